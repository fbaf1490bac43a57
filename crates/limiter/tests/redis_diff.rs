//! The Lua script against sluice-core on random traces: identical decisions
//! and states for every algorithm the core knows ([`Algorithm::ALL`]). Times
//! are microseconds on both sides (the script's unit; sluice-core is run with
//! microsecond windows and instants).
#![cfg(test)]

mod support;

use sluice_core::{decide, decide_all, refund_at, Algorithm, Check, Decision, Limit};
use sluice_limiter::store::redis::{RedisStore, Target, DECIDE_LUA};
use sluice_limiter::store::StoreItem;
use std::collections::HashMap;
use std::time::Duration;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }
}

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
    Limit {
        algorithm,
        requests,
        window,
        burst,
        precision,
        soft_percent,
        max_delay: None,
    }
}

/// sluice-core's decision for `cost` without consuming, as a denied check
/// reports its admitting limits.
fn peek(limit: &Limit, state: Option<&[u8]>, now: u64, cost: u64) -> Decision {
    if cost <= 1 {
        return decide(limit, state, now, 0).decision;
    }
    // A companion limit that can never admit `cost` denies the check, so
    // `limit` is decided for `cost` without consuming.
    let never = Limit {
        algorithm: Algorithm::FixedWindow,
        requests: 1,
        window: 1_000_000,
        burst: cost - 1,
        precision: 1,
        soft_percent: 0,
        max_delay: None,
    };
    let checks = [
        Check { limit, state },
        Check {
            limit: &never,
            state: None,
        },
    ];
    decide_all(&checks, now, cost).decisions[0]
}

fn same(lua: &Decision, core: &Decision, ctx: &str) {
    let mut core_us = *core;
    // The script reports microseconds; the store turns them into ns.
    core_us.reset = core.reset * 1_000;
    core_us.retry_after = core.retry_after * 1_000;
    assert_eq!(*lua, core_us, "{ctx}");
}

struct Trace<'a> {
    store: &'a RedisStore,
    limits: Vec<Limit>,
    items: Vec<StoreItem>,
    states: HashMap<usize, Vec<u8>>,
}

impl Trace<'_> {
    /// Decides `chosen` in both; returns whether the check was admitted.
    async fn step(&mut self, chosen: &[usize], now: u64, cost: u64, ctx: &str) -> bool {
        let items: Vec<&StoreItem> = chosen.iter().map(|&i| &self.items[i]).collect();
        let lua = self.store.run_check(&items, cost, Some(now)).await.unwrap();
        let checks: Vec<Check<'_>> = chosen
            .iter()
            .map(|&i| Check {
                limit: &self.limits[i],
                state: self.states.get(&i).map(Vec::as_slice),
            })
            .collect();
        let core = decide_all(&checks, now, cost);
        assert_eq!(lua.allowed, core.allowed, "{ctx}: allowed");
        assert_eq!(lua.now_us, now);
        for ((l, c), &i) in lua.decisions.iter().zip(&core.decisions).zip(chosen) {
            same(l, c, &format!("{ctx}: limit {i} {:?}", self.limits[i]));
        }
        for (s, &i) in core.new_states.into_iter().zip(chosen) {
            if let Some(s) = s {
                self.states.insert(i, s.as_bytes().to_vec());
            }
        }
        core.allowed
    }

    async fn refund(&mut self, chosen: &[usize], admitted: u64, now: u64, cost: u64, ctx: &str) {
        let items: Vec<&StoreItem> = chosen.iter().map(|&i| &self.items[i]).collect();
        let lua = self
            .store
            .run_refund(&items, cost, admitted, Some(now))
            .await
            .unwrap();
        for (&i, l) in chosen.iter().zip(&lua.decisions) {
            if let Some(state) = self.states.get(&i) {
                if let Some(s) = refund_at(&self.limits[i], state, admitted, now, cost) {
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

/// Runs `traces` random traces; returns how many decisions each algorithm
/// of [`Algorithm::ALL`] took, in that order.
async fn run_traces(
    store: &RedisStore,
    seed: u64,
    traces: usize,
    steps: usize,
    large: bool,
) -> Vec<usize> {
    let mut rng = Rng(seed);
    let mut decided = vec![0; Algorithm::ALL.len()];
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
            .map(|(i, l)| StoreItem {
                id: format!("diff/{seed}/{t}/{i}|{}", l.algorithm.name()),
                // The store takes nanoseconds and hands the script microseconds.
                limit: Limit {
                    window: l.window * 1_000,
                    ..l.clone()
                },
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
        let mut last_admit: Option<(Vec<usize>, u64, u64)> = None;
        for s in 0..steps {
            match rng.below(20) {
                0 => now = now.saturating_sub(rng.below(max_window / 2 + 1)), // clock step back
                1..=4 => {}
                5 => now += max_window + rng.below(max_window),
                6..=11 => now += rng.below(max_window / 8 + 2),
                _ => now += rng.below(max_window / 64 + 2),
            }
            let mut chosen: Vec<usize> = (0..n).filter(|_| rng.below(3) != 0).collect();
            if chosen.is_empty() {
                chosen.push(0);
            }
            let cost = match rng.below(12) {
                0 => 0,
                1 => rng.range(2, 60),
                2 | 3 => rng.range(2, 5),
                _ => 1,
            };
            let ctx =
                format!("seed {seed} trace {t} step {s} now {now} cost {cost} chosen {chosen:?}");
            for &i in &chosen {
                let a = trace.limits[i].algorithm;
                if let Some(k) = Algorithm::ALL.iter().position(|&x| x == a) {
                    decided[k] += 1;
                }
            }
            if trace.step(&chosen, now, cost, &ctx).await && cost > 0 {
                last_admit = Some((chosen, now, cost));
            }
            if rng.below(6) == 0 {
                if let Some((chosen, at, cost)) = last_admit.take() {
                    let later = now + rng.below(max_window / 4 + 1);
                    let ctx = format!("seed {seed} trace {t} step {s} refund at {later}");
                    trace.refund(&chosen, at, later, cost, &ctx).await;
                }
            }
        }
    }
    decided
}

/// Fails unless every algorithm of [`Algorithm::ALL`] was decided.
fn every_algorithm_decided(decided: &[usize]) {
    for (a, n) in Algorithm::ALL.iter().zip(decided) {
        assert!(*n > 0, "no decision of {a} was compared");
    }
}

/// Every algorithm the core knows has an implementation in the script (the
/// script also refuses to run without one); checked without Redis.
#[test]
fn the_script_implements_every_algorithm() {
    for a in Algorithm::ALL {
        let entry = format!("\n  {} = {{decide = ", a.name());
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
    for seed in 1..=12u64 {
        let decided = run_traces(&store, seed * 7919, 25, 80, false).await;
        every_algorithm_decided(&decided);
    }
}

#[tokio::test]
async fn lua_matches_core_with_wide_integers() {
    let Some(server) = support::RedisServer::start(&[]) else {
        return;
    };
    let store = store(&server).await;
    for seed in 1..=4u64 {
        let decided = run_traces(&store, seed * 104_729, 20, 40, true).await;
        every_algorithm_decided(&decided);
    }
}

#[tokio::test]
async fn the_eval_form_decides_the_same() {
    let Some(server) = support::RedisServer::start(&[]) else {
        return;
    };
    let store = store(&server).await;
    store.use_eval_only();
    let decided = run_traces(&store, 31, 10, 40, false).await;
    every_algorithm_decided(&decided);
}
