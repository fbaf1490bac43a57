//! The memory store under contention: many threads, one key or keys spread
//! over shards, never more admitted than the limit, and no deadlock.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use sluice_core::{Algorithm, Limit, SECOND};
use sluice_limiter::clock::ManualClock;
use sluice_limiter::store::memory::{MemoryConfig, MemoryStore};
use sluice_limiter::store::StoreItem;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

fn item(id: &str, algorithm: Algorithm, requests: u64) -> StoreItem {
    StoreItem {
        id: id.to_string(),
        limit: Limit::new(algorithm, requests, 3600 * SECOND).unwrap(),
    }
}

#[test]
fn threads_never_admit_more_than_the_limit() {
    for alg in Algorithm::ALL {
        let store = Arc::new(MemoryStore::new(
            MemoryConfig::default(),
            Arc::new(ManualClock::new(1_700_000_000 * SECOND)),
        ));
        let admitted = Arc::new(AtomicU64::new(0));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let store = store.clone();
                let admitted = admitted.clone();
                std::thread::spawn(move || {
                    let items = [item("hot", alg, 500)];
                    for _ in 0..200 {
                        if store.check(&items, 1).allowed {
                            admitted.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(admitted.load(Ordering::Relaxed), 500, "{alg}");
    }
}

#[test]
fn checks_over_many_shards_in_any_order_do_not_deadlock() {
    let store = Arc::new(MemoryStore::new(
        MemoryConfig {
            shards: 4,
            max_keys: 10_000,
        },
        Arc::new(ManualClock::new(1_700_000_000 * SECOND)),
    ));
    let shared = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..8u64)
        .map(|t| {
            let store = store.clone();
            let shared = shared.clone();
            std::thread::spawn(move || {
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
                    items.dedup_by(|a, b| a.id == b.id);
                    items.push(item("shared", Algorithm::TokenBucket, 1000));
                    if t % 2 == 0 {
                        items.reverse();
                    }
                    if store.check(&items, 1).allowed {
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
