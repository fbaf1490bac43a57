//! Token bucket: `burst` tokens, refilled at `requests` per `window`.
//!
//! State (26 bytes): version, tag, then three little-endian `u64`: the time
//! of the last update (ns), whole tokens, and the fraction of a token in
//! units of `1 / window_ns`. Keeping whole tokens and a fraction (rather than
//! one scaled number) keeps the state meaningful when the limit's rate changes.

use super::meter;
use super::Mode;
use crate::limit::Params;
use crate::math::{divrem, sat64};
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
    let (whole, frac) = divrem(tokens, p.window());
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
    match state
        .and_then(|s| decode3(s, tag::TOKEN_BUCKET))
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

/// The common case in 64-bit arithmetic, keeping whole tokens and the
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
    if now < last || frac >= w || whole > p.cap || p.max_delay.is_some() {
        return None;
    }
    let rate = p.rate.max(1);
    // Refill: `s` units of a token's fraction carry into whole tokens.
    let (mut whole, mut frac) = (whole, frac);
    match (now - last)
        .checked_mul(rate)
        .and_then(|x| x.checked_add(frac))
    {
        Some(s) if s < w => frac = s,
        Some(s) if s - w < w => {
            whole += 1;
            frac = s - w;
        }
        Some(s) if s < cap_units => {
            whole += s / w;
            frac = s % w;
        }
        _ => {
            whole = p.cap;
            frac = 0;
        }
    }
    if whole >= p.cap {
        whole = p.cap;
        frac = 0;
    }
    let allowed = whole >= cost;
    let consumed = allowed && mode == Mode::Commit;
    let left = if consumed { whole - cost } else { whole };
    let level = cap_units - (left * w + frac);
    let retry_after = if allowed {
        0
    } else {
        (cost * w - (whole * w + frac)).div_ceil(rate)
    };
    Some(Outcome {
        decision: crate::Decision {
            allowed,
            limit: p.requests,
            remaining: p.report(left),
            reset: level.div_ceil(rate),
            retry_after,
            delay: 0,
            denial: (!allowed).then_some(crate::Denial::OverLimit),
        },
        new_state: consumed.then(|| encode3(tag::TOKEN_BUCKET, now, left, frac)),
    })
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
