//! Global limits: the limiter call-out's wire format.
//!
//! The request body follows the limiter API:
//! `{"domain":..,"hits":1,"limits":[{"key":"<rule>/<limit index>/<key>","algorithm":..,"requests":..,"window_ms":..,"burst":..}]}`.

use serde::{Deserialize, Serialize};
use sluice_core::{Algorithm, Decision, Denial, Limit, MILLISECOND};
use std::fmt::Write;
use std::hash::Hasher;

/// One limit of a check request.
#[derive(Debug, Serialize)]
pub struct CheckLimit {
    /// `<rule>/<limit index>/<key text>`.
    pub key: String,
    /// Algorithm name.
    pub algorithm: &'static str,
    /// Requests per window.
    pub requests: u64,
    /// Window in milliseconds.
    pub window_ms: u64,
    /// Burst.
    pub burst: u64,
    /// Sub-windows (`sliding_window` with a precision other than 1 only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub precision: Option<u32>,
}

/// Longest key the limiter accepts, in bytes.
pub const MAX_KEY_BYTES: usize = 512;

/// The limiter key of `key` for limit `index` of `rule`: `<rule>/<index>/<key>`,
/// or, when that would be longer than the limiter accepts (a long header
/// value), `<rule>/<index>/#<hash of key>` with a hash every Envoy computes
/// alike. Keys that share a hash share a counter, which errs on the side of
/// limiting.
pub fn limiter_key(rule: &str, index: usize, key: &str) -> String {
    let mut out = format!("{rule}/{index}/");
    if out.len().saturating_add(key.len()) <= MAX_KEY_BYTES {
        out.push_str(key);
    } else {
        // Fixed keys: the hash must agree across Envoys (unlike slot seeds).
        #[allow(deprecated)]
        let mut hasher = std::hash::SipHasher::new_with_keys(0x736c_7569_6365, 0x676c_6f62_616c);
        hasher.write(key.as_bytes());
        let _ = write!(out, "#{:016x}", hasher.finish());
    }
    out
}

impl CheckLimit {
    /// The wire form of `limit` for limit `index` of `rule` and the key text `key`.
    pub fn new(rule: &str, index: usize, key: &str, limit: &Limit) -> Self {
        CheckLimit {
            key: limiter_key(rule, index, key),
            algorithm: limit.algorithm.name(),
            requests: limit.requests,
            window_ms: limit.window / MILLISECOND,
            burst: limit.burst,
            precision: (limit.algorithm == Algorithm::SlidingWindow && limit.precision != 1)
                .then_some(limit.precision),
        }
    }
}

/// The body of `POST /v1/check`.
#[derive(Debug, Serialize)]
pub struct CheckRequest<'a> {
    /// The configuration's domain.
    pub domain: &'a str,
    /// Cost of this request.
    pub hits: u64,
    /// The limits to decide together.
    pub limits: Vec<CheckLimit>,
}

/// The limiter's answer.
#[derive(Debug, Deserialize)]
pub struct CheckResponse {
    /// True when every limit allowed.
    pub allowed: bool,
    /// One decision per requested limit, in order.
    pub limits: Vec<LimitAnswer>,
}

/// The limiter's decision for one limit.
#[derive(Debug, Clone, Copy, Deserialize)]
pub struct LimitAnswer {
    /// Whether the limit allows the request.
    pub allowed: bool,
    /// The quota.
    pub limit: u64,
    /// Requests left.
    pub remaining: u64,
    /// Milliseconds until the quota is full.
    pub reset_ms: u64,
    /// Milliseconds until the request could pass.
    pub retry_after_ms: u64,
}

impl LimitAnswer {
    /// As a core decision.
    pub fn decision(&self) -> Decision {
        Decision {
            allowed: self.allowed,
            limit: self.limit,
            remaining: self.remaining,
            reset: self.reset_ms.saturating_mul(MILLISECOND),
            retry_after: self.retry_after_ms.saturating_mul(MILLISECOND),
            delay: 0,
            denial: (!self.allowed).then_some(Denial::OverLimit),
        }
    }
}

/// Parses a limiter answer to a check of `expected` limits; `None` for
/// anything malformed.
pub fn parse_response(body: &[u8], expected: usize) -> Option<CheckResponse> {
    let response: CheckResponse = serde_json::from_slice(body).ok()?;
    (response.limits.len() == expected).then_some(response)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use sluice_core::SECOND;

    #[test]
    fn request_matches_the_contract() {
        let limit = Limit {
            algorithm: Algorithm::Gcra,
            requests: 100,
            window: 60 * SECOND,
            burst: 20,
            precision: 1,
            soft_percent: 0,
            max_delay: None,
        };
        let body = CheckRequest {
            domain: "demo",
            hits: 1,
            limits: vec![CheckLimit::new("per-ip", 1, "203.0.113.7", &limit)],
        };
        assert_eq!(
            serde_json::to_string(&body).unwrap(),
            r#"{"domain":"demo","hits":1,"limits":[{"key":"per-ip/1/203.0.113.7","algorithm":"gcra","requests":100,"window_ms":60000,"burst":20}]}"#
        );
        let sliding = Limit {
            algorithm: Algorithm::SlidingWindow,
            precision: 4,
            ..limit
        };
        let wire = serde_json::to_string(&CheckLimit::new("r", 0, "k", &sliding)).unwrap();
        assert!(wire.ends_with(r#""burst":20,"precision":4}"#), "{wire}");
    }

    #[test]
    fn long_keys_are_hashed() {
        assert_eq!(limiter_key("r", 0, "alice"), "r/0/alice");
        let long = "x".repeat(600);
        let hashed = limiter_key("r", 0, &long);
        assert!(
            hashed.starts_with("r/0/#") && hashed.len() == 5 + 16,
            "{hashed}"
        );
        assert_eq!(hashed, limiter_key("r", 0, &long));
        assert_ne!(hashed, limiter_key("r", 0, &"y".repeat(600)));
        let fits = "x".repeat(MAX_KEY_BYTES - 4);
        assert_eq!(limiter_key("r", 0, &fits).len(), MAX_KEY_BYTES);
    }

    #[test]
    fn parses_answers() {
        let body = br#"{"allowed":false,"limits":[{"allowed":false,"limit":100,"remaining":0,"reset_ms":540,"retry_after_ms":600,"extra":1}]}"#;
        let r = parse_response(body, 1).unwrap();
        assert!(!r.allowed);
        let d = r.limits[0].decision();
        assert_eq!(
            (d.reset, d.retry_after, d.denial),
            (
                540 * MILLISECOND,
                600 * MILLISECOND,
                Some(Denial::OverLimit)
            )
        );
        assert!(parse_response(body, 2).is_none());
        assert!(parse_response(b"garbage", 1).is_none());
        assert!(parse_response(br#"{"allowed":true}"#, 0).is_none());
    }
}
