//! decode(encode(s)) == s for every algorithm's state.

use super::gcra::Gcra;
use super::leaky_bucket::LeakyBucket;
use super::meter::Meter;
use super::scaled::{self, Round};
use super::token_bucket::TokenBucket;
use super::*;
use crate::limit::Params;
use crate::{Algorithm, Limit, MILLISECOND, SECOND};
use proptest::prelude::*;

fn params(a: Algorithm) -> impl Strategy<Value = (Limit, Params)> {
    (
        1u64..=crate::MAX_REQUESTS,
        1u64..=crate::MAX_REQUESTS,
        MILLISECOND..=crate::MAX_WINDOW,
        0u32..=1000,
        1u32..=1000,
        proptest::option::of(0u64..=crate::MAX_WINDOW),
    )
        .prop_map(move |(requests, burst, window, soft, precision, delay)| {
            let l = Limit {
                algorithm: a,
                requests,
                window,
                burst,
                precision,
                soft_percent: soft,
                max_delay: delay,
            };
            let p = Params::of(&l);
            (l, p)
        })
}

proptest! {
    #[test]
    fn whole_and_fraction(unit in 1u128..=u128::from(u64::MAX), x: u128, down: bool) {
        let value = x % (unit * (u128::from(u64::MAX) + 1));
        let (whole, frac) = scaled::split(value, unit);
        let round = if down { Round::Down } else { Round::Up };
        prop_assert_eq!(scaled::join(whole, frac, unit, round), value);
    }

    #[test]
    fn token_bucket((_, p) in params(Algorithm::TokenBucket), last: u64, x: u128) {
        let level = x % (meter::capacity(&p) + 1);
        let e = TokenBucket::encode(&p, last, level);
        prop_assert_eq!(e.len(), 26);
        let words = TokenBucket::words(e.as_bytes()).unwrap();
        prop_assert_eq!(words.0, last);
        prop_assert_eq!(TokenBucket::level(&p, words, last), (level, false));
    }

    #[test]
    fn leaky_bucket((_, p) in params(Algorithm::LeakyBucket), last: u64, x: u128) {
        let level = x % (meter::max_level(&p) + 1);
        let e = LeakyBucket::encode(&p, last, level);
        prop_assert_eq!(e.len(), 26);
        let words = LeakyBucket::words(e.as_bytes()).unwrap();
        prop_assert_eq!(words.0, last);
        prop_assert_eq!(LeakyBucket::level(&p, words, last), (level, false));
    }

    #[test]
    fn gcra((_, p) in params(Algorithm::Gcra), x: u128, at: u64) {
        let tat = x % (u128::from(u64::MAX) * p.rate());
        let at = at.min((tat / p.rate()) as u64);
        let ahead = tat - u128::from(at) * p.rate();
        let e = Gcra::encode(&p, at, ahead);
        prop_assert_eq!(e.len(), 18);
        let (whole, frac) = Gcra::words(e.as_bytes()).unwrap();
        prop_assert_eq!(scaled::join(whole, frac, p.rate(), Round::Up), tat);
        if ahead <= meter::max_level(&p) {
            prop_assert_eq!(Gcra::level(&p, (whole, frac), at), (ahead, false));
        }
    }

    #[test]
    fn fixed_window(start: u64, count: u64) {
        let e = fixed_window::encode(start, count);
        prop_assert_eq!(fixed_window::decode(e.as_bytes()), Some((start, count)));
    }

    #[test]
    fn sliding_log(
        window in MILLISECOND..=crate::MAX_WINDOW,
        base in 0u64..u64::MAX / 2,
        mut gaps in prop::collection::vec(0u64..1000, 0..50),
        extra in 0u64..5,
    ) {
        let l = Limit::new(Algorithm::SlidingLog, 10, window).unwrap();
        let p = Params::of(&l);
        let shift = sliding_log::shift_for(p.window());
        gaps.sort_unstable();
        let ticks: Vec<u64> = gaps.iter().map(|g| base + g).collect();
        let last = ticks.last().copied().unwrap_or(base) + 3;
        let e = sliding_log::encode(shift, &ticks, last, extra);
        let log = sliding_log::Log::decode(&p, e.as_bytes()).unwrap();
        let mut expected = ticks.clone();
        expected.extend(std::iter::repeat(last).take(extra as usize));
        let got: Vec<u64> = (0..log.len()).map(|i| log.tick(i)).collect();
        prop_assert_eq!(got, expected);
    }

    #[test]
    fn sliding_window(
        precision in 1u32..=1000,
        index: u64,
        counts in prop::collection::vec(any::<u64>(), 1001),
        wide: bool,
    ) {
        let l = Limit::new(Algorithm::SlidingWindow, 10, SECOND).unwrap().with_precision(precision);
        let p = Params::of(&l);
        let counts: Vec<u64> = counts
            .into_iter()
            .take(precision as usize + 1)
            .map(|c| if wide { c } else { c & u64::from(u32::MAX) })
            .collect();
        let c = sliding_window::Counters { index, counts: counts.into_iter().collect() };
        let e = c.encode(&p);
        prop_assert_eq!(sliding_window::Counters::decode(&p, e.as_bytes()), Some(c));
    }
}

proptest! {
    /// A meter's debt state reads back its time and level.
    #[test]
    fn debt((_, p) in params(Algorithm::Gcra), at: u64, x: u128) {
        let level = x % (u128::from(u64::MAX) * p.window());
        for a in [Algorithm::TokenBucket, Algorithm::LeakyBucket, Algorithm::Gcra] {
            let e = debt::encode(&p, a, at, level);
            prop_assert_eq!(e.len(), 27);
            prop_assert_eq!(debt::decode(&p, e.as_bytes(), a), Some((at, level)));
            // Another meter's code, or a meter's own layout, is not debt.
            prop_assert_eq!(debt::decode(&p, e.as_bytes(), Algorithm::FixedWindow), None);
        }
        prop_assert_eq!(debt::decode(&p, TokenBucket::encode(&p, at, 0).as_bytes(), Algorithm::TokenBucket), None);
    }
}
