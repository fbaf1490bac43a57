//! One `rate_limit` block: its unit, its fields as written, and the checks
//! that span several of them, run while the block is read so that their
//! errors carry its position.

use serde::de::{self, Deserializer};
use serde::Deserialize;
use sluice_core::{Algorithm, Limit, Nanos};

pub use sluice_wire::Unit;

fn duration<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Nanos>, D::Error> {
    let text = String::deserialize(d)?;
    sluice_core::parse_duration(&text)
        .map(Some)
        .map_err(de::Error::custom)
}

fn algorithm<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Algorithm>, D::Error> {
    let text = String::deserialize(d)?;
    text.parse::<Algorithm>()
        .map(Some)
        .map_err(|e| de::Error::custom(e.to_string()))
}

/// One entry of `replaces`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawReplaces {
    #[serde(default)]
    name: String,
}

/// `rate_limit` as written, before its fields are checked together.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRateLimitFields {
    #[serde(default)]
    unit: Option<Unit>,
    #[serde(default)]
    requests_per_unit: Option<u32>,
    #[serde(default)]
    unlimited: bool,
    #[serde(default)]
    name: String,
    #[serde(default)]
    replaces: Vec<RawReplaces>,
    // Sluice's extensions.
    #[serde(default, deserialize_with = "algorithm")]
    algorithm: Option<Algorithm>,
    #[serde(default, deserialize_with = "duration")]
    window: Option<Nanos>,
    #[serde(default)]
    burst: Option<u64>,
    #[serde(default)]
    soft_percent: Option<u32>,
    #[serde(default)]
    unit_multiplier: Option<u32>,
}

/// What a `rate_limit` block does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Counted against a limit in the store.
    Limit(Limit),
    /// `requests_per_unit: 0`: every request is over the limit (nothing is
    /// stored).
    Block,
    /// `unlimited: true`: never limited, never stored.
    Unlimited,
}

/// A checked `rate_limit` block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateLimit {
    /// What it does.
    pub action: Action,
    /// `requests_per_unit` as configured (reported in `current_limit`).
    pub requests_per_unit: u32,
    /// The window's unit when it is one (`None` for a `window` that is not
    /// exactly a unit: reported as `UNKNOWN`).
    pub unit: Option<Unit>,
    /// The window.
    pub window: Nanos,
    /// `name`, reported in `current_limit` and matched by `replaces`.
    pub name: String,
    /// Names of the limits this one replaces when both apply.
    pub replaces: Vec<String>,
}

impl TryFrom<RawRateLimitFields> for RateLimit {
    type Error = String;

    fn try_from(raw: RawRateLimitFields) -> Result<Self, String> {
        let replaces: Vec<String> = raw.replaces.into_iter().map(|r| r.name).collect();
        if replaces.iter().any(String::is_empty) {
            return Err("replaces: an entry has an empty name".into());
        }
        if !raw.name.is_empty() && replaces.contains(&raw.name) {
            return Err(format!("replaces: {:?} is this limit's own name", raw.name));
        }
        let extended = raw.algorithm.is_some()
            || raw.window.is_some()
            || raw.burst.is_some()
            || raw.soft_percent.is_some()
            || raw.unit_multiplier.is_some();
        if raw.unlimited {
            if raw.unit.is_some() || raw.window.is_some() {
                return Err("unit: an unlimited rate limit takes no unit or window".into());
            }
            if extended {
                return Err(
                    "unlimited: an unlimited rate limit takes no algorithm, burst, soft_percent or unit_multiplier"
                        .into(),
                );
            }
            return Ok(RateLimit {
                action: Action::Unlimited,
                requests_per_unit: raw.requests_per_unit.unwrap_or(0),
                unit: None,
                window: 0,
                name: raw.name,
                replaces,
            });
        }
        let (unit, window) = unit_and_window(raw.unit, raw.window, raw.unit_multiplier)?;
        let Some(requests_per_unit) = raw.requests_per_unit else {
            return Err("requests_per_unit: missing".into());
        };
        let window_field = match (raw.unit_multiplier, raw.unit) {
            (Some(_), _) => "unit_multiplier",
            (None, Some(_)) => "unit",
            (None, None) => "window",
        };
        let action = if requests_per_unit == 0 {
            Action::Block
        } else {
            let limit = Limit {
                algorithm: raw.algorithm.unwrap_or(Algorithm::FixedWindow),
                requests: u64::from(requests_per_unit),
                window,
                burst: raw.burst.unwrap_or(u64::from(requests_per_unit)),
                precision: 1,
                soft_percent: raw.soft_percent.unwrap_or(0),
                max_delay: None,
            };
            limit.validate().map_err(|e| {
                let e = e
                    .renamed("requests", "requests_per_unit")
                    .renamed("window", window_field);
                e.to_string()
            })?;
            Action::Limit(limit)
        };
        Ok(RateLimit {
            action,
            requests_per_unit,
            unit,
            window,
            name: raw.name,
            replaces,
        })
    }
}

/// The unit reported and the window: a unit, `unit_multiplier` of them, or
/// a `window`.
fn unit_and_window(
    unit: Option<Unit>,
    window: Option<Nanos>,
    multiplier: Option<u32>,
) -> Result<(Option<Unit>, Nanos), String> {
    match (unit, window, multiplier) {
        (Some(_), Some(_), _) => Err("window: give either unit or window, not both".into()),
        (None, Some(_), Some(_)) => Err("unit_multiplier: multiplies a unit, not a window".into()),
        (Some(u), None, None) => Ok((Some(u), u.window())),
        (Some(u), None, Some(n)) => {
            let window = multiplied(u, n)?;
            Ok((Unit::of_window(window), window))
        }
        (None, Some(w), None) => Ok((Unit::of_window(w), w)),
        (None, None, _) => Err("unit: missing (or a window, or unlimited: true)".into()),
    }
}

/// `unit_multiplier` units of `unit`: a window of any length, aligned to
/// the epoch like a unit's.
fn multiplied(unit: Unit, n: u32) -> Result<Nanos, String> {
    if n == 0 {
        return Err("unit_multiplier: must be at least 1".into());
    }
    unit.window()
        .checked_mul(u64::from(n))
        .ok_or_else(|| format!("unit_multiplier: {n} units of {unit:?} is too long a window"))
}

impl<'de> Deserialize<'de> for RateLimit {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = RawRateLimitFields::deserialize(d)?;
        RateLimit::try_from(raw).map_err(de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::SECOND;

    fn read(text: &str) -> Result<RateLimit, String> {
        serde_yaml_ng::from_str::<RateLimit>(text).map_err(|e| e.to_string())
    }

    #[test]
    fn unit_multiplier_makes_a_window_of_n_units() {
        let five = read("{unit: minute, unit_multiplier: 5, requests_per_unit: 3}").unwrap();
        assert_eq!((five.window, five.unit), (300 * SECOND, None));
        let Action::Limit(limit) = five.action else {
            panic!("not a limit: {:?}", five.action)
        };
        assert_eq!(
            (limit.algorithm, limit.window),
            (Algorithm::FixedWindow, 300 * SECOND)
        );
        // A multiple that is a unit reports as that unit.
        let sixty = read("{unit: second, unit_multiplier: 60, requests_per_unit: 3}").unwrap();
        assert_eq!(
            (sixty.window, sixty.unit),
            (60 * SECOND, Some(Unit::Minute))
        );
        let one = read("{unit: hour, unit_multiplier: 1, requests_per_unit: 3}").unwrap();
        assert_eq!((one.window, one.unit), (3_600 * SECOND, Some(Unit::Hour)));
    }

    #[test]
    fn unit_multiplier_errors_name_the_field() {
        for (text, start) in [
            ("{unit: minute, unit_multiplier: 0, requests_per_unit: 3}", "unit_multiplier: must be at least 1"),
            ("{window: 5m, unit_multiplier: 2, requests_per_unit: 3}", "unit_multiplier: multiplies a unit"),
            ("{unit_multiplier: 2, requests_per_unit: 3}", "unit: missing"),
            ("{unit: year, unit_multiplier: 2, requests_per_unit: 3}", "unit_multiplier: must be between 1ms and 366d"),
            ("{unlimited: true, unit_multiplier: 2}", "unlimited: an unlimited rate limit takes no algorithm, burst, soft_percent or unit_multiplier"),
        ] {
            let e = read(text).unwrap_err();
            assert!(e.starts_with(start), "{text}: {e}");
        }
        let e = read("{unit: minute, unit_multiplier: -1, requests_per_unit: 3}").unwrap_err();
        assert!(
            e.starts_with("unit_multiplier: invalid type: integer `-1`, expected u32"),
            "{e}"
        );
    }
}
