//! A count another filter wrote into the request's dynamic metadata (as
//! Envoy Gateway's `cost.request.from: Metadata` reads one), read through
//! the property `metadata.filter_metadata.NAMESPACE.KEY`.
//!
//! Envoy hands a property's value over without its type: a number (every
//! number of a protobuf `Struct` is a double) as its 8 bytes little-endian,
//! a string as its bytes. Both are read: `header_to_metadata` writes a
//! `NUMBER` as a double and a `STRING` as text.

pub use sluice_wire::Unit;

/// Where a count is in the request's dynamic metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetadataPlace {
    /// The `filter_metadata` namespace (`envoy.filters.http.ext_proc`); may
    /// hold dots.
    pub namespace: String,
    /// The key in it.
    pub key: String,
}

impl MetadataPlace {
    /// Reads `NAMESPACE:KEY` (the namespace may hold `:`; the key is after
    /// the last one, and holds none).
    pub fn parse(text: &str) -> Option<MetadataPlace> {
        let (namespace, key) = text.rsplit_once(':')?;
        if namespace.is_empty() || key.is_empty() {
            return None;
        }
        Some(MetadataPlace {
            namespace: namespace.to_string(),
            key: key.to_string(),
        })
    }

    /// The property path of the value.
    pub fn property(&self) -> [&str; 4] {
        ["metadata", "filter_metadata", &self.namespace, &self.key]
    }
}

/// A limit another filter wrote for a request: `requests_per_unit` per
/// `unit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetadataLimit {
    /// Requests per unit: 1 to `u32::MAX` (the protocol's `uint32`).
    pub requests: u64,
    /// The window.
    pub unit: Unit,
}

/// What the request's metadata says of a limit at a place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitRead {
    /// Nothing is at the place: the configured limit applies.
    Absent,
    /// Something is, but not a struct of a `requests_per_unit` from 1 to
    /// `u32::MAX` and a known `unit`.
    Invalid,
    /// A limit.
    Valid(MetadataLimit),
}

/// Reads the limit at `place` through `property`: its struct's
/// `requests_per_unit` and `unit` fields, each its own property (Envoy
/// walks into the struct; a number comes as a double, a string as text).
/// Only when `requests_per_unit` is missing is the place itself read, to
/// tell a missing limit from a malformed one.
pub fn read_limit(
    place: &MetadataPlace,
    property: impl Fn(&[&str]) -> Option<Vec<u8>>,
) -> LimitRead {
    let [m, f, ns, key] = place.property();
    let Some(requests) = property(&[m, f, ns, key, "requests_per_unit"]) else {
        return match property(&[m, f, ns, key]) {
            Some(_) => LimitRead::Invalid,
            None => LimitRead::Absent,
        };
    };
    let requests = count(&requests).filter(|r| (1..=u64::from(u32::MAX)).contains(r));
    let unit = property(&[m, f, ns, key, "unit"])
        .and_then(|u| std::str::from_utf8(&u).ok().and_then(Unit::parse));
    match (requests, unit) {
        (Some(requests), Some(unit)) => LimitRead::Valid(MetadataLimit { requests, unit }),
        (None, _) | (_, None) => LimitRead::Invalid,
    }
}

/// The non-negative integer a property's value holds: a double with no
/// fraction, or text of only digits (surrounding blanks aside). Too large
/// for `u64`: `u64::MAX`. Anything else (a fraction, a negative number,
/// other text, a struct): `None`.
pub fn count(value: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(value)
        .ok()
        .map(|t| t.trim_matches(|c: char| c == ' ' || c == '\t'))
        .filter(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()));
    if let Some(digits) = text {
        // Only digits: parsing fails only on overflow.
        return Some(digits.parse().unwrap_or(u64::MAX));
    }
    let bytes: [u8; 8] = value.try_into().ok()?;
    let number = f64::from_le_bytes(bytes);
    if !number.is_finite() || number < 0.0 || number.fract() != 0.0 {
        return None;
    }
    // In range, `as` is exact for an integral double; past it, it saturates.
    Some(number as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limit_of(fields: &[(&str, &[u8])]) -> LimitRead {
        let place = MetadataPlace {
            namespace: "ns".into(),
            key: "lim".into(),
        };
        read_limit(&place, |path| {
            let name = path[4..].first().copied().unwrap_or("");
            fields
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.to_vec())
        })
    }

    #[test]
    fn reads_a_limit_struct() {
        let three = 3.0f64.to_le_bytes();
        assert_eq!(
            limit_of(&[("requests_per_unit", &three), ("unit", b"HOUR")]),
            LimitRead::Valid(MetadataLimit {
                requests: 3,
                unit: Unit::Hour
            })
        );
        assert_eq!(
            limit_of(&[("requests_per_unit", b"7"), ("unit", b"minute")]),
            LimitRead::Valid(MetadataLimit {
                requests: 7,
                unit: Unit::Minute
            })
        );
        assert_eq!(limit_of(&[]), LimitRead::Absent);
        // The place holds something that is no limit struct.
        assert_eq!(limit_of(&[("", b"5")]), LimitRead::Invalid);
        for bad in [
            vec![("requests_per_unit", &three[..])],
            vec![("requests_per_unit", &three[..]), ("unit", b"fortnight")],
            vec![("requests_per_unit", b"0"), ("unit", b"hour")],
            vec![("requests_per_unit", b"4294967296"), ("unit", b"hour")],
            vec![
                ("requests_per_unit", &2.5f64.to_le_bytes()[..]),
                ("unit", b"hour"),
            ],
        ] {
            assert_eq!(limit_of(&bad), LimitRead::Invalid, "{bad:?}");
        }
    }

    #[test]
    fn reads_a_double_or_digits() {
        assert_eq!(count(&5.0f64.to_le_bytes()), Some(5));
        assert_eq!(count(&0.0f64.to_le_bytes()), Some(0));
        assert_eq!(count(&1e30f64.to_le_bytes()), Some(u64::MAX));
        assert_eq!(count(b"12"), Some(12));
        assert_eq!(count(b" 7\t"), Some(7));
        assert_eq!(count(b"99999999999999999999999"), Some(u64::MAX));
        // Eight digits are text, not a double's bytes.
        assert_eq!(count(b"12345678"), Some(12_345_678));
    }

    #[test]
    fn refuses_what_is_no_count() {
        for bad in [
            2.5f64.to_le_bytes().to_vec(),
            (-1.0f64).to_le_bytes().to_vec(),
            f64::NAN.to_le_bytes().to_vec(),
            f64::INFINITY.to_le_bytes().to_vec(),
            b"".to_vec(),
            b"five".to_vec(),
            b"-3".to_vec(),
            vec![1, 2, 3],
        ] {
            assert_eq!(count(&bad), None, "{bad:?}");
        }
    }

    #[test]
    fn parses_a_namespace_and_key() {
        let place = MetadataPlace::parse("envoy.filters.http.ext_proc:cost");
        assert_eq!(
            place.as_ref().map(MetadataPlace::property),
            Some([
                "metadata",
                "filter_metadata",
                "envoy.filters.http.ext_proc",
                "cost"
            ])
        );
        assert_eq!(
            MetadataPlace::parse("a:b:c").map(|p| (p.namespace, p.key)),
            Some(("a:b".to_string(), "c".to_string()))
        );
        for bad in ["", "ns", "ns:", ":key"] {
            assert_eq!(MetadataPlace::parse(bad), None, "{bad}");
        }
    }
}
