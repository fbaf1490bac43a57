//! The Lua script's charges and refunds (its `adjust` mode) against
//! sluice-core's `adjust` on random traces mixing checks, charges into debt
//! and refunds, for every algorithm (the sliding log is only refunded: it
//! carries no debt): identical decisions, and checks on keys in debt
//! decided alike. Times are microseconds on both sides (sluice-core run
//! with microsecond windows and instants, as in `redis_diff.rs`).
#![cfg(test)]

mod support;

use sluice_core::{adjust, decide, Adjust, Algorithm, Decision, Limit};
use sluice_limiter::store::redis::{RedisStore, Target};
use sluice_limiter::store::{AdjustItem, RateItem, StoreItem};
use std::time::Duration;

use support::Rng;

const WINDOWS_US: [u64; 4] = [1_000_000, 1_000_003, 7_919_000, 60_000_000];

fn random_limit(rng: &mut Rng, algorithm: Algorithm) -> Limit {
    let window = WINDOWS_US[rng.below(WINDOWS_US.len() as u64) as usize];
    let requests = rng.range(1, 30);
    let delayed =
        matches!(algorithm, Algorithm::Gcra | Algorithm::LeakyBucket) && rng.below(3) == 0;
    Limit {
        algorithm,
        requests,
        window,
        burst: rng.range(1, 40),
        precision: if algorithm == Algorithm::SlidingWindow {
            rng.range(1, 8) as u32
        } else {
            1
        },
        soft_percent: if rng.below(4) == 0 { 50 } else { 0 },
        max_delay: delayed.then(|| rng.range(0, window)),
    }
}

/// The limit as the store takes it: nanoseconds, handed to the script in
/// microseconds.
fn in_ns(l: &Limit) -> Limit {
    Limit {
        window: l.window * 1_000,
        max_delay: l.max_delay.map(|d| d * 1_000),
        ..l.clone()
    }
}

fn same(lua: &Decision, core: &Decision, ctx: &str) {
    let mut core_us = *core;
    core_us.reset = core.reset * 1_000;
    core_us.retry_after = core.retry_after * 1_000;
    core_us.delay = core.delay * 1_000;
    assert_eq!(*lua, core_us, "{ctx}");
}

#[derive(Default)]
struct Seen {
    charged: usize,
    in_debt: usize,
    refunded: usize,
    denied_in_debt: usize,
}

async fn trace(store: &RedisStore, rng: &mut Rng, t: usize, seen: &mut Seen) {
    let algorithm = Algorithm::ALL[t % Algorithm::ALL.len()];
    let limit = random_limit(rng, algorithm);
    let id = format!("charge-diff/{t}|{}", algorithm.name());
    let mut state: Option<Vec<u8>> = None;
    let mut now = 1_763_700_000_000_000 + rng.below(1_000_000_000);
    let mut last_cost = (now, 1);
    for step in 0..60 {
        now += match rng.below(4) {
            0 => 0,
            1 => rng.below(limit.window / 20 + 1),
            2 => rng.below(limit.window),
            _ => rng.below(3 * limit.window),
        };
        let ctx = format!("trace {t} step {step} {limit:?}");
        let kind = rng.below(3);
        if kind == 0 {
            let cost = rng.range(1, 4);
            let item = StoreItem::Rate(RateItem::new(id.clone(), in_ns(&limit), cost));
            let lua = store.run_check(&[&item], 1, Some(now)).await.unwrap();
            let core = decide(&limit, state.as_deref(), now, cost);
            same(
                &lua.decisions[0],
                &core.decision,
                &format!("{ctx}: check {cost}"),
            );
            let in_debt = core.decision.retry_after > 0 && core.decision.remaining == 0;
            seen.denied_in_debt += usize::from(!core.decision.allowed && in_debt);
            if let Some(s) = core.new_state {
                state = Some(s.into_vec());
            }
            if core.decision.allowed {
                last_cost = (now, cost);
            }
            continue;
        }
        let adj = if kind == 1 && algorithm.carries_debt() {
            Adjust::Charge(rng.range(1, 3 * limit.burst))
        } else {
            let (at, cost) = last_cost;
            Adjust::Refund {
                cost: rng.range(1, cost + 2),
                age: now - at,
            }
        };
        let item = AdjustItem {
            id: id.clone(),
            limit: in_ns(&limit),
            adjust: match adj {
                Adjust::Refund { cost, age } => Adjust::Refund {
                    cost,
                    age: age * 1_000,
                },
                charge => charge,
            },
        };
        let lua = store.run_adjust(&[&item], Some(now)).await.unwrap();
        let core = adjust(&limit, state.as_deref(), now, adj).unwrap();
        same(&lua[0], &core.decision, &format!("{ctx}: {adj:?}"));
        match adj {
            Adjust::Charge(_) => seen.charged += 1,
            Adjust::Refund { .. } => seen.refunded += usize::from(core.new_state.is_some()),
        }
        seen.in_debt += usize::from(!core.decision.allowed);
        if let Some(s) = core.new_state {
            state = Some(s.into_vec());
        }
    }
}

#[tokio::test]
async fn lua_charges_match_core_on_random_traces() {
    let Some(server) = support::RedisServer::start(&[]) else {
        return;
    };
    let store = RedisStore::connect_now(Target::Single(server.url()), Duration::from_secs(5))
        .await
        .unwrap();
    let mut rng = Rng(0xdeb7_c4a6_0000_0001);
    let mut seen = Seen::default();
    for t in 0..120 {
        trace(&store, &mut rng, t, &mut seen).await;
    }
    assert!(seen.charged > 100, "charges: {}", seen.charged);
    assert!(seen.in_debt > 50, "keys in debt: {}", seen.in_debt);
    assert!(seen.refunded > 50, "refunds: {}", seen.refunded);
    assert!(
        seen.denied_in_debt > 20,
        "checks denied in debt: {}",
        seen.denied_in_debt
    );
}
