//! The body of `POST /v1/check`.

use serde::{Deserialize, Serialize};
use sluice_core::{Algorithm, Holder, Limit, Permits, MILLISECOND};
use std::borrow::Cow;

/// The `algorithm` of a concurrency limit ([`LimitSpec::permits`]): not a
/// rate algorithm, so not among sluice-core's [`Algorithm`]s.
pub const CONCURRENCY: &str = "concurrency";

/// `POST /v1/check` body: the limits one request falls under.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckRequest<'a> {
    /// Namespace of the keys; 1 to 128 bytes of letters, digits, `_`, `-`
    /// and `.`.
    #[serde(borrow)]
    pub domain: Cow<'a, str>,
    /// Weight of the request, taken from every limit; defaults to 1. A
    /// weight of 0 asks whether one unit would pass, consuming nothing.
    #[serde(default = "one")]
    pub hits: u64,
    /// The limits, decided together.
    pub limits: Vec<LimitSpec<'a>>,
    /// Coalescing: the check carries this many identical requests (each
    /// weighing `hits`, or a limit's own `hits`), decided one by one in
    /// arrival order; the answer says how many were admitted
    /// ([`CheckResponse::admitted`](crate::CheckResponse::admitted)). 1 to
    /// [`MAX_BATCH`](crate::MAX_BATCH); absent: one request, answered as
    /// before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<u32>,
    /// Who takes the permits of the check's concurrency limits: one filter
    /// VM, which gives them back (`POST /v1/permits`) when its requests
    /// end and renews them while they live. Required when a limit is a
    /// concurrency limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder: Option<Holder>,
}

fn one() -> u64 {
    1
}

/// One limit of a check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitSpec<'a> {
    /// The client's key for this limit, at most [`MAX_KEY_BYTES`](crate::MAX_KEY_BYTES)
    /// (the filter sends `<rule>/<limit index>/<key text>`, see [`limiter_key`](crate::limiter_key)).
    #[serde(borrow)]
    pub key: Cow<'a, str>,
    /// One of the algorithm names (`gcra`, `token_bucket`, ...), or
    /// [`CONCURRENCY`] for a concurrency limit.
    #[serde(borrow)]
    pub algorithm: Cow<'a, str>,
    /// Requests per window; a concurrency limit: the units in flight at
    /// once (its permits).
    pub requests: u64,
    /// The window in milliseconds; a concurrency limit: how long a
    /// holder's permits count after its last acquire or renewal (at least
    /// 1000).
    pub window_ms: u64,
    /// Requests a fresh key admits at once; defaults to `requests`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<u64>,
    /// Sliding window: sub-windows per window; defaults to 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub precision: Option<u32>,
    /// Soft throttling: percent admitted above the quota; defaults to 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub soft_percent: Option<u32>,
    /// This limit's weight when it differs from the check's `hits` (rules
    /// of one request may weigh it differently); defaults to `hits`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hits: Option<u64>,
    /// Delay mode (`gcra`, `leaky_bucket`): a request that would conform
    /// within this many milliseconds is admitted, with the wait in the
    /// answer's `delay_ms`; later than that it is denied. Absent: denied at
    /// once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_delay_ms: Option<u64>,
    /// Leases: when the check is admitted, also take up to this many more
    /// units of this limit for the caller to spend itself (1 to
    /// [`MAX_COUNT`](crate::MAX_COUNT)), granted in the answer's
    /// [`leased`](crate::LimitResult::leased): the most that fit now with
    /// the request, debited at once. Not with `max_delay_ms`, nor in a
    /// check with `batch`.
    ///
    /// The bound: the limiter never counts more than the allowance, but
    /// units spent after they were debited can let through, in any
    /// interval, up to the allowance plus the sum of the leases outstanding
    /// in it (≤ Envoys × max_share × limit); windows never carry a lease
    /// across their boundary (a return from an earlier window gives nothing
    /// back).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<u64>,
    /// Leases: units of this limit to give back before deciding (1 to
    /// [`MAX_COUNT`](crate::MAX_COUNT)), consumed `returned_age_ms` ago on
    /// the limiter's clock; given back whether or not the check is admitted,
    /// never making the limit more permissive than if they had not been
    /// consumed. Requires `returned_age_ms`; not in a check with `batch`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub returned: Option<u64>,
    /// How long ago the `returned` units were consumed, in milliseconds (0
    /// to [`MAX_WINDOW_MS`](crate::MAX_WINDOW_MS)); given with `returned`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub returned_age_ms: Option<u64>,
    /// Priority: units that must still fit beside this limit's weight for
    /// the request to pass, not consumed (1 to [`MAX_COUNT`](crate::MAX_COUNT)):
    /// a class allowed a share of the limit keeps the rest for the classes
    /// above it. Denied with the wait until weight + reserve fits. Not with
    /// `max_delay_ms` or `lease`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserve: Option<u64>,
    /// Penalty box: once this limit refuses a request over it, every check
    /// of its key is refused by it for this many milliseconds (1000 to
    /// [`MAX_BLOCK_MS`](crate::MAX_BLOCK_MS)), whatever its quota allows;
    /// the answer's `retry_after_ms` and `reset_ms` say when the block
    /// ends. Not with `max_delay_ms`, `lease` or `returned`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_ms: Option<u64>,
}

impl LimitSpec<'static> {
    /// The wire form of `limit` under the limiter key `key`, weighing the
    /// check's `hits`. Fields at their default (precision 1, no soft
    /// allowance, no delay) are left out.
    #[inline]
    pub fn new(key: String, limit: &Limit) -> Self {
        LimitSpec {
            key: Cow::Owned(key),
            algorithm: Cow::Borrowed(limit.algorithm.name()),
            requests: limit.requests,
            window_ms: limit.window / MILLISECOND,
            burst: Some(limit.burst),
            precision: (limit.algorithm == Algorithm::SlidingWindow && limit.precision != 1)
                .then_some(limit.precision),
            soft_percent: (limit.soft_percent != 0).then_some(limit.soft_percent),
            hits: None,
            max_delay_ms: limit.max_delay.map(|d| d / MILLISECOND),
            lease: None,
            returned: None,
            returned_age_ms: None,
            reserve: None,
            block_ms: None,
        }
    }
}

impl LimitSpec<'static> {
    /// The wire form of the concurrency limit `permits` under the limiter
    /// key `key` (`window_ms` is its ttl), weighing the check's `hits`.
    #[inline]
    pub fn permits(key: String, permits: &Permits) -> Self {
        LimitSpec {
            key: Cow::Owned(key),
            algorithm: Cow::Borrowed(CONCURRENCY),
            requests: permits.max,
            window_ms: permits.ttl / MILLISECOND,
            burst: None,
            precision: None,
            soft_percent: None,
            hits: None,
            max_delay_ms: None,
            lease: None,
            returned: None,
            returned_age_ms: None,
            reserve: None,
            block_ms: None,
        }
    }
}

impl CheckRequest<'_> {
    /// This check's JSON, exactly as `serde_json::to_vec` writes it (compact,
    /// fields in declaration order, absent options left out), without
    /// serde's machinery: see [`check_json`].
    #[inline]
    pub fn to_json(&self) -> Vec<u8> {
        check_json(
            &self.domain,
            self.hits,
            &self.limits,
            self.batch,
            self.holder,
        )
    }
}

/// The JSON of the [`CheckRequest`] with these fields, exactly as
/// `serde_json::to_vec` writes it, written by hand: the filter writes one
/// per global check, and needs no `CheckRequest` (nor copies of its limits)
/// to do it.
#[inline]
pub fn check_json(
    domain: &str,
    hits: u64,
    limits: &[LimitSpec<'_>],
    batch: Option<u32>,
    holder: Option<Holder>,
) -> Vec<u8> {
    let capacity = limits.iter().fold(domain.len().saturating_add(48), |n, l| {
        n.saturating_add(l.key.len()).saturating_add(96)
    });
    let mut out = Vec::with_capacity(capacity);
    out.extend_from_slice(br#"{"domain":"#);
    push_str(&mut out, domain);
    out.extend_from_slice(br#","hits":"#);
    push_u64(&mut out, hits);
    out.extend_from_slice(br#","limits":["#);
    for (i, limit) in limits.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        limit.write_json(&mut out);
    }
    out.push(b']');
    if let Some(batch) = batch {
        out.extend_from_slice(br#","batch":"#);
        push_u64(&mut out, u64::from(batch));
    }
    if let Some(holder) = holder {
        out.extend_from_slice(br#","holder":"#);
        push_u64(&mut out, holder);
    }
    out.push(b'}');
    out
}

impl LimitSpec<'_> {
    /// Appends this limit's JSON, as serde_json writes it.
    fn write_json(&self, out: &mut Vec<u8>) {
        let optional = [
            (&br#","burst":"#[..], self.burst),
            (br#","precision":"#, self.precision.map(u64::from)),
            (br#","soft_percent":"#, self.soft_percent.map(u64::from)),
            (br#","hits":"#, self.hits),
            (br#","max_delay_ms":"#, self.max_delay_ms),
            (br#","lease":"#, self.lease),
            (br#","returned":"#, self.returned),
            (br#","returned_age_ms":"#, self.returned_age_ms),
            (br#","reserve":"#, self.reserve),
            (br#","block_ms":"#, self.block_ms),
        ];
        let head = (&*self.key, &*self.algorithm, self.requests, self.window_ms);
        write_limit(out, head, &optional);
    }
}

/// Appends a limit's JSON as serde_json writes it: `key`, `algorithm`,
/// `requests`, `window_ms` (the `head`), then each `optional` field that
/// has a value, in the order given (its name written with its comma).
pub(crate) fn write_limit(
    out: &mut Vec<u8>,
    head: (&str, &str, u64, u64),
    optional: &[(&[u8], Option<u64>)],
) {
    let (key, algorithm, requests, window_ms) = head;
    out.extend_from_slice(br#"{"key":"#);
    push_str(out, key);
    out.extend_from_slice(br#","algorithm":"#);
    push_str(out, algorithm);
    out.extend_from_slice(br#","requests":"#);
    push_u64(out, requests);
    out.extend_from_slice(br#","window_ms":"#);
    push_u64(out, window_ms);
    for (name, value) in optional {
        if let Some(value) = value {
            out.extend_from_slice(name);
            push_u64(out, *value);
        }
    }
    out.push(b'}');
}

/// Appends `n` in decimal.
pub(crate) fn push_u64(out: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at = at.saturating_sub(1);
        if let Some(d) = digits.get_mut(at) {
            // A remainder of 10 is one digit.
            *d = b'0'.saturating_add(u8::try_from(n % 10).unwrap_or(0));
        }
        n /= 10;
        if n == 0 || at == 0 {
            break;
        }
    }
    out.extend_from_slice(digits.get(at..).unwrap_or_default());
}

/// Appends `s` as a JSON string, escaped as serde_json escapes it: `"`,
/// `\` and control characters (`\b \t \n \f \r`, others `\u00XX`);
/// everything else as is.
pub(crate) fn push_str(out: &mut Vec<u8>, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push(b'"');
    let bytes = s.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let escape: &[u8] = match b {
            b'"' => br#"\""#,
            b'\\' => br"\\",
            0x08 => br"\b",
            b'\t' => br"\t",
            b'\n' => br"\n",
            0x0c => br"\f",
            b'\r' => br"\r",
            0x00..=0x1f => b"",
            _ => continue,
        };
        out.extend_from_slice(bytes.get(start..i).unwrap_or_default());
        start = i.saturating_add(1);
        if escape.is_empty() {
            let hex = |n: u8| HEX.get(usize::from(n & 0xf)).copied().unwrap_or(b'0');
            out.extend_from_slice(&[b'\\', b'u', b'0', b'0', hex(b >> 4), hex(b)]);
        } else {
            out.extend_from_slice(escape);
        }
    }
    out.extend_from_slice(bytes.get(start..).unwrap_or_default());
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter_key;
    use crate::test_rng::Rng;
    use sluice_core::SECOND;

    #[test]
    fn the_hand_written_json_is_serdes() {
        let mut rng = Rng(0x5eed_1234_abcd_0001);
        for _ in 0..5000 {
            let limits = (0..rng.below(4))
                .map(|_| LimitSpec {
                    key: rng.text().into(),
                    algorithm: rng.text().into(),
                    requests: rng.number(),
                    window_ms: rng.number(),
                    burst: rng.option(),
                    precision: rng.option().map(|n| n as u32),
                    soft_percent: rng.option().map(|n| n as u32),
                    hits: rng.option(),
                    max_delay_ms: rng.option(),
                    lease: rng.option(),
                    returned: rng.option(),
                    returned_age_ms: rng.option(),
                    reserve: rng.option(),
                    block_ms: rng.option(),
                })
                .collect();
            let request = CheckRequest {
                domain: rng.text().into(),
                hits: rng.number(),
                limits,
                batch: rng.option().map(|n| n as u32),
                holder: rng.option(),
            };
            let serde = serde_json::to_vec(&request).unwrap();
            assert_eq!(
                String::from_utf8(request.to_json()).unwrap(),
                String::from_utf8(serde).unwrap()
            );
        }
        // Every control character.
        let all: String = (0u8..0x80).map(char::from).collect();
        let gcra = Limit::new(Algorithm::Gcra, 100, 60 * SECOND)
            .unwrap()
            .with_burst(20);
        let permits = Permits {
            max: 5,
            ttl: 30 * SECOND,
        };
        let request = CheckRequest {
            domain: all.into(),
            hits: 1,
            limits: vec![
                LimitSpec::new(limiter_key("r", 0, "k"), &gcra),
                LimitSpec::permits(limiter_key("r", 1, "k"), &permits),
            ],
            batch: Some(3),
            holder: Some(u64::MAX),
        };
        assert_eq!(request.to_json(), serde_json::to_vec(&request).unwrap());
    }
}
