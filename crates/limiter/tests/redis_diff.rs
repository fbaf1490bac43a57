//! The Lua script against sluice-core on random traces: identical decisions
//! and states for every algorithm the core knows ([`Algorithm::ALL`]), with
//! delay mode on the meters that have it, per-limit weights, and batches of
//! identical requests (`decide_batch`, with each admitted request's wait), and
//! leases with returns (`decide_all_leased`, and the refund of a lease). Times
//! are microseconds on both sides (the script's unit; sluice-core is run with
//! microsecond windows and instants).
#![cfg(test)]

mod support;

use sluice_core::{
    decide_all, decide_all_leased, decide_batch, refund_at, Algorithm, Check, Decision, Denial,
    Lease, Limit,
};
use sluice_limiter::store::redis::{RedisStore, Target, DECIDE_LUA};
use sluice_limiter::store::{RateItem, StoreItem};
use std::collections::HashMap;
use std::time::Duration;

/// The last admitted check of a trace: its (limit, cost) pairs, when, how
/// many requests it carried, and the units leased per limit, for a refund.
type LastAdmit = (Vec<(usize, u64)>, u64, u32, Vec<u64>);

use support::Rng;

// sluice-core clamps windows to at least 1 ms, i.e. 10^6 of its units: run
// it on microsecond windows of at least a second so the clamp never applies.
const WINDOWS_US: [u64; 6] = [
    1_000_000,
    1_000_003,
    2_500_000,
    7_919_000,
    60_000_000,
    3_600_000_000,
];

fn random_limit(rng: &mut Rng, algorithm: Algorithm, large: bool) -> Limit {
    let (requests, burst, window) = if large {
        // Beyond 2^53 in scaled units: exercises the script's wide integers.
        (
            rng.range(1_000_000, 1_000_000_000_000),
            rng.range(1_000_000, 1_000_000_000_000),
            rng.range(86_400_000_000, 366 * 86_400_000_000),
        )
    } else {
        let w = WINDOWS_US[rng.below(WINDOWS_US.len() as u64) as usize];
        (rng.range(1, 40), rng.range(1, 50), w + rng.below(3))
    };
    let burst = if algorithm == Algorithm::SlidingLog {
        burst.min(2_000)
    } else {
        burst
    };
    let precision = if algorithm != Algorithm::SlidingWindow {
        1
    } else if rng.below(4) == 0 {
        rng.range(7, 1000) as u32
    } else {
        rng.range(1, 6) as u32
    };
    let soft_percent = if rng.below(4) == 0 {
        rng.range(1, 60) as u32
    } else {
        0
    };
    // Delay mode on half the meters that have it: none, a few emission
    // intervals, up to a window or two.
    let delayed =
        matches!(algorithm, Algorithm::Gcra | Algorithm::LeakyBucket) && rng.below(2) == 0;
    let max_delay = delayed.then(|| match rng.below(4) {
        0 => 0,
        1 => rng.range(1, 3 * (window / requests).max(1)),
        2 => rng.range(1, window),
        _ => rng.range(window, 2 * window),
    });
    // Delay mode is mostly used with a small burst: a queue forms sooner.
    let burst = match max_delay {
        Some(_) if !large && rng.below(2) == 0 => rng.range(1, 4),
        _ => burst,
    };
    Limit {
        algorithm,
        requests,
        window,
        burst,
        precision,
        soft_percent,
        max_delay,
    }
}

/// sluice-core's decision for `cost` without consuming, as a denied check
/// reports its admitting limits.
fn peek(limit: &Limit, state: Option<&[u8]>, now: u64, cost: u64) -> Decision {
    // A companion limit that can never admit its cost denies the check, so
    // `limit` is decided for `cost` without consuming.
    let never = Limit {
        algorithm: Algorithm::FixedWindow,
        requests: 1,
        window: 1_000_000,
        burst: 1,
        precision: 1,
        soft_percent: 0,
        max_delay: None,
    };
    let checks = [Check::new(limit, state, cost), Check::new(&never, None, 2)];
    decide_all(&checks, now).decisions[0]
}

fn same(lua: &Decision, core: &Decision, ctx: &str) {
    let mut core_us = *core;
    // The script reports microseconds; the store turns them into ns.
    core_us.reset = core.reset * 1_000;
    core_us.retry_after = core.retry_after * 1_000;
    core_us.delay = core.delay * 1_000;
    assert_eq!(*lua, core_us, "{ctx}");
}

/// What the traces compared, so a test can insist that each case was met.
#[derive(Debug, Default)]
struct Coverage {
    /// Decisions per algorithm of [`Algorithm::ALL`], in that order.
    decided: Vec<usize>,
    /// Admissions with a delay.
    delayed: usize,
    /// Denials for a delay beyond `max_delay`.
    too_long: usize,
    /// Checks whose limits weighed the request differently.
    weighed: usize,
    /// Batches of which some requests but not all were admitted.
    partial: usize,
    /// Batches with several admitted requests that waited.
    waited: usize,
    /// Limits granted a lease.
    leased: usize,
    /// Limits granted less than their lease asked, but some.
    leased_short: usize,
    /// Limits given units back.
    returned: usize,
    /// Limits given units back by a denied check.
    returned_denied: usize,
    /// Limits with a reserve that refused.
    reserve_refused: usize,
}

impl Coverage {
    fn add(&mut self, other: Coverage) {
        if self.decided.is_empty() {
            self.decided = vec![0; other.decided.len()];
        }
        for (a, b) in self.decided.iter_mut().zip(other.decided) {
            *a += b;
        }
        self.delayed += other.delayed;
        self.too_long += other.too_long;
        self.weighed += other.weighed;
        self.partial += other.partial;
        self.waited += other.waited;
        self.leased += other.leased;
        self.leased_short += other.leased_short;
        self.returned += other.returned;
        self.returned_denied += other.returned_denied;
        self.reserve_refused += other.reserve_refused;
    }
}

struct Trace<'a> {
    store: &'a RedisStore,
    limits: Vec<Limit>,
    items: Vec<RateItem>,
    states: HashMap<usize, Vec<u8>>,
}

impl Trace<'_> {
    fn rate_items(&self, chosen: &[(usize, u64)]) -> Vec<RateItem> {
        chosen
            .iter()
            .map(|&(i, hits)| RateItem {
                hits,
                ..self.items[i].clone()
            })
            .collect()
    }

    /// Decides `requests` identical requests over `chosen` (limit index,
    /// weight), each limit with its reserve, in both; returns how many were
    /// admitted.
    async fn step(
        &mut self,
        chosen: &[(usize, u64)],
        reserves: &[u64],
        requests: u32,
        now: u64,
        ctx: &str,
        seen: &mut Coverage,
    ) -> u32 {
        let items: Vec<StoreItem> = self
            .rate_items(chosen)
            .into_iter()
            .zip(reserves)
            .map(|(item, &reserve)| RateItem { reserve, ..item }.into())
            .collect();
        let refs: Vec<&StoreItem> = items.iter().collect();
        let lua = self
            .store
            .run_check(&refs, requests, Some(now))
            .await
            .unwrap();
        let checks: Vec<Check<'_>> = chosen
            .iter()
            .zip(reserves)
            .map(|(&(i, cost), &reserve)| Check {
                reserve,
                ..Check::new(
                    &self.limits[i],
                    self.states.get(&i).map(Vec::as_slice),
                    cost,
                )
            })
            .collect();
        let core = decide_batch(&checks, now, requests);
        assert_eq!(lua.admitted, core.admitted, "{ctx}: admitted");
        assert_eq!(lua.allowed, core.all_admitted(requests), "{ctx}: allowed");
        assert_eq!(lua.now_us, now);
        let core_delays: Vec<u64> = core.delays.iter().map(|d| d * 1_000).collect();
        assert_eq!(lua.delays, core_delays, "{ctx}: delays");
        seen.partial += usize::from(core.admitted > 0 && core.admitted < requests);
        seen.waited += usize::from(core.delays.iter().filter(|&&d| d > 0).count() > 1);
        for (((l, c), &(i, _)), &r) in lua
            .decisions
            .iter()
            .zip(&core.decisions)
            .zip(chosen)
            .zip(reserves)
        {
            same(
                l,
                c,
                &format!("{ctx}: limit {i} {:?} reserve {r}", self.limits[i]),
            );
            seen.reserve_refused += usize::from(r > 0 && !c.allowed);
            seen.delayed += usize::from(c.allowed && c.delay > 0);
            seen.too_long += usize::from(c.denial == Some(Denial::DelayTooLong));
        }
        for (s, &(i, _)) in core.new_states.into_iter().zip(chosen) {
            if let Some(s) = s {
                self.states.insert(i, s.as_bytes().to_vec());
            }
        }
        core.admitted
    }

    /// Decides one request over `chosen` with `leases` (one per chosen
    /// limit) in both; returns the units leased per limit, `None` when
    /// denied.
    async fn step_leased(
        &mut self,
        chosen: &[(usize, u64)],
        leases: &[Lease],
        now: u64,
        ctx: &str,
        seen: &mut Coverage,
    ) -> Option<Vec<u64>> {
        let items: Vec<StoreItem> = self
            .rate_items(chosen)
            .into_iter()
            .zip(leases)
            .map(|(item, l)| {
                RateItem {
                    lease: l.take,
                    returned: l.returned,
                    // The store takes nanoseconds.
                    returned_age: (now - l.returned_at) * 1_000,
                    ..item
                }
                .into()
            })
            .collect();
        let refs: Vec<&StoreItem> = items.iter().collect();
        let lua = self.store.run_check(&refs, 1, Some(now)).await.unwrap();
        let checks: Vec<Check<'_>> = chosen
            .iter()
            .map(|&(i, cost)| {
                Check::new(
                    &self.limits[i],
                    self.states.get(&i).map(Vec::as_slice),
                    cost,
                )
            })
            .collect();
        let core = decide_all_leased(&checks, leases, now);
        assert_eq!(lua.allowed, core.allowed, "{ctx}: allowed");
        assert_eq!(lua.admitted, u32::from(core.allowed), "{ctx}: admitted");
        assert_eq!(lua.leased, core.granted, "{ctx}: leased");
        let wait = core.decisions.iter().map(|d| d.delay).max().unwrap_or(0);
        let want: Vec<u64> = if core.allowed && wait > 0 {
            vec![wait * 1_000]
        } else {
            Vec::new()
        };
        assert_eq!(lua.delays, want, "{ctx}: delays");
        for (((l, c), &(i, _)), lease) in lua
            .decisions
            .iter()
            .zip(&core.decisions)
            .zip(chosen)
            .zip(leases)
        {
            same(
                l,
                c,
                &format!("{ctx}: limit {i} {lease:?} {:?}", self.limits[i]),
            );
        }
        for ((k, l), s) in core.granted.iter().zip(leases).zip(&core.new_states) {
            seen.leased += usize::from(*k > 0);
            seen.leased_short += usize::from(*k > 0 && *k < l.take);
            let given = l.returned > 0 && s.is_some();
            seen.returned += usize::from(given);
            seen.returned_denied += usize::from(given && !core.allowed);
        }
        for (s, &(i, _)) in core.new_states.into_iter().zip(chosen) {
            if let Some(s) = s {
                self.states.insert(i, s.as_bytes().to_vec());
            }
        }
        core.allowed.then_some(core.granted)
    }

    /// Gives back `requests` requests of `chosen` admitted at `admitted`,
    /// and the units `leased` per limit.
    async fn refund(
        &mut self,
        chosen: &[(usize, u64)],
        admitted: u64,
        requests: u32,
        leased: &[u64],
        now: u64,
        ctx: &str,
    ) {
        let items: Vec<StoreItem> = self
            .rate_items(chosen)
            .into_iter()
            .zip(leased.iter().chain(std::iter::repeat(&0)))
            .map(|(item, &lease)| RateItem { lease, ..item }.into())
            .collect();
        let refs: Vec<&StoreItem> = items.iter().collect();
        let lua = self
            .store
            .run_refund(&refs, admitted, requests, Some(now))
            .await
            .unwrap();
        let leased = leased.iter().chain(std::iter::repeat(&0));
        for ((&(i, cost), l), &k) in chosen.iter().zip(&lua.decisions).zip(leased) {
            if let Some(state) = self.states.get(&i) {
                let back = cost * u64::from(requests) + k;
                if let Some(s) = refund_at(&self.limits[i], state, admitted, now, back) {
                    self.states.insert(i, s.as_bytes().to_vec());
                }
            }
            let c = peek(
                &self.limits[i],
                self.states.get(&i).map(Vec::as_slice),
                now,
                cost,
            );
            same(l, &c, &format!("{ctx}: refund of limit {i}"));
        }
    }
}

/// Runs `traces` random traces; returns what they compared.
async fn run_traces(
    store: &RedisStore,
    seed: u64,
    traces: usize,
    steps: usize,
    large: bool,
) -> Coverage {
    let mut rng = Rng(seed);
    let mut sizes = Rng(seed ^ 0x5eed_ba7c);
    // Leases are drawn apart too, so the other traces stay as they were.
    let mut leasing = Rng(seed ^ 0x001e_a5e5);
    let mut reserving = Rng(seed ^ 0x0e5e_7e5e);
    let mut seen = Coverage {
        decided: vec![0; Algorithm::ALL.len()],
        ..Coverage::default()
    };
    for t in 0..traces {
        let n = rng.range(1, 3) as usize;
        // The first limit takes every algorithm in turn, the others any.
        let limits: Vec<Limit> = (0..n)
            .map(|i| {
                let pick = if i == 0 {
                    t
                } else {
                    rng.below(Algorithm::ALL.len() as u64) as usize
                };
                let a = Algorithm::ALL[pick % Algorithm::ALL.len()];
                random_limit(&mut rng, a, large)
            })
            .collect();
        let items = limits
            .iter()
            .enumerate()
            .map(|(i, l)| {
                RateItem::new(
                    format!("diff/{seed}/{t}/{i}|{}", l.algorithm.name()),
                    // The store takes nanoseconds and hands the script microseconds.
                    Limit {
                        window: l.window * 1_000,
                        max_delay: l.max_delay.map(|d| d * 1_000),
                        ..l.clone()
                    },
                    1,
                )
            })
            .collect();
        let max_window = limits.iter().map(|l| l.window).max().unwrap_or(1);
        let mut trace = Trace {
            store,
            limits,
            items,
            states: HashMap::new(),
        };
        let mut now: u64 = 1_763_700_000_000_000 + rng.below(1_000_000_000);
        let mut last_admit: Option<LastAdmit> = None;
        for s in 0..steps {
            match rng.below(20) {
                0 => now = now.saturating_sub(rng.below(max_window / 2 + 1)), // clock step back
                1..=4 => {}
                5 => now += max_window + rng.below(max_window),
                6..=11 => now += rng.below(max_window / 8 + 2),
                _ => now += rng.below(max_window / 64 + 2),
            }
            let mut picked: Vec<usize> = (0..n).filter(|_| rng.below(3) != 0).collect();
            if picked.is_empty() {
                picked.push(0);
            }
            let cost = |rng: &mut Rng| match rng.below(12) {
                0 => 0,
                1 => rng.range(2, 60),
                2 | 3 => rng.range(2, 5),
                _ => 1,
            };
            let base = cost(&mut rng);
            // A quarter of the checks weigh the request differently per limit.
            let weighed = rng.below(4) == 0;
            let chosen: Vec<(usize, u64)> = picked
                .into_iter()
                .map(|i| (i, if weighed { cost(&mut rng) } else { base }))
                .collect();
            seen.weighed += usize::from(chosen.windows(2).any(|w| w[0].1 != w[1].1));
            let ctx = format!("seed {seed} trace {t} step {s} now {now} chosen {chosen:?}");
            for &(i, _) in &chosen {
                let a = trace.limits[i].algorithm;
                if let Some(k) = Algorithm::ALL.iter().position(|&x| x == a) {
                    seen.decided[k] += 1;
                }
            }
            // Most checks carry one request; some a batch, a few a large one
            // (drawn apart, so the traces stay those without batches).
            let requests = match sizes.below(10) {
                0..=5 => 1,
                6..=8 => sizes.range(2, 40) as u32,
                _ => sizes.range(41, 600) as u32,
            };
            let ctx = format!("{ctx} requests {requests}");
            let (admitted, leased) = if requests == 1 && leasing.below(3) == 0 {
                let leases: Vec<Lease> = chosen
                    .iter()
                    .map(|_| Lease {
                        take: match leasing.below(4) {
                            0 => 0,
                            1 => leasing.range(1, 4),
                            2 => leasing.range(1, 60),
                            _ => leasing.range(1, 2_000_000_000_000),
                        },
                        returned: match leasing.below(3) {
                            0 => leasing.range(1, 20),
                            _ => 0,
                        },
                        returned_at: now.saturating_sub(leasing.below(max_window + max_window / 2)),
                    })
                    .collect();
                let ctx = format!("{ctx} leases {leases:?}");
                match trace
                    .step_leased(&chosen, &leases, now, &ctx, &mut seen)
                    .await
                {
                    Some(granted) => (1, granted),
                    None => (0, Vec::new()),
                }
            } else {
                // A quarter of the limits (not in delay mode) keep a reserve.
                let reserves: Vec<u64> = chosen
                    .iter()
                    .map(|&(i, _)| match trace.limits[i].max_delay {
                        None if reserving.below(4) == 0 => reserving.range(1, 8),
                        _ => 0,
                    })
                    .collect();
                let ctx = format!("{ctx} reserves {reserves:?}");
                let admitted = trace
                    .step(&chosen, &reserves, requests, now, &ctx, &mut seen)
                    .await;
                (admitted, Vec::new())
            };
            if admitted > 0 && chosen.iter().any(|&(_, c)| c > 0) {
                last_admit = Some((chosen, now, admitted, leased));
            }
            if rng.below(6) == 0 {
                if let Some((chosen, at, admitted, leased)) = last_admit.take() {
                    let later = now + rng.below(max_window / 4 + 1);
                    let back = sizes.range(1, u64::from(admitted)) as u32;
                    let ctx = format!(
                        "seed {seed} trace {t} step {s} refund of {back} and {leased:?} at {later}"
                    );
                    trace.refund(&chosen, at, back, &leased, later, &ctx).await;
                }
            }
        }
    }
    seen
}

/// Fails unless every algorithm of [`Algorithm::ALL`] was decided, and
/// delay mode, per-limit weights and batches (partly admitted, with waits)
/// were met (`batches`: unless the limits are too large for a batch to
/// reach them).
fn every_case_met(seen: &Coverage, batches: bool) {
    for (a, n) in Algorithm::ALL.iter().zip(&seen.decided) {
        assert!(*n > 0, "no decision of {a} was compared");
    }
    assert!(seen.delayed > 0, "no delayed admission was compared");
    assert!(
        seen.reserve_refused > 0,
        "no refusal under a reserve was compared"
    );
    assert!(seen.too_long > 0, "no delay beyond max_delay was compared");
    assert!(
        seen.weighed > 0,
        "no check with per-limit weights was compared"
    );
    if batches {
        assert!(seen.partial > 0, "no partly admitted batch was compared");
        assert!(seen.waited > 0, "no batch with several waits was compared");
        assert!(
            seen.leased_short > 0,
            "no partly granted lease was compared"
        );
    }
    assert!(seen.leased > 0, "no granted lease was compared");
    assert!(seen.returned > 0, "no return was compared");
}

/// Every algorithm the core knows has an implementation in the script (the
/// script also refuses to run without one); checked without Redis.
#[test]
fn the_script_implements_every_algorithm() {
    for a in Algorithm::ALL {
        let entry = format!("\n  {} = ", a.name());
        assert!(
            DECIDE_LUA.contains(&entry),
            "decide.lua has no entry for {a} in ALGORITHMS"
        );
    }
}

async fn store(server: &support::RedisServer) -> RedisStore {
    RedisStore::connect_now(Target::Single(server.url()), Duration::from_secs(5))
        .await
        .unwrap()
}

#[tokio::test]
async fn lua_matches_core_on_random_traces() {
    let Some(server) = support::RedisServer::start(&[]) else {
        return;
    };
    let store = store(&server).await;
    let mut seen = Coverage::default();
    for seed in 1..=12u64 {
        seen.add(run_traces(&store, seed * 7919, 25, 80, false).await);
    }
    every_case_met(&seen, true);
    assert!(
        seen.returned_denied > 0,
        "no return on a denied check was compared"
    );
}

#[tokio::test]
async fn lua_matches_core_with_wide_integers() {
    let Some(server) = support::RedisServer::start(&[]) else {
        return;
    };
    let store = store(&server).await;
    let mut seen = Coverage::default();
    for seed in 1..=4u64 {
        seen.add(run_traces(&store, seed * 104_729, 20, 40, true).await);
    }
    every_case_met(&seen, false);
}

#[tokio::test]
async fn the_eval_form_decides_the_same() {
    let Some(server) = support::RedisServer::start(&[]) else {
        return;
    };
    let store = store(&server).await;
    store.use_eval_only();
    let seen = run_traces(&store, 31, 10, 40, false).await;
    every_case_met(&seen, true);
}
