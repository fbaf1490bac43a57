use super::fake::MemoryStore;
use super::*;
use sluice_core::{Algorithm, SECOND};
use std::sync::atomic::Ordering;
use std::sync::Arc;

fn limit(algorithm: Algorithm, requests: u64) -> Limit {
    Limit::new(algorithm, requests, 60 * SECOND).unwrap()
}

/// Whether one request of cost 1 is admitted at `now`.
fn admits(store: &MemoryStore, key: &str, l: &Limit, now: Nanos) -> bool {
    consume(store, key, l, now, 1, 0).unwrap().decision.allowed
}

#[test]
fn admits_exactly_the_limit() {
    let store = MemoryStore::default();
    for algorithm in Algorithm::ALL {
        let l = limit(algorithm, 5);
        let key = format!("k/{algorithm}");
        let allowed = (0..8)
            .filter(|_| admits(&store, &key, &l, 1_000 * SECOND))
            .count();
        assert_eq!(allowed, 5, "{algorithm}");
    }
}

#[test]
fn retries_after_cas_mismatch() {
    let store = MemoryStore::default();
    let l = limit(Algorithm::FixedWindow, 3);
    store.inject_mismatches.store(5, Ordering::SeqCst);
    assert!(admits(&store, "k", &l, SECOND));
    assert_eq!(store.inject_mismatches.load(Ordering::SeqCst), 0);
    // Two more fit, then the limit holds: the retried write was applied once.
    assert!(admits(&store, "k", &l, SECOND));
    assert!(admits(&store, "k", &l, SECOND));
    assert!(!admits(&store, "k", &l, SECOND));
}

#[test]
fn gives_up_after_max_attempts() {
    let store = MemoryStore::default();
    let l = limit(Algorithm::TokenBucket, 3);
    store
        .inject_mismatches
        .store(MAX_ATTEMPTS, Ordering::SeqCst);
    assert_eq!(consume(&store, "k", &l, SECOND, 1, 0), Err(Contended));
    assert_eq!(store.value("k"), None);
    assert!(admits(&store, "k", &l, SECOND));
}

#[test]
fn creation_race_loses_no_update() {
    // A worker that saw the key missing must not overwrite a key another
    // worker created meanwhile.
    let store = MemoryStore::default();
    let l = limit(Algorithm::FixedWindow, 10);
    assert!(admits(&store, "k", &l, SECOND));
    let stale = sluice_core::decide(&l, None, SECOND, 1).new_state.unwrap();
    assert_eq!(
        store.set("k", stale.as_bytes(), Some(CREATE_CAS)),
        Err(SetError::CasMismatch)
    );
}

#[test]
fn refund_restores_quota() {
    let store = MemoryStore::default();
    for algorithm in Algorithm::ALL {
        let l = limit(algorithm, 2);
        let key = format!("r/{algorithm}");
        assert!(admits(&store, &key, &l, SECOND));
        assert!(admits(&store, &key, &l, SECOND));
        assert!(!admits(&store, &key, &l, SECOND));
        refund(&store, &key, &l, SECOND, 1).unwrap();
        assert!(admits(&store, &key, &l, SECOND), "{algorithm}");
    }
    refund(&store, "missing", &limit(Algorithm::Gcra, 1), SECOND, 1).unwrap();
}

#[test]
fn many_threads_admit_exact_counts() {
    for algorithm in Algorithm::ALL {
        let store = Arc::new(MemoryStore::default());
        let l = Arc::new(limit(algorithm, 1_000));
        let handles: Vec<_> = (0..8)
            .map(|_| {
                let (store, l) = (Arc::clone(&store), Arc::clone(&l));
                std::thread::spawn(move || {
                    (0..500)
                        .filter(|_| match consume(&*store, "hot", &l, 5 * SECOND, 1, 0) {
                            Ok(d) => d.decision.allowed,
                            Err(Contended) => false,
                        })
                        .count()
                })
            })
            .collect();
        let allowed: usize = handles.into_iter().map(|h| h.join().unwrap()).sum();
        assert_eq!(allowed, 1_000, "{algorithm}");
    }
}

#[test]
fn seed_is_created_once() {
    let store = MemoryStore::default();
    assert_eq!(load_or_create(&store, "seed", b"first").unwrap(), b"first");
    assert_eq!(load_or_create(&store, "seed", b"second").unwrap(), b"first");
    assert_eq!(store.key_count(), 1);
}

#[test]
fn every_step_retries_and_gives_up_alike() {
    // consume, refund and load_or_create share one loop: a mismatch rereads,
    // and MAX_ATTEMPTS mismatches give up without writing.
    let store = MemoryStore::default();
    let l = limit(Algorithm::Gcra, 2);
    assert!(admits(&store, "k", &l, SECOND));
    assert!(admits(&store, "k", &l, SECOND));
    store.inject_mismatches.store(3, Ordering::SeqCst);
    refund(&store, "k", &l, SECOND, 1).unwrap();
    assert_eq!(store.inject_mismatches.load(Ordering::SeqCst), 0);
    assert!(admits(&store, "k", &l, SECOND));
    store
        .inject_mismatches
        .store(MAX_ATTEMPTS, Ordering::SeqCst);
    assert_eq!(refund(&store, "k", &l, SECOND, 1), Err(Contended));
    assert!(!admits(&store, "k", &l, SECOND));

    store.inject_mismatches.store(2, Ordering::SeqCst);
    assert_eq!(load_or_create(&store, "seed", b"first").unwrap(), b"first");
    store
        .inject_mismatches
        .store(MAX_ATTEMPTS, Ordering::SeqCst);
    assert_eq!(load_or_create(&store, "other", b"x"), Err(Contended));
    assert_eq!(store.value("other"), None);
}

#[test]
fn counts_cas_retries() {
    // Tests run on their own threads, so this thread's tally is this test's.
    let _ = take_cas_retries();
    let store = MemoryStore::default();
    let l = limit(Algorithm::Gcra, 10);
    assert!(admits(&store, "k", &l, SECOND));
    assert_eq!(
        take_cas_retries(),
        0,
        "an uncontended write retries nothing"
    );

    store.inject_mismatches.store(3, Ordering::SeqCst);
    assert!(admits(&store, "k", &l, SECOND));
    assert_eq!(take_cas_retries(), 3);
    assert_eq!(take_cas_retries(), 0, "taking the tally zeroes it");

    // Refunds and lease-style steps share the loop and its count.
    store.inject_mismatches.store(2, Ordering::SeqCst);
    refund(&store, "k", &l, SECOND, 1).unwrap();
    store.inject_mismatches.store(1, Ordering::SeqCst);
    assert_eq!(load_or_create(&store, "seed", b"s").unwrap(), b"s");
    assert_eq!(take_cas_retries(), 3);

    // A decision that gives up retried MAX_ATTEMPTS - 1 times; the last
    // mismatch is counted by cas_exhausted instead.
    store
        .inject_mismatches
        .store(MAX_ATTEMPTS, Ordering::SeqCst);
    assert_eq!(consume(&store, "k", &l, SECOND, 1, 0), Err(Contended));
    assert_eq!(take_cas_retries(), u64::from(MAX_ATTEMPTS - 1));
}

#[test]
fn counts_real_races_between_threads() {
    // Every thread's retries are its own; together they are the writes
    // that lost a race, and each decision still stands exactly once. On a
    // loaded machine a decision may lose MAX_ATTEMPTS races and give up
    // (consuming nothing); its last mismatch is not retried.
    let store = Arc::new(MemoryStore::default());
    let l = Arc::new(limit(Algorithm::FixedWindow, 2_000));
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let (store, l) = (Arc::clone(&store), Arc::clone(&l));
            std::thread::spawn(move || {
                let _ = take_cas_retries();
                let (mut allowed, mut gave_up) = (0u64, 0u64);
                for _ in 0..1_000 {
                    match consume(&*store, "hot", &l, SECOND, 1, 0) {
                        Ok(d) => allowed += u64::from(d.decision.allowed),
                        Err(Contended) => gave_up += 1,
                    }
                }
                (allowed, gave_up, take_cas_retries())
            })
        })
        .collect();
    let results: Vec<(u64, u64, u64)> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let allowed: u64 = results.iter().map(|r| r.0).sum();
    let gave_up: u64 = results.iter().map(|r| r.1).sum();
    let retries: u64 = results.iter().map(|r| r.2).sum();
    assert_eq!(allowed, 2_000u64.min(4_000 - gave_up));
    assert_eq!(retries + gave_up, store.mismatches.load(Ordering::SeqCst));
}
