//! The limiter's side: a check body parsed strictly and validated into core
//! limits before any store is touched; every error names its field.

use crate::request::CONCURRENCY;
use crate::{CheckRequest, LimitSpec, MAX_KEY_BYTES};
use sluice_core::{Algorithm, FieldError, Holder, Limit, Nanos, Permits, MILLISECOND};

/// Largest accepted request body.
pub const MAX_BODY_BYTES: usize = 64 * 1024;
/// Most limits one check may carry.
pub const MAX_LIMITS: usize = 64;
/// Longest accepted domain, in bytes.
pub const MAX_DOMAIN_BYTES: usize = 128;
/// Longest window: 366 days, as sluice-core accepts.
pub const MAX_WINDOW_MS: u64 = sluice_core::MAX_WINDOW / MILLISECOND;
/// Shortest penalty-box block (`block_ms`): 1 s, as sluice-core accepts.
pub const MIN_BLOCK_MS: u64 = sluice_core::MIN_BLOCK / MILLISECOND;
/// Longest penalty-box block (`block_ms`): 24 h.
pub const MAX_BLOCK_MS: u64 = sluice_core::MAX_BLOCK / MILLISECOND;
/// Largest `requests`, `burst` and `hits`, as sluice-core accepts.
pub const MAX_COUNT: u64 = sluice_core::MAX_REQUESTS;

/// Most requests one coalesced check may carry (`batch`).
pub const MAX_BATCH: u32 = 10_000;

/// The shortest ttl of a concurrency limit (its `window_ms`): a holder
/// renews well within it.
pub const MIN_PERMITS_TTL_MS: u64 = 1000;

/// A validated limit with its key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyedLimit {
    /// The client key as sent (without the domain).
    pub key: String,
    /// The request's weight under this limit: the limit's `hits` when
    /// given, else the check's.
    pub hits: u64,
    /// What the limit is.
    pub rule: Rule,
}

impl KeyedLimit {
    /// The rate limit, when this is one.
    pub fn limit(&self) -> Option<&Limit> {
        match &self.rule {
            Rule::Rate(r) => Some(&r.limit),
            Rule::Permits { .. } => None,
        }
    }
}

/// A limit of a check: a rate limit, or a concurrency limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rule {
    /// A rate limit (one of sluice-core's algorithms), with its lease terms.
    Rate(RateRule),
    /// A concurrency limit: `hits` permits taken for `holder` while the
    /// request lives, given back with `POST /v1/permits`.
    Permits {
        /// At most `max` units held at once; a holder's permits count for
        /// `ttl` after its last acquire or renewal.
        permits: Permits,
        /// Who takes them (the check's `holder`).
        holder: Holder,
    },
}

/// A rate limit of a check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateRule {
    /// The limit to enforce.
    pub limit: Limit,
    /// Leases: the most units to take beyond `hits` when admitted (0: none).
    pub lease: u64,
    /// Leases: units to give back before deciding (0: none).
    pub returned: u64,
    /// How long ago the `returned` units were consumed.
    pub returned_age: Nanos,
    /// Priority: units that must still fit beside the weight (0: none).
    pub reserve: u64,
    /// Penalty box: how long a key this limit refuses stays refused (0:
    /// no block).
    pub block: Nanos,
}

/// A check that passed validation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidCheck {
    /// The domain.
    pub domain: String,
    /// The weight of the request under the limits that give none of their
    /// own (each [`KeyedLimit::hits`] holds the weight in force).
    pub hits: u64,
    /// The limits, in request order.
    pub limits: Vec<KeyedLimit>,
    /// Coalescing: how many identical requests the check carries, when it
    /// said (`None` is one request, answered without `admitted`); never
    /// with a concurrency limit.
    pub batch: Option<u32>,
}

impl ValidCheck {
    /// The number of requests carried: `batch`, or 1.
    pub fn requests(&self) -> u32 {
        self.batch.unwrap_or(1)
    }
}

/// Parses and validates a `/v1/check` body.
pub fn parse_check(body: &[u8]) -> Result<ValidCheck, FieldError> {
    if body.len() > MAX_BODY_BYTES {
        return Err(FieldError::at(
            "",
            format!("body exceeds {MAX_BODY_BYTES} bytes"),
        ));
    }
    match serde_json::from_slice::<CheckRequest<'_>>(body) {
        Ok(req) => req.validate(),
        Err(plain) => Err(name_the_field::<CheckRequest<'_>>(body, plain)),
    }
}

/// Parses again, slower, only to name the field at fault.
#[cfg(feature = "field-paths")]
pub(crate) fn name_the_field<'a, T: serde::Deserialize<'a>>(
    body: &'a [u8],
    plain: serde_json::Error,
) -> FieldError {
    let de = &mut serde_json::Deserializer::from_slice(body);
    match serde_path_to_error::deserialize::<_, T>(de) {
        Err(e) => {
            let path = e.path().to_string();
            let field = if path == "." { String::new() } else { path };
            FieldError::at(field, e.into_inner().to_string())
        }
        Ok(_) => FieldError::at("", plain.to_string()),
    }
}

/// Without `field-paths` (the filter, which never reads checks and should
/// not carry the path tracking), serde's message alone.
#[cfg(not(feature = "field-paths"))]
#[allow(clippy::extra_unused_type_parameters)] // One signature with and without the feature.
pub(crate) fn name_the_field<'a, T: serde::Deserialize<'a>>(
    _body: &'a [u8],
    plain: serde_json::Error,
) -> FieldError {
    FieldError::at("", plain.to_string())
}

/// Whether `name` is a valid domain: 1 to [`MAX_DOMAIN_BYTES`] bytes of
/// letters, digits, `_`, `-` and `.`.
pub fn valid_domain(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_DOMAIN_BYTES
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

/// Checks a domain name as [`valid_domain`] does, saying what is wrong.
pub fn validate_domain(domain: &str) -> Result<(), String> {
    if domain.is_empty() {
        return Err("must not be empty".into());
    }
    if domain.len() > MAX_DOMAIN_BYTES {
        return Err(format!("longer than {MAX_DOMAIN_BYTES} bytes"));
    }
    if !valid_domain(domain) {
        return Err("may hold only letters, digits, '_', '-' and '.'".into());
    }
    Ok(())
}

impl CheckRequest<'_> {
    /// Validates every field, naming the first bad one.
    pub fn validate(self) -> Result<ValidCheck, FieldError> {
        validate_domain(&self.domain).map_err(|m| FieldError::at("domain", m))?;
        if self.hits > MAX_COUNT || (self.hits == 0 && self.batch.is_some()) {
            return Err(FieldError::at(
                "hits",
                format!("must be between 0 and {MAX_COUNT} (at least 1 with batch)"),
            ));
        }
        if let Some(n) = self.batch {
            if n == 0 || n > MAX_BATCH {
                return Err(FieldError::at(
                    "batch",
                    format!("must be between 1 and {MAX_BATCH}"),
                ));
            }
        }
        if self.limits.is_empty() {
            return Err(FieldError::at("limits", "must hold at least one limit"));
        }
        if self.limits.len() > MAX_LIMITS {
            return Err(FieldError::at(
                "limits",
                format!("at most {MAX_LIMITS} limits per check"),
            ));
        }
        if let Some(i) = self.limits.iter().position(|l| l.algorithm == CONCURRENCY) {
            if self.holder.is_none() {
                return Err(FieldError::at(
                    "holder",
                    format!("required with a concurrency limit (limits[{i}])"),
                ));
            }
            // Permits are taken per request and given back per request.
            if self.batch.is_some() {
                return Err(FieldError::at(
                    "batch",
                    format!("not allowed with a concurrency limit (limits[{i}])"),
                ));
            }
        }
        let mut limits = Vec::with_capacity(self.limits.len());
        for (i, spec) in self.limits.into_iter().enumerate() {
            let keyed = KeyedLimit::from_spec(spec, self.hits, self.holder)
                .map_err(|e| e.under(&format!("limits[{i}]")))?;
            // Leases are for single requests: a batch's requests share none.
            if let (Some(_), Rule::Rate(r)) = (self.batch, &keyed.rule) {
                let field = if r.lease != 0 {
                    Some("lease")
                } else if r.returned != 0 {
                    Some("returned")
                } else {
                    None
                };
                if let Some(field) = field {
                    return Err(FieldError::at(
                        format!("limits[{i}].{field}"),
                        "not allowed in a check with batch",
                    ));
                }
            }
            limits.push(keyed);
        }
        Ok(ValidCheck {
            domain: self.domain.into_owned(),
            hits: self.hits,
            limits,
            batch: self.batch,
        })
    }
}

/// Builds a core [`Limit`] from wire numbers, naming the field at fault
/// (`requests`, `window_ms`, `burst`, `precision`, `soft_percent`,
/// `max_delay_ms`).
pub fn build_limit(
    algorithm: Algorithm,
    requests: u64,
    window_ms: u64,
    burst: Option<u64>,
    precision: Option<u32>,
    soft_percent: Option<u32>,
    max_delay_ms: Option<u64>,
) -> Result<Limit, FieldError> {
    let range = |field: &str, v: u64, max: u64| {
        if v == 0 || v > max {
            Err(FieldError::at(
                field,
                format!("must be between 1 and {max}"),
            ))
        } else {
            Ok(())
        }
    };
    range("requests", requests, MAX_COUNT)?;
    range("window_ms", window_ms, MAX_WINDOW_MS)?;
    let burst = burst.unwrap_or(requests);
    range("burst", burst, MAX_COUNT)?;
    let window = window_ms
        .checked_mul(MILLISECOND)
        .ok_or_else(|| FieldError::at("window_ms", "too large"))?;
    let max_delay = match max_delay_ms {
        Some(ms) if ms > MAX_WINDOW_MS => {
            return Err(FieldError::at(
                "max_delay_ms",
                format!("must be between 0 and {MAX_WINDOW_MS}"),
            ))
        }
        Some(ms) => Some(ms.saturating_mul(MILLISECOND)),
        None => None,
    };
    let limit = Limit {
        algorithm,
        requests,
        window,
        burst,
        precision: precision.unwrap_or(1),
        soft_percent: soft_percent.unwrap_or(0),
        max_delay,
    };
    limit.validate().map_err(|e| {
        e.renamed("window", "window_ms")
            .renamed("max_delay", "max_delay_ms")
    })?;
    Ok(limit)
}

/// The fields a concurrency limit does not take, with whether each is set.
fn rate_only_fields(spec: &LimitSpec<'_>) -> [(&'static str, bool); 9] {
    [
        ("burst", spec.burst.is_some()),
        ("precision", spec.precision.is_some()),
        ("soft_percent", spec.soft_percent.is_some()),
        ("max_delay_ms", spec.max_delay_ms.is_some()),
        ("lease", spec.lease.is_some()),
        ("returned", spec.returned.is_some()),
        ("returned_age_ms", spec.returned_age_ms.is_some()),
        ("reserve", spec.reserve.is_some()),
        ("block_ms", spec.block_ms.is_some()),
    ]
}

/// A concurrency limit's terms: `requests` permits, a ttl of `window_ms`.
fn build_permits(spec: &LimitSpec<'_>) -> Result<Permits, FieldError> {
    if let Some((field, _)) = rate_only_fields(spec).into_iter().find(|(_, set)| *set) {
        return Err(FieldError::at(field, "not allowed in a concurrency limit"));
    }
    if spec.requests == 0 || spec.requests > MAX_COUNT {
        return Err(FieldError::at(
            "requests",
            format!("must be between 1 and {MAX_COUNT}"),
        ));
    }
    if !(MIN_PERMITS_TTL_MS..=MAX_WINDOW_MS).contains(&spec.window_ms) {
        return Err(FieldError::at(
            "window_ms",
            format!("must be between {MIN_PERMITS_TTL_MS} and {MAX_WINDOW_MS} (the holders' ttl)"),
        ));
    }
    Ok(Permits {
        max: spec.requests,
        ttl: spec.window_ms.saturating_mul(MILLISECOND),
    })
}

/// The ttl of `POST /v1/permits` (`ttl_ms`), checked as a concurrency
/// limit's `window_ms`.
pub(crate) fn permits_ttl(ttl_ms: u64) -> Result<Nanos, String> {
    if (MIN_PERMITS_TTL_MS..=MAX_WINDOW_MS).contains(&ttl_ms) {
        Ok(ttl_ms.saturating_mul(MILLISECOND))
    } else {
        Err(format!(
            "must be between {MIN_PERMITS_TTL_MS} and {MAX_WINDOW_MS}"
        ))
    }
}

/// Checks a key as a check's and a permits body's keys are checked.
pub(crate) fn check_key(key: &str) -> Result<(), FieldError> {
    if key.is_empty() {
        return Err(FieldError::at("key", "must not be empty"));
    }
    if key.len() > MAX_KEY_BYTES {
        return Err(FieldError::at(
            "key",
            format!("longer than {MAX_KEY_BYTES} bytes"),
        ));
    }
    Ok(())
}

impl KeyedLimit {
    /// Validates one limit of a check whose weight is `check_hits`, whose
    /// permits (if it is a concurrency limit) `holder` takes.
    pub fn from_spec(
        spec: LimitSpec<'_>,
        check_hits: u64,
        holder: Option<Holder>,
    ) -> Result<Self, FieldError> {
        check_key(&spec.key)?;
        let hits = spec.hits.unwrap_or(check_hits);
        // A concurrency limit's weight is the permits it takes: at least 1.
        let least = u64::from(spec.algorithm == CONCURRENCY);
        if hits < least || hits > MAX_COUNT {
            return Err(FieldError::at(
                "hits",
                format!("must be between {least} and {MAX_COUNT}"),
            ));
        }
        if spec.algorithm == CONCURRENCY {
            let permits = build_permits(&spec)?;
            let holder =
                holder.ok_or_else(|| FieldError::at("holder", "required (the check's holder)"))?;
            return Ok(KeyedLimit {
                key: spec.key.into_owned(),
                hits,
                rule: Rule::Permits { permits, holder },
            });
        }
        let rule = Rule::Rate(RateRule::from_spec(&spec)?);
        Ok(KeyedLimit {
            key: spec.key.into_owned(),
            hits,
            rule,
        })
    }
}

impl RateRule {
    /// Validates the rate limit of `spec`.
    fn from_spec(spec: &LimitSpec<'_>) -> Result<Self, FieldError> {
        let algorithm = spec
            .algorithm
            .parse::<Algorithm>()
            .map_err(|e| FieldError::at("algorithm", e.to_string()))?;
        let limit = build_limit(
            algorithm,
            spec.requests,
            spec.window_ms,
            spec.burst,
            spec.precision,
            spec.soft_percent,
            spec.max_delay_ms,
        )?;
        let lease = match spec.lease {
            None => 0,
            Some(n) if n == 0 || n > MAX_COUNT => {
                return Err(FieldError::at(
                    "lease",
                    format!("must be between 1 and {MAX_COUNT}"),
                ))
            }
            // A lease is spent without waiting: delay mode has nothing to lease.
            Some(_) if limit.max_delay.is_some() => {
                return Err(FieldError::at(
                    "lease",
                    "not allowed with max_delay_ms (delay mode)",
                ))
            }
            Some(n) => n,
        };
        let (returned, returned_age) = match (spec.returned, spec.returned_age_ms) {
            (None, None) => (0, 0),
            (Some(_), None) => {
                return Err(FieldError::at("returned_age_ms", "required with returned"))
            }
            (None, Some(_)) => {
                return Err(FieldError::at("returned", "required with returned_age_ms"))
            }
            (Some(n), _) if n == 0 || n > MAX_COUNT => {
                return Err(FieldError::at(
                    "returned",
                    format!("must be between 1 and {MAX_COUNT}"),
                ))
            }
            (_, Some(ms)) if ms > MAX_WINDOW_MS => {
                return Err(FieldError::at(
                    "returned_age_ms",
                    format!("must be between 0 and {MAX_WINDOW_MS}"),
                ))
            }
            (Some(n), Some(ms)) => (n, ms.saturating_mul(MILLISECOND)),
        };
        Ok(RateRule {
            reserve: reserve_of(spec, &limit, lease)?,
            block: block_of(spec, &limit, lease.max(returned))?,
            limit,
            lease,
            returned,
            returned_age,
        })
    }
}

/// A limit's `block_ms`, in nanoseconds: in range, and not with delay
/// mode nor leases (whose units are spent without asking).
fn block_of(spec: &LimitSpec<'_>, limit: &Limit, leases: u64) -> Result<Nanos, FieldError> {
    match spec.block_ms {
        None => Ok(0),
        Some(ms) if !(MIN_BLOCK_MS..=MAX_BLOCK_MS).contains(&ms) => Err(FieldError::at(
            "block_ms",
            format!("must be between {MIN_BLOCK_MS} and {MAX_BLOCK_MS}"),
        )),
        Some(_) if limit.max_delay.is_some() => Err(FieldError::at(
            "block_ms",
            "not allowed with max_delay_ms (delay mode)",
        )),
        Some(_) if leases != 0 => Err(FieldError::at(
            "block_ms",
            "not allowed with lease or returned",
        )),
        Some(ms) => Ok(ms.saturating_mul(MILLISECOND)),
    }
}

/// A limit's `reserve`: in range, and not with delay mode (a reserve is
/// room now, not later) nor a lease (whose grant is what fits now).
fn reserve_of(spec: &LimitSpec<'_>, limit: &Limit, lease: u64) -> Result<u64, FieldError> {
    match spec.reserve {
        None => Ok(0),
        Some(n) if n == 0 || n > MAX_COUNT => Err(FieldError::at(
            "reserve",
            format!("must be between 1 and {MAX_COUNT}"),
        )),
        Some(_) if limit.max_delay.is_some() => Err(FieldError::at(
            "reserve",
            "not allowed with max_delay_ms (delay mode)",
        )),
        Some(_) if lease != 0 => Err(FieldError::at("reserve", "not allowed with lease")),
        Some(n) => Ok(n),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rate(l: &KeyedLimit) -> &RateRule {
        match &l.rule {
            Rule::Rate(r) => r,
            Rule::Permits { .. } => panic!("a rate limit"),
        }
    }

    #[test]
    fn concurrency_limits_take_permits_and_nothing_else() {
        let body = |limit: &str, check: &str| {
            format!(
                r#"{{"domain":"d"{check},"limits":[{{"key":"g","algorithm":"gcra","requests":1,"window_ms":1}},{{"key":"c","algorithm":"concurrency","requests":5,"window_ms":1000{limit}}}]}}"#
            )
        };
        let err = |limit: &str, check: &str| {
            parse_check(body(limit, check).as_bytes())
                .unwrap_err()
                .to_string()
        };
        let ok = parse_check(body(r#","hits":2"#, r#","holder":9"#).as_bytes()).unwrap();
        assert_eq!(
            ok.limits[1],
            KeyedLimit {
                key: "c".into(),
                hits: 2,
                rule: Rule::Permits {
                    permits: Permits {
                        max: 5,
                        ttl: sluice_core::SECOND
                    },
                    holder: 9
                }
            }
        );
        assert_eq!(
            err("", ""),
            "holder: required with a concurrency limit (limits[1])"
        );
        assert_eq!(
            err("", r#","holder":1,"batch":2"#),
            "batch: not allowed with a concurrency limit (limits[1])"
        );
        let h = r#","holder":1"#;
        for (field, extra) in [
            ("burst", r#","burst":5"#),
            ("precision", r#","precision":2"#),
            ("soft_percent", r#","soft_percent":10"#),
            ("max_delay_ms", r#","max_delay_ms":0"#),
            ("lease", r#","lease":1"#),
            ("returned", r#","returned":1,"returned_age_ms":0"#),
            ("returned_age_ms", r#","returned_age_ms":0"#),
        ] {
            assert_eq!(
                err(extra, h),
                format!("limits[1].{field}: not allowed in a concurrency limit")
            );
        }
        assert!(err(r#","hits":0"#, h).starts_with("limits[1].hits: "));
        let bad = |requests: u64, window_ms: u64| {
            parse_check(
                format!(
                    r#"{{"domain":"d","holder":1,"limits":[{{"key":"c","algorithm":"concurrency","requests":{requests},"window_ms":{window_ms}}}]}}"#
                )
                .as_bytes(),
            )
            .unwrap_err()
            .to_string()
        };
        assert!(bad(0, 1000).starts_with("limits[0].requests: must be between 1"));
        assert!(bad(MAX_COUNT + 1, 1000).starts_with("limits[0].requests: "));
        assert!(bad(1, 999).starts_with("limits[0].window_ms: must be between 1000"));
        assert!(bad(1, MAX_WINDOW_MS + 1).starts_with("limits[0].window_ms: "));
        // A holder without a concurrency limit is harmless.
        let plain = br#"{"domain":"d","holder":3,"limits":[{"key":"g","algorithm":"gcra","requests":1,"window_ms":1}]}"#;
        assert!(parse_check(plain).is_ok());
    }

    #[test]
    fn errors_name_the_field() {
        let err = |body: &str| parse_check(body.as_bytes()).unwrap_err().to_string();
        assert!(err(
            r#"{"domain":"d","limits":[{"key":"k","algorithm":"gcra","requests":0,"window_ms":1}]}"#
        )
        .starts_with("limits[0].requests: "));
        assert!(err(
            r#"{"domain":"d","limits":[{"key":"k","algorithm":"gcra","requests":1,"window_ms":0}]}"#
        )
        .starts_with("limits[0].window_ms: "));
        assert!(err(
            r#"{"domain":"d","limits":[{"key":"k","algorithm":"nope","requests":1,"window_ms":1}]}"#
        )
        .starts_with("limits[0].algorithm: unknown algorithm"));
        assert!(err(r#"{"domain":"d","limits":[],"extra":1}"#).contains("extra"));
        assert!(err(r#"{"domain":"a b","limits":[]}"#).starts_with("domain: "));
        assert_eq!(
            err(
                r#"{"domain":"d","limits":[{"key":"k","algorithm":"gcra","requests":1,"window_ms":1,"hits":1000000000001}]}"#
            ),
            format!("limits[0].hits: must be between 0 and {MAX_COUNT}")
        );
        assert_eq!(
            err(
                r#"{"domain":"d","limits":[{"key":"k","algorithm":"gcra","requests":1,"window_ms":1},{"key":"k","algorithm":"gcra","requests":1,"window_ms":1,"hits":1000000000001}]}"#
            ),
            format!("limits[1].hits: must be between 0 and {MAX_COUNT}")
        );
        assert_eq!(
            err(r#"{"domain":"d","limits":[{"key":"k","algorithm":"fixed_window","requests":1,"window_ms":1,"max_delay_ms":5}]}"#),
            "limits[0].max_delay_ms: delay mode is for gcra and leaky_bucket only, not fixed_window"
        );
        for algorithm in ["token_bucket", "sliding_log", "sliding_window"] {
            assert!(err(&format!(r#"{{"domain":"d","limits":[{{"key":"k","algorithm":"{algorithm}","requests":1,"window_ms":1,"max_delay_ms":5}}]}}"#))
                .starts_with("limits[0].max_delay_ms: delay mode is for gcra and leaky_bucket only"));
        }
        assert_eq!(
            err(&format!(
                r#"{{"domain":"d","limits":[{{"key":"k","algorithm":"gcra","requests":1,"window_ms":1,"max_delay_ms":{}}}]}}"#,
                MAX_WINDOW_MS + 1
            )),
            format!("limits[0].max_delay_ms: must be between 0 and {MAX_WINDOW_MS}")
        );
        assert!(err(r#"{"domain":"d","limits":[{"key":"k","algorithm":"gcra","requests":1,"window_ms":1,"max_delay_ms":-1}]}"#)
            .starts_with("limits[0].max_delay_ms: "));
    }

    #[test]
    fn weights_and_delay_mode() {
        let check = parse_check(
            br#"{"domain":"d","hits":2,"limits":[
                {"key":"a","algorithm":"gcra","requests":10,"window_ms":1000,"burst":1,"max_delay_ms":1000},
                {"key":"b","algorithm":"leaky_bucket","requests":10,"window_ms":1000,"hits":5,"max_delay_ms":0},
                {"key":"c","algorithm":"fixed_window","requests":10,"window_ms":1000}]}"#,
        )
        .unwrap();
        let hits: Vec<u64> = check.limits.iter().map(|l| l.hits).collect();
        assert_eq!(hits, [2, 5, 2]);
        let delays: Vec<_> = check
            .limits
            .iter()
            .map(|l| l.limit().unwrap().max_delay)
            .collect();
        assert_eq!(delays, [Some(1000 * MILLISECOND), Some(0), None]);
        let max = parse_check(
            format!(r#"{{"domain":"d","limits":[{{"key":"k","algorithm":"gcra","requests":1,"window_ms":1,"max_delay_ms":{MAX_WINDOW_MS}}}]}}"#)
                .as_bytes(),
        )
        .unwrap();
        assert_eq!(
            max.limits[0].limit().unwrap().max_delay,
            Some(sluice_core::MAX_WINDOW)
        );
    }

    #[test]
    fn batches_are_bounded() {
        let body = |batch: &str| {
            format!(
                r#"{{"domain":"d","batch":{batch},"limits":[{{"key":"k","algorithm":"gcra","requests":1,"window_ms":1}}]}}"#
            )
        };
        let err = |batch: &str| parse_check(body(batch).as_bytes()).unwrap_err().to_string();
        let range = format!("batch: must be between 1 and {MAX_BATCH}");
        assert_eq!(err("0"), range);
        assert_eq!(err(&(MAX_BATCH + 1).to_string()), range);
        assert!(err("-1").starts_with("batch: "));
        assert!(err("\"2\"").starts_with("batch: "));
        assert!(err("5000000000").starts_with("batch: "));
        let max = parse_check(body(&MAX_BATCH.to_string()).as_bytes()).unwrap();
        assert_eq!((max.batch, max.requests()), (Some(MAX_BATCH), MAX_BATCH));
        let one = parse_check(
            br#"{"domain":"d","limits":[{"key":"k","algorithm":"gcra","requests":1,"window_ms":1}]}"#,
        )
        .unwrap();
        assert_eq!((one.batch, one.requests()), (None, 1));
    }

    #[test]
    fn blocks_are_bounded_and_named() {
        let body = |extra: &str| {
            format!(
                r#"{{"domain":"d","limits":[{{"key":"k","algorithm":"gcra","requests":10,"window_ms":1000{extra}}}]}}"#
            )
        };
        let err = |extra: &str| parse_check(body(extra).as_bytes()).unwrap_err().to_string();
        let ok = parse_check(body(r#","block_ms":900000"#).as_bytes()).unwrap();
        assert_eq!(rate(&ok.limits[0]).block, 900 * sluice_core::SECOND);
        let none = parse_check(body("").as_bytes()).unwrap();
        assert_eq!(rate(&none.limits[0]).block, 0);
        let range = "limits[0].block_ms: must be between 1000 and 86400000";
        assert_eq!(err(r#","block_ms":999"#), range);
        assert_eq!(err(r#","block_ms":86400001"#), range);
        assert!(parse_check(body(r#","block_ms":86400000"#).as_bytes()).is_ok());
        assert_eq!(
            err(r#","block_ms":1000,"max_delay_ms":10"#),
            "limits[0].block_ms: not allowed with max_delay_ms (delay mode)"
        );
        assert_eq!(
            err(r#","block_ms":1000,"lease":3"#),
            "limits[0].block_ms: not allowed with lease or returned"
        );
        let permits = br#"{"domain":"d","holder":1,"limits":[{"key":"k","algorithm":"concurrency","requests":1,"window_ms":1000,"block_ms":1000}]}"#;
        assert_eq!(
            parse_check(permits).unwrap_err().to_string(),
            "limits[0].block_ms: not allowed in a concurrency limit"
        );
    }

    #[test]
    fn reserves_are_bounded_and_named() {
        let body = |extra: &str| {
            format!(
                r#"{{"domain":"d","limits":[{{"key":"k","algorithm":"gcra","requests":10,"window_ms":1000{extra}}}]}}"#
            )
        };
        let err = |extra: &str| parse_check(body(extra).as_bytes()).unwrap_err().to_string();
        let ok = parse_check(body(r#","reserve":4"#).as_bytes()).unwrap();
        assert_eq!(rate(&ok.limits[0]).reserve, 4);
        let range = format!("limits[0].reserve: must be between 1 and {MAX_COUNT}");
        assert_eq!(err(r#","reserve":0"#), range);
        assert_eq!(err(&format!(r#","reserve":{}"#, MAX_COUNT + 1)), range);
        assert_eq!(
            err(r#","reserve":4,"max_delay_ms":100"#),
            "limits[0].reserve: not allowed with max_delay_ms (delay mode)"
        );
        assert_eq!(
            err(r#","reserve":4,"lease":2"#),
            "limits[0].reserve: not allowed with lease"
        );
        let permits = r#"{"domain":"d","holder":1,"limits":[{"key":"k","algorithm":"concurrency","requests":10,"window_ms":1000,"reserve":2}]}"#;
        assert_eq!(
            parse_check(permits.as_bytes()).unwrap_err().to_string(),
            "limits[0].reserve: not allowed in a concurrency limit"
        );
    }

    #[test]
    fn leases_are_bounded_and_named() {
        let body = |extra: &str, batch: &str| {
            format!(
                r#"{{"domain":"d"{batch},"limits":[{{"key":"k","algorithm":"gcra","requests":10,"window_ms":1000{extra}}}]}}"#
            )
        };
        let err = |extra: &str, batch: &str| {
            parse_check(body(extra, batch).as_bytes())
                .unwrap_err()
                .to_string()
        };
        let range = format!("limits[0].lease: must be between 1 and {MAX_COUNT}");
        assert_eq!(err(r#","lease":0"#, ""), range);
        assert_eq!(err(&format!(r#","lease":{}"#, MAX_COUNT + 1), ""), range);
        assert!(err(r#","lease":-1"#, "").starts_with("limits[0].lease: "));
        assert_eq!(
            err(r#","lease":5,"max_delay_ms":100"#, ""),
            "limits[0].lease: not allowed with max_delay_ms (delay mode)"
        );
        assert_eq!(
            err(r#","lease":5"#, r#","batch":2"#),
            "limits[0].lease: not allowed in a check with batch"
        );
        assert_eq!(
            err(r#","returned":5,"returned_age_ms":0"#, r#","batch":1"#),
            "limits[0].returned: not allowed in a check with batch"
        );
        assert_eq!(
            err(r#","returned":5"#, ""),
            "limits[0].returned_age_ms: required with returned"
        );
        assert_eq!(
            err(r#","returned_age_ms":5"#, ""),
            "limits[0].returned: required with returned_age_ms"
        );
        assert_eq!(
            err(r#","returned":0,"returned_age_ms":5"#, ""),
            format!("limits[0].returned: must be between 1 and {MAX_COUNT}")
        );
        assert_eq!(
            err(
                &format!(r#","returned":1,"returned_age_ms":{}"#, MAX_WINDOW_MS + 1),
                ""
            ),
            format!("limits[0].returned_age_ms: must be between 0 and {MAX_WINDOW_MS}")
        );
        // Returns are fine in delay mode; leases and returns together.
        let ok = parse_check(
            body(
                r#","returned":3,"returned_age_ms":0,"max_delay_ms":100"#,
                "",
            )
            .as_bytes(),
        )
        .unwrap();
        let r = rate(&ok.limits[0]);
        assert_eq!((r.returned, r.returned_age), (3, 0));
        let ok = parse_check(
            body(
                &format!(r#","lease":{MAX_COUNT},"returned":2,"returned_age_ms":{MAX_WINDOW_MS}"#),
                "",
            )
            .as_bytes(),
        )
        .unwrap();
        let l = rate(&ok.limits[0]);
        assert_eq!(
            (l.lease, l.returned, l.returned_age),
            (MAX_COUNT, 2, sluice_core::MAX_WINDOW)
        );
        // Absent: nothing leased or returned, as before.
        let plain = parse_check(body("", r#","batch":3"#).as_bytes()).unwrap();
        let r = rate(&plain.limits[0]);
        assert_eq!((r.lease, r.returned), (0, 0));
    }

    #[test]
    fn domains() {
        assert!(valid_domain("demo.v1_a-b"));
        assert!(!valid_domain(""));
        assert!(!valid_domain("a/b"));
        assert!(!valid_domain(&"a".repeat(MAX_DOMAIN_BYTES + 1)));
        assert!(valid_domain(&"a".repeat(MAX_DOMAIN_BYTES)));
    }
}
