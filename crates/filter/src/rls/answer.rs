//! Reading a `RateLimitResponse`.
//!
//! `overall_code` decides. The statuses report each limit when the service
//! sends one per descriptor (envoyproxy/ratelimit and `sluice-limiter` do);
//! a service may send none (Limitador does) or another number, and then the
//! decision still stands with no quota reported. Besides its decision, an
//! answer may ask for headers on the response and on the request sent
//! upstream, and for a denial body: that is its [`Reply`].
//!
//! | answer | decision | rate-limit headers | `retry-after` |
//! |---|---|---|---|
//! | code, one status per descriptor | the code | the statuses | the denying status's reset |
//! | code, other statuses or none | the code | none | see [`Reply::retry_after`] |
//! | `UNKNOWN` code or unreadable | failure mode | | |

use super::proto::{low32, Reader, Value};
use sluice_core::{Nanos, MILLISECOND, SECOND};
use sluice_wire::{CheckResponse, LimitResult};

/// What a rate limit service asks the filter to do besides deciding.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reply {
    /// `response_headers_to_add`: (lower-case name, value), in order; a
    /// header the service sends replaces Sluice's header of that name.
    pub response_headers: Vec<(String, String)>,
    /// `request_headers_to_add`, added to an admitted request before it is
    /// routed.
    pub request_headers: Vec<(String, String)>,
    /// `raw_body`, the body of the denial when not empty.
    pub body: Option<Vec<u8>>,
    /// Seconds before a retry, for a denial whose answer has no status per
    /// descriptor: the longest reset of its `OVER_LIMIT` statuses, else the
    /// service's own `retry-after`, `ratelimit-reset` or `x-ratelimit-reset`
    /// header; `None` when the answer does not say.
    pub retry_after: Option<u64>,
}

/// An answer read for the descriptors of a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Read {
    /// One result per descriptor sent, as the limiter API gives them. Without
    /// a status per descriptor, each reports no quota (`limit` 0) and a
    /// denial is the first descriptor's.
    pub check: CheckResponse,
    /// Each limit's window, from its status's unit (0 when not said).
    pub windows: Vec<Nanos>,
    /// What the service asks to add.
    pub reply: Reply,
}

const CODE_OK: u64 = 1;
const CODE_OVER_LIMIT: u64 = 2;

/// Reads a `RateLimitResponse` to a call of `expected` descriptors. `None`
/// when the message is malformed or its overall code is neither `OK` nor
/// `OVER_LIMIT`.
pub fn decode_response(bytes: &[u8], expected: usize) -> Option<Read> {
    let mut overall = 0;
    let mut statuses = Vec::with_capacity(expected);
    let mut reply = Reply::default();
    let mut r = Reader::new(bytes);
    while let Some((field, value)) = r.field()? {
        match (field, value) {
            (1, Value::Varint(code)) => overall = low32(code),
            (2, Value::Bytes(status)) => statuses.push(status_of(status)?),
            (3, Value::Bytes(header)) => push_header(&mut reply.response_headers, header)?,
            (4, Value::Bytes(header)) => push_header(&mut reply.request_headers, header)?,
            // The last occurrence wins, as protobuf reads a repeated scalar.
            (5, Value::Bytes(body)) => reply.body = (!body.is_empty()).then(|| body.to_vec()),
            _ => {}
        }
    }
    if overall != CODE_OK && overall != CODE_OVER_LIMIT {
        return None;
    }
    let allowed = overall == CODE_OK;
    let reports = statuses.len() == expected && (allowed || statuses.iter().any(|s| !s.0.allowed));
    let (limits, windows) = if reports {
        statuses
            .into_iter()
            .map(|(result, window)| (overruled(result, allowed), window))
            .unzip()
    } else {
        let retry_ms = (!allowed)
            .then(|| retry_of(&statuses, &reply.response_headers))
            .flatten();
        reply.retry_after = retry_ms.map(|ms| ms.div_ceil(1000).max(1));
        unreported(allowed, expected, retry_ms)
    };
    let check = CheckResponse {
        allowed,
        limits,
        admitted: None,
        delays_ms: Vec::new(),
    };
    Some(Read {
        check,
        windows,
        reply,
    })
}

/// A status of an admitted answer is admitted: the overall code decides.
fn overruled(result: LimitResult, allowed: bool) -> LimitResult {
    if !allowed || result.allowed {
        return result;
    }
    LimitResult {
        allowed: true,
        retry_after_ms: 0,
        ..result
    }
}

/// The results of an answer with no status per descriptor: no quota known;
/// a denial is the first descriptor's, with `retry_ms` only when it is the
/// only one (then the denial is surely its own, and may be cached).
fn unreported(
    allowed: bool,
    expected: usize,
    retry_ms: Option<u64>,
) -> (Vec<LimitResult>, Vec<Nanos>) {
    let limits = (0..expected)
        .map(|i| {
            let denied = !allowed && i == 0;
            LimitResult {
                allowed: !denied,
                limit: 0,
                remaining: 0,
                reset_ms: 0,
                retry_after_ms: if denied && expected == 1 {
                    retry_ms.unwrap_or(0)
                } else {
                    0
                },
                delay_ms: 0,
                leased: 0,
                blocked: false,
            }
        })
        .collect();
    (limits, vec![0; expected])
}

/// The wait a denial's answer gives without a status per descriptor, in
/// milliseconds (see [`Reply::retry_after`]).
fn retry_of(statuses: &[(LimitResult, Nanos)], headers: &[(String, String)]) -> Option<u64> {
    let reset = statuses
        .iter()
        .filter(|(s, _)| !s.allowed)
        .map(|(s, _)| s.reset_ms)
        .max()
        .filter(|ms| *ms > 0);
    reset.or_else(|| {
        ["retry-after", "ratelimit-reset", "x-ratelimit-reset"]
            .iter()
            .find_map(|name| {
                let (_, value) = headers.iter().find(|(n, _)| n == name)?;
                let seconds: u64 = value.trim().parse().ok()?;
                Some(seconds.saturating_mul(1000)).filter(|ms| *ms > 0)
            })
    })
}

/// Appends a `config.core.v3.HeaderValue` (`key`, `value` or `raw_value`)
/// when it is a header Envoy can carry: a token name that is not a
/// pseudo-header, a value without CR, LF or NUL. Others are left out.
fn push_header(out: &mut Vec<(String, String)>, bytes: &[u8]) -> Option<()> {
    let (mut key, mut value, mut raw): (&[u8], &[u8], &[u8]) = (&[], &[], &[]);
    let mut r = Reader::new(bytes);
    while let Some((field, v)) = r.field()? {
        match (field, v) {
            (1, Value::Bytes(k)) => key = k,
            (2, Value::Bytes(v)) => value = v,
            (3, Value::Bytes(v)) => raw = v,
            _ => {}
        }
    }
    let value = if value.is_empty() { raw } else { value };
    let token = |b: &u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(b);
    let name_ok = !key.is_empty() && key.iter().all(token);
    let value_ok = !value.iter().any(|b| matches!(b, b'\r' | b'\n' | 0));
    if let (true, true, Ok(name), Ok(value)) = (
        name_ok,
        value_ok,
        std::str::from_utf8(key),
        std::str::from_utf8(value),
    ) {
        out.push((name.to_ascii_lowercase(), value.to_string()));
    }
    Some(())
}

/// A `DescriptorStatus`: its decision and its limit's window.
fn status_of(bytes: &[u8]) -> Option<(LimitResult, Nanos)> {
    let mut code = 0;
    let (mut limit, mut unit, mut remaining, mut reset) = (0, 0, 0, 0);
    let mut r = Reader::new(bytes);
    while let Some((field, value)) = r.field()? {
        match (field, value) {
            (1, Value::Varint(c)) => code = low32(c),
            (2, Value::Bytes(current)) => {
                let mut c = Reader::new(current);
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
        blocked: false,
    };
    Some((result, window_of(unit)))
}

/// A `google.protobuf.Duration`, in nanoseconds (negative: 0).
fn duration_of(bytes: &[u8]) -> Option<Nanos> {
    let (mut seconds, mut nanos) = (0u64, 0u64);
    let mut r = Reader::new(bytes);
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

/// The window of a `RateLimit.Unit` (0 for `UNKNOWN`).
fn window_of(unit: u64) -> Nanos {
    i32::try_from(unit)
        .ok()
        .and_then(sluice_wire::Unit::from_code)
        .map_or(0, sluice_wire::Unit::window)
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let Read {
            check: answer,
            windows,
            ..
        } = decode_response(&body, 2).unwrap();
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
    fn malformed_answers_are_refused() {
        let body = response(1, &[(1, 100, 2, 42, 30)]);
        assert!(decode_response(&body[..body.len() - 1], 1).is_none());
        // No overall code: not an answer.
        assert!(decode_response(&body[2..], 1).is_none());
        assert!(decode_response(&[0x0f], 0).is_none());
        // Unknown fields are skipped.
        let mut extra = body.clone();
        extra.extend_from_slice(&[0x2a, 2, b'h', b'i', 0x35, 0, 0, 0, 0]);
        assert!(decode_response(&extra, 1).is_some());
    }
    /// A `HeaderValue` field (`field` 3: response, 4: request).
    fn header(field: u8, key: &str, value: &str) -> Vec<u8> {
        let mut h = vec![0x0a, key.len() as u8];
        h.extend_from_slice(key.as_bytes());
        h.push(0x12);
        h.push(value.len() as u8);
        h.extend_from_slice(value.as_bytes());
        let mut out = vec![(field << 3) | 2, h.len() as u8];
        out.extend_from_slice(&h);
        out
    }

    #[test]
    fn the_overall_code_decides_without_statuses() {
        // Limitador: the code only.
        let ok = decode_response(&[0x08, 1], 2).unwrap();
        assert!(ok.check.allowed);
        assert!(ok.check.limits.iter().all(|l| l.allowed && l.limit == 0));
        assert_eq!(ok.windows, [0, 0]);
        let over = decode_response(&[0x08, 2], 2).unwrap();
        assert!(!over.check.allowed);
        // The denial is the first descriptor's, with no quota and no wait.
        let first = over.check.limits[0];
        assert!(!first.allowed);
        assert_eq!((first.limit, first.retry_after_ms), (0, 0));
        assert!(over.check.limits[1].allowed);
        assert_eq!(over.reply.retry_after, None);
        // Statuses of another length: the code still decides.
        let body = response(2, &[(2, 10, 1, 0, 7)]);
        let read = decode_response(&body, 2).unwrap();
        assert!(!read.check.allowed);
        assert_eq!(read.check.limits[0].limit, 0);
        // ...and their reset is the wait.
        assert_eq!(read.reply.retry_after, Some(7));
        // One descriptor: the denial is surely its own, and carries the wait.
        let read = decode_response(&response(2, &[(2, 10, 1, 0, 7), (2, 1, 1, 0, 3)]), 1).unwrap();
        assert_eq!(read.check.limits[0].retry_after_ms, 7_000);
        // Neither OK nor OVER_LIMIT: not an answer.
        assert!(decode_response(&[0x08, 0], 1).is_none());
        assert!(decode_response(&[0x08, 3], 1).is_none());
    }

    #[test]
    fn headers_and_body_are_read_for_the_reply() {
        let mut body = vec![0x08, 2];
        body.extend(header(3, "X-RateLimit-Limit", "5"));
        body.extend(header(3, "x-ratelimit-reset", "42"));
        body.extend(header(4, "x-tenant-tier", "free"));
        // Not headers Envoy can carry: left out.
        body.extend(header(3, ":status", "200"));
        body.extend(header(3, "bad name", "x"));
        body.extend(header(3, "x-split", "a\r\nb"));
        body.extend([0x2a, 4, b'n', b'o', b'p', b'e']);
        let read = decode_response(&body, 1).unwrap();
        let reply = read.reply;
        assert_eq!(
            reply.response_headers,
            [
                ("x-ratelimit-limit".to_string(), "5".to_string()),
                ("x-ratelimit-reset".to_string(), "42".to_string())
            ]
        );
        assert_eq!(
            reply.request_headers,
            [("x-tenant-tier".to_string(), "free".to_string())]
        );
        assert_eq!(reply.body.as_deref(), Some(&b"nope"[..]));
        // A later empty raw_body replaces it, as protobuf reads the field.
        let mut twice = body.clone();
        twice.extend([0x2a, 0]);
        assert_eq!(decode_response(&twice, 1).unwrap().reply.body, None);
        // No status: the wait comes from the service's reset header.
        assert_eq!(reply.retry_after, Some(42));
        assert_eq!(read.check.limits[0].retry_after_ms, 42_000);
        // raw_value when value is empty.
        let mut raw = vec![0x0a, 1, b'k', 0x1a, 1, b'v'];
        raw.splice(0..0, [0x1a, 6]);
        let mut body = vec![0x08, 1];
        body.extend(raw);
        let read = decode_response(&body, 1).unwrap();
        assert_eq!(
            read.reply.response_headers,
            [("k".to_string(), "v".to_string())]
        );
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
                if let Some(read) = decode_response(&bytes, expected) {
                    prop_assert_eq!(read.check.limits.len(), expected);
                    prop_assert_eq!(read.windows.len(), expected);
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
                if let Some(read) = decode_response(&body, statuses.len()) {
                    prop_assert_eq!(read.check.limits.len(), statuses.len());
                }
            }
        }

        /// Found by the `rls_answer` fuzz target: 32-bit fields sent as
        /// longer varints read as protobuf reads them (the low 32 bits),
        /// so an `OVER_LIMIT` code with high bits set still denies.
        #[test]
        fn fuzz_rls_answer_regressions() {
            let input =
                include_bytes!("../../../../fuzz/regressions/rls_answer/remaining-high-bits");
            // Its overall code (10) is no code: an answer once it says OK.
            assert!(decode_response(&input[1..], 1).is_none());
            let body = [&input[1..], &[0x08, 1]].concat();
            let answer = decode_response(&body, 1).unwrap().check;
            assert_eq!(answer.limits[0].remaining, 2_096_755_688);

            let mut big = Vec::new();
            crate::rls::proto::put_varint(&mut big, (1 << 32) | 2);
            let mut status = vec![0x08];
            status.extend_from_slice(&big);
            let mut body = vec![0x08];
            body.extend_from_slice(&big);
            body.push(0x12);
            body.push(status.len() as u8);
            body.extend_from_slice(&status);
            let answer = decode_response(&body, 1).unwrap().check;
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
            let answer = decode_response(&body, 1).unwrap().check;
            assert_eq!(answer.limits[0].reset_ms, u64::MAX.div_ceil(MILLISECOND));
        }
    }
}
