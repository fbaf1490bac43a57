//! Worked examples and edge cases for every algorithm.
#![cfg(test)]

mod common;

use common::Key;
use sluice_core::{
    decide, decide_all, decide_reserving, most_restrictive, refund, refund_at, Algorithm, Check,
    Denial, Encoded, Limit, MILLISECOND, SECOND,
};

const MINUTE: u64 = 60 * SECOND;
const HOUR: u64 = 60 * MINUTE;
/// 2024-05-01T00:00:00Z, an arbitrary midnight.
const MIDNIGHT: u64 = 1_714_521_600 * SECOND;

fn limit(a: Algorithm, requests: u64, window: u64) -> Limit {
    Limit::new(a, requests, window).unwrap()
}

/// A fixed window of 10 requests per hour. A request at 12:40 finds
/// 7 in the 12:00-1:00 window and passes (8); at 1:40 one finds 9 and passes
/// (10), after which the 1:00-2:00 window admits nothing more.
#[test]
fn fixed_window_ten_per_hour() {
    let l = limit(Algorithm::FixedWindow, 10, HOUR);
    let noon = MIDNIGHT + 12 * HOUR;
    let mut key = Key::default();
    for i in 0..7 {
        assert!(key.hit(&l, noon + i * MINUTE, 1).allowed);
    }
    let d = key.hit(&l, noon + 40 * MINUTE, 1);
    assert!(d.allowed);
    assert_eq!(d.remaining, 2);
    assert_eq!(d.reset, 20 * MINUTE);
    for i in 0..9 {
        assert!(key.hit(&l, noon + HOUR + i * MINUTE, 1).allowed);
    }
    let d = key.hit(&l, noon + HOUR + 40 * MINUTE, 1);
    assert!(d.allowed);
    assert_eq!(d.remaining, 0);
    let d = key.hit(&l, noon + HOUR + 41 * MINUTE, 1);
    assert!(!d.allowed);
    assert_eq!(d.denial, Some(Denial::OverLimit));
    assert_eq!(d.retry_after, 19 * MINUTE);
    assert!(key.hit(&l, noon + 2 * HOUR, 1).allowed);
}

/// 3 requests per minute per user. Every algorithm admits three at
/// once, denies the fourth, and says when to come back.
#[test]
fn three_per_minute_every_algorithm() {
    let t0 = MIDNIGHT + 10 * SECOND;
    for a in Algorithm::ALL {
        let l = limit(a, 3, MINUTE);
        let mut key = Key::default();
        for n in (0..3).rev() {
            let d = key.hit(&l, t0, 1);
            assert!(d.allowed, "{a}");
            assert_eq!(d.limit, 3);
            assert_eq!(d.remaining, n, "{a}");
        }
        let d = key.hit(&l, t0, 1);
        assert!(!d.allowed, "{a}");
        let expected = match a {
            // One request's worth of refill.
            Algorithm::TokenBucket | Algorithm::LeakyBucket | Algorithm::Gcra => 20 * SECOND,
            // The window ends on the minute.
            Algorithm::FixedWindow => 50 * SECOND,
            // The oldest entry leaves a minute after it came.
            Algorithm::SlidingLog => MINUTE,
            // The previous minute is weighted out by the end of this one.
            Algorithm::SlidingWindow => 50 * SECOND + 20 * SECOND,
        };
        assert_eq!(d.retry_after, expected, "{a}");
        assert!(key.hit(&l, t0 + d.retry_after, 1).allowed, "{a}");
    }
}

/// GCRA with L > 1: L = 10 per P = 60 s. Requests bunch up to L at once;
/// then one passes every P/L = 6 s; the rule "limit when TAT - t > P - P/L"
/// holds.
#[test]
fn gcra_with_l_above_one() {
    let l = limit(Algorithm::Gcra, 10, MINUTE);
    let mut key = Key::default();
    let t0 = MIDNIGHT;
    for _ in 0..10 {
        assert!(key.hit(&l, t0, 1).allowed);
    }
    let d = key.hit(&l, t0, 1);
    assert!(!d.allowed);
    assert_eq!(d.retry_after, 6 * SECOND);
    assert_eq!(d.reset, MINUTE);
    assert!(!key.hit(&l, t0 + 6 * SECOND - 1, 1).allowed);
    let d = key.hit(&l, t0 + 6 * SECOND, 1);
    assert!(d.allowed);
    assert_eq!(d.remaining, 0);
    // Steady traffic at exactly P/L passes forever.
    for i in 2..50 {
        assert!(key.hit(&l, t0 + i * 6 * SECOND, 1).allowed);
    }
    // A burst of 2 tolerates 2 at once; then P/L spacing.
    let l = limit(Algorithm::Gcra, 10, MINUTE).with_burst(2);
    let mut key = Key::default();
    assert!(key.hit(&l, t0, 1).allowed);
    assert!(key.hit(&l, t0, 1).allowed);
    assert_eq!(key.hit(&l, t0, 1).retry_after, 6 * SECOND);
}

/// An emission interval that is not a whole number of nanoseconds
/// (3 per second) is kept exactly: over 3 seconds exactly 9 + 3 requests pass.
#[test]
fn fractional_emission_interval_is_exact() {
    for a in [
        Algorithm::TokenBucket,
        Algorithm::LeakyBucket,
        Algorithm::Gcra,
    ] {
        let l = limit(a, 3, SECOND);
        let mut key = Key::default();
        let mut admitted = 0;
        for t in 0..=3000u64 {
            while key.hit(&l, MIDNIGHT + t * MILLISECOND, 1).allowed {
                admitted += 1;
            }
        }
        assert_eq!(admitted, 12, "{a}");
    }
}

#[test]
fn cost_above_capacity_is_denied_without_retry() {
    for a in Algorithm::ALL {
        let l = limit(a, 5, SECOND);
        let key = Key::default();
        for cost in [6, u64::MAX] {
            let d = key.peek(&l, MIDNIGHT, cost);
            assert!(!d.allowed, "{a}");
            assert_eq!(d.denial, Some(Denial::CostExceedsCapacity), "{a}");
            assert_eq!(d.retry_after, 0);
            assert_eq!(d.remaining, 5);
        }
        let out = decide(&l, None, MIDNIGHT, 6);
        assert!(out.new_state.is_none());
        assert!(decide(&l, None, MIDNIGHT, 5).decision.allowed, "{a}");
        // The soft allowance raises the capacity.
        let l = limit(a, 5, SECOND).with_soft_percent(20);
        assert!(decide(&l, None, MIDNIGHT, 6).decision.allowed, "{a}");
        assert_eq!(
            decide(&l, None, MIDNIGHT, 7).decision.denial,
            Some(Denial::CostExceedsCapacity)
        );
    }
}

#[test]
fn weighted_requests() {
    for a in Algorithm::ALL {
        let l = limit(a, 10, SECOND);
        let mut key = Key::default();
        assert!(key.hit(&l, MIDNIGHT, 7).allowed, "{a}");
        let d = key.hit(&l, MIDNIGHT, 4);
        assert!(!d.allowed, "{a}");
        assert!(d.retry_after > 0);
        let d = key.hit(&l, MIDNIGHT, 3);
        assert!(d.allowed, "{a}");
        assert_eq!(d.remaining, 0);
    }
}

/// Cost 0 is a query: allowed while a request of cost 1 would pass, and
/// consumes nothing.
#[test]
fn cost_zero_is_a_query() {
    for a in Algorithm::ALL {
        let l = limit(a, 2, SECOND);
        let mut key = Key::default();
        let q = decide(&l, None, MIDNIGHT, 0);
        assert!(q.decision.allowed && q.new_state.is_none(), "{a}");
        assert_eq!(q.decision.remaining, 2);
        key.hit(&l, MIDNIGHT, 1);
        let q = decide(&l, key.state.as_deref(), MIDNIGHT, 0);
        assert!(q.decision.allowed && q.new_state.is_none(), "{a}");
        assert_eq!(q.decision.remaining, 1);
        key.hit(&l, MIDNIGHT, 1);
        let q = decide(&l, key.state.as_deref(), MIDNIGHT, 0);
        assert!(!q.decision.allowed && q.new_state.is_none(), "{a}");
        assert_eq!(q.decision.remaining, 0);
        assert!(q.decision.retry_after > 0);
    }
}

/// Soft throttling: 10 per minute with 20 % admits 12, reports a
/// limit of 10, and `remaining` counts the hard quota only.
#[test]
fn soft_throttling() {
    for a in Algorithm::ALL {
        let l = limit(a, 10, MINUTE).with_soft_percent(20);
        l.validate().unwrap();
        let mut key = Key::default();
        let mut remaining = Vec::new();
        for _ in 0..12 {
            let d = key.hit(&l, MIDNIGHT, 1);
            assert!(d.allowed, "{a}");
            assert_eq!(d.limit, 10);
            remaining.push(d.remaining);
        }
        assert_eq!(remaining, [9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 0, 0], "{a}");
        assert!(!key.hit(&l, MIDNIGHT, 1).allowed, "{a}");
    }
}

#[test]
fn delay_mode() {
    for a in [Algorithm::Gcra, Algorithm::LeakyBucket] {
        let l = limit(a, 1, SECOND).with_max_delay(Some(2 * SECOND));
        l.validate().unwrap();
        let mut key = Key::default();
        let delays: Vec<_> = (0..3).map(|_| key.hit(&l, MIDNIGHT, 1)).collect();
        assert!(delays.iter().all(|d| d.allowed), "{a}");
        assert_eq!(
            delays.iter().map(|d| d.delay).collect::<Vec<_>>(),
            [0, SECOND, 2 * SECOND]
        );
        let d = key.hit(&l, MIDNIGHT, 1);
        assert!(!d.allowed);
        assert_eq!(d.denial, Some(Denial::DelayTooLong));
        assert_eq!(d.retry_after, 3 * SECOND);
        // The queue drains: a second later one more fits within the delay.
        let d = key.hit(&l, MIDNIGHT + SECOND, 1);
        assert!(d.allowed && d.delay == 2 * SECOND, "{a}");
        // After it all drained, no delay.
        let d = key.hit(&l, MIDNIGHT + 10 * SECOND, 1);
        assert_eq!((d.allowed, d.delay), (true, 0));
    }
}

#[test]
fn validation_names_the_field() {
    let field = |l: Limit| l.validate().unwrap_err().path;
    let base = |a| Limit::new(a, 10, SECOND).unwrap();
    assert_eq!(
        Limit::new(Algorithm::Gcra, 0, SECOND).unwrap_err().path,
        "requests"
    );
    assert_eq!(
        Limit::new(Algorithm::Gcra, 1, MILLISECOND - 1)
            .unwrap_err()
            .path,
        "window"
    );
    assert_eq!(
        Limit::new(Algorithm::Gcra, 1, 367 * 24 * HOUR)
            .unwrap_err()
            .path,
        "window"
    );
    assert!(Limit::new(Algorithm::Gcra, 1, 366 * 24 * HOUR).is_ok());
    assert!(Limit::new(Algorithm::Gcra, 1_000_000_000, MILLISECOND).is_ok());
    assert_eq!(field(base(Algorithm::Gcra).with_burst(0)), "burst");
    assert_eq!(
        field(base(Algorithm::SlidingWindow).with_precision(0)),
        "precision"
    );
    assert_eq!(
        field(base(Algorithm::SlidingWindow).with_precision(1001)),
        "precision"
    );
    assert!(base(Algorithm::SlidingWindow)
        .with_precision(1000)
        .validate()
        .is_ok());
    assert_eq!(field(base(Algorithm::Gcra).with_precision(2)), "precision");
    assert_eq!(
        field(base(Algorithm::Gcra).with_soft_percent(1001)),
        "soft_percent"
    );
    assert_eq!(
        field(base(Algorithm::SlidingLog).with_burst(100_001)),
        "burst"
    );
    assert!(base(Algorithm::SlidingLog)
        .with_burst(100_000)
        .validate()
        .is_ok());
    assert_eq!(
        field(
            base(Algorithm::SlidingLog)
                .with_burst(100_000)
                .with_soft_percent(1)
        ),
        "soft_percent"
    );
    for a in [
        Algorithm::TokenBucket,
        Algorithm::FixedWindow,
        Algorithm::SlidingLog,
        Algorithm::SlidingWindow,
    ] {
        assert_eq!(field(base(a).with_max_delay(Some(SECOND))), "max_delay");
    }
    assert!(base(Algorithm::Gcra)
        .with_max_delay(Some(SECOND))
        .validate()
        .is_ok());
    // A bucket may take at most a century to drain.
    let day = 24 * HOUR;
    assert_eq!(
        field(
            Limit::new(Algorithm::Gcra, 1, day)
                .unwrap()
                .with_burst(36_526)
        ),
        "burst"
    );
    assert!(Limit::new(Algorithm::Gcra, 1, day)
        .unwrap()
        .with_burst(36_525)
        .validate()
        .is_ok());
    assert!(Limit::new(Algorithm::FixedWindow, 1, day)
        .unwrap()
        .with_burst(1_000_000)
        .validate()
        .is_ok());
    let e = Limit::new(Algorithm::Gcra, 0, SECOND).unwrap_err();
    assert!(e.to_string().starts_with("requests: "));
}

/// The wall clock steps back an hour after the key was exhausted: nothing
/// more is admitted at the earlier time, and the key recovers within one
/// window of real time.
#[test]
fn clock_stepping_back() {
    for a in Algorithm::ALL {
        let l = limit(a, 5, MINUTE);
        let mut key = Key::default();
        let late = MIDNIGHT + 2 * HOUR + 30 * SECOND;
        while key.hit(&l, late, 1).allowed {}
        let early = late - HOUR;
        let d = key.hit(&l, early, 1);
        assert!(!d.allowed, "{a}");
        assert!(d.retry_after <= MINUTE, "{a}: {}", d.retry_after);
        assert!(!key.hit(&l, early + 1, 1).allowed, "{a}");
        let d = key.hit(&l, early + 2 * SECOND, 1);
        assert!(!d.allowed, "{a}");
        assert!(
            key.hit(&l, early + d.retry_after + 2 * SECOND, 1).allowed,
            "{a}"
        );
        let mut key2 = Key {
            state: key.state.clone(),
        };
        assert!(key2.hit(&l, early + 3 * MINUTE, 5).allowed, "{a}");
    }
}

/// A state written far ahead (a clock that ran fast, then was corrected)
/// does not lock the key out until the clock catches up.
#[test]
fn state_from_the_future_recovers() {
    for a in Algorithm::ALL {
        let l = limit(a, 5, SECOND);
        let mut key = Key::default();
        let future = u64::MAX - SECOND;
        while key.hit(&l, future, 1).allowed {}
        assert!(!key.hit(&l, MIDNIGHT, 1).allowed, "{a}");
        assert!(key.hit(&l, MIDNIGHT + 2 * SECOND, 1).allowed, "{a}");
    }
}

#[test]
fn extremes_do_not_overflow() {
    let windows = [MILLISECOND, SECOND, 366 * 24 * HOUR];
    let counts = [1, 1_000_000_000, sluice_core::MAX_REQUESTS];
    let nows = [0, 1, MIDNIGHT, u64::MAX / 2, u64::MAX - 1, u64::MAX];
    for a in Algorithm::ALL {
        for &w in &windows {
            for &n in &counts {
                let mut l = Limit::new(a, 1, w).unwrap();
                l.requests = n;
                l.burst = if a == Algorithm::SlidingLog {
                    n.min(100_000)
                } else {
                    n
                };
                if a == Algorithm::SlidingWindow {
                    l.precision = 1000;
                }
                if matches!(a, Algorithm::Gcra | Algorithm::LeakyBucket) {
                    l.max_delay = Some(w);
                }
                l.soft_percent = if a == Algorithm::SlidingLog { 0 } else { 1000 };
                l.validate().unwrap();
                let mut key = Key::default();
                for &now in nows.iter().chain(nows.iter().rev()) {
                    for cost in [0, 1, 1000, n, u64::MAX] {
                        key.hit(&l, now, cost);
                    }
                }
            }
        }
    }
}

/// A limit that does not validate is still decided, never with a panic.
#[test]
fn invalid_limits_do_not_panic() {
    for a in Algorithm::ALL {
        for (requests, window, burst, precision) in [
            (0, 0, 0, 0),
            (u64::MAX, u64::MAX, u64::MAX, u32::MAX),
            (1, 1, 1, 1),
        ] {
            let l = Limit {
                algorithm: a,
                requests,
                window,
                burst,
                precision,
                soft_percent: u32::MAX,
                max_delay: Some(u64::MAX),
            };
            let mut key = Key::default();
            for now in [0, 1, u64::MAX] {
                key.hit(&l, now, 1);
                key.hit(&l, now, u64::MAX);
            }
        }
    }
}

#[test]
fn foreign_state_is_no_state() {
    let t = MIDNIGHT;
    for a in Algorithm::ALL {
        let l = limit(a, 1, SECOND);
        for b in Algorithm::ALL {
            if a == b {
                continue;
            }
            let other = limit(b, 1, SECOND);
            let s = decide(&other, None, t, 1).new_state.unwrap();
            assert!(
                decide(&l, Some(s.as_bytes()), t, 1).decision.allowed,
                "{a} on {b}"
            );
        }
        assert!(decide(&l, Some(&[]), t, 1).decision.allowed);
        assert!(decide(&l, Some(&[0xff; 40]), t, 1).decision.allowed);
    }
}

#[test]
fn state_sizes() {
    let t = MIDNIGHT;
    let size = |l: &Limit, cost| decide(l, None, t, cost).new_state.unwrap().len();
    assert_eq!(size(&limit(Algorithm::TokenBucket, 10, SECOND), 1), 26);
    assert_eq!(size(&limit(Algorithm::LeakyBucket, 10, SECOND), 1), 26);
    assert_eq!(size(&limit(Algorithm::Gcra, 10, SECOND), 1), 18);
    assert_eq!(size(&limit(Algorithm::FixedWindow, 10, SECOND), 1), 18);
    assert_eq!(size(&limit(Algorithm::SlidingLog, 10, SECOND), 3), 15 + 12);
    assert_eq!(size(&limit(Algorithm::SlidingWindow, 10, SECOND), 1), 21);
    let sw60 = limit(Algorithm::SlidingWindow, 500, HOUR).with_precision(60);
    assert_eq!(size(&sw60, 1), 13 + 61 * 4);
}

#[test]
fn several_limits_together() {
    let per_second = limit(Algorithm::Gcra, 1, SECOND);
    let per_minute = limit(Algorithm::FixedWindow, 100, MINUTE);
    let t = MIDNIGHT;
    let first = decide_all(
        &[
            Check::new(&per_second, None, 1),
            Check::new(&per_minute, None, 1),
        ],
        t,
    );
    assert!(first.allowed);
    assert!(first.new_states.iter().all(Option::is_some));
    let s0 = first.new_states[0].clone().unwrap();
    let s1 = first.new_states[1].clone().unwrap();
    let second = decide_all(
        &[
            Check::new(&per_second, Some(s0.as_bytes()), 1),
            Check::new(&per_minute, Some(s1.as_bytes()), 1),
        ],
        t,
    );
    assert!(!second.allowed);
    assert!(second.new_states.iter().all(Option::is_none));
    // The limit that would have admitted reports what remains without this request.
    assert!(second.decisions[1].allowed);
    assert_eq!(second.decisions[1].remaining, 99);
    assert_eq!(most_restrictive(&second.decisions), Some(0));
    assert_eq!(second.decisions[0].retry_after, SECOND);
    assert_eq!(most_restrictive(&[]), None);
    assert_eq!(most_restrictive(&first.decisions), Some(0));
}

#[test]
fn refund_gives_back_exactly() {
    let t = MIDNIGHT + 123;
    for a in Algorithm::ALL {
        let l = limit(a, 3, MINUTE);
        let mut key = Key::default();
        key.hit(&l, t, 1);
        let before = key.state.clone().unwrap();
        key.hit(&l, t, 2);
        let after = key.state.clone().unwrap();
        let back = refund(&l, &after, t, 2).unwrap();
        // The refunded state decides like the state before the request.
        for dt in [0, 1, SECOND, 20 * SECOND, MINUTE, 2 * MINUTE] {
            for cost in [1, 2, 3] {
                let x = decide(&l, Some(&before), t + dt, cost).decision;
                let y = decide(&l, Some(back.as_bytes()), t + dt, cost).decision;
                assert_eq!(x, y, "{a} dt {dt} cost {cost}");
            }
        }
        assert!(refund(&l, &after, t, 0).is_none());
        // Long after, there is nothing left to give back for the meters.
        if common::naive::is_meter(a) {
            assert!(refund_at(&l, &after, t, t + HOUR, 2).is_none(), "{a}");
        }
    }
}

#[test]
fn several_limits_weigh_the_request_each_their_own_way() {
    let ten = limit(Algorithm::FixedWindow, 10, MINUTE);
    let five = limit(Algorithm::TokenBucket, 5, MINUTE);
    let t = MIDNIGHT;
    // Weighs 3 under the first limit, 2 under the second.
    let first = decide_all(&[Check::new(&ten, None, 3), Check::new(&five, None, 2)], t);
    assert!(first.allowed);
    assert_eq!(
        (first.decisions[0].remaining, first.decisions[1].remaining),
        (7, 3)
    );
    let s0 = first.new_states[0].clone().unwrap();
    let s1 = first.new_states[1].clone().unwrap();
    // 4 more under the second limit do not fit its 3: nothing is consumed
    // from the first either.
    let denied = decide_all(
        &[
            Check::new(&ten, Some(s0.as_bytes()), 3),
            Check::new(&five, Some(s1.as_bytes()), 4),
        ],
        t,
    );
    assert!(!denied.allowed);
    assert!(denied.new_states.iter().all(Option::is_none));
    assert!(denied.decisions[0].allowed);
    assert_eq!(denied.decisions[0].remaining, 7);
    assert_eq!(denied.decisions[1].retry_after, MINUTE / 5);
}

/// Debt, for every algorithm that carries it: 10 per minute, admitted for
/// an estimate of 2, the response cost 25, so 23 are charged: 15 beyond
/// the quota. The key denies with the exact wait and recovers at that
/// instant; a query reports the same.
#[test]
fn a_charge_takes_the_key_into_debt_and_it_recovers_exactly() {
    let t0 = MIDNIGHT + 12 * SECOND;
    for a in Algorithm::ALL.into_iter().filter(|a| a.carries_debt()) {
        let l = limit(a, 10, MINUTE);
        let mut key = Key::default();
        assert!(key.hit(&l, t0, 2).allowed, "{a}");
        let d = key.charge(&l, t0, 23);
        assert!(!d.allowed, "{a}");
        assert_eq!(d.remaining, 0, "{a}");
        assert_eq!(d.denial, Some(Denial::OverLimit), "{a}");
        let (retry, reset) = match a {
            // 25 units drain at 10 a minute: one unit fits after 16 have
            // drained (96 s), the bucket is empty after 150 s.
            Algorithm::TokenBucket | Algorithm::LeakyBucket | Algorithm::Gcra => {
                (96 * SECOND, 150 * SECOND)
            }
            // The debt ends with the window, 48 s on.
            Algorithm::FixedWindow => (48 * SECOND, 48 * SECOND),
            // 25 in this minute weigh 25 × (1 − e/60 s) next minute: 9 fit
            // when e = 38.4 s, so 48 + 38.4 s; gone at 48 + 60 s.
            Algorithm::SlidingWindow => (86_400 * MILLISECOND, 108 * SECOND),
            Algorithm::SlidingLog => unreachable!(),
        };
        assert_eq!((d.retry_after, d.reset), (retry, reset), "{a}");
        // A request is denied with the same wait, less the time passed.
        let later = key.hit(&l, t0 + SECOND, 1);
        assert!(!later.allowed, "{a}");
        assert_eq!(later.retry_after, retry - SECOND, "{a}");
        assert_eq!(later.remaining, 0, "{a}");
        // Weighted requests wait for their own weight.
        let heavy = key.peek(&l, t0, 4);
        assert!(!heavy.allowed && heavy.retry_after >= retry, "{a}");
        assert!(!key.peek(&l, t0 + retry - 1, 1).allowed, "{a}");
        assert!(key.hit(&l, t0 + retry, 1).allowed, "{a}");
    }
}

/// A charge is never refused: a key already in debt goes deeper, a fresh
/// key too; a charge of 0 changes nothing; the sliding log cannot carry
/// debt.
#[test]
fn charges_are_unconditional() {
    let t0 = MIDNIGHT;
    for a in Algorithm::ALL {
        let l = limit(a, 3, MINUTE);
        let fresh = sluice_core::charge(&l, None, t0, 0);
        if !a.carries_debt() {
            assert_eq!(fresh, None);
            assert_eq!(sluice_core::charge(&l, None, t0, 5), None);
            continue;
        }
        let fresh = fresh.unwrap();
        assert_eq!(fresh.new_state, None, "{a}");
        assert!(
            fresh.decision.allowed && fresh.decision.remaining == 3,
            "{a}"
        );
        let mut key = Key::default();
        let first = key.charge(&l, t0, 5);
        let deeper = key.charge(&l, t0, 1_000);
        assert!(!first.allowed && !deeper.allowed, "{a}");
        assert!(deeper.retry_after >= first.retry_after, "{a}");
        assert!(deeper.reset >= first.reset, "{a}");
    }
}

/// A refund after a charge gives back exactly what was charged right away,
/// and out of debt only what can still be in the bucket later.
#[test]
fn a_refund_after_a_charge_gives_back() {
    let t0 = MIDNIGHT + 12 * SECOND;
    for a in Algorithm::ALL.into_iter().filter(|a| a.carries_debt()) {
        let l = limit(a, 10, MINUTE);
        let mut key = Key::default();
        key.hit(&l, t0, 4);
        let before = key.clone();
        key.charge(&l, t0, 8);
        let back = refund_at(&l, key.state.as_deref().unwrap(), t0, t0, 8).unwrap();
        let restored = Key {
            state: Some(back.into_vec()),
        };
        for at in [t0, t0 + SECOND, t0 + 30 * SECOND] {
            assert_eq!(restored.peek(&l, at, 1), before.peek(&l, at, 1), "{a}");
        }
        // In debt, a refund of units consumed 12 s ago (2 drained, for the
        // meters) gives back the rest.
        let mut key = Key::default();
        key.charge(&l, t0, 30);
        let later = t0 + 12 * SECOND;
        let deep = key.peek(&l, later, 1);
        let back = refund_at(&l, key.state.as_deref().unwrap(), t0, later, 10).unwrap();
        let refunded = Key {
            state: Some(back.into_vec()),
        }
        .peek(&l, later, 1);
        assert!(!deep.allowed && !refunded.allowed, "{a}");
        let gained = deep.retry_after - refunded.retry_after;
        match a {
            // 8 of the 10 units are given back: 48 s sooner.
            Algorithm::TokenBucket | Algorithm::LeakyBucket | Algorithm::Gcra => {
                assert_eq!(gained, 48 * SECOND, "{a}")
            }
            // The debt ends with the window whatever it is.
            Algorithm::FixedWindow => assert_eq!(gained, 0, "{a}"),
            _ => assert!(gained > 0, "{a}"),
        }
    }
}

/// A meter's state in debt survives a limit change and a clock step as a
/// level: never read as less debt than it holds.
#[test]
fn a_meter_in_debt_keeps_its_level() {
    let t0 = MIDNIGHT;
    for a in [
        Algorithm::TokenBucket,
        Algorithm::LeakyBucket,
        Algorithm::Gcra,
    ] {
        let l = limit(a, 10, SECOND);
        let mut key = Key::default();
        key.charge(&l, t0, 40);
        assert_eq!(key.state.as_ref().unwrap().len(), 27, "{a}");
        // 30 beyond, draining 10 a second: back under the quota in 3 s.
        assert_eq!(key.peek(&l, t0, 1).retry_after, 3_100 * MILLISECOND, "{a}");
        // The clock steps back a minute: the debt is kept, not forgotten.
        let back = key.peek(&l, t0 - MINUTE, 1);
        assert_eq!(back.retry_after, 3_100 * MILLISECOND, "{a}");
        // A larger burst reads the same level: less beyond it.
        let wider = l.clone().with_burst(20);
        assert_eq!(
            key.peek(&wider, t0, 1).retry_after,
            2_100 * MILLISECOND,
            "{a}"
        );
        // Once drained, decisions write the meter's own layout again.
        key.hit(&l, t0 + 4 * SECOND, 1);
        assert_ne!(key.state.as_ref().unwrap().len(), 27, "{a}");
    }
}

#[test]
fn a_reserve_keeps_its_share_for_others_under_every_algorithm() {
    for algorithm in Algorithm::ALL {
        let limit = Limit::new(algorithm, 10, 60 * SECOND).unwrap();
        let mut state: Option<Encoded> = None;
        let now = 1_000 * SECOND;
        let mut take = |reserve: u64| {
            let out = decide_reserving(
                &limit,
                state.as_ref().map(|s| s.as_bytes()),
                now,
                1,
                reserve,
            );
            if let Some(s) = out.new_state.clone() {
                state = Some(s);
            }
            out.decision
        };
        // A class with 40% of the limit: 4 pass.
        let bulk: Vec<bool> = (0..6).map(|_| take(6).allowed).collect();
        assert_eq!(bulk, [true, true, true, true, false, false], "{algorithm}");
        let denied = take(6);
        assert!(denied.retry_after > 0, "{algorithm}: {denied:?}");
        // A class with 80%: 4 more; the full class: the last 2.
        assert_eq!((0..5).filter(|_| take(2).allowed).count(), 4, "{algorithm}");
        assert_eq!((0..3).filter(|_| take(0).allowed).count(), 2, "{algorithm}");
    }
}
