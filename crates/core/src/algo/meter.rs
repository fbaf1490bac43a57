//! The meter shared by token bucket, leaky bucket and GCRA.
//!
//! All three measure a bucket level in *scaled units*: one request weighs
//! `window` units and the bucket drains `rate` units per nanosecond, so that
//! every quantity is an exact integer (no rounding of `window / requests`).
//! The capacity is `cap * window` units. A request of cost `c` conforms when
//! `level + c * window <= capacity`.
//!
//! Each of the three decides its common case in 64-bit arithmetic in its own
//! module; [`judge`] is the general case (128-bit) they fall back to.

use super::Mode;
use crate::limit::Params;
use crate::math::{ceil_div, divrem, sat64};
use crate::{Decision, Denial, Nanos};

/// The capacity in scaled units.
pub(crate) fn capacity(p: &Params) -> u128 {
    u128::from(p.cap) * p.window()
}

/// The largest level a valid state can hold: the capacity plus what delay
/// mode may queue.
pub(crate) fn max_level(p: &Params) -> u128 {
    capacity(p) + p.max_delay.map_or(0, |d| u128::from(d) * p.rate())
}

/// The level after draining for `elapsed` nanoseconds.
pub(crate) fn drain(p: &Params, level: u128, elapsed: Nanos) -> u128 {
    level.saturating_sub(u128::from(elapsed) * p.rate())
}

/// A judged request, with the divisions the states reuse for encoding.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Judged {
    pub allowed: bool,
    pub remaining: u64,
    pub reset: Nanos,
    pub retry_after: Nanos,
    pub delay: Nanos,
    pub denial: Option<Denial>,
    /// The level after the decision (with the request when it consumed).
    pub after: u128,
    /// Whether the request consumed.
    pub consumed: bool,
    /// `(capacity - after) / window` and its remainder (free room).
    pub free: (u128, u128),
    /// `after / rate` and its remainder (time to drain).
    pub drain: (u128, u128),
}

impl Judged {
    /// The decision to report.
    #[inline(always)]
    pub(crate) fn decision(&self, p: &Params) -> Decision {
        Decision {
            allowed: self.allowed,
            limit: p.requests,
            remaining: self.remaining,
            reset: self.reset,
            retry_after: self.retry_after,
            delay: self.delay,
            denial: self.denial,
        }
    }
}

/// Decides `cost` (1..=cap) against `level`.
#[inline(always)]
pub(crate) fn judge(p: &Params, level: u128, cost: u64, mode: Mode) -> Judged {
    match judge_narrow(p, level, cost, mode) {
        Some(j) => j,
        None => judge_wide(p, level, cost, mode),
    }
}

/// [`judge`] in 64-bit arithmetic, for the common limits whose capacity in
/// scaled units fits in 64 bits; `None` when it does not.
#[inline(always)]
fn judge_narrow(p: &Params, level: u128, cost: u64, mode: Mode) -> Option<Judged> {
    let cap = p.cap.checked_mul(p.window)?;
    let level = u64::try_from(level).ok()?;
    let need = cost.checked_mul(p.window)?;
    let full = level.checked_add(need)?;
    let rate = p.rate.max(1);
    let (allowed, delay, denial, retry_after) = if full <= cap {
        (true, 0, None, 0)
    } else {
        // Rounded up so that waiting exactly this long conforms.
        let wait = (full - cap).div_ceil(rate);
        match p.max_delay {
            Some(max) if wait <= max => (true, wait, None, 0),
            Some(_) => (false, 0, Some(Denial::DelayTooLong), wait),
            None => (false, 0, Some(Denial::OverLimit), wait),
        }
    };
    let consumed = allowed && mode == Mode::Commit;
    let after = if consumed { full } else { level };
    let room = cap.saturating_sub(after);
    let window = p.window.max(1);
    let free = (room / window, room % window);
    let drain = (after / rate, after % rate);
    Some(Judged {
        allowed,
        remaining: p.report(free.0),
        reset: drain.0 + u64::from(drain.1 != 0),
        retry_after,
        delay,
        denial,
        after: u128::from(after),
        consumed,
        free: (u128::from(free.0), u128::from(free.1)),
        drain: (u128::from(drain.0), u128::from(drain.1)),
    })
}

/// [`judge`] in 128-bit arithmetic, for any limit.
#[inline(never)]
pub(crate) fn judge_wide(p: &Params, level: u128, cost: u64, mode: Mode) -> Judged {
    let cap = capacity(p);
    let need = u128::from(cost) * p.window();
    let full = level + need;
    let (allowed, delay, denial, retry_after) = if full <= cap {
        (true, 0, None, 0)
    } else {
        let wait = sat64(ceil_div(full - cap, p.rate()));
        match p.max_delay {
            Some(max) if wait <= max => (true, wait, None, 0),
            Some(_) => (false, 0, Some(Denial::DelayTooLong), wait),
            None => (false, 0, Some(Denial::OverLimit), wait),
        }
    };
    let consumed = allowed && mode == Mode::Commit;
    let after = if consumed { full } else { level };
    let free = divrem(cap.saturating_sub(after), p.window());
    let drain = divrem(after, p.rate());
    Judged {
        allowed,
        remaining: p.report(sat64(free.0)),
        reset: sat64(drain.0.saturating_add(u128::from(drain.1 != 0))),
        retry_after,
        delay,
        denial,
        after,
        consumed,
        free,
        drain,
    }
}

/// How much of a refund of `cost` admitted at `admitted_at` is certainly
/// still in the bucket at `at`: the request's units drain at most `rate` per
/// nanosecond, so `cost * window - rate * (at - admitted_at)` of them remain.
pub(crate) fn refundable(p: &Params, cost: u64, admitted_at: Nanos, at: Nanos) -> u128 {
    let need = u128::from(cost).min(u128::from(p.cap)) * p.window();
    need.saturating_sub(u128::from(at.saturating_sub(admitted_at)) * p.rate())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use crate::{Algorithm, Limit};
    use proptest::prelude::*;

    proptest! {
        /// The 64-bit path decides exactly as the 128-bit one.
        #[test]
        fn narrow_equals_wide(
            requests in 1u64..=2_000_000,
            burst in 1u64..=2_000_000,
            window in crate::MIN_WINDOW..=crate::MAX_WINDOW,
            soft in prop_oneof![Just(0u32), 0u32..=1000],
            delay in proptest::option::of(0u64..=crate::MAX_WINDOW),
            x: u128,
            cost in 1u64..=4_000_000,
            peek: bool,
        ) {
            let l = Limit { algorithm: Algorithm::Gcra, requests, window, burst, precision: 1, soft_percent: soft, max_delay: delay };
            let p = Params::of(&l);
            let level = x % (max_level(&p) + 1);
            let cost = cost.min(p.cap);
            let mode = if peek { Mode::Peek } else { Mode::Commit };
            if let Some(n) = judge_narrow(&p, level, cost, mode) {
                let w = judge_wide(&p, level, cost, mode);
                prop_assert_eq!(n.decision(&p), w.decision(&p));
                prop_assert_eq!((n.after, n.consumed, n.free, n.drain), (w.after, w.consumed, w.free, w.drain));
            }
        }
    }
}
