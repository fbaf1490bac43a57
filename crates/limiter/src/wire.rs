//! The JSON wire format of `/v1/check`, kept apart from sluice-core's types.
//!
//! Requests are parsed strictly (unknown fields are errors) and validated into
//! [`ValidCheck`] before any store is touched; every error names its field.

use serde::{Deserialize, Serialize};
use sluice_core::{Algorithm, Decision, FieldError, Limit, MILLISECOND};

/// Largest accepted request body.
pub const MAX_BODY_BYTES: usize = 64 * 1024;
/// Most limits one check may carry.
pub const MAX_LIMITS: usize = 64;
/// Longest accepted limit key, in bytes.
pub const MAX_KEY_BYTES: usize = 512;
/// Longest accepted domain, in bytes.
pub const MAX_DOMAIN_BYTES: usize = 128;
/// Longest window: 366 days, as sluice-core accepts.
pub const MAX_WINDOW_MS: u64 = sluice_core::MAX_WINDOW / MILLISECOND;
/// Largest `requests`, `burst` and `hits`, as sluice-core accepts.
pub const MAX_COUNT: u64 = sluice_core::MAX_REQUESTS;

/// `POST /v1/check` body.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckRequest {
    /// Namespace of the keys; letters, digits, `_`, `-` and `.`.
    pub domain: String,
    /// Weight of the request; defaults to 1.
    #[serde(default = "one")]
    pub hits: u64,
    /// The limits the request falls under, decided together.
    pub limits: Vec<LimitSpec>,
}

fn one() -> u64 {
    1
}

/// One limit of a check as sent on the wire.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitSpec {
    /// The client's key for this limit (e.g. `per-ip/203.0.113.7`).
    pub key: String,
    /// One of the six algorithm names (`gcra`, `token_bucket`, ...).
    pub algorithm: String,
    /// Requests per window.
    pub requests: u64,
    /// The window in milliseconds.
    pub window_ms: u64,
    /// Requests a fresh key admits at once; defaults to `requests`.
    #[serde(default)]
    pub burst: Option<u64>,
    /// Sliding window: sub-windows per window; defaults to 1.
    #[serde(default)]
    pub precision: Option<u32>,
    /// Soft throttling: percent admitted above the quota; defaults to 0.
    #[serde(default)]
    pub soft_percent: Option<u32>,
}

/// `POST /v1/check` answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckResponse {
    /// True when every limit allowed.
    pub allowed: bool,
    /// One result per requested limit, in request order.
    pub limits: Vec<LimitResult>,
}

/// What one limit decided, in whole milliseconds rounded up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LimitResult {
    /// Whether this limit allowed the request.
    pub allowed: bool,
    /// The quota: requests per window.
    pub limit: u64,
    /// Requests of weight 1 that would pass now.
    pub remaining: u64,
    /// Time until the quota is entirely available again.
    pub reset_ms: u64,
    /// Time until a request of this weight can pass; 0 when allowed.
    pub retry_after_ms: u64,
}

impl From<&Decision> for LimitResult {
    fn from(d: &Decision) -> Self {
        LimitResult {
            allowed: d.allowed,
            limit: d.limit,
            remaining: d.remaining,
            // Rounded up so a client never retries too early.
            reset_ms: d.reset.div_ceil(MILLISECOND),
            retry_after_ms: d.retry_after.div_ceil(MILLISECOND),
        }
    }
}

/// An error body: `{"error": "..."}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// What went wrong, starting with the field at fault when there is one.
    pub error: String,
}

/// A validated limit with its key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyedLimit {
    /// The client key as sent (without the domain).
    pub key: String,
    /// The limit to enforce.
    pub limit: Limit,
}

impl KeyedLimit {
    /// The store's identity for this limit's state: domain, key, algorithm and
    /// window, so that two limits on one key (say 10/s and 1000/h) keep
    /// separate state, and a key's state never meets another algorithm.
    pub fn state_id(&self, domain: &str) -> String {
        format!(
            "{domain}/{}|{}|{}",
            self.key,
            self.limit.algorithm.name(),
            self.limit.window / MILLISECOND
        )
    }
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
    match serde_json::from_slice::<CheckRequest>(body) {
        Ok(req) => req.validate(),
        // Parse again, slower, only to name the field at fault.
        Err(plain) => {
            let de = &mut serde_json::Deserializer::from_slice(body);
            match serde_path_to_error::deserialize::<_, CheckRequest>(de) {
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

/// Checks a domain name: 1 to 128 bytes of letters, digits, `_`, `-`, `.`.
pub fn validate_domain(domain: &str) -> Result<(), String> {
    if domain.is_empty() {
        return Err("must not be empty".into());
    }
    if domain.len() > MAX_DOMAIN_BYTES {
        return Err(format!("longer than {MAX_DOMAIN_BYTES} bytes"));
    }
    if !domain
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
    {
        return Err("may hold only letters, digits, '_', '-' and '.'".into());
    }
    Ok(())
}

impl CheckRequest {
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
            let prefix = format!("limits[{i}]");
            let keyed = KeyedLimit::try_from(spec).map_err(|e| e.under(&prefix))?;
            limits.push(keyed);
        }
        Ok(ValidCheck {
            domain: self.domain,
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

impl TryFrom<LimitSpec> for KeyedLimit {
    type Error = FieldError;

    fn try_from(spec: LimitSpec) -> Result<Self, Self::Error> {
        if spec.key.is_empty() {
            return Err(FieldError::at("key", "must not be empty"));
        }
        if spec.key.len() > MAX_KEY_BYTES {
            return Err(FieldError::at(
                "key",
                format!("longer than {MAX_KEY_BYTES} bytes"),
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
            key: spec.key,
            limit,
        })
    }
}
