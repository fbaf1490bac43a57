//! Token bucket: `burst` tokens, refilled at `requests` per `window`.
//!
//! State (26 bytes): version, tag, then three little-endian `u64`: the time
//! of the last update (ns), whole tokens, and the fraction of a token in
//! units of `1 / window_ns`. Keeping whole tokens and a fraction (rather than
//! one scaled number) keeps the state meaningful when the limit's rate changes.

use super::meter;
use super::Mode;
use crate::limit::Params;
use crate::math::{floor_div, sat64};
use crate::state::{decode3, encode3, tag};
use crate::{Nanos, Outcome};

/// Decoded state: `(last update, tokens in scaled units)`.
#[inline]
pub(crate) fn decode(p: &Params, bytes: &[u8]) -> Option<(Nanos, u128)> {
    let (last, whole, frac) = decode3(bytes, tag::TOKEN_BUCKET)?;
    // A fraction out of range (another window) is rounded down: fewer tokens.
    let frac = u128::from(frac).min(p.window() - 1);
    let tokens = u128::from(whole) * p.window() + frac;
    Some((last, tokens.min(meter::capacity(p))))
}

/// Encodes `(last update, tokens in scaled units)`.
pub(crate) fn encode(p: &Params, last: Nanos, tokens: u128) -> crate::Encoded {
    let whole = floor_div(tokens, p.window());
    let frac = tokens - whole * p.window();
    encode3(tag::TOKEN_BUCKET, last, sat64(whole), sat64(frac))
}

#[inline(always)]
pub(crate) fn decide(
    p: &Params,
    state: Option<&[u8]>,
    now: Nanos,
    cost: u64,
    mode: Mode,
) -> Outcome {
    let cap = meter::capacity(p);
    let (tokens, repaired) = match state.and_then(|s| decode(p, s)) {
        // The clock stepped back: no refill, and rebase on `now` so that the
        // bucket refills from here rather than from a time still to come.
        Some((last, tokens)) if now < last => (tokens, true),
        Some((last, tokens)) => (cap - meter::drain(p, cap - tokens, now - last), false),
        None => (cap, false),
    };
    let j = meter::judge(p, cap - tokens, cost, mode);
    // The tokens left are the free room: reuse its division.
    let new_state = (j.consumed || repaired)
        .then(|| encode3(tag::TOKEN_BUCKET, now, sat64(j.free.0), sat64(j.free.1)));
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
    let (last, tokens) = decode(p, state)?;
    let at = now.max(admitted_at).max(last);
    let back = meter::refundable(p, cost, admitted_at, at);
    if back == 0 {
        return None;
    }
    Some(encode(p, last, (tokens + back).min(meter::capacity(p))))
}
