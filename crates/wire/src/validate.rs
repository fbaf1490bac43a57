//! The limiter's side: a check body parsed strictly and validated into core
//! limits before any store is touched; every error names its field.

use crate::{CheckRequest, LimitSpec, MAX_KEY_BYTES};
use sluice_core::{Algorithm, FieldError, Limit, MILLISECOND};

/// Largest accepted request body.
pub const MAX_BODY_BYTES: usize = 64 * 1024;
/// Most limits one check may carry.
pub const MAX_LIMITS: usize = 64;
/// Longest accepted domain, in bytes.
pub const MAX_DOMAIN_BYTES: usize = 128;
/// Longest window: 366 days, as sluice-core accepts.
pub const MAX_WINDOW_MS: u64 = sluice_core::MAX_WINDOW / MILLISECOND;
/// Largest `requests`, `burst` and `hits`, as sluice-core accepts.
pub const MAX_COUNT: u64 = sluice_core::MAX_REQUESTS;

/// A validated limit with its key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyedLimit {
    /// The client key as sent (without the domain).
    pub key: String,
    /// The limit to enforce.
    pub limit: Limit,
}

/// A check that passed validation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidCheck {
    /// The domain.
    pub domain: String,
    /// The weight of the request.
    pub hits: u64,
    /// The limits, in request order.
    pub limits: Vec<KeyedLimit>,
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
        // Parse again, slower, only to name the field at fault.
        Err(plain) => {
            let de = &mut serde_json::Deserializer::from_slice(body);
            match serde_path_to_error::deserialize::<_, CheckRequest<'_>>(de) {
                Err(e) => {
                    let path = e.path().to_string();
                    let field = if path == "." { String::new() } else { path };
                    Err(FieldError::at(field, e.into_inner().to_string()))
                }
                Ok(_) => Err(FieldError::at("", plain.to_string())),
            }
        }
    }
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
        if self.hits == 0 || self.hits > MAX_COUNT {
            return Err(FieldError::at(
                "hits",
                format!("must be between 1 and {MAX_COUNT}"),
            ));
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
        let mut limits = Vec::with_capacity(self.limits.len());
        for (i, spec) in self.limits.into_iter().enumerate() {
            let keyed = KeyedLimit::try_from(spec).map_err(|e| e.under(&format!("limits[{i}]")))?;
            limits.push(keyed);
        }
        Ok(ValidCheck {
            domain: self.domain.into_owned(),
            hits: self.hits,
            limits,
        })
    }
}

/// Builds a core [`Limit`] from wire numbers, naming the field at fault
/// (`requests`, `window_ms`, `burst`, `precision`, `soft_percent`).
pub fn build_limit(
    algorithm: Algorithm,
    requests: u64,
    window_ms: u64,
    burst: Option<u64>,
    precision: Option<u32>,
    soft_percent: Option<u32>,
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
    let limit = Limit {
        algorithm,
        requests,
        window,
        burst,
        precision: precision.unwrap_or(1),
        soft_percent: soft_percent.unwrap_or(0),
        max_delay: None,
    };
    limit
        .validate()
        .map_err(|e| e.renamed("window", "window_ms"))?;
    Ok(limit)
}

impl TryFrom<LimitSpec<'_>> for KeyedLimit {
    type Error = FieldError;

    fn try_from(spec: LimitSpec<'_>) -> Result<Self, Self::Error> {
        if spec.key.is_empty() {
            return Err(FieldError::at("key", "must not be empty"));
        }
        if spec.key.len() > MAX_KEY_BYTES {
            return Err(FieldError::at(
                "key",
                format!("longer than {MAX_KEY_BYTES} bytes"),
            ));
        }
        // Per-limit weights and delay mode are not decided by the stores yet.
        if spec.hits.is_some() {
            return Err(FieldError::at("hits", "per-limit hits are not supported"));
        }
        if spec.max_delay_ms.is_some() {
            return Err(FieldError::at(
                "max_delay_ms",
                "delay mode is not supported",
            ));
        }
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
        )?;
        Ok(KeyedLimit {
            key: spec.key.into_owned(),
            limit,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(err(r#"{"domain":"d","limits":[{"key":"k","algorithm":"gcra","requests":1,"window_ms":1,"hits":2}]}"#)
            .starts_with("limits[0].hits: "));
        assert!(err(r#"{"domain":"d","limits":[{"key":"k","algorithm":"gcra","requests":1,"window_ms":1,"max_delay_ms":5}]}"#)
            .starts_with("limits[0].max_delay_ms: "));
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
