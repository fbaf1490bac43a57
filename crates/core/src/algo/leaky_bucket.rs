//! Leaky bucket as a meter: each request pours its cost into a bucket of
//! `burst` that leaks `requests` per `window`.
//!
//! State (26 bytes): version, tag, then three little-endian `u64`: the time
//! of the last update (ns), the whole level, and the fraction of a request in
//! units of `1 / window_ns`. In delay mode the level may exceed the capacity
//! by what is queued.
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

pub(crate) struct LeakyBucket;

impl LeakyBucket {
    /// The level of a state, in scaled units.
    #[inline]
    fn stored(p: &Params, whole: u64, frac: u64) -> u128 {
        // A fraction out of range (another window) is rounded up: a fuller bucket.
        scaled::join(whole, frac, p.window(), Round::Up).min(meter::max_level(p))
    }
}

impl Meter for LeakyBucket {
    const ALGORITHM: Algorithm = Algorithm::LeakyBucket;

    /// `(last update, whole level, fraction)`.
    type Words = (u64, u64, u64);

    #[inline]
    fn words(bytes: &[u8]) -> Option<Self::Words> {
        decode3(bytes, Algorithm::LeakyBucket)
    }

    fn level(p: &Params, (last, whole, frac): Self::Words, now: Nanos) -> (u128, bool) {
        meter::bucket_level(p, last, LeakyBucket::stored(p, whole, frac), now)
    }

    #[inline(always)]
    fn decide_narrow(
        p: &Params,
        (last, whole, frac): Self::Words,
        now: Nanos,
        cost: u64,
        mode: Mode,
    ) -> Option<Outcome> {
        let (decision, after) = meter::bucket_narrow(p, last, (whole, frac), now, cost, mode)?;
        Some(Outcome {
            decision,
            new_state: after.map(|(whole, frac)| encode3(Algorithm::LeakyBucket, now, whole, frac)),
        })
    }

    fn encode(p: &Params, at: Nanos, level: u128) -> Encoded {
        let (whole, frac) = scaled::split(level, p.window());
        encode3(Algorithm::LeakyBucket, at, whole, frac)
    }

    #[inline(always)]
    fn store(p: &Params, now: Nanos, j: &Judged) -> Encoded {
        if j.after > meter::capacity(p) {
            return LeakyBucket::encode(p, now, j.after);
        }
        // The level is the capacity less the free room: reuse its division.
        let (q, r) = j.free;
        let (whole, frac) = if r == 0 {
            (u128::from(p.cap) - q, 0)
        } else {
            (u128::from(p.cap) - q - 1, p.window() - r)
        };
        encode3(Algorithm::LeakyBucket, now, sat64(whole), sat64(frac))
    }

    fn refund_view(
        p: &Params,
        (last, whole, frac): Self::Words,
        admitted_at: Nanos,
        now: Nanos,
    ) -> RefundView {
        let level = LeakyBucket::stored(p, whole, frac);
        meter::bucket_refund_view(last, level, admitted_at, now)
    }
}
