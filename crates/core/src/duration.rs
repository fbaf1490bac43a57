//! Duration strings, as Sluice's configurations write them.

use crate::{Nanos, MILLISECOND, SECOND};

/// Parses a duration into nanoseconds: a whole number and a unit (`"250ms"`,
/// `"10s"`, `"5m"`, `"1h"`, `"1d"`), or Envoy's decimal seconds (`"0.25s"`,
/// `"1.5s"`, up to nine decimals, as protobuf's `Duration` is written in
/// JSON).
///
/// The number is non-negative; the result must fit in a `u64` of nanoseconds
/// (about 584 years). Whether zero is acceptable is up to the caller.
pub fn parse_duration(text: &str) -> Result<Nanos, String> {
    let number_end = text
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(number_end);
    let (whole, fraction) = match number.split_once('.') {
        Some((whole, fraction)) => (whole, Some(fraction)),
        None => (number, None),
    };
    if whole.is_empty() || fraction.is_some_and(|f| f.is_empty() || f.contains('.')) {
        return Err(format!(
            "invalid duration {text:?}: expected a whole number and a unit (ms, s, m, h, d), e.g. \"250ms\" or \"1m\", or decimal seconds, e.g. \"0.25s\""
        ));
    }
    let scale = match unit {
        "ms" => MILLISECOND,
        "s" => SECOND,
        "m" => 60 * SECOND,
        "h" => 3_600 * SECOND,
        "d" => 86_400 * SECOND,
        _ => {
            return Err(format!(
                "invalid duration {text:?}: unit must be one of ms, s, m, h, d"
            ))
        }
    };
    let whole = whole
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(scale))
        .ok_or_else(|| format!("invalid duration {text:?}: too large"))?;
    let Some(fraction) = fraction else {
        return Ok(whole);
    };
    if unit != "s" || fraction.len() > 9 {
        return Err(format!(
            "invalid duration {text:?}: decimals are for seconds only, at most nine (e.g. \"1.5s\")"
        ));
    }
    // At most nine digits: the nanoseconds, once padded.
    let nanos = fraction
        .bytes()
        .chain(std::iter::repeat(b'0'))
        .take(9)
        .fold(0u64, |n, b| n * 10 + u64::from(b - b'0'));
    whole
        .checked_add(nanos)
        .ok_or_else(|| format!("invalid duration {text:?}: too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_unit() {
        assert_eq!(parse_duration("250ms"), Ok(250 * MILLISECOND));
        assert_eq!(parse_duration("1s"), Ok(SECOND));
        assert_eq!(parse_duration("2m"), Ok(120 * SECOND));
        assert_eq!(parse_duration("1h"), Ok(3_600 * SECOND));
        assert_eq!(parse_duration("1d"), Ok(86_400 * SECOND));
        assert_eq!(parse_duration("0s"), Ok(0));
    }

    #[test]
    fn parses_envoy_decimal_seconds() {
        assert_eq!(parse_duration("0.25s"), Ok(250 * MILLISECOND));
        assert_eq!(parse_duration("1.5s"), Ok(1_500 * MILLISECOND));
        assert_eq!(parse_duration("0.000000001s"), Ok(1));
        assert_eq!(parse_duration("2.0s"), Ok(2 * SECOND));
    }

    #[test]
    fn rejects_bad_text() {
        for bad in [
            "",
            "ms",
            "1",
            "1 s",
            "-1s",
            "1sec",
            "s1",
            ".5s",
            "1.s",
            "1.2.3s",
            "1.5m",
            "1.5ms",
            "0.0000000001s",
            "99999999999999999999s",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
        assert!(parse_duration("100000d").unwrap_or(0) > 0);
        assert!(parse_duration("100000000000d").is_err());
    }
}
