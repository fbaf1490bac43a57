//! The few protobuf messages of Envoy's rate limit service protocol
//! (`envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`) that the
//! filter sends and reads, encoded by hand: a gRPC runtime would outweigh
//! the rest of the filter.
//!
//! The request carries one descriptor per global limit; the answer's
//! statuses come back in the same order and are read into the limiter
//! API's [`CheckResponse`], so the rest of the request path is the same for
//! both protocols.

use sluice_core::{Nanos, MILLISECOND, SECOND};
use sluice_wire::{CheckResponse, LimitResult};

/// The gRPC service and method the filter calls.
pub const SERVICE: &str = "envoy.service.ratelimit.v3.RateLimitService";
/// See [`SERVICE`].
pub const METHOD: &str = "ShouldRateLimit";

/// One descriptor of a request: its entries, in order, and its weight when
/// it differs from the request's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Descriptor {
    /// `(key, value)` entries.
    pub entries: Vec<(String, String)>,
    /// Per-descriptor `hits_addend`; `None` uses the request's.
    pub hits: Option<u64>,
}

/// Encodes a `RateLimitRequest` of `domain` for `descriptors`, each adding
/// `hits` unless it says otherwise.
pub fn encode_request(domain: &str, descriptors: &[Descriptor], hits: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    put_bytes(&mut out, 1, domain.as_bytes());
    let mut descriptor = Vec::new();
    let mut entry = Vec::new();
    for d in descriptors {
        descriptor.clear();
        for (key, value) in &d.entries {
            entry.clear();
            put_bytes(&mut entry, 1, key.as_bytes());
            put_bytes(&mut entry, 2, value.as_bytes());
            put_bytes(&mut descriptor, 1, &entry);
        }
        if let Some(h) = d.hits {
            // google.protobuf.UInt64Value { value = 1 }
            entry.clear();
            put_varint_field(&mut entry, 1, h);
            put_bytes(&mut descriptor, 3, &entry);
        }
        put_bytes(&mut out, 2, &descriptor);
    }
    // uint32 on the wire: a larger weight cannot be said, and is capped
    // (it is far above any limit an RLS can hold).
    let hits = hits.min(u64::from(u32::MAX));
    if hits != 1 {
        put_varint_field(&mut out, 3, hits);
    }
    out
}

/// Reads a `RateLimitResponse` with one status per descriptor sent
/// (`expected`): the decisions as the limiter API would give them, and each
/// limit's window (from its unit; 0 when the service did not say).
/// `None` when the message is malformed or has another number of statuses.
pub fn decode_response(bytes: &[u8], expected: usize) -> Option<(CheckResponse, Vec<Nanos>)> {
    let mut overall = 0;
    let mut limits = Vec::with_capacity(expected);
    let mut windows = Vec::with_capacity(expected);
    let mut r = Reader { bytes, at: 0 };
    while let Some((field, value)) = r.field()? {
        match (field, value) {
            (1, Value::Varint(code)) => overall = low32(code),
            (2, Value::Bytes(status)) => {
                let (result, window) = status_of(status)?;
                limits.push(result);
                windows.push(window);
            }
            _ => {}
        }
    }
    if limits.len() != expected || overall == CODE_UNKNOWN {
        return None;
    }
    let allowed = overall == CODE_OK;
    let answer = CheckResponse {
        allowed,
        limits,
        admitted: None,
        delays_ms: Vec::new(),
    };
    Some((answer, windows))
}

const CODE_UNKNOWN: u64 = 0;
const CODE_OK: u64 = 1;
const CODE_OVER_LIMIT: u64 = 2;

/// A `DescriptorStatus`: its decision and its limit's window.
fn status_of(bytes: &[u8]) -> Option<(LimitResult, Nanos)> {
    let mut code = 0;
    let (mut limit, mut unit, mut remaining, mut reset) = (0, 0, 0, 0);
    let mut r = Reader { bytes, at: 0 };
    while let Some((field, value)) = r.field()? {
        match (field, value) {
            (1, Value::Varint(c)) => code = low32(c),
            (2, Value::Bytes(current)) => {
                let mut c = Reader {
                    bytes: current,
                    at: 0,
                };
                while let Some((f, v)) = c.field()? {
                    match (f, v) {
                        (1, Value::Varint(n)) => limit = low32(n),
                        (2, Value::Varint(u)) => unit = low32(u),
                        _ => {}
                    }
                }
            }
            (3, Value::Varint(n)) => remaining = low32(n),
            (4, Value::Bytes(duration)) => reset = duration_of(duration)?,
            _ => {}
        }
    }
    let allowed = code != CODE_OVER_LIMIT;
    let reset_ms = reset.div_ceil(MILLISECOND);
    let result = LimitResult {
        allowed,
        limit,
        remaining,
        reset_ms,
        // The protocol has no retry time: the quota's reset is when a
        // retry surely passes.
        retry_after_ms: if allowed { 0 } else { reset_ms.max(1) },
        delay_ms: 0,
        leased: 0,
    };
    Some((result, window_of(unit)))
}

/// A 32-bit field (`uint32`, `int32`, an enum) read from a longer varint:
/// protobuf keeps the low 32 bits, so an `OVER_LIMIT` code or a remaining
/// count sent with high bits set reads as every other parser reads it.
fn low32(n: u64) -> u64 {
    n & 0xffff_ffff
}

/// A `google.protobuf.Duration`, in nanoseconds (negative: 0).
fn duration_of(bytes: &[u8]) -> Option<Nanos> {
    let (mut seconds, mut nanos) = (0u64, 0u64);
    let mut r = Reader { bytes, at: 0 };
    while let Some((field, value)) = r.field()? {
        match (field, value) {
            // int64 / int32: a negative value is a huge varint.
            (1, Value::Varint(s)) if i64::try_from(s).is_ok() => seconds = s,
            (2, Value::Varint(n)) if low32(n) < SECOND => nanos = low32(n),
            _ => {}
        }
    }
    Some(seconds.saturating_mul(SECOND).saturating_add(nanos))
}

/// The window of a `RateLimit.Unit`.
fn window_of(unit: u64) -> Nanos {
    const DAY: Nanos = 86_400 * SECOND;
    match unit {
        1 => SECOND,
        2 => 60 * SECOND,
        3 => 3_600 * SECOND,
        4 => DAY,
        5 => 30 * DAY,
        6 => 365 * DAY,
        7 => 7 * DAY,
        _ => 0,
    }
}

fn put_varint(out: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

fn put_varint_field(out: &mut Vec<u8>, field: u64, n: u64) {
    put_varint(out, field << 3);
    put_varint(out, n);
}

fn put_bytes(out: &mut Vec<u8>, field: u64, bytes: &[u8]) {
    put_varint(out, (field << 3) | 2);
    put_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// A field's value, by wire type.
enum Value<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    Fixed,
}

/// Reads fields off a message, skipping what it does not know.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn varint(&mut self) -> Option<u64> {
        let mut n = 0u64;
        for shift in (0..64).step_by(7) {
            let b = *self.bytes.get(self.at)?;
            self.at += 1;
            n |= u64::from(b & 0x7f) << shift;
            if b < 0x80 {
                return Some(n);
            }
        }
        None
    }

    fn skip(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.at.checked_add(n)?;
        let slice = self.bytes.get(self.at..end)?;
        self.at = end;
        Some(slice)
    }

    /// The next field: `Some(None)` at the end, `None` when malformed.
    fn field(&mut self) -> Option<Option<(u64, Value<'a>)>> {
        if self.at >= self.bytes.len() {
            return Some(None);
        }
        let tag = self.varint()?;
        let value = match tag & 7 {
            0 => Value::Varint(self.varint()?),
            1 => {
                self.skip(8)?;
                Value::Fixed
            }
            2 => {
                let len = usize::try_from(self.varint()?).ok()?;
                Value::Bytes(self.skip(len)?)
            }
            5 => {
                self.skip(4)?;
                Value::Fixed
            }
            _ => return None,
        };
        Some(Some((tag >> 3, value)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn descriptor(entries: &[(&str, &str)], hits: Option<u64>) -> Descriptor {
        Descriptor {
            entries: entries
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            hits,
        }
    }

    #[test]
    fn requests_are_encoded_field_by_field() {
        let body = encode_request(
            "d",
            &[descriptor(
                &[("generic_key", "r"), ("remote_address", "1.2.3.4")],
                None,
            )],
            1,
        );
        let mut expected = vec![0x0a, 1, b'd', 0x12];
        let entry1 = [&[0x0a, 11][..], b"generic_key", &[0x12, 1], b"r"].concat();
        let entry2 = [&[0x0a, 14][..], b"remote_address", &[0x12, 7], b"1.2.3.4"].concat();
        let inner = [
            &[0x0a, entry1.len() as u8][..],
            &entry1,
            &[0x0a, entry2.len() as u8],
            &entry2,
        ]
        .concat();
        expected.push(inner.len() as u8);
        expected.extend_from_slice(&inner);
        assert_eq!(body, expected);
        // A weight other than 1: hits_addend (3), and per descriptor (3 in
        // the descriptor, a UInt64Value).
        let body = encode_request("d", &[descriptor(&[("k", "v")], Some(300))], 5);
        assert!(body.ends_with(&[0x18, 5]), "{body:?}");
        let wrapped = [0x1a, 3, 0x08, 0xac, 0x02];
        assert!(body.windows(5).any(|w| w == wrapped), "{body:?}");
    }

    /// A response with `statuses`: (code, requests_per_unit, unit,
    /// remaining, reset seconds).
    fn response(overall: u8, statuses: &[(u8, u8, u8, u8, u8)]) -> Vec<u8> {
        let mut out = vec![0x08, overall];
        for &(code, per_unit, unit, remaining, reset) in statuses {
            let status = [
                0x08, code, 0x12, 4, 0x08, per_unit, 0x10, unit, 0x18, remaining, 0x22, 2, 0x08,
                reset,
            ];
            out.push(0x12);
            out.push(status.len() as u8);
            out.extend_from_slice(&status);
        }
        out
    }

    #[test]
    fn answers_become_limit_results_with_their_windows() {
        let body = response(2, &[(1, 100, 2, 42, 30), (2, 10, 1, 0, 1)]);
        let (answer, windows) = decode_response(&body, 2).unwrap();
        assert!(!answer.allowed);
        assert_eq!(windows, [60 * SECOND, SECOND]);
        let ok = answer.limits[0];
        assert!(ok.allowed);
        assert_eq!(
            (ok.limit, ok.remaining, ok.reset_ms, ok.retry_after_ms),
            (100, 42, 30_000, 0)
        );
        let over = answer.limits[1];
        assert!(!over.allowed);
        assert_eq!((over.limit, over.retry_after_ms), (10, 1000));
    }

    #[test]
    fn malformed_or_mismatched_answers_are_refused() {
        let body = response(1, &[(1, 100, 2, 42, 30)]);
        assert!(decode_response(&body, 2).is_none());
        assert!(decode_response(&body[..body.len() - 1], 1).is_none());
        // No overall code: not an answer.
        assert!(decode_response(&body[2..], 1).is_none());
        assert!(decode_response(&[0x0f], 0).is_none());
        // Unknown fields are skipped.
        let mut extra = body.clone();
        extra.extend_from_slice(&[0x2a, 2, b'h', b'i', 0x35, 0, 0, 0, 0]);
        assert!(decode_response(&extra, 1).is_some());
    }
    mod fuzz {
        //! `decode_response` on arbitrary bytes and on valid answers with
        //! bytes changed: an answer or `None`, never a panic.
        //! More cases: `PROPTEST_CASES=100000 cargo test -p sluice fuzz_`.
        use super::*;
        use proptest::prelude::*;
        use proptest::sample::Index;

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(1000))]

            #[test]
            fn fuzz_rls_answer_arbitrary_bytes(
                bytes in prop::collection::vec(any::<u8>(), 0..256),
                expected in 0..4usize,
            ) {
                if let Some((answer, windows)) = decode_response(&bytes, expected) {
                    prop_assert_eq!(answer.limits.len(), expected);
                    prop_assert_eq!(windows.len(), expected);
                }
            }

            #[test]
            fn fuzz_rls_answer_mutated_bytes(
                statuses in prop::collection::vec(any::<(u8, u8, u8, u8, u8)>(), 0..4),
                overall in any::<u8>(),
                edits in prop::collection::vec((any::<Index>(), any::<u8>(), any::<u8>()), 0..6),
            ) {
                let mut body = response(overall, &statuses);
                for (at, op, byte) in edits {
                    let i = at.index(body.len() + 1);
                    match op % 3 {
                        0 if i < body.len() => body[i] = byte,
                        1 if i < body.len() => {
                            body.remove(i);
                        }
                        _ => body.insert(i, byte),
                    }
                }
                if let Some((answer, _)) = decode_response(&body, statuses.len()) {
                    prop_assert_eq!(answer.limits.len(), statuses.len());
                }
            }
        }

        /// Found by the `rls_answer` fuzz target: 32-bit fields sent as
        /// longer varints read as protobuf reads them (the low 32 bits),
        /// so an `OVER_LIMIT` code with high bits set still denies.
        #[test]
        fn fuzz_rls_answer_regressions() {
            let input = include_bytes!("../../../fuzz/regressions/rls_answer/remaining-high-bits");
            let (answer, _) = decode_response(&input[1..], 1).unwrap();
            assert_eq!(answer.limits[0].remaining, 2_096_755_688);

            let mut big = Vec::new();
            put_varint(&mut big, (1 << 32) | 2);
            let mut status = vec![0x08];
            status.extend_from_slice(&big);
            let mut body = vec![0x08];
            body.extend_from_slice(&big);
            body.push(0x12);
            body.push(status.len() as u8);
            body.extend_from_slice(&status);
            let (answer, _) = decode_response(&body, 1).unwrap();
            assert!(!answer.allowed);
            assert!(!answer.limits[0].allowed);
        }

        /// Lengths and varints at their limits.
        #[test]
        fn fuzz_rls_answer_edges() {
            let huge_len = [
                0x12, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
            ];
            assert!(decode_response(&huge_len, 1).is_none());
            let long_varint = [0x08; 1]
                .iter()
                .chain([0xff; 20].iter())
                .copied()
                .collect::<Vec<_>>();
            assert!(decode_response(&long_varint, 0).is_none());
            // Seconds at i64::MAX: the reset saturates.
            let duration = [0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f];
            let mut status = vec![0x08, 2, 0x22, duration.len() as u8];
            status.extend_from_slice(&duration);
            let mut body = vec![0x08, 2, 0x12, status.len() as u8];
            body.extend_from_slice(&status);
            let (answer, _) = decode_response(&body, 1).unwrap();
            assert_eq!(answer.limits[0].reset_ms, u64::MAX.div_ceil(MILLISECOND));
        }
    }
}
