//! GCRA: a theoretical arrival time (TAT) that advances by `window /
//! requests` per unit of cost; a request conforms when the new TAT is at
//! most `burst * window / requests` ahead of now.
//!
//! The TAT is kept exactly, in units of `1 / requests_ns`: state (18 bytes)
//! is version, tag, then two little-endian `u64`: the TAT in whole
//! nanoseconds and its fraction in units of `1 / rate` nanosecond.

use super::meter;
use super::Mode;
use crate::limit::Params;
use crate::math::{floor_div, sat64};
use crate::state::{decode2, encode2, tag};
use crate::{Nanos, Outcome};

/// Decoded state: the TAT in scaled units (`ns * rate`).
#[inline]
pub(crate) fn decode(p: &Params, bytes: &[u8]) -> Option<u128> {
    let (whole, frac) = decode2(bytes, tag::GCRA)?;
    // A fraction out of range (another rate) is rounded up: a later TAT.
    Some(if u128::from(frac) >= p.rate() {
        (u128::from(whole) + 1) * p.rate()
    } else {
        u128::from(whole) * p.rate() + u128::from(frac)
    })
}

/// Encodes a TAT in scaled units.
pub(crate) fn encode(p: &Params, tat: u128) -> crate::Encoded {
    let whole = floor_div(tat, p.rate());
    if whole > u128::from(u64::MAX) {
        return encode2(tag::GCRA, u64::MAX, 0);
    }
    encode2(tag::GCRA, sat64(whole), sat64(tat - whole * p.rate()))
}

#[inline(always)]
pub(crate) fn decide(
    p: &Params,
    state: Option<&[u8]>,
    now: Nanos,
    cost: u64,
    mode: Mode,
) -> Outcome {
    // The common case: the TAT is near now, and its distance fits in 64 bits.
    let near = state
        .and_then(|s| decode2(s, tag::GCRA))
        .and_then(|(whole, frac)| {
            if frac >= p.rate {
                return None;
            }
            let level = match whole.checked_sub(now) {
                Some(ahead) => ahead.checked_mul(p.rate)?.checked_add(frac)?,
                None => 0,
            };
            let queue = match p.max_delay {
                Some(d) => d.checked_mul(p.rate),
                None => Some(0),
            };
            let max = p
                .cap
                .checked_mul(p.window)
                .zip(queue)
                .and_then(|(c, q)| c.checked_add(q));
            // `None`: the largest valid level is beyond 64 bits, so above this one.
            max.map_or(true, |m| level <= m)
                .then_some(u128::from(level))
        });
    let (level, repaired) = match near {
        Some(level) => (level, false),
        None => level_wide(p, state, now),
    };
    let j = meter::judge(p, level, cost, mode);
    // TAT = now * rate + after: its whole part is now + after / rate, the
    // division already done for `reset`.
    let new_state = (j.consumed || repaired).then(|| {
        match u64::try_from(j.drain.0)
            .ok()
            .and_then(|q| now.checked_add(q))
        {
            Some(whole) => encode2(tag::GCRA, whole, sat64(j.drain.1)),
            None => encode(p, u128::from(now) * p.rate() + j.after),
        }
    });
    Outcome {
        decision: j.decision(p),
        new_state,
    }
}

/// The level in the general case, in 128-bit arithmetic, and whether the
/// state had to be repaired after a clock step.
#[inline(never)]
fn level_wide(p: &Params, state: Option<&[u8]>, now: Nanos) -> (u128, bool) {
    match state.and_then(|s| decode(p, s)) {
        Some(tat) => {
            let max = meter::max_level(p);
            let level = tat.saturating_sub(u128::from(now) * p.rate());
            // More ahead than any valid state can be: the clock stepped
            // back. Treat the bucket as full from now, so it recovers
            // within a window.
            if level > max {
                (max, true)
            } else {
                (level, false)
            }
        }
        None => (0, false),
    }
}

pub(crate) fn refund(
    p: &Params,
    state: &[u8],
    admitted_at: Nanos,
    now: Nanos,
    cost: u64,
) -> Option<crate::Encoded> {
    let tat = decode(p, state)?;
    let at = now.max(admitted_at);
    let back = meter::refundable(p, cost, admitted_at, at);
    let floor = u128::from(at) * p.rate();
    if back == 0 || tat <= floor {
        return None;
    }
    Some(encode(p, tat.saturating_sub(back).max(floor)))
}
