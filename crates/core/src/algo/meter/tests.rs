//! The meters' 64-bit paths decide as their 128-bit ones.

use super::*;
use crate::algo::{gcra::Gcra, leaky_bucket::LeakyBucket, token_bucket::TokenBucket};
use crate::{Algorithm, Limit};
use proptest::prelude::*;

/// Whenever the 64-bit path of meter `M` answers, the general case
/// answers the same.
fn narrow_as_wide<M: Meter>(
    p: &Params,
    words: M::Words,
    now: Nanos,
    cost: u64,
    mode: Mode,
) -> Result<(), TestCaseError> {
    if let Some(n) = M::decide_narrow(p, words, now, cost, mode) {
        prop_assert_eq!(n, decide_wide::<M>(p, None, Some(words), now, cost, mode));
    }
    Ok(())
}

proptest! {
    /// Each meter's 64-bit path decides as its 128-bit one, on states
    /// near and out of range (a state written under another limit).
    #[test]
    fn meters_narrow_equal_wide(
        requests in prop_oneof![1u64..=100, 1u64..=2_000_000],
        burst in prop_oneof![1u64..=100, 1u64..=2_000_000],
        window in prop_oneof![crate::MIN_WINDOW..=100 * crate::SECOND, crate::MIN_WINDOW..=crate::MAX_WINDOW],
        soft in prop_oneof![Just(0u32), 0u32..=1000],
        delay in proptest::option::of(0u64..=crate::MAX_WINDOW),
        now in 0u64..=u64::MAX / 2,
        back: u32,
        whole in prop_oneof![0u64..=120, 0u64..=2_000_100],
        frac: u64,
        cost in 1u64..=4_000_000,
        peek: bool,
    ) {
        let mode = if peek { Mode::Peek } else { Mode::Commit };
        for algorithm in [Algorithm::TokenBucket, Algorithm::LeakyBucket, Algorithm::Gcra] {
            let l = Limit { algorithm, requests, window, burst, precision: 1, soft_percent: soft, max_delay: delay };
            let p = Params::of(&l);
            let cost = cost.min(p.cap);
            let last = now - u64::from(back);
            match algorithm {
                Algorithm::TokenBucket => {
                    let frac = frac % (p.window + 2);
                    narrow_as_wide::<TokenBucket>(&p, (last, whole, frac), now, cost, mode)?;
                }
                Algorithm::LeakyBucket => {
                    let frac = frac % (p.window + 2);
                    narrow_as_wide::<LeakyBucket>(&p, (last, whole, frac), now, cost, mode)?;
                }
                _ => {
                    let ahead = whole.saturating_mul(p.window) / p.rate;
                    let tat = now.saturating_add(ahead).saturating_sub(u64::from(back));
                    let frac = frac % (p.rate + 2);
                    narrow_as_wide::<Gcra>(&p, (tat, frac), now, cost, mode)?;
                }
            }
        }
    }


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
