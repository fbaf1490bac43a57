//! The rate limit units of Envoy's rate limit service protocol
//! (`RateLimitResponse.RateLimit.Unit`), as envoyproxy/ratelimit's YAML,
//! Envoy's per-descriptor overrides and Envoy Gateway's metadata name them:
//! one description for the limiter and the filter.

use serde::de::{self, Deserializer};
use serde::Deserialize;
use sluice_core::{Nanos, SECOND};

/// A rate limit unit of the RLS protocol (`RateLimitResponse.RateLimit.Unit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Unit {
    /// One second.
    Second,
    /// 60 seconds.
    Minute,
    /// 3,600 seconds.
    Hour,
    /// 86,400 seconds.
    Day,
    /// 7 days.
    Week,
    /// 30 days (as envoyproxy/ratelimit counts a month).
    Month,
    /// 365 days.
    Year,
}

impl Unit {
    /// Every unit, shortest first.
    pub const ALL: [Unit; 7] = [
        Unit::Second,
        Unit::Minute,
        Unit::Hour,
        Unit::Day,
        Unit::Week,
        Unit::Month,
        Unit::Year,
    ];

    /// The unit's length.
    pub const fn window(self) -> Nanos {
        let secs: u64 = match self {
            Unit::Second => 1,
            Unit::Minute => 60,
            Unit::Hour => 3_600,
            Unit::Day => 86_400,
            Unit::Week => 7 * 86_400,
            Unit::Month => 30 * 86_400,
            Unit::Year => 365 * 86_400,
        };
        secs * SECOND
    }

    /// The unit's number in the protocol's enum.
    pub const fn code(self) -> i32 {
        match self {
            Unit::Second => 1,
            Unit::Minute => 2,
            Unit::Hour => 3,
            Unit::Day => 4,
            Unit::Month => 5,
            Unit::Year => 6,
            Unit::Week => 7,
        }
    }

    /// The unit numbered `code` in the protocol (`None` for `UNKNOWN`).
    pub fn from_code(code: i32) -> Option<Unit> {
        Unit::ALL.into_iter().find(|u| u.code() == code)
    }

    /// The unit exactly `window` long, if any (for `current_limit`).
    pub fn of_window(window: Nanos) -> Option<Unit> {
        Unit::ALL.into_iter().find(|u| u.window() == window)
    }

    /// The protocol's name of the unit (`SECOND` ... `YEAR`).
    pub const fn name(self) -> &'static str {
        match self {
            Unit::Second => "SECOND",
            Unit::Minute => "MINUTE",
            Unit::Hour => "HOUR",
            Unit::Day => "DAY",
            Unit::Week => "WEEK",
            Unit::Month => "MONTH",
            Unit::Year => "YEAR",
        }
    }

    /// The unit named `text`, in any case (`hour`, `HOUR`, `Hour`), as
    /// the YAML, Envoy's overrides and Envoy Gateway's metadata name it.
    pub fn parse(text: &str) -> Option<Unit> {
        match text.to_ascii_lowercase().as_str() {
            "second" => Some(Unit::Second),
            "minute" => Some(Unit::Minute),
            "hour" => Some(Unit::Hour),
            "day" => Some(Unit::Day),
            "week" => Some(Unit::Week),
            "month" => Some(Unit::Month),
            "year" => Some(Unit::Year),
            _ => None,
        }
    }
}

impl<'de> Deserialize<'de> for Unit {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Unit::parse(&text).ok_or_else(|| {
            de::Error::custom(format!(
                "invalid rate limit unit {text:?} (expected second, minute, hour, day, week, month or year)"
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_names_and_windows_agree() {
        for unit in Unit::ALL {
            assert_eq!(Unit::from_code(unit.code()), Some(unit));
            assert_eq!(Unit::parse(unit.name()), Some(unit));
            assert_eq!(Unit::parse(&unit.name().to_ascii_lowercase()), Some(unit));
            assert_eq!(Unit::of_window(unit.window()), Some(unit));
        }
        assert_eq!(Unit::from_code(0), None);
        assert_eq!(Unit::parse("eon"), None);
        assert_eq!(Unit::Month.window(), 30 * 86_400 * SECOND);
    }
}
