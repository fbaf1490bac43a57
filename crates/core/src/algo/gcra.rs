//! GCRA: a theoretical arrival time (TAT) that advances by `window /
//! requests` per unit of cost; a request conforms when the new TAT is at
//! most `burst * window / requests` ahead of now.
//!
//! The TAT is kept exactly, whatever `window / requests` is: state (18
//! bytes) is version, tag, then two little-endian `u64`: the TAT in whole
//! nanoseconds since the epoch and its fraction in units of `1 / rate`
//! nanosecond (`rate` being `requests` plus the soft allowance).

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
    match state
        .and_then(|s| decode2(s, tag::GCRA))
        .and_then(|words| decide_narrow(p, words, now, cost, mode))
    {
        Some(out) => out,
        None => decide_wide(p, state, now, cost, mode),
    }
}

/// The common case, in 64-bit arithmetic: the TAT is near now and the
/// capacity fits in 64 bits. `None` for the rest, which the general path
/// decides.
#[inline(always)]
fn decide_narrow(
    p: &Params,
    (whole, frac): (u64, u64),
    now: Nanos,
    cost: u64,
    mode: Mode,
) -> Option<Outcome> {
    let (rate, w) = (p.rate.max(1), p.window);
    let (interval, interval_frac) = (w / rate, w % rate);
    let cap_units = p.cap.checked_mul(w)?;
    let queue = match p.max_delay {
        Some(d) => d.checked_mul(rate)?,
        None => 0,
    };
    let max_units = cap_units.checked_add(queue)?;
    let level = match whole.checked_sub(now) {
        Some(ahead) => ahead.checked_mul(rate)?.checked_add(frac)?,
        None => 0,
    };
    if frac >= rate || level > max_units {
        return None;
    }
    let full = level.checked_add(cost.checked_mul(w)?)?;
    let (allowed, delay, denial, retry_after) = if full <= cap_units {
        (true, 0, None, 0)
    } else {
        // Rounded up so that waiting exactly this long conforms.
        let wait = (full - cap_units).div_ceil(rate);
        match p.max_delay {
            Some(max) if wait <= max => (true, wait, None, 0),
            Some(_) => (false, 0, Some(crate::Denial::DelayTooLong), wait),
            None => (false, 0, Some(crate::Denial::OverLimit), wait),
        }
    };
    let consumed = allowed && mode == Mode::Commit;
    let after = if consumed { full } else { level };
    // The new TAT is max(TAT, now) plus `cost` emission intervals, in whole
    // ns and a fraction; the interval does not depend on the state, so its
    // division overlaps the decoding instead of following it.
    let (base, base_frac) = if whole >= now {
        (whole, frac)
    } else {
        (now, 0)
    };
    let (tat, tat_frac) = if consumed {
        let sum = base_frac.checked_add(cost.checked_mul(interval_frac)?)?;
        let carry = if sum < rate {
            0
        } else if sum - rate < rate {
            1
        } else {
            sum / rate
        };
        let tat = base
            .checked_add(cost.checked_mul(interval)?)?
            .checked_add(carry)?;
        (tat, sum - carry * rate)
    } else {
        (base, base_frac)
    };
    Some(Outcome {
        decision: crate::Decision {
            allowed,
            limit: p.requests,
            remaining: p.report((cap_units - after.min(cap_units)) / w),
            reset: (tat - now) + u64::from(tat_frac != 0),
            retry_after,
            delay,
            denial,
        },
        new_state: consumed.then(|| encode2(tag::GCRA, tat, tat_frac)),
    })
}

/// The general case, in 128-bit arithmetic: fresh keys, clock steps, states
/// out of range, capacities beyond 64 bits.
#[inline(never)]
fn decide_wide(p: &Params, state: Option<&[u8]>, now: Nanos, cost: u64, mode: Mode) -> Outcome {
    let (level, repaired) = level_wide(p, state, now);
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
