//! gRPC requests: recognising them, and their deadline.
//!
//! A denied gRPC request is answered the gRPC way (HTTP 200 with
//! `grpc-status: 8`, RESOURCE_EXHAUSTED, and a `grpc-message`; the rate-limit
//! headers travel as metadata): Envoy would otherwise map a 429 to
//! `grpc-status: 14` (UNAVAILABLE), which clients retry at once. A delayed
//! gRPC request is denied instead of held past its `grpc-timeout`.

use sluice_core::{Nanos, MILLISECOND, SECOND};

/// Whether a request with this `content-type` is a gRPC call, as Envoy
/// decides it: `application/grpc` or one of its `+suffix` forms (gRPC-Web is
/// not: Envoy's `grpc_web` filter, placed before Sluice, converts it).
pub fn is_grpc(content_type: &str) -> bool {
    let Some(rest) = content_type
        .get(..16)
        .filter(|p| p.eq_ignore_ascii_case("application/grpc"))
        .and_then(|_| content_type.get(16..))
    else {
        return false;
    };
    rest.is_empty() || rest.starts_with('+') || rest.starts_with(';')
}

/// The `grpc-message` of a denial by rule `rule`.
pub fn denial_message(rule: &str) -> String {
    format!("rate limited by rule {rule}")
}

/// A `grpc-timeout` value (1 to 8 digits and a unit: `H`, `M`, `S`, `m`,
/// `u`, `n`) in nanoseconds; `None` when malformed.
pub fn parse_timeout(value: &str) -> Option<Nanos> {
    let value = value.trim();
    let digits = value.get(..value.len().checked_sub(1)?)?;
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    let unit = match value.as_bytes().last()? {
        b'H' => 3_600 * SECOND,
        b'M' => 60 * SECOND,
        b'S' => SECOND,
        b'm' => MILLISECOND,
        b'u' => 1_000,
        b'n' => 1,
        _ => return None,
    };
    n.checked_mul(unit)
}

/// Whether a request held `delay` would outlive its deadline `timeout`.
pub fn outlives(delay: Nanos, timeout: Option<Nanos>) -> bool {
    timeout.is_some_and(|t| delay >= t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_grpc_content_types() {
        for yes in [
            "application/grpc",
            "application/grpc+proto",
            "Application/GRPC",
            "application/grpc;charset=x",
        ] {
            assert!(is_grpc(yes), "{yes}");
        }
        for no in [
            "",
            "application/json",
            "application/grpc-web",
            "application/grpc-web+proto",
            "application/grp",
        ] {
            assert!(!is_grpc(no), "{no}");
        }
    }

    #[test]
    fn parses_grpc_timeouts() {
        assert_eq!(parse_timeout("1H"), Some(3_600 * SECOND));
        assert_eq!(parse_timeout("2M"), Some(120 * SECOND));
        assert_eq!(parse_timeout("3S"), Some(3 * SECOND));
        assert_eq!(parse_timeout("250m"), Some(250 * MILLISECOND));
        assert_eq!(parse_timeout("1500u"), Some(1_500_000));
        assert_eq!(parse_timeout("99999999n"), Some(99_999_999));
        for bad in ["", "m", "123456789m", "1s", "-1S", "1.5S", "10"] {
            assert_eq!(parse_timeout(bad), None, "{bad}");
        }
        assert!(outlives(SECOND, Some(SECOND)));
        assert!(!outlives(SECOND, Some(2 * SECOND)));
        assert!(!outlives(SECOND, None));
    }
}
