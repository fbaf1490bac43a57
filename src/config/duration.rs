//! Duration strings: a whole number followed by a unit (`ms`, `s`, `m`, `h`, `d`).

use sluice_core::{Nanos, MILLISECOND, SECOND};

/// Parses `"250ms"`, `"1s"`, `"1m"`, `"1h"` or `"1d"` into nanoseconds.
///
/// The number is a non-negative integer; the result must fit in a `u64` of
/// nanoseconds (about 584 years). Whether zero is acceptable is up to the caller.
pub fn parse_duration(text: &str) -> Result<Nanos, String> {
    let digits_end = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(digits_end);
    if number.is_empty() {
        return Err(format!(
            "invalid duration {text:?}: expected a whole number and a unit (ms, s, m, h, d), e.g. \"250ms\" or \"1m\""
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
    number
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(scale))
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
    fn rejects_bad_text() {
        for bad in [
            "",
            "ms",
            "1",
            "1 s",
            "-1s",
            "1.5s",
            "1sec",
            "s1",
            "99999999999999999999s",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
        assert!(parse_duration("100000d").unwrap_or(0) > 0);
        assert!(parse_duration("100000000000d").is_err());
    }
}
