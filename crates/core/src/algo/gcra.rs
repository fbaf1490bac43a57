//! GCRA: a theoretical arrival time (TAT) that advances by `window /
//! requests` per unit of cost; a request conforms when the new TAT is at
//! most `burst * window / requests` ahead of now.
//!
//! The TAT is kept exactly, whatever `window / requests` is: state (18
//! bytes) is version, tag, then two little-endian `u64`: the TAT in whole
//! nanoseconds since the epoch and its fraction in units of `1 / rate`
//! nanosecond (`rate` being `requests` plus the soft allowance).
//!
//! As a meter, the level at `now` is how far the TAT is ahead of now, in
//! scaled units (`(tat - now) * rate`).
//!
//! In debt beyond what this layout holds (after a charge), the state takes
//! the meters' debt layout (`super::debt`).

use super::meter::{self, Judged, Meter, RefundView};
use super::scaled::{self, Round};
use super::{Mode, Verdict};
use crate::limit::Params;
use crate::math::sat64;
use crate::state::{decode2, encode2};
use crate::{Algorithm, Encoded, Nanos, Outcome};

pub(crate) struct Gcra;

impl Gcra {
    /// The level at `at`: how far the TAT is ahead, zero when it is past.
    #[inline]
    fn ahead(p: &Params, whole: u64, frac: u64, at: Nanos) -> u128 {
        // A fraction out of range (another rate) is rounded up: a later TAT.
        let tat = scaled::join(whole, frac, p.rate(), Round::Up);
        tat.saturating_sub(u128::from(at) * p.rate())
    }
}

impl Meter for Gcra {
    const ALGORITHM: Algorithm = Algorithm::Gcra;

    /// `(TAT in whole ns, fraction)`.
    type Words = (u64, u64);

    #[inline]
    fn words(bytes: &[u8]) -> Option<Self::Words> {
        decode2(bytes, Algorithm::Gcra)
    }

    fn level(p: &Params, (whole, frac): Self::Words, now: Nanos) -> (u128, bool) {
        let max = meter::max_level(p);
        let level = Gcra::ahead(p, whole, frac, now);
        // More ahead than any valid state can be: the clock stepped back.
        // Treat the bucket as full from now, so it recovers within a window.
        if level > max {
            (max, true)
        } else {
            (level, false)
        }
    }

    /// The TAT kept as whole ns and a fraction, so that `reset` needs no
    /// division, and the emission interval's division does not depend on
    /// the state, so it overlaps the decoding instead of following it.
    #[inline(always)]
    fn decide_narrow(
        p: &Params,
        (whole, frac): Self::Words,
        now: Nanos,
        cost: u64,
        mode: Mode,
    ) -> Option<Outcome> {
        let (rate, w) = (p.rate.max(1), p.window);
        let (interval, interval_frac) = (w / rate, w % rate);
        let cap = p.cap.checked_mul(w)?;
        let queue = match p.max_delay {
            Some(d) => d.checked_mul(rate)?,
            None => 0,
        };
        let max = cap.checked_add(queue)?;
        let level = match whole.checked_sub(now) {
            Some(ahead) => ahead.checked_mul(rate)?.checked_add(frac)?,
            None => 0,
        };
        if frac >= rate || level > max {
            return None;
        }
        let full = level.checked_add(cost.checked_mul(w)?)?;
        let verdict = if full <= cap {
            Verdict::ADMIT
        } else {
            // Rounded up so that waiting exactly this long conforms.
            Verdict::after((full - cap).div_ceil(rate), p.max_delay)
        };
        let consumed = verdict.allowed && mode == Mode::Commit;
        let after = if consumed { full } else { level };
        // The new TAT is max(TAT, now) plus `cost` emission intervals.
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
        let free = (cap - after.min(cap)) / w;
        let reset = (tat - now) + u64::from(tat_frac != 0);
        Some(Outcome {
            decision: verdict.decision(p, free, reset),
            new_state: consumed.then(|| encode2(Algorithm::Gcra, tat, tat_frac)),
        })
    }

    fn encode(p: &Params, at: Nanos, level: u128) -> Encoded {
        let (whole, frac) = scaled::split(u128::from(at) * p.rate() + level, p.rate());
        encode2(Algorithm::Gcra, whole, frac)
    }

    #[inline(always)]
    fn store(p: &Params, now: Nanos, j: &Judged) -> Encoded {
        // TAT = now * rate + after: its whole part is now + after / rate, the
        // division already done for `reset`.
        match u64::try_from(j.drain.0)
            .ok()
            .and_then(|q| now.checked_add(q))
        {
            Some(whole) => encode2(Algorithm::Gcra, whole, sat64(j.drain.1)),
            None => Gcra::encode(p, now, j.after),
        }
    }

    fn refund_view(
        p: &Params,
        (whole, frac): Self::Words,
        admitted_at: Nanos,
        now: Nanos,
    ) -> RefundView {
        // No time is stored: the level is read as of the refund, and the
        // state written back from then.
        let at = now.max(admitted_at);
        RefundView {
            level: Gcra::ahead(p, whole, frac, at),
            stamp: at,
            until: at,
        }
    }
}
