//! The meter shared by token bucket, leaky bucket and GCRA.
//!
//! All three measure a bucket level in *scaled units*: one request weighs
//! `window` units and the bucket drains `rate` units per nanosecond, so that
//! every quantity is an exact integer (no rounding of `window / requests`).
//! The capacity is `cap * window` units. A request of cost `c` conforms when
//! `level + c * window <= capacity`.

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
    pub decision: Decision,
    /// The level after the decision (with the request when it consumed).
    pub after: u128,
    /// Whether the request consumed.
    pub consumed: bool,
    /// `(capacity - after) / window` and its remainder (free room).
    pub free: (u128, u128),
    /// `after / rate` and its remainder (time to drain).
    pub drain: (u128, u128),
}

/// Decides `cost` (1..=cap) against `level`.
#[inline(always)]
pub(crate) fn judge(p: &Params, level: u128, cost: u64, mode: Mode) -> Judged {
    let cap = capacity(p);
    let need = u128::from(cost) * p.window();
    let full = level + need;
    let (allowed, delay, denial, retry_after) = if full <= cap {
        (true, 0, None, 0)
    } else {
        // Rounded up so that waiting exactly this long conforms.
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
    let decision = Decision {
        allowed,
        limit: p.requests,
        remaining: p.report(sat64(free.0)),
        reset: sat64(drain.0.saturating_add(u128::from(drain.1 != 0))),
        retry_after,
        delay,
        denial,
    };
    Judged {
        decision,
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
