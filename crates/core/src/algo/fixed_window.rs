//! Fixed window: one counter per window, windows aligned to the Unix epoch
//! (a window of an hour runs from one full hour to the next, in UTC).
//!
//! State (18 bytes): version, tag, then two little-endian `u64`: the start of
//! the counted window (ns since the epoch) and the count in it.
//!
//! Debt: a charge ([`charge`]) adds to the count beyond the capacity; the
//! window denies until it ends, and the debt ends with it (it is not carried
//! into the next window).

use super::{Mode, Verdict};
use crate::limit::Params;
use crate::state::{decode2, encode2};
use crate::{Algorithm, Nanos, Outcome};

#[inline]
pub(crate) fn decode(bytes: &[u8]) -> Option<(Nanos, u64)> {
    decode2(bytes, Algorithm::FixedWindow)
}

pub(crate) fn encode(start: Nanos, count: u64) -> crate::Encoded {
    encode2(Algorithm::FixedWindow, start, count)
}

/// The start of the window holding `now`, and the time left in it.
fn window_of(p: &Params, now: Nanos) -> (Nanos, Nanos) {
    let window = p.window.max(1);
    let into = now % window;
    (now - into, window - into)
}

/// The window holding `now`, the time left in it, its count, and whether
/// the state was moved from a window still to come.
#[inline(always)]
fn read(p: &Params, state: Option<&[u8]>, now: Nanos) -> (Nanos, Nanos, u64, bool) {
    let (start, left) = window_of(p, now);
    let (count, repaired) = match state.and_then(decode) {
        Some((at, count)) if at == start => (count, false),
        // A window still to come: the clock stepped back. Keep the count
        // but move it to this window, so the key recovers when it ends.
        Some((at, count)) if at > start => (count, true),
        _ => (0, false),
    };
    (start, left, count, repaired)
}

/// Counts `cost` in the window holding `now`, beyond the capacity if need be.
pub(crate) fn charge(p: &Params, state: Option<&[u8]>, now: Nanos, cost: u64) -> crate::Encoded {
    let (start, _, count, _) = read(p, state, now);
    encode(start, count.saturating_add(cost))
}

#[inline(always)]
pub(crate) fn decide(
    p: &Params,
    state: Option<&[u8]>,
    now: Nanos,
    cost: u64,
    mode: Mode,
) -> Outcome {
    let (start, left, count, repaired) = read(p, state, now);
    let verdict = if count.saturating_add(cost) <= p.cap {
        Verdict::ADMIT
    } else {
        Verdict::over_limit(left)
    };
    let consumed = verdict.allowed && mode == Mode::Commit;
    let after = if consumed { count + cost } else { count };
    let reset = if after > 0 { left } else { 0 };
    let decision = verdict.decision(p, p.cap.saturating_sub(after), reset);
    let new_state = (consumed || repaired).then(|| encode(start, after));
    Outcome {
        decision,
        new_state,
    }
}

pub(crate) fn refund(
    p: &Params,
    state: &[u8],
    admitted_at: Nanos,
    cost: u64,
) -> Option<crate::Encoded> {
    let (start, count) = decode(state)?;
    // Only the window the request was counted in holds its cost.
    if start != window_of(p, admitted_at).0 || count == 0 || cost == 0 {
        return None;
    }
    Some(encode(start, count.saturating_sub(cost)))
}
