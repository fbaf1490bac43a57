//! Property tests: every algorithm against a naive reference model on random
//! traces, and the contracts the stores rely on.
#![cfg(test)]

mod common;

use common::naive::{self, Verdict};
use common::{soft, Key};
use proptest::prelude::*;
use sluice_core::{
    charge, decide, decide_all, decide_all_leased, decide_batch, refund, refund_at, Algorithm,
    Check, Decision, Denial, Lease, Limit, Nanos, MILLISECOND, SECOND,
};

const T0: Nanos = 1_714_521_600 * SECOND;
const HOUR: Nanos = 3600 * SECOND;

/// Windows for which every algorithm is exact (a sliding log tick is 1 ns).
fn short_window() -> impl Strategy<Value = Nanos> {
    prop_oneof![
        Just(MILLISECOND),
        Just(7 * MILLISECOND),
        Just(SECOND),
        Just(1_500 * MILLISECOND + 7),
        Just(2 * SECOND),
    ]
}

fn any_window() -> impl Strategy<Value = Nanos> {
    prop_oneof![
        short_window(),
        Just(60 * SECOND),
        Just(HOUR + 1),
        Just(24 * HOUR),
        Just(366 * 24 * HOUR),
    ]
}

/// A valid limit of `algorithm` with small numbers, so that traces reach
/// the limit often.
fn limit_of(algorithm: Algorithm, window: BoxedStrategy<Nanos>) -> BoxedStrategy<Limit> {
    (
        window,
        1u64..=12,
        1u64..=12,
        1u32..=6,
        prop_oneof![3 => Just(0u32), 1 => Just(50u32), 1 => Just(100u32)],
        0u64..=4,
    )
        .prop_map(
            move |(window, requests, burst, precision, soft_percent, delay)| {
                let delays = matches!(algorithm, Algorithm::Gcra | Algorithm::LeakyBucket);
                let l = Limit {
                    algorithm,
                    requests,
                    window,
                    burst,
                    precision: if algorithm == Algorithm::SlidingWindow {
                        precision
                    } else {
                        1
                    },
                    soft_percent,
                    // Delay up to a few emission intervals, sometimes none.
                    max_delay: (delays && delay > 0)
                        .then(|| (window / requests * (delay - 1) + delay * 13).min(window)),
                };
                l.validate().unwrap();
                l
            },
        )
        .boxed()
}

fn any_limit(window: fn() -> BoxedStrategy<Nanos>) -> BoxedStrategy<Limit> {
    prop::sample::select(Algorithm::ALL.to_vec())
        .prop_flat_map(move |a| limit_of(a, window()))
        .boxed()
}

/// A limit of one of the five algorithms with an exact naive model.
fn exact_limit() -> BoxedStrategy<Limit> {
    prop::sample::select(vec![
        Algorithm::TokenBucket,
        Algorithm::LeakyBucket,
        Algorithm::Gcra,
        Algorithm::FixedWindow,
        Algorithm::SlidingLog,
    ])
    .prop_flat_map(|a| limit_of(a, short()))
    .boxed()
}

fn short() -> BoxedStrategy<Nanos> {
    short_window().boxed()
}

fn anyw() -> BoxedStrategy<Nanos> {
    any_window().boxed()
}

/// A trace: gaps as fractions of the window (in 1/1000), and costs.
fn trace(len: usize) -> impl Strategy<Value = Vec<(u64, u64)>> {
    prop::collection::vec(
        (
            prop_oneof![3 => Just(0u64), 4 => 0u64..200, 2 => 0u64..1500, 1 => 900u64..1100],
            prop_oneof![6 => Just(1u64), 2 => 1u64..=4, 1 => Just(0u64), 1 => 1u64..=30],
        ),
        1..len,
    )
}

/// A trace with charges: gaps as in [`trace`], costs, and whether the
/// event is a charge (debt) rather than a request.
fn charged_trace(len: usize) -> impl Strategy<Value = Vec<(u64, u64, bool)>> {
    prop::collection::vec(
        (
            prop_oneof![3 => Just(0u64), 4 => 0u64..200, 2 => 0u64..1500, 1 => 900u64..1100],
            prop_oneof![4 => Just(1u64), 2 => 1u64..=4, 1 => Just(0u64), 2 => 1u64..=40],
            prop_oneof![2 => Just(false), 1 => Just(true)],
        ),
        1..len,
    )
}

/// [`charged_trace`]'s absolute times for a window.
fn charged_times(window: Nanos, trace: &[(u64, u64, bool)]) -> Vec<(Nanos, u64, bool)> {
    let plain: Vec<(u64, u64)> = trace.iter().map(|&(gap, cost, _)| (gap, cost)).collect();
    times(window, &plain)
        .into_iter()
        .zip(trace)
        .map(|((t, cost), &(_, _, charged))| (t, cost, charged))
        .collect()
}

/// A limit of an algorithm that carries debt.
fn debt_limit(window: fn() -> BoxedStrategy<Nanos>) -> BoxedStrategy<Limit> {
    prop::sample::select(
        Algorithm::ALL
            .into_iter()
            .filter(|a| a.carries_debt())
            .collect::<Vec<_>>(),
    )
    .prop_flat_map(move |a| limit_of(a, window()))
    .boxed()
}

/// The trace's absolute times for a window.
fn times(window: Nanos, trace: &[(u64, u64)]) -> Vec<(Nanos, u64)> {
    let mut t = T0 + window / 3;
    trace
        .iter()
        .map(|&(gap, cost)| {
            t += (u128::from(window) * u128::from(gap) / 1000) as u64 + gap % 7;
            (t, cost)
        })
        .collect()
}

fn verdict(d: &Decision) -> Verdict {
    Verdict {
        allowed: d.allowed,
        remaining: d.remaining,
        reset: d.reset,
        retry_after: d.retry_after,
        delay: d.delay,
    }
}

enum Model {
    Meter(naive::Meter),
    Fixed(naive::Fixed),
    Log(naive::Log),
}

impl Model {
    fn new(l: &Limit) -> Option<Model> {
        match l.algorithm {
            Algorithm::TokenBucket | Algorithm::LeakyBucket | Algorithm::Gcra => {
                Some(Model::Meter(naive::Meter::new(l)))
            }
            Algorithm::FixedWindow => Some(Model::Fixed(naive::Fixed::new(l))),
            Algorithm::SlidingLog => Some(Model::Log(naive::Log::new(l))),
            // An estimate: checked against its error bound instead.
            Algorithm::SlidingWindow => None,
        }
    }

    fn decide(&mut self, t: Nanos, cost: u64) -> Verdict {
        match self {
            Model::Meter(m) => m.decide(t, cost),
            Model::Fixed(m) => m.decide(t, cost),
            Model::Log(m) => m.decide(t, cost),
        }
    }

    /// Debt: the query after a charge (the sliding log carries none).
    fn charge(&mut self, t: Nanos, cost: u64) -> Option<Verdict> {
        match self {
            Model::Meter(m) => {
                m.charge(t, cost);
                Some(m.query(t))
            }
            Model::Fixed(m) => {
                m.charge(t, cost);
                Some(m.query(t))
            }
            Model::Log(_) => None,
        }
    }
}

/// What `n` calls of [`decide_all`] in a row decide: per request whether
/// it was admitted, its decisions and its delay, and the states after all.
#[allow(clippy::type_complexity)]
fn one_by_one(
    limits: &[Limit],
    keys: &[Key],
    costs: &[u64],
    reserves: &[u64],
    now: Nanos,
    n: u32,
) -> (Vec<bool>, Vec<Vec<Decision>>, Vec<Nanos>, Vec<Key>) {
    let mut keys = keys.to_vec();
    let (mut allowed, mut decisions, mut delays) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..n {
        let checks: Vec<Check<'_>> = limits
            .iter()
            .zip(&keys)
            .zip(costs)
            .zip(reserves)
            .map(|(((limit, k), &cost), &reserve)| Check {
                reserve,
                ..Check::new(limit, k.state.as_deref(), cost)
            })
            .collect();
        let out = decide_all(&checks, now);
        allowed.push(out.allowed);
        delays.push(out.delay());
        decisions.push(out.decisions.clone());
        for (k, s) in keys.iter_mut().zip(out.new_states) {
            if let Some(s) = s {
                k.state = Some(s.into_vec());
            }
        }
    }
    (allowed, decisions, delays, keys)
}

fn cap(l: &Limit) -> u64 {
    soft(l.burst, l.soft_percent)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    /// Token bucket, leaky bucket, GCRA, fixed window and sliding log agree
    /// exactly with the naive models (allowed, remaining, reset, retry_after, delay).
    #[test]
    fn agrees_with_naive_model(l in exact_limit(), trace in trace(60)) {
        let mut model = Model::new(&l).unwrap();
        let mut key = Key::default();
        for (t, cost) in times(l.window, &trace) {
            let d = key.hit(&l, t, cost);
            if cost == 0 || cost > cap(&l) {
                continue;
            }
            let v = model.decide(t, cost);
            prop_assert_eq!(verdict(&d), v, "at {} cost {}", t - T0, cost);
        }
    }

    /// With charges (debt) in the trace, token bucket, leaky bucket, GCRA
    /// and fixed window agree exactly with the naive models extended with
    /// debt: a charge is consumed whatever the level, and the decisions
    /// after it (and the charge's own, a query's) are the model's.
    #[test]
    fn charges_agree_with_the_naive_model(l in exact_limit(), trace in charged_trace(60)) {
        let mut model = Model::new(&l).unwrap();
        let mut key = Key::default();
        for (t, cost, charged) in charged_times(l.window, &trace) {
            if charged {
                let Some(want) = model.charge(t, cost) else {
                    prop_assert!(charge(&l, None, t, cost).is_none());
                    continue;
                };
                let d = key.charge(&l, t, cost);
                prop_assert_eq!(verdict(&d), want, "charge at {} cost {}", t - T0, cost);
                continue;
            }
            let d = key.hit(&l, t, cost);
            if cost == 0 || cost > cap(&l) {
                continue;
            }
            let v = model.decide(t, cost);
            prop_assert_eq!(verdict(&d), v, "at {} cost {}", t - T0, cost);
        }
    }

    /// The window algorithms count a charge as an admission under a quota
    /// without bound: their states do not depend on the quota.
    #[test]
    fn a_window_charge_is_an_admission_without_quota(
        a in prop::sample::select(vec![Algorithm::FixedWindow, Algorithm::SlidingWindow]),
        window in any_window(),
        precision in 1u32..=6,
        trace in charged_trace(40),
    ) {
        let l = Limit::new(a, 3, window).unwrap().with_precision(if a == Algorithm::SlidingWindow { precision } else { 1 });
        let unbounded = l.clone().with_burst(sluice_core::MAX_REQUESTS);
        let mut key = Key::default();
        for (t, cost, charged) in charged_times(window, &trace) {
            if charged && cost > 0 {
                let got = charge(&l, key.state.as_deref(), t, cost).unwrap().new_state;
                let want = decide(&unbounded, key.state.as_deref(), t, cost).new_state;
                prop_assert_eq!(&got, &want);
                key.state = got.map(|s| s.into_vec());
            } else {
                key.hit(&l, t, cost);
            }
        }
    }

    /// In debt as out of it, `retry_after` and `reset` are exact: waiting
    /// exactly `retry_after` passes, a nanosecond less does not; after
    /// `reset` the whole quota is back. Every algorithm that carries debt,
    /// any window, delay mode.
    #[test]
    fn debt_recovers_exactly(l in debt_limit(anyw), trace in charged_trace(40)) {
        let mut key = Key::default();
        for (t, cost, charged) in charged_times(l.window, &trace) {
            let before = key.clone();
            let (d, probe) = if charged {
                let d = key.charge(&l, t, cost);
                (d, 1)
            } else {
                (key.hit(&l, t, cost), cost.max(1))
            };
            let after = if charged { &key } else { &before };
            if matches!(d.denial, Some(Denial::OverLimit | Denial::DelayTooLong)) {
                let r = d.retry_after;
                prop_assert!(r > 0);
                if charged {
                    // Not even one unit fits.
                    prop_assert_eq!(d.remaining, 0);
                }
                let then = after.peek(&l, t + r, probe);
                prop_assert!(then.allowed && then.delay == 0, "{} {:?} then {:?}", l.algorithm, d, then);
                let early = after.peek(&l, t + r - 1, probe);
                prop_assert!(!early.allowed || early.delay > 0);
            }
            let full = key.peek(&l, t + d.reset, 0);
            prop_assert_eq!(full.remaining, l.burst);
            prop_assert_eq!(full.reset, 0);
            if d.reset > 0 {
                prop_assert!(key.peek(&l, t + d.reset - 1, 0).remaining < l.burst);
            }
        }
    }

    /// A refund of charged units never leaves a key more permissive than if
    /// they had never been charged, with requests and charges before and
    /// after; right away it restores the key exactly.
    #[test]
    fn a_refund_after_a_charge_is_never_too_generous(
        l in debt_limit(short),
        before in charged_trace(20),
        after in charged_trace(10),
        cost in 1u64..=12,
        probes in prop::collection::vec((0u64..2000, 1u64..4), 1..8),
    ) {
        let cost = cost.min(cap(&l));
        let mut with = Key::default();
        let mut t = T0;
        for (ti, c, charged) in charged_times(l.window, &before) {
            if charged { with.charge(&l, ti, c); } else { with.hit(&l, ti, c); }
            t = ti;
        }
        let mut without = with.clone();
        with.charge(&l, t, cost);
        let back = refund_at(&l, with.state.as_deref().unwrap(), t, t, cost).map(|s| s.into_vec());
        let restored = Key { state: back.or_else(|| with.state.clone()) };
        for &(gap, c) in &probes {
            let at = t + (u128::from(l.window) * u128::from(gap) / 1000) as u64;
            prop_assert_eq!(restored.peek(&l, at, c), without.peek(&l, at, c));
        }
        let mut now = t;
        for (gap, c, charged) in &after {
            now += (u128::from(l.window) * u128::from(*gap) / 1000) as u64;
            if *charged {
                with.charge(&l, now, *c);
                without.charge(&l, now, *c);
            } else if with.hit(&l, now, *c).allowed && *c > 0 {
                prop_assert!(without.hit(&l, now, *c).allowed);
            }
        }
        let refunded = refund_at(&l, with.state.as_deref().unwrap(), t, now, cost)
            .map(|s| s.into_vec())
            .or_else(|| with.state.clone());
        let refunded = Key { state: refunded };
        for &(gap, c) in &probes {
            let at = now + (u128::from(l.window) * u128::from(gap) / 1000) as u64;
            let (r, w) = (refunded.peek(&l, at, c), without.peek(&l, at, c));
            prop_assert!(!r.allowed || w.allowed, "{:?} vs {:?}", r, w);
            prop_assert!(!r.allowed || r.delay >= w.delay, "{:?} vs {:?}", r, w);
            let (r, w) = (refunded.peek(&l, at, 0), without.peek(&l, at, 0));
            prop_assert!(r.remaining <= w.remaining, "{:?} vs {:?}", r, w);
        }
    }

    /// The meters agree with the naive model at scale too, where their
    /// capacity in scaled units passes 2^64 (the general 128-bit path).
    #[test]
    fn meters_agree_at_scale(
        a in prop::sample::select(vec![Algorithm::TokenBucket, Algorithm::LeakyBucket, Algorithm::Gcra]),
        requests in prop_oneof![1u64..1000, 1_000_000u64..=sluice_core::MAX_REQUESTS],
        burst in prop_oneof![1u64..1000, 1_000_000u64..=sluice_core::MAX_REQUESTS],
        window in any_window(),
        events in prop::collection::vec((0u64..3000, 0u64..=4), 1..30),
    ) {
        let l = Limit::new(a, requests, window).unwrap().with_burst(burst);
        if l.validate().is_err() {
            // Buckets draining over more than a century are refused.
            return Ok(());
        }
        let mut model = naive::Meter::new(&l);
        let mut key = Key::default();
        let mut t = T0;
        for (gap, share) in events {
            // Gaps in thousandths of the time one request takes to drain.
            t += (u128::from(window) * u128::from(gap) / u128::from(requests) / 1000) as u64;
            let cost = (burst * share / 4).max(1);
            let d = key.hit(&l, t, cost);
            prop_assert_eq!(verdict(&d), model.decide(t, cost));
        }
    }

    /// No interval holds more than the limit allows: for the meters,
    /// `burst + requests * elapsed / window` (plus what delay mode queues);
    /// for fixed windows `burst` per aligned window; for the sliding log
    /// `burst` in any window-long interval (also for long windows, where
    /// timestamps are rounded to ticks).
    #[test]
    fn never_admits_more_than_the_limit(l in any_limit(anyw), trace in trace(60)) {
        let mut key = Key::default();
        let mut admitted: Vec<(Nanos, u64, Nanos)> = Vec::new();
        for (t, cost) in times(l.window, &trace) {
            let d = key.hit(&l, t, cost);
            if d.allowed && cost > 0 {
                admitted.push((t, cost, d.delay));
            }
        }
        let c = u128::from(cap(&l));
        let w = u128::from(l.window);
        let rate = u128::from(soft(l.requests, l.soft_percent));
        for i in 0..admitted.len() {
            let mut sum = 0u128;
            for j in i..admitted.len() {
                let (ti, _, _) = admitted[i];
                let (tj, cj, _) = admitted[j];
                sum += u128::from(cj);
                let dt = u128::from(tj - ti);
                match l.algorithm {
                    Algorithm::TokenBucket | Algorithm::LeakyBucket | Algorithm::Gcra => {
                        let queued = u128::from(l.max_delay.unwrap_or(0)) * rate;
                        prop_assert!(sum * w <= c * w + rate * dt + queued);
                    }
                    Algorithm::FixedWindow => {
                        if ti / l.window == tj / l.window {
                            prop_assert!(sum <= c);
                        }
                    }
                    Algorithm::SlidingLog => {
                        if dt < w {
                            prop_assert!(sum <= c);
                        }
                    }
                    Algorithm::SlidingWindow => {
                        // At most twice the burst in a window.
                        if dt < w {
                            prop_assert!(sum <= 2 * c);
                        }
                    }
                }
            }
        }
    }

    /// The sliding window estimate differs from the exact trailing count by
    /// less than the count of the sub-window straddling the trailing edge.
    #[test]
    fn sliding_window_within_bound(l in limit_of(Algorithm::SlidingWindow, short()), trace in trace(80)) {
        let mut key = Key::default();
        let mut admitted: Vec<(Nanos, u64)> = Vec::new();
        let p = u128::from(l.precision);
        let w = u128::from(l.window);
        let sub = |t: Nanos| u128::from(t) * p / w;
        for (t, cost) in times(l.window, &trace) {
            let d = key.hit(&l, t, cost);
            if cost == 0 || cost > cap(&l) {
                continue;
            }
            let exact: u64 = admitted.iter().filter(|a| a.0 + l.window > t).map(|a| a.1).sum();
            let straddling: u64 = admitted
                .iter()
                .filter(|a| sub(a.0) + p == sub(t))
                .map(|a| a.1)
                .sum();
            if d.allowed {
                prop_assert!(exact + cost <= cap(&l) + straddling);
                admitted.push((t, cost));
            } else {
                prop_assert!(exact + cost + straddling > cap(&l));
            }
        }
    }

    /// A client that waits exactly `retry_after` is admitted if nobody else
    /// spent the quota meanwhile, and not a nanosecond earlier; `reset` is
    /// when the full quota is back; a delayed admission conforms after its delay.
    #[test]
    fn retry_after_and_reset_are_exact(l in any_limit(anyw), trace in trace(40)) {
        let mut key = Key::default();
        for (t, cost) in times(l.window, &trace) {
            let before = key.clone();
            let d = key.hit(&l, t, cost);
            if matches!(d.denial, Some(Denial::OverLimit | Denial::DelayTooLong)) {
                let probe = cost.max(1);
                let r = d.retry_after;
                prop_assert!(r > 0);
                let then = before.peek(&l, t + r, probe);
                prop_assert!(then.allowed && then.delay == 0, "{} {:?} then {:?}", l.algorithm, d, then);
                prop_assert!(!before.peek(&l, t + r - 1, probe).allowed || before.peek(&l, t + r - 1, probe).delay > 0);
            }
            if d.allowed && d.delay > 0 {
                let then = before.peek(&l, t + d.delay, cost.max(1));
                prop_assert!(then.allowed && then.delay == 0);
                prop_assert!(before.peek(&l, t + d.delay - 1, cost.max(1)).delay > 0);
            }
            if d.denial == Some(Denial::CostExceedsCapacity) {
                prop_assert_eq!(d.retry_after, 0);
                prop_assert!(cost > cap(&l));
            }
            // After `reset` the whole quota is back, not before.
            let full = key.peek(&l, t + d.reset, 0);
            prop_assert_eq!(full.remaining, l.burst);
            prop_assert_eq!(full.reset, 0);
            if d.reset > 0 {
                prop_assert!(key.peek(&l, t + d.reset - 1, 0).remaining < l.burst);
            }
        }
    }

    /// Deciding several limits together: when one denies, nothing is
    /// consumed; when all allow, each consumes as it would alone.
    #[test]
    fn decide_all_consumes_nothing_on_deny(
        limits in prop::collection::vec(any_limit(short), 1..4),
        trace in trace(30),
        cost in 1u64..4,
    ) {
        let window = limits[0].window;
        let mut keys = vec![Key::default(); limits.len()];
        for (t, c) in times(window, &trace) {
            let checks: Vec<Check<'_>> = limits
                .iter()
                .zip(&keys)
                .map(|(limit, k)| Check::new(limit, k.state.as_deref(), cost))
                .collect();
            let all = decide_all(&checks, t);
            let alone: Vec<_> = checks.iter().map(|ch| decide(ch.limit, ch.state, t, cost)).collect();
            prop_assert_eq!(all.allowed, alone.iter().all(|o| o.decision.allowed));
            if all.allowed {
                for (i, o) in alone.iter().enumerate() {
                    prop_assert_eq!(&all.decisions[i], &o.decision);
                    prop_assert_eq!(&all.new_states[i], &o.new_state);
                }
            } else {
                prop_assert!(all.new_states.iter().all(Option::is_none));
                for (i, o) in alone.iter().enumerate() {
                    prop_assert_eq!(all.decisions[i].allowed, o.decision.allowed);
                }
            }
            for (k, s) in keys.iter_mut().zip(all.new_states) {
                if let Some(s) = s {
                    k.state = Some(s.into_vec());
                }
            }
            // Let the trace's own costs move the keys too.
            for (k, l) in keys.iter_mut().zip(&limits) {
                k.hit(l, t, c);
            }
        }
    }

    /// `n` identical requests decided as one batch are `n` calls of
    /// `decide_all` in a row: the admitted ones are a prefix (a refusal at
    /// one instant is final for identical requests), and the count, the
    /// reported decisions, each admitted request's delay and the states
    /// after are the same. Every algorithm, several limits, per-limit
    /// weights (0 included), reserves (priority classes), delay mode, and
    /// clock steps back.
    #[test]
    fn a_batch_is_its_requests_one_by_one(
        limits in prop::collection::vec(any_limit(anyw), 1..4),
        history in trace(30),
        costs in prop::collection::vec(
            prop_oneof![6 => Just(1u64), 3 => 1u64..=4, 1 => Just(0u64), 1 => 1u64..=30],
            3,
        ),
        reserves in prop::collection::vec(
            prop_oneof![4 => Just(0u64), 2 => 1u64..=5, 1 => 1u64..=40],
            3,
        ),
        n in prop_oneof![3 => 1u32..=40, 1 => Just(1u32), 1 => 100u32..=300],
        back in prop_oneof![4 => Just(0u64), 1 => 1u64..=2000],
        gap in prop_oneof![2 => Just(0u64), 2 => 0u64..300],
    ) {
        let window = limits[0].window;
        let mut keys = vec![Key::default(); limits.len()];
        let mut now = T0;
        for (t, c) in times(window, &history) {
            for (k, l) in keys.iter_mut().zip(&limits) {
                k.hit(l, t, c);
            }
            now = t;
        }
        // A clock step back (rebased states), or some time on.
        now = now.saturating_sub((u128::from(window) * u128::from(back) / 1000) as u64)
            + (u128::from(window) * u128::from(gap) / 1000) as u64;
        let costs = &costs[..limits.len()];
        let reserves = &reserves[..limits.len()];
        let checks: Vec<Check<'_>> = limits
            .iter()
            .zip(&keys)
            .zip(costs)
            .zip(reserves)
            .map(|(((limit, k), &cost), &reserve)| Check {
                reserve,
                ..Check::new(limit, k.state.as_deref(), cost)
            })
            .collect();
        let batch = decide_batch(&checks, now, n);
        let (allowed, decisions, delays, after) =
            one_by_one(&limits, &keys, costs, reserves, now, n);
        let k = allowed.iter().take_while(|&&a| a).count();
        prop_assert!(allowed[k..].iter().all(|&a| !a), "not a prefix: {:?}", allowed);
        prop_assert_eq!(batch.admitted as usize, k);
        prop_assert_eq!(batch.all_admitted(n), k == n as usize);
        let last = k.min(n as usize - 1);
        prop_assert_eq!(&batch.decisions, &decisions[last]);
        let delays = &delays[..k];
        if delays.iter().all(|&d| d == 0) {
            prop_assert!(batch.delays.is_empty(), "{:?}", batch.delays);
        } else {
            prop_assert_eq!(&batch.delays[..], delays);
        }
        for ((key, new), want) in keys.iter().zip(batch.new_states).zip(&after) {
            let got = new.map(|s| s.into_vec()).or_else(|| key.state.clone());
            prop_assert_eq!(&got, &want.state);
        }
    }

    /// A leased check is `decide_all` on the states after the returns, and
    /// when admitted each limit's grant is maximal (one unit more would not
    /// fit at once) and leaves the state and decision of one decision of
    /// cost `cost + k`; a denied check grants nothing and consumes nothing
    /// (only the returns, and rebased states, are written).
    #[test]
    fn a_lease_is_the_largest_slice_that_fits(
        limits in prop::collection::vec(any_limit(anyw), 1..4),
        history in trace(30),
        costs in prop::collection::vec(
            prop_oneof![6 => Just(1u64), 3 => 1u64..=4, 1 => Just(0u64), 1 => 1u64..=30],
            3,
        ),
        takes in prop::collection::vec(prop_oneof![1 => Just(0u64), 3 => 1u64..=20, 1 => 1u64..=1000], 3),
        returns in prop::collection::vec((prop_oneof![2 => Just(0u64), 1 => 1u64..=10], 0u64..1500), 3),
        back in prop_oneof![4 => Just(0u64), 1 => 1u64..=2000],
        gap in prop_oneof![2 => Just(0u64), 2 => 0u64..300],
    ) {
        let window = limits[0].window;
        let mut keys = vec![Key::default(); limits.len()];
        let mut now = T0;
        for (t, c) in times(window, &history) {
            for (k, l) in keys.iter_mut().zip(&limits) {
                k.hit(l, t, c);
            }
            now = t;
        }
        now = now.saturating_sub((u128::from(window) * u128::from(back) / 1000) as u64)
            + (u128::from(window) * u128::from(gap) / 1000) as u64;
        let leases: Vec<Lease> = limits
            .iter()
            .zip(takes.iter().zip(&returns))
            .map(|(l, (&take, &(returned, age)))| Lease {
                take,
                returned,
                returned_at: now.saturating_sub((u128::from(l.window) * u128::from(age) / 1000) as u64),
            })
            .collect();
        let checks: Vec<Check<'_>> = limits
            .iter()
            .zip(&keys)
            .zip(&costs)
            .map(|((limit, k), &cost)| Check::new(limit, k.state.as_deref(), cost))
            .collect();
        let out = decide_all_leased(&checks, &leases, now);
        // The states after the returns, then decide_all on them.
        let given: Vec<Option<Vec<u8>>> = checks
            .iter()
            .zip(&leases)
            .map(|(c, l)| {
                c.state
                    .and_then(|s| refund_at(c.limit, s, l.returned_at, now, l.returned))
                    .map(|e| e.into_vec())
                    .or_else(|| c.state.map(<[u8]>::to_vec))
            })
            .collect();
        let after: Vec<Check<'_>> = checks
            .iter()
            .zip(&given)
            .map(|(c, g)| Check { state: g.as_deref(), ..*c })
            .collect();
        let plain = decide_all(&after, now);
        prop_assert_eq!(out.allowed, plain.allowed);
        for (i, c) in after.iter().enumerate() {
            let k = out.granted[i];
            let got = out.new_states[i].clone().map(|s| s.into_vec()).or_else(|| c.state.map(<[u8]>::to_vec));
            if !out.allowed {
                prop_assert_eq!(k, 0);
                prop_assert_eq!(&out.decisions[i], &plain.decisions[i]);
                let want = plain.new_states[i].clone().map(|s| s.into_vec()).or_else(|| given[i].clone());
                prop_assert_eq!(&got, &want);
                continue;
            }
            prop_assert!(k <= leases[i].take);
            let once = decide(c.limit, c.state, now, c.cost + k);
            if k > 0 {
                prop_assert!(once.decision.allowed && once.decision.delay == 0);
                prop_assert_eq!(&out.decisions[i], &once.decision);
                let want = once.new_state.map(|s| s.into_vec()).or_else(|| c.state.map(<[u8]>::to_vec));
                prop_assert_eq!(&got, &want);
            } else {
                prop_assert_eq!(&out.decisions[i], &plain.decisions[i]);
            }
            if k < leases[i].take {
                let more = decide(c.limit, c.state, now, c.cost + k + 1).decision;
                prop_assert!(!(more.allowed && more.delay == 0), "{} more would fit", k + 1);
            }
        }
    }

    /// A refund never leaves a key more permissive than if the refunded
    /// request had never been admitted (the other requests being what they
    /// were), and a refund right away restores the key exactly.
    #[test]
    fn refund_is_never_too_generous(
        l in any_limit(short),
        before in trace(20),
        after in trace(10),
        cost in 1u64..4,
        probes in prop::collection::vec((0u64..2000, 1u64..4), 1..8),
    ) {
        let mut with = Key::default();
        let mut t = T0;
        for (ti, c) in times(l.window, &before) {
            with.hit(&l, ti, c);
            t = ti;
        }
        let mut without = with.clone();
        let admitted = with.hit(&l, t, cost);
        if !admitted.allowed {
            // Nothing to refund (not counted as a rejected case).
            return Ok(());
        }
        // Right away: exactly as before.
        let back = refund(&l, with.state.as_deref().unwrap(), t, cost).map(|s| s.into_vec());
        let restored = Key { state: back.or_else(|| with.state.clone()) };
        for &(gap, c) in &probes {
            let at = t + (u128::from(l.window) * u128::from(gap) / 1000) as u64;
            prop_assert_eq!(restored.peek(&l, at, c), without.peek(&l, at, c));
        }
        // After more traffic: never more generous than without the request.
        let mut now = t;
        for (gap, c) in &after {
            now += (u128::from(l.window) * u128::from(*gap) / 1000) as u64;
            let d = with.hit(&l, now, *c);
            if d.allowed && *c > 0 {
                let w = without.hit(&l, now, *c);
                prop_assert!(w.allowed);
            }
        }
        let refunded = refund_at(&l, with.state.as_deref().unwrap(), t, now, cost)
            .map(|s| s.into_vec())
            .or_else(|| with.state.clone());
        let refunded = Key { state: refunded };
        for &(gap, c) in &probes {
            let at = now + (u128::from(l.window) * u128::from(gap) / 1000) as u64;
            let r = refunded.peek(&l, at, c);
            let w = without.peek(&l, at, c);
            prop_assert!(!r.allowed || w.allowed, "{:?} vs {:?}", r, w);
            let (r, w) = (refunded.peek(&l, at, 0), without.peek(&l, at, 0));
            prop_assert!(r.remaining <= w.remaining, "{:?} vs {:?}", r, w);
        }
    }

    /// The wall clock jumps back and forth by up to a year: nothing panics,
    /// and a key is usable again a few windows after the last request.
    #[test]
    fn clock_steps_recover(
        l in any_limit(anyw),
        trace in prop::collection::vec((0u64..3, 0u64..1000, 1u64..4), 1..40),
    ) {
        let mut key = Key::default();
        let mut t = T0 + 400 * 24 * HOUR;
        let mut last = t;
        for (kind, amount, cost) in trace {
            t = match kind {
                0 => t.saturating_sub(amount * (366 * 24 * HOUR / 1000)),
                1 => t + amount * (l.window / 1000),
                _ => t,
            };
            key.hit(&l, t, cost);
            last = t;
        }
        let rate = soft(l.requests, l.soft_percent);
        let windows = cap(&l).div_ceil(rate) + 2;
        let recovered = last + windows * l.window + l.max_delay.unwrap_or(0);
        prop_assert!(key.peek(&l, recovered, 1).allowed);
    }

    /// Arbitrary bytes decode as no state, without a panic.
    #[test]
    fn random_bytes_never_panic(
        l in any_limit(anyw),
        tail in prop::collection::vec(any::<u8>(), 0..80),
        raw in any::<bool>(),
        now in any::<u64>(),
        cost in any::<u64>(),
    ) {
        let tag = l.algorithm.code();
        let bytes = if raw { tail } else { [vec![1, tag], tail].concat() };
        let out = decide(&l, Some(&bytes), now, cost);
        if let Some(s) = out.new_state {
            decide(&l, Some(s.as_bytes()), now, 1);
        }
        decide(&l, Some(&bytes), now, 1);
        refund_at(&l, &bytes, now, now, cost);
        refund(&l, &bytes, now.wrapping_sub(cost), 1);
        if let Some(out) = charge(&l, Some(&bytes), now, cost) {
            let s = out.new_state.map(|s| s.into_vec());
            decide(&l, s.as_deref(), now, cost);
            refund_at(&l, s.as_deref().unwrap_or(&bytes), now, now, cost);
        }
    }

    /// A valid state with bytes changed, cut or extended decodes or is
    /// taken as no state, without a panic, whatever the time and cost.
    /// More cases: `PROPTEST_CASES=100000 cargo test -p sluice-core fuzz_`.
    #[test]
    fn fuzz_mutated_states_never_panic(
        l in any_limit(anyw),
        t in any::<u64>(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0..3u8), 1..4),
        now in any::<u64>(),
        cost in any::<u64>(),
    ) {
        let Some(state) = decide(&l, None, t, 1).new_state else { return Ok(()) };
        let mut bytes = state.into_vec();
        for (at, byte, op) in edits {
            let i = at.index(bytes.len() + 1);
            match op {
                0 if i < bytes.len() => bytes[i] = byte,
                1 if i < bytes.len() => bytes.truncate(i),
                _ => bytes.insert(i, byte),
            }
        }
        decide(&l, Some(&bytes), now, cost);
        decide_batch(&[Check::new(&l, Some(&bytes), 1)], now, 3);
        refund_at(&l, &bytes, t, now, cost);
        charge(&l, Some(&bytes), now, cost);
    }
}
