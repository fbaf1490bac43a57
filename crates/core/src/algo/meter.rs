//! The meter shared by token bucket, leaky bucket and GCRA.
//!
//! All three measure a bucket level in *scaled units*: one request weighs
//! `window` units and the bucket drains `rate` units per nanosecond, so that
//! every quantity is an exact integer (no rounding of `window / requests`).
//! The capacity is `cap * window` units. A request of cost `c` conforms when
//! `level + c * window <= capacity`.
//!
//! The three differ only in what they store (tokens and a time, a level and
//! a time, a theoretical arrival time), so in how a state reads as a level
//! and how a level is written back: each implements [`Meter`] for that. The
//! rest is written once here: the decision ([`decide`]) and the refund
//! ([`refund`]); a quantity kept as whole units and a fraction is read and
//! written by `super::scaled`.
//!
//! A charge ([`charge`]) may take the level beyond the capacity (debt); a
//! level that a meter's own layout cannot hold is written in the shared
//! debt layout (`super::debt`), read back here for all three ([`read`]).
//!
//! A decision runs in 64-bit arithmetic when the numbers fit (the common
//! case, [`Meter::decide_narrow`]), in 128-bit arithmetic otherwise. The two
//! buckets share one 64-bit path that keeps the level as whole requests and
//! a fraction ([`bucket_narrow`]); GCRA keeps its own, which advances the
//! arrival time by whole and fractional emission intervals. Each saves a
//! division or two over judging one 64-bit level.

use super::{debt, Mode, Verdict};
use crate::limit::Params;
use crate::math::{ceil_div, divrem, sat64};
use crate::{Algorithm, Decision, Encoded, Nanos, Outcome};

/// What makes a meter one of the three: its stored words, and how they read
/// as a level.
pub(crate) trait Meter {
    /// The algorithm, whose code tags the states.
    const ALGORITHM: Algorithm;

    /// The words behind the state's header.
    type Words: Copy;

    /// The highest level this meter's own layout holds; above it a state
    /// is written in the debt layout.
    fn max_stored(p: &Params) -> u128 {
        max_level(p)
    }

    /// The words of `bytes` when they are this meter's state.
    fn words(bytes: &[u8]) -> Option<Self::Words>;

    /// The level at `now`, and whether the state must be rebased on `now`
    /// because the clock stepped back behind it.
    fn level(p: &Params, words: Self::Words, now: Nanos) -> (u128, bool);

    /// The decision in 64-bit arithmetic, `None` when the general case must
    /// decide: a clock step, a state out of range (written under another
    /// limit), a number beyond 64 bits. Whenever it answers, it answers as
    /// the general case ([`Meter::level`], then [`Meter::store`]) would.
    fn decide_narrow(
        p: &Params,
        words: Self::Words,
        now: Nanos,
        cost: u64,
        mode: Mode,
    ) -> Option<Outcome>;

    /// The state holding `level` as of `at`.
    fn encode(p: &Params, at: Nanos, level: u128) -> Encoded;

    /// The state after `j` decided at `now`: [`Meter::encode`] of `j.after`,
    /// reusing the divisions `j` made.
    fn store(p: &Params, now: Nanos, j: &Judged) -> Encoded;

    /// What a refund at `now` of a request admitted at `admitted_at` works on.
    fn refund_view(p: &Params, words: Self::Words, admitted_at: Nanos, now: Nanos) -> RefundView;
}

/// What a refund works on: the level it gives back from, as of `stamp` (the
/// state is written back at that time), and the instant `until` up to which
/// the refunded request's units may have drained.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RefundView {
    pub level: u128,
    pub stamp: Nanos,
    pub until: Nanos,
}

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
fn drain(p: &Params, level: u128, elapsed: Nanos) -> u128 {
    level.saturating_sub(u128::from(elapsed) * p.rate())
}

/// A bucket's level at `now` (token and leaky bucket) from its level at
/// `last`: drained in between; when the clock stepped back, not drained and
/// to be rebased on `now`, so that it drains from here rather than from a
/// time still to come.
#[inline]
pub(crate) fn bucket_level(p: &Params, last: Nanos, level: u128, now: Nanos) -> (u128, bool) {
    if now < last {
        (level, true)
    } else {
        (drain(p, level, now - last), false)
    }
}

/// The buckets' common case in 64-bit arithmetic (token and leaky bucket),
/// from the level at `last` as whole requests and a fraction (in units of
/// `1 / window`): kept apart, they give `remaining` without a division.
/// Returns the decision and, when the request consumed, the level after it
/// in the same form; `None` for a clock step, a level out of range or a
/// capacity beyond 64 bits.
#[inline(always)]
pub(crate) fn bucket_narrow(
    p: &Params,
    last: Nanos,
    (whole, frac): (u64, u64),
    now: Nanos,
    cost: u64,
    mode: Mode,
) -> Option<(Decision, Option<(u64, u64)>)> {
    let w = p.window;
    let cap = p.cap.checked_mul(w)?;
    let queue = match p.max_delay {
        Some(d) => d.checked_mul(p.rate)?,
        None => 0,
    };
    let max = cap.checked_add(queue)?;
    let level = whole.checked_mul(w)?.checked_add(frac)?;
    if now < last || frac >= w || level > max {
        return None;
    }
    let rate = p.rate.max(1);
    // Drain `x` units, borrowing from the whole level.
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
    let verdict = if full <= cap {
        Verdict::ADMIT
    } else {
        // Rounded up so that waiting exactly this long conforms.
        Verdict::after((full - cap).div_ceil(rate), p.max_delay)
    };
    let consumed = verdict.allowed && mode == Mode::Commit;
    let (after_whole, after) = if consumed {
        (whole + cost, full)
    } else {
        (whole, level)
    };
    // Free room in whole requests: the capacity less the level rounded up.
    let used = after_whole + u64::from(frac != 0);
    let decision = verdict.decision(p, p.cap.saturating_sub(used), after.div_ceil(rate));
    Some((decision, consumed.then_some((after_whole, frac))))
}

/// A bucket's refund (token and leaky bucket): from the level at `last`,
/// kept at `last`; the request's units drain until now, and not before the
/// request or the state.
pub(crate) fn bucket_refund_view(
    last: Nanos,
    level: u128,
    admitted_at: Nanos,
    now: Nanos,
) -> RefundView {
    RefundView {
        level,
        stamp: last,
        until: now.max(admitted_at).max(last),
    }
}

/// Decides `cost` (1..=cap) at `now` against a meter's stored state.
#[inline(always)]
pub(crate) fn decide<M: Meter>(
    p: &Params,
    state: Option<&[u8]>,
    now: Nanos,
    cost: u64,
    mode: Mode,
) -> Outcome {
    let words = state.and_then(M::words);
    match words.and_then(|w| M::decide_narrow(p, w, now, cost, mode)) {
        Some(out) => out,
        None => decide_wide::<M>(p, state, words, now, cost, mode),
    }
}

/// The general case, in 128-bit arithmetic: fresh keys, clock steps, states
/// out of range or in debt, capacities beyond 64 bits.
#[inline(never)]
fn decide_wide<M: Meter>(
    p: &Params,
    state: Option<&[u8]>,
    words: Option<M::Words>,
    now: Nanos,
    cost: u64,
    mode: Mode,
) -> Outcome {
    let (level, rebased) = read::<M>(p, state, words, now);
    let j = judge(p, level, cost, mode);
    let store = || {
        if j.after > M::max_stored(p) {
            debt::encode(p, M::ALGORITHM, now, j.after)
        } else {
            M::store(p, now, &j)
        }
    };
    Outcome {
        decision: j.decision(p),
        new_state: (j.consumed || rebased).then(store),
    }
}

/// The level of `state` at `now` (its words when they decode, else the debt
/// layout, else a fresh key), and whether it must be rebased on `now`.
fn read<M: Meter>(
    p: &Params,
    state: Option<&[u8]>,
    words: Option<M::Words>,
    now: Nanos,
) -> (u128, bool) {
    if let Some(w) = words {
        return M::level(p, w, now);
    }
    match state.and_then(|s| debt::decode(p, s, M::ALGORITHM)) {
        Some((last, level)) => bucket_level(p, last, level, now),
        None => (0, false),
    }
}

/// The state holding `level` as of `at`: the meter's own layout when it
/// holds it, else the debt layout.
fn stored<M: Meter>(p: &Params, at: Nanos, level: u128) -> Encoded {
    if level > M::max_stored(p) {
        debt::encode(p, M::ALGORITHM, at, level)
    } else {
        M::encode(p, at, level)
    }
}

/// Consumes `cost` at `now` whatever the level: the level may pass the
/// capacity (debt), and drains at the rate as always.
pub(crate) fn charge<M: Meter>(p: &Params, state: Option<&[u8]>, now: Nanos, cost: u64) -> Encoded {
    let (level, _) = read::<M>(p, state, state.and_then(M::words), now);
    let need = u128::from(cost).saturating_mul(p.window());
    stored::<M>(p, now, level.saturating_add(need))
}

/// Gives back `cost` admitted at `admitted_at`: what of the request can
/// still be in the bucket at the view's `until` (its units drain at most
/// `rate` per nanosecond, so `cost * window - rate * (until - admitted_at)`
/// of them remain). `None` when nothing is given back.
pub(crate) fn refund<M: Meter>(
    p: &Params,
    state: &[u8],
    admitted_at: Nanos,
    now: Nanos,
    cost: u64,
) -> Option<Encoded> {
    let view = match M::words(state) {
        Some(words) => M::refund_view(p, words, admitted_at, now),
        None => {
            let (last, level) = debt::decode(p, state, M::ALGORITHM)?;
            bucket_refund_view(last, level, admitted_at, now)
        }
    };
    // Not capped: a charge may have consumed beyond the capacity.
    let need = u128::from(cost) * p.window();
    let drained = u128::from(view.until.saturating_sub(admitted_at)) * p.rate();
    let back = need.saturating_sub(drained);
    if back == 0 || view.level == 0 {
        return None;
    }
    Some(stored::<M>(p, view.stamp, view.level.saturating_sub(back)))
}

/// A judged request, with the divisions the states reuse for encoding.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Judged {
    pub verdict: Verdict,
    pub reset: Nanos,
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
        self.verdict.decision(p, sat64(self.free.0), self.reset)
    }
}

/// Decides `cost` (1..=cap) against `level`.
#[inline(always)]
fn judge(p: &Params, level: u128, cost: u64, mode: Mode) -> Judged {
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
    let verdict = if full <= cap {
        Verdict::ADMIT
    } else {
        // Rounded up so that waiting exactly this long conforms.
        Verdict::after((full - cap).div_ceil(rate), p.max_delay)
    };
    let consumed = verdict.allowed && mode == Mode::Commit;
    let after = if consumed { full } else { level };
    let room = cap.saturating_sub(after);
    let window = p.window.max(1);
    let free = (room / window, room % window);
    let drain = (after / rate, after % rate);
    Some(Judged {
        verdict,
        reset: drain.0 + u64::from(drain.1 != 0),
        after: u128::from(after),
        consumed,
        free: (u128::from(free.0), u128::from(free.1)),
        drain: (u128::from(drain.0), u128::from(drain.1)),
    })
}

/// [`judge`] in 128-bit arithmetic, for any limit.
#[inline(never)]
fn judge_wide(p: &Params, level: u128, cost: u64, mode: Mode) -> Judged {
    let cap = capacity(p);
    let need = u128::from(cost) * p.window();
    let full = level.saturating_add(need);
    let verdict = if full <= cap {
        Verdict::ADMIT
    } else {
        Verdict::after(sat64(ceil_div(full - cap, p.rate())), p.max_delay)
    };
    let consumed = verdict.allowed && mode == Mode::Commit;
    let after = if consumed { full } else { level };
    let free = divrem(cap.saturating_sub(after), p.window());
    let drain = divrem(after, p.rate());
    Judged {
        verdict,
        reset: sat64(drain.0.saturating_add(u128::from(drain.1 != 0))),
        after,
        consumed,
        free,
        drain,
    }
}

#[cfg(test)]
mod tests;
