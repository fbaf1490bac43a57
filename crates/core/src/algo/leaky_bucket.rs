//! Leaky bucket as a meter: each request pours its cost into a bucket of
//! `burst` that leaks `requests` per `window`.
//!
//! State (26 bytes): version, tag, then three little-endian `u64`: the time
//! of the last update (ns), the whole level, and the fraction of a request in
//! units of `1 / window_ns`. In delay mode the level may exceed the capacity
//! by what is queued.

use super::meter;
use super::Mode;
use crate::limit::Params;
use crate::math::{floor_div, sat64};
use crate::state::{decode3, encode3, tag};
use crate::{Nanos, Outcome};

/// Decoded state: `(last update, level in scaled units)`.
#[inline]
pub(crate) fn decode(p: &Params, bytes: &[u8]) -> Option<(Nanos, u128)> {
    let (last, whole, frac) = decode3(bytes, tag::LEAKY_BUCKET)?;
    // A fraction out of range (another window) is rounded up: a fuller bucket.
    let level = if u128::from(frac) >= p.window() {
        (u128::from(whole) + 1) * p.window()
    } else {
        u128::from(whole) * p.window() + u128::from(frac)
    };
    Some((last, level.min(meter::max_level(p))))
}

/// Encodes `(last update, level in scaled units)`.
pub(crate) fn encode(p: &Params, last: Nanos, level: u128) -> crate::Encoded {
    let whole = floor_div(level, p.window());
    let frac = level - whole * p.window();
    encode3(tag::LEAKY_BUCKET, last, sat64(whole), sat64(frac))
}

#[inline(always)]
pub(crate) fn decide(
    p: &Params,
    state: Option<&[u8]>,
    now: Nanos,
    cost: u64,
    mode: Mode,
) -> Outcome {
    let (level, repaired) = match state.and_then(|s| decode(p, s)) {
        // The clock stepped back: no leak, and rebase on `now`.
        Some((last, level)) if now < last => (level, true),
        Some((last, level)) => (meter::drain(p, level, now - last), false),
        None => (0, false),
    };
    let j = meter::judge(p, level, cost, mode);
    let new_state = (j.consumed || repaired).then(|| {
        if j.after <= meter::capacity(p) {
            // The level is the capacity less the free room: reuse its division.
            let (q, r) = j.free;
            let (whole, frac) = if r == 0 {
                (u128::from(p.cap) - q, 0)
            } else {
                (u128::from(p.cap) - q - 1, p.window() - r)
            };
            encode3(tag::LEAKY_BUCKET, now, sat64(whole), sat64(frac))
        } else {
            encode(p, now, j.after)
        }
    });
    Outcome {
        decision: j.decision(p),
        new_state,
    }
}

pub(crate) fn refund(
    p: &Params,
    state: &[u8],
    admitted_at: Nanos,
    now: Nanos,
    cost: u64,
) -> Option<crate::Encoded> {
    let (last, level) = decode(p, state)?;
    let at = now.max(admitted_at).max(last);
    let back = meter::refundable(p, cost, admitted_at, at);
    if back == 0 || level == 0 {
        return None;
    }
    Some(encode(p, last, level.saturating_sub(back)))
}
