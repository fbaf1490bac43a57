//! Token bucket: `burst` tokens, refilled at `requests` per `window`.
//!
//! State (26 bytes): version, tag, then three little-endian `u64`: the time
//! of the last update (ns), whole tokens, and the fraction of a token in
//! units of `1 / window_ns`. Keeping whole tokens and a fraction (rather than
//! one scaled number) keeps the state meaningful when the limit's rate changes.
//!
//! As a meter, the level is the capacity less the tokens.
//!
//! In debt beyond what this layout holds (after a charge), the state takes
//! the meters' debt layout (`super::debt`).

use super::meter::{self, Judged, Meter, RefundView};
use super::scaled::{self, Round};
use super::Mode;
use crate::limit::Params;
use crate::math::sat64;
use crate::state::{decode3, encode3};
use crate::{Algorithm, Encoded, Nanos, Outcome};

pub(crate) struct TokenBucket;

impl TokenBucket {
    /// The tokens of a state, in scaled units.
    #[inline]
    fn tokens(p: &Params, whole: u64, frac: u64) -> u128 {
        // A fraction out of range (another window) is rounded down: fewer tokens.
        scaled::join(whole, frac, p.window(), Round::Down).min(meter::capacity(p))
    }
}

impl Meter for TokenBucket {
    const ALGORITHM: Algorithm = Algorithm::TokenBucket;

    /// Tokens cannot go below zero: a level above the capacity is debt.
    fn max_stored(p: &Params) -> u128 {
        meter::capacity(p)
    }

    /// `(last update, whole tokens, fraction)`.
    type Words = (u64, u64, u64);

    #[inline]
    fn words(bytes: &[u8]) -> Option<Self::Words> {
        decode3(bytes, Algorithm::TokenBucket)
    }

    fn level(p: &Params, (last, whole, frac): Self::Words, now: Nanos) -> (u128, bool) {
        let level = meter::capacity(p) - TokenBucket::tokens(p, whole, frac);
        meter::bucket_level(p, last, level, now)
    }

    #[inline(always)]
    fn decide_narrow(
        p: &Params,
        (last, whole, frac): Self::Words,
        now: Nanos,
        cost: u64,
        mode: Mode,
    ) -> Option<Outcome> {
        let (cap, w) = (p.cap, p.window);
        // Tokens cannot hold a queue: delay mode (an invalid limit here) is
        // left to the general case.
        if frac >= w || p.max_delay.is_some() {
            return None;
        }
        // The level is the capacity less the tokens.
        let level = match (cap.checked_sub(whole), frac) {
            (None | Some(0), _) => (0, 0),
            (Some(n), 0) => (n, 0),
            (Some(n), f) => (n - 1, w - f),
        };
        let (decision, after) = meter::bucket_narrow(p, last, level, now, cost, mode)?;
        Some(Outcome {
            decision,
            new_state: after.map(|(whole, frac)| {
                let tokens = match frac {
                    0 => (cap - whole, 0),
                    f => (cap - whole - 1, w - f),
                };
                encode3(Algorithm::TokenBucket, now, tokens.0, tokens.1)
            }),
        })
    }

    fn encode(p: &Params, at: Nanos, level: u128) -> Encoded {
        let (whole, frac) = scaled::split(meter::capacity(p).saturating_sub(level), p.window());
        encode3(Algorithm::TokenBucket, at, whole, frac)
    }

    #[inline(always)]
    fn store(_: &Params, now: Nanos, j: &Judged) -> Encoded {
        // The tokens left are the free room.
        encode3(
            Algorithm::TokenBucket,
            now,
            sat64(j.free.0),
            sat64(j.free.1),
        )
    }

    fn refund_view(
        p: &Params,
        (last, whole, frac): Self::Words,
        admitted_at: Nanos,
        now: Nanos,
    ) -> RefundView {
        let level = meter::capacity(p) - TokenBucket::tokens(p, whole, frac);
        meter::bucket_refund_view(last, level, admitted_at, now)
    }
}
