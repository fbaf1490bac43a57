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
use crate::math::{divrem, sat64};
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
    let (whole, frac) = divrem(level, p.window());
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
    match state
        .and_then(|s| decode3(s, tag::LEAKY_BUCKET))
        .and_then(|words| decide_narrow(p, words, now, cost, mode))
    {
        Some(out) => out,
        None => decide_wide(p, state, now, cost, mode),
    }
}

/// The general case, in 128-bit arithmetic: fresh keys, clock steps, states
/// out of range, capacities beyond 64 bits.
#[inline(never)]
fn decide_wide(p: &Params, state: Option<&[u8]>, now: Nanos, cost: u64, mode: Mode) -> Outcome {
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

/// The common case in 64-bit arithmetic, keeping the whole level and the
/// fraction apart so that no division is needed for `remaining`; `None`
/// for the rare cases (a clock step, an out-of-range state, a capacity
/// beyond 64 bits), which the general path decides.
#[inline(always)]
fn decide_narrow(
    p: &Params,
    (last, whole, frac): (u64, u64, u64),
    now: Nanos,
    cost: u64,
    mode: Mode,
) -> Option<Outcome> {
    let w = p.window;
    let cap_units = p.cap.checked_mul(w)?;
    let queue = match p.max_delay {
        Some(d) => d.checked_mul(p.rate)?,
        None => 0,
    };
    let max_units = cap_units.checked_add(queue)?;
    let level = whole.checked_mul(w)?.checked_add(frac)?;
    if now < last || frac >= w || level > max_units {
        return None;
    }
    let rate = p.rate.max(1);
    // Leak `x` units, borrowing from the whole level.
    let (mut whole, mut frac) = (whole, frac);
    match (now - last).checked_mul(rate) {
        Some(x) if x <= frac => frac -= x,
        Some(x) if x < level && x - frac <= w => {
            whole -= 1;
            frac = w - (x - frac);
        }
        Some(x) if x < level => {
            let left = level - x;
            whole = left / w;
            frac = left % w;
        }
        _ => {
            whole = 0;
            frac = 0;
        }
    }
    let level = whole * w + frac;
    let full = level.checked_add(cost.checked_mul(w)?)?;
    let (allowed, delay, denial, retry_after) = if full <= cap_units {
        (true, 0, None, 0)
    } else {
        let wait = (full - cap_units).div_ceil(rate);
        match p.max_delay {
            Some(max) if wait <= max => (true, wait, None, 0),
            Some(_) => (false, 0, Some(crate::Denial::DelayTooLong), wait),
            None => (false, 0, Some(crate::Denial::OverLimit), wait),
        }
    };
    let consumed = allowed && mode == Mode::Commit;
    let (after_whole, after) = if consumed {
        (whole + cost, full)
    } else {
        (whole, level)
    };
    // Free room in whole requests: the capacity less the level rounded up.
    let used = after_whole + u64::from(frac != 0);
    Some(Outcome {
        decision: crate::Decision {
            allowed,
            limit: p.requests,
            remaining: p.report(p.cap.saturating_sub(used)),
            reset: after.div_ceil(rate),
            retry_after,
            delay,
            denial,
        },
        new_state: consumed.then(|| encode3(tag::LEAKY_BUCKET, now, after_whole, frac)),
    })
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
