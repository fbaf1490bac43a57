//! What only the memory store does: its bound on keys, sweeping the keys that
//! are back to full, and locking shards without deadlock. The contract every
//! store keeps is tested in `conformance.rs`.
#![cfg(test)]

mod support;

use support::one;

use axum::http::StatusCode;
use serde_json::{json, Value};
use sluice_core::{Algorithm, Limit, MILLISECOND, SECOND};
use sluice_limiter::api::AppState;
use sluice_limiter::clock::ManualClock;
use sluice_limiter::store::memory::{MemoryConfig, MemoryStore};
use sluice_limiter::store::{Store, StoreItem};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

const T0: u64 = 1_700_000_000 * SECOND;

struct Harness {
    state: AppState<Arc<MemoryStore>>,
    clock: Arc<ManualClock>,
    mem: Arc<MemoryStore>,
}

impl Harness {
    fn with_config(config: MemoryConfig) -> Self {
        let clock = Arc::new(ManualClock::new(T0));
        let mem = Arc::new(MemoryStore::new(config, clock.clone()));
        Harness {
            state: AppState::new(mem.clone()),
            clock,
            mem,
        }
    }

    async fn check(&self, body: Value) -> (StatusCode, Value) {
        support::send_json(&self.state, "POST", "/v1/check", &body).await
    }

    async fn allowed(&self, body: &Value) -> bool {
        support::allowed(&self.state, body).await
    }
}

#[tokio::test]
async fn entries_are_dropped_once_full_again() {
    let h = Harness::with_config(MemoryConfig::default());
    assert!(h.allowed(&one("a", "token_bucket", 10, 1000)).await);
    assert!(h.allowed(&one("b", "sliding_window", 10, 1000)).await);
    assert_eq!(h.mem.len(), 2);
    assert_eq!(h.mem.sweep(), 0);
    h.clock.advance(2 * SECOND);
    assert_eq!(h.mem.sweep(), 2);
    assert!(h.mem.is_empty());
}

#[tokio::test]
async fn a_full_store_denies_new_keys_and_keeps_serving_known_ones() {
    let h = Harness::with_config(MemoryConfig {
        shards: 1,
        max_keys: 3,
    });
    for k in ["a", "b", "c"] {
        assert!(h.allowed(&one(k, "fixed_window", 5, 1000)).await);
    }
    let (_, v) = h.check(one("d", "fixed_window", 5, 1000)).await;
    assert_eq!(v["allowed"], json!(false));
    assert_eq!(v["limits"][0]["retry_after_ms"], json!(1000));
    assert!(h.allowed(&one("a", "fixed_window", 5, 1000)).await);
    // Once the known keys are back to full, there is room again.
    h.clock.advance(1100 * MILLISECOND);
    assert!(h.allowed(&one("d", "fixed_window", 5, 1000)).await);
    assert!(support::metrics(&h.state)
        .await
        .contains("sluice_limiter_capacity_denials_total 1"));
}

#[tokio::test]
async fn a_full_shard_finds_the_room_of_its_first_key_back_to_full() {
    let h = Harness::with_config(MemoryConfig {
        shards: 1,
        max_keys: 3,
    });
    // `a` is back to full 200 ms after a hit; `b` and `c` after 12 minutes.
    let short = |k| one(k, "gcra", 5, 1000);
    let long = |k| one(k, "gcra", 5, 3_600_000);
    assert!(h.allowed(&short("a")).await);
    assert!(h.allowed(&long("b")).await);
    assert!(h.allowed(&long("c")).await);
    assert!(!h.allowed(&long("d")).await);
    // `a` is used again: its state lives longer than the shard last knew.
    h.clock.advance(100 * MILLISECOND);
    assert!(h.allowed(&short("a")).await);
    h.clock.advance(150 * MILLISECOND);
    assert!(!h.allowed(&long("d")).await);
    // Once `a` is back to full, its room goes to `d`; `b` and `c` are kept.
    h.clock.advance(300 * MILLISECOND);
    assert!(h.allowed(&long("d")).await);
    assert!(!h.allowed(&short("a")).await);
    for k in ["b", "c"] {
        for _ in 0..4 {
            assert!(h.allowed(&long(k)).await, "{k}");
        }
        assert!(!h.allowed(&long(k)).await, "{k}");
    }
    assert_eq!(h.mem.len(), 3);
}

fn item(id: &str, algorithm: Algorithm, requests: u64) -> StoreItem {
    StoreItem::new(
        id.to_string(),
        Limit::new(algorithm, requests, 3600 * SECOND).unwrap(),
        1,
    )
}

#[test]
fn checks_over_many_shards_in_any_order_do_not_deadlock() {
    let store = Arc::new(MemoryStore::new(
        MemoryConfig {
            shards: 4,
            max_keys: 10_000,
        },
        Arc::new(ManualClock::new(T0)),
    ));
    let shared = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..8u64)
        .map(|t| {
            let store = store.clone();
            let shared = shared.clone();
            std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .build()
                    .unwrap();
                for i in 0..300u64 {
                    // Keys in varying order, so shard locks are requested in
                    // every order; one limit shared by all threads.
                    let mut items: Vec<StoreItem> = (0..5)
                        .map(|k| {
                            item(
                                &format!("k{}", (i + k * t) % 17),
                                Algorithm::FixedWindow,
                                1_000_000,
                            )
                        })
                        .collect();
                    items.dedup_by(|a, b| a.id() == b.id());
                    items.push(item("shared", Algorithm::TokenBucket, 1000));
                    if t % 2 == 0 {
                        items.reverse();
                    }
                    if runtime.block_on(store.check(&items)).unwrap().allowed {
                        shared.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(shared.load(Ordering::Relaxed), 1000);
}

#[tokio::test]
async fn the_store_fills_to_exactly_max_keys_over_every_shard() {
    // Neither total divides evenly by the shard count; the second has fewer
    // keys than shards.
    for (shards, max_keys) in [(64, 100), (64, 10)] {
        let store = MemoryStore::new(
            MemoryConfig { shards, max_keys },
            Arc::new(ManualClock::new(T0)),
        );
        let mut admitted = 0;
        for i in 0..20 * max_keys {
            let items = [item(&format!("flood-{i}"), Algorithm::FixedWindow, 5)];
            if store.check(&items).await.unwrap().allowed {
                admitted += 1;
            }
            assert!(store.len() <= max_keys);
        }
        assert_eq!((admitted, store.len()), (max_keys, max_keys));
    }
}

/// A penalty box is an entry of its own: counted in the blocked-keys
/// gauge and the counters while it lives, swept once it ended; a block
/// that finds its shard full is not kept (the refusal stands alone).
#[tokio::test]
async fn blocks_are_entries_counted_until_swept_and_not_kept_without_room() {
    let h = Harness::with_config(MemoryConfig {
        shards: 1,
        max_keys: 2,
    });
    let boxed = |key: &str| {
        json!({"domain": "d", "limits": [{"key": key, "algorithm": "fixed_window",
            "requests": 1, "window_ms": 1000, "block_ms": 5000}]})
    };
    assert!(h.allowed(&boxed("a")).await);
    let (_, v) = h.check(boxed("a")).await;
    assert_eq!(v["limits"][0]["retry_after_ms"], json!(5000), "{v}");
    assert_eq!(h.mem.status().blocked, Some(1));
    assert_eq!(h.mem.len(), 2);
    // Full: b's state finds no room, and then a block of c neither.
    let (_, v) = h.check(boxed("b")).await;
    assert_eq!(v["allowed"], json!(false), "{v}");
    h.clock.advance(2 * SECOND);
    assert_eq!(h.mem.sweep(), 1, "a's state, not its block");
    assert!(h.allowed(&boxed("c")).await);
    let (_, v) = h.check(boxed("c")).await;
    assert_eq!(v["limits"][0]["retry_after_ms"], json!(1000), "{v}");
    assert_eq!(h.mem.status().blocked, Some(1));
    let (_, v) = h.check(boxed("a")).await;
    assert_eq!(v["limits"][0]["retry_after_ms"], json!(3000), "{v}");
    h.clock.advance(3 * SECOND);
    assert_eq!(h.mem.sweep(), 2, "c's state and a's block");
    assert_eq!(h.mem.status().blocked, Some(0));
    let metrics = support::metrics(&h.state).await;
    for line in [
        "sluice_limiter_blocks_started_total 1",
        "sluice_limiter_blocked_total 1",
        "sluice_limiter_store_blocked_keys 0",
    ] {
        assert!(metrics.contains(line), "{line} in {metrics}");
    }
}
