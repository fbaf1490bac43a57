//! The checks shared by the configuration's parts: numbers in range,
//! names, windows, a limit's quota, and where a limit stands in the
//! configuration (each kind of limit compiles its own part: see
//! [`crate::engine`]).

use super::duration::parse_duration;
use super::plan::Penalty;
use super::raw::{Mode, OnExceed, Protocol, RawLimit, RawRule};
use crate::key::KeyPart;
use sluice_core::{
    Algorithm, FieldError, Limit, Nanos, MAX_BLOCK, MAX_SOFT_PERCENT, MILLISECOND, MIN_BLOCK,
};

/// Where a limit stands: what its kind's compile step needs besides its raw
/// configuration.
#[derive(Debug, Clone, Copy)]
pub struct LimitSite<'a> {
    /// The configuration's domain.
    pub domain: &'a str,
    /// The rule's name.
    pub rule: &'a str,
    /// The rule's position among `rules`.
    pub rule_index: usize,
    /// Every rule as configured (an elastic limit names its pool among
    /// them).
    pub rules: &'a [RawRule],
    /// The rule's mode.
    pub mode: Mode,
    /// The rule's key parts.
    pub key: &'a [KeyPart],
    /// The limit's index in its rule.
    pub index: usize,
    /// The limit's JSON path (`rules[i].limits[j]`).
    pub path: &'a str,
    /// How the filter talks to the limiter.
    pub protocol: Protocol,
    /// The shape of local limits' key tables.
    pub keys: crate::table::Shape,
}

impl LimitSite<'_> {
    /// The JSON path of the limit's field `field`.
    pub fn field(&self, field: &str) -> String {
        field_path(self.path, field)
    }
}

/// The JSON path of the member `field` of the object at `path`
/// (`{path}.{field}`).
// Not inlined: one copy for the many error paths that name a field.
#[inline(never)]
pub fn field_path(path: &str, field: &str) -> String {
    let mut out = String::with_capacity(path.len() + 1 + field.len());
    out.push_str(path);
    out.push('.');
    out.push_str(field);
    out
}

/// A limit's configured IETF name, checked as a name.
pub fn limit_name(limit_path: &str, raw: &RawLimit) -> Result<Option<String>, FieldError> {
    match &raw.name {
        Some(name) if !valid_name(name) => Err(FieldError::at(
            field_path(limit_path, "name"),
            format!("{name:?} must be 1 to {MAX_NAME_LEN} bytes of A-Z, a-z, 0-9, '_', '.', '-'"),
        )),
        name => Ok(name.clone()),
    }
}

pub fn in_range<T: TryFrom<u64>>(
    value: u64,
    min: u64,
    max: u64,
    path: &str,
) -> Result<T, FieldError> {
    if value < min || value > max {
        return Err(FieldError::at(
            path,
            format!("must be between {min} and {max}, got {value}"),
        ));
    }
    T::try_from(value).map_err(|_| FieldError::at(path, format!("out of range: {value}")))
}

/// Longest domain or rule name: the limiter's longest domain.
pub const MAX_NAME_LEN: usize = sluice_wire::MAX_DOMAIN_BYTES;

/// Domains and rule names follow the limiter's rule for domains (a rule name
/// is part of every limiter key).
pub fn valid_name(name: &str) -> bool {
    sluice_wire::valid_domain(name)
}

/// A window or duration of at least 1ms.
pub fn window(path: &str, text: &str) -> Result<Nanos, FieldError> {
    let window = parse_duration(text).map_err(|m| FieldError::at(path, m))?;
    if window < MILLISECOND {
        return Err(FieldError::at(path, "must be at least 1ms"));
    }
    Ok(window)
}

/// `limit`, validated, its errors under `path`.
pub fn validated(path: &str, limit: Limit) -> Result<Limit, FieldError> {
    limit.validate().map_err(|e| e.under(path))?;
    Ok(limit)
}

/// The limit `raw` configures, checked.
pub fn compile_limit(path: &str, raw: &RawLimit) -> Result<Limit, FieldError> {
    let required = |field: &str| FieldError::at(format!("{path}.{field}"), "required");
    let algorithm = raw
        .algorithm
        .as_deref()
        .ok_or_else(|| required("algorithm"))?
        .parse::<Algorithm>()
        .map_err(|e| FieldError::at(field_path(path, "algorithm"), e.to_string()))?;
    let requests = raw.requests.ok_or_else(|| required("requests"))?;
    let window = window(
        &field_path(path, "window"),
        raw.window.as_deref().ok_or_else(|| required("window"))?,
    )?;
    let precision = match raw.precision {
        None => 1,
        Some(_) if algorithm != Algorithm::SlidingWindow => {
            return Err(FieldError::at(
                field_path(path, "precision"),
                "only applies to the sliding_window algorithm",
            ));
        }
        Some(p) => u32::try_from(p).map_err(|_| {
            FieldError::at(field_path(path, "precision"), format!("out of range: {p}"))
        })?,
    };
    let soft_percent = in_range(
        raw.soft_percent,
        0,
        u64::from(MAX_SOFT_PERCENT),
        &field_path(path, "soft_percent"),
    )?;
    validated(
        path,
        Limit {
            algorithm,
            requests,
            window,
            burst: raw.burst.unwrap_or(requests),
            precision,
            soft_percent,
            max_delay: max_delay(path, raw, algorithm)?,
        },
    )
}

/// The hold bound of a limit in delay mode; `None` in deny mode.
pub fn max_delay(
    path: &str,
    raw: &RawLimit,
    algorithm: Algorithm,
) -> Result<Option<Nanos>, FieldError> {
    match (raw.on_exceed, raw.max_delay.as_deref()) {
        (OnExceed::Deny | OnExceed::Block, None) => Ok(None),
        (OnExceed::Deny | OnExceed::Block, Some(_)) => Err(FieldError::at(
            field_path(path, "max_delay"),
            "only applies with on_exceed: delay",
        )),
        (OnExceed::Delay, None) => Err(FieldError::at(
            field_path(path, "max_delay"),
            "required with on_exceed: delay",
        )),
        (OnExceed::Delay, Some(_))
            if !matches!(algorithm, Algorithm::Gcra | Algorithm::LeakyBucket) =>
        {
            Err(FieldError::at(
                field_path(path, "on_exceed"),
                format!("delay is for gcra and leaky_bucket only, not {algorithm}"),
            ))
        }
        (OnExceed::Delay, Some(text)) => {
            let field = field_path(path, "max_delay");
            let delay = parse_duration(text).map_err(|m| FieldError::at(&field, m))?;
            if delay < MILLISECOND {
                return Err(FieldError::at(field, "must be at least 1ms"));
            }
            Ok(Some(delay))
        }
    }
}

/// The penalty of a limit: a block of `block_for` (1s to 24h) with
/// `on_exceed: block`, which requires it and which alone takes it.
pub fn penalty(path: &str, raw: &RawLimit) -> Result<Penalty, FieldError> {
    let field = field_path(path, "block_for");
    match (raw.on_exceed, raw.block_for.as_deref()) {
        (OnExceed::Deny | OnExceed::Delay, None) => Ok(Penalty::None),
        (OnExceed::Deny | OnExceed::Delay, Some(_)) => {
            Err(FieldError::at(field, "only applies with on_exceed: block"))
        }
        (OnExceed::Block, None) => Err(FieldError::at(field, "required with on_exceed: block")),
        (OnExceed::Block, Some(text)) => {
            let block = parse_duration(text).map_err(|m| FieldError::at(&field, m))?;
            if !(MIN_BLOCK..=MAX_BLOCK).contains(&block) {
                return Err(FieldError::at(field, "must be from 1s to 24h"));
            }
            Ok(Penalty::Block(block))
        }
    }
}

/// Refuses `on_exceed: block` (and `block_for`) on a limit of a kind that
/// cannot block, saying why.
pub fn refuse_block(path: &str, raw: &RawLimit, why: &str) -> Result<(), FieldError> {
    match (raw.on_exceed, &raw.block_for) {
        (OnExceed::Block, _) => Err(FieldError::at(
            field_path(path, "on_exceed"),
            format!("block does not apply to {why}"),
        )),
        (OnExceed::Deny | OnExceed::Delay, Some(_)) => Err(FieldError::at(
            field_path(path, "block_for"),
            "only applies with on_exceed: block",
        )),
        (OnExceed::Deny | OnExceed::Delay, None) => Ok(()),
    }
}

/// The fields of a rate limit in `raw` (its algorithm's, and the ways it is
/// decided), each with whether it is given: a kind of limit that takes none
/// of them refuses the first given, naming it.
pub fn rate_fields(raw: &RawLimit) -> [(&'static str, bool); 8] {
    [
        ("algorithm", raw.algorithm.is_some()),
        ("requests", raw.requests.is_some()),
        ("window", raw.window.is_some()),
        ("burst", raw.burst.is_some()),
        ("precision", raw.precision.is_some()),
        ("soft_percent", raw.soft_percent != 0),
        ("elastic", raw.elastic.is_some()),
        ("sync", raw.sync.is_some()),
    ]
}
