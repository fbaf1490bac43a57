use super::*;
use crate::local::fake::MemoryStore;
use crate::slots::SlotHasher;
use bucket::Bucket;
use sluice_core::{Algorithm, Limit, SECOND};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

const PREFIX: &str = "t/";

fn table(max_keys: u64, when_full: WhenFull) -> Table<'static> {
    Table {
        prefix: PREFIX,
        buckets: buckets_for(max_keys),
        when_full,
    }
}

fn hasher() -> SlotHasher {
    SlotHasher::from_seed(&SlotHasher::new_seed(7)).unwrap()
}

fn admitted(store: &MemoryStore, t: &Table, fp: u64, limit: &Limit, now: Nanos, n: u64) -> u64 {
    (0..n)
        .filter(|_| {
            consume(store, t, fp, limit, now, 1, 0)
                .unwrap()
                .result
                .decision
                .allowed
        })
        .count() as u64
}

#[test]
fn nine_hundred_keys_in_a_thousand_each_get_exactly_their_quota() {
    for (seed, algorithm) in (0..10).flat_map(|s| Algorithm::ALL.map(|a| (s, a))) {
        let h = SlotHasher::from_seed(&SlotHasher::new_seed(seed)).unwrap();
        let store = MemoryStore::default();
        let t = table(1_000, WhenFull::Share);
        let limit = Limit::new(algorithm, 3, 3_600 * SECOND).unwrap();
        let now = 1_000 * SECOND;
        for client in 0..900 {
            let fp = h.fingerprint(&format!("10.1.{}.{}", client / 256, client % 256));
            let got = admitted(&store, &t, fp, &limit, now + client, 4);
            assert_eq!(got, 3, "{algorithm}, seed {seed}: client {client}");
        }
        // Every client is still exact after the others came.
        for client in 0..900 {
            let fp = h.fingerprint(&format!("10.1.{}.{}", client / 256, client % 256));
            assert_eq!(admitted(&store, &t, fp, &limit, now + 1_000, 1), 0);
        }
        assert!(store.key_count() as u64 <= t.buckets, "{algorithm}");
    }
}

#[test]
fn a_full_table_shares_the_overflow_entry_and_never_over_admits() {
    let h = hasher();
    let store = MemoryStore::default();
    let t = table(10, WhenFull::Share);
    let limit = Limit::new(Algorithm::FixedWindow, 2, 3_600 * SECOND).unwrap();
    let now = 10 * SECOND;
    let mut own = 0;
    let mut shared = 0;
    for client in 0..200 {
        let fp = h.fingerprint(&format!("c{client}"));
        let first = consume(&store, &t, fp, &limit, now, 1, 0).unwrap();
        match first.placed {
            Placed::Own => own += 1,
            Placed::Shared => shared += 1,
            Placed::Evicted => unreachable!(),
        }
        let got =
            u64::from(first.result.decision.allowed) + admitted(&store, &t, fp, &limit, now, 3);
        assert!(got <= 2, "client {client} admitted {got}");
    }
    // Every bucket filled before a key shared: the capacity is the table's.
    assert_eq!(own, t.buckets * bucket::WAYS as u64);
    assert_eq!(shared, 200 - own);
}

#[test]
fn a_key_with_its_own_entry_stays_exact_under_a_flood() {
    let h = hasher();
    let store = MemoryStore::default();
    let t = table(100, WhenFull::Share);
    let limit = Limit::new(Algorithm::Gcra, 10, 60 * SECOND).unwrap();
    let now = 5 * SECOND;
    let legit = h.fingerprint("legit");
    assert_eq!(admitted(&store, &t, legit, &limit, now, 5), 5);
    for n in 0..20_000 {
        let _ = consume(
            &store,
            &t,
            h.fingerprint(&format!("flood{n}")),
            &limit,
            now,
            1,
            0,
        );
    }
    assert_eq!(admitted(&store, &t, legit, &limit, now, 10), 5);
}

#[test]
fn evict_takes_the_entry_that_rests_first_and_the_key_starts_full() {
    let h = hasher();
    let store = MemoryStore::default();
    let t = table(1, WhenFull::Evict);
    let limit = Limit::new(Algorithm::FixedWindow, 1, 60 * SECOND).unwrap();
    // Fill both buckets: 2 * WAYS keys, each admitted once (in the same window).
    let mut keys = Vec::new();
    let mut n = 0;
    while keys.len() < 2 * bucket::WAYS {
        let fp = h.fingerprint(&format!("k{n}"));
        n += 1;
        let d = consume(&store, &t, fp, &limit, SECOND, 1, 0).unwrap();
        assert!(d.result.decision.allowed);
        if d.placed == Placed::Own {
            keys.push(fp);
        }
    }
    let newcomer = h.fingerprint("newcomer");
    let d = consume(&store, &t, newcomer, &limit, 2 * SECOND, 1, 0).unwrap();
    assert_eq!(
        (d.placed, d.result.decision.allowed),
        (Placed::Evicted, true)
    );
    let evicted = keys
        .iter()
        .filter(|&&fp| {
            consume(&store, &t, fp, &limit, 2 * SECOND, 1, 0)
                .unwrap()
                .result
                .decision
                .allowed
        })
        .count();
    assert!(evicted >= 1, "an evicted key starts at full quota");
}

#[test]
fn a_key_at_rest_gives_its_entry_to_a_new_key() {
    let h = hasher();
    let store = MemoryStore::default();
    let t = table(1, WhenFull::Share);
    let limit = Limit::new(Algorithm::TokenBucket, 1, SECOND).unwrap();
    for n in 0..2 * bucket::WAYS {
        let _ = consume(
            &store,
            &t,
            h.fingerprint(&format!("k{n}")),
            &limit,
            SECOND,
            1,
            0,
        );
    }
    // A second later every key is full again: newcomers find room.
    for n in 0..2 * bucket::WAYS {
        let fp = h.fingerprint(&format!("new{n}"));
        let d = consume(&store, &t, fp, &limit, 3 * SECOND, 1, 0).unwrap();
        assert_eq!(
            (d.placed, d.result.decision.allowed),
            (Placed::Own, true),
            "{n}"
        );
    }
}

#[test]
fn refunds_find_the_entry_or_nothing() {
    let store = MemoryStore::default();
    let t = table(100, WhenFull::Share);
    let limit = Limit::new(Algorithm::FixedWindow, 1, 60 * SECOND).unwrap();
    let d = consume(&store, &t, 42, &limit, SECOND, 1, 0).unwrap();
    assert!(
        !consume(&store, &t, 42, &limit, SECOND, 1, 0)
            .unwrap()
            .result
            .decision
            .allowed
    );
    refund(&store, PREFIX, d.spot, &limit, SECOND, SECOND, 1).unwrap();
    assert!(
        consume(&store, &t, 42, &limit, SECOND, 1, 0)
            .unwrap()
            .result
            .decision
            .allowed
    );
    let elsewhere = Spot {
        bucket: d.spot.bucket,
        fingerprint: 43,
    };
    let before = store.key_count();
    refund(&store, PREFIX, elsewhere, &limit, SECOND, SECOND, 1).unwrap();
    assert_eq!(store.key_count(), before);
}

/// What another worker does in the middle of a decision.
type Hook<'a> = Box<dyn FnOnce(&MemoryStore) + 'a>;

/// A store that runs `hook` once, just before the first write to `key`.
struct Racing<'a> {
    inner: &'a MemoryStore,
    key: String,
    hook: Mutex<Option<Hook<'a>>>,
}

impl SharedStore for Racing<'_> {
    fn get(&self, key: &str) -> (Option<Vec<u8>>, Option<u32>) {
        self.inner.get(key)
    }

    fn set(&self, key: &str, value: &[u8], cas: Option<u32>) -> Result<(), SetError> {
        if key == self.key {
            let hook = self.hook.lock().ok().and_then(|mut h| h.take());
            if let Some(hook) = hook {
                hook(self.inner);
            }
        }
        self.inner.set(key, value, cas)
    }
}

#[test]
fn a_key_placed_in_both_buckets_at_once_is_counted_once() {
    let store = MemoryStore::default();
    let t = table(1, WhenFull::Share);
    // Two tokens per minute: a key that took one is full again 30 s later.
    let limit = Limit::new(Algorithm::TokenBucket, 2, 60 * SECOND).unwrap();
    let key = 1_000_001;
    let (p, s) = t.candidates(key);
    let p_key = format!("{PREFIX}b{p}");
    let live_in_p = |store: &MemoryStore| Bucket::read(store.value(&p_key).as_deref()).live(SECOND);
    // Keys of the same two buckets, taken at 1 s, until p is full (s then
    // holds one fewer: ties go to p).
    let mut fp = 1;
    while live_in_p(&store) < bucket::WAYS {
        fp += 2;
        consume(&store, &t, fp, &limit, SECOND, 1, 0).unwrap();
    }
    // At 30 s p is still full: the key goes to s. Just before that write,
    // another worker, at 31 s (p's keys at rest), places the key in p.
    let racing = Racing {
        inner: &store,
        key: format!("{PREFIX}b{s}"),
        hook: Mutex::new(Some(Box::new(|inner: &MemoryStore| {
            let d = consume(inner, &t, key, &limit, 31 * SECOND, 1, 0).unwrap();
            assert_eq!((d.spot.bucket, d.result.decision.allowed), (p, true));
        }))),
    };
    let d = consume(&racing, &t, key, &limit, 30 * SECOND, 1, 0).unwrap();
    assert_eq!(d.spot.bucket, p, "moved to the entry in p");
    assert!(d.result.decision.allowed);
    // Both requests are counted in p: the quota of 2 is spent.
    assert!(
        !consume(&store, &t, key, &limit, 31 * SECOND, 1, 0)
            .unwrap()
            .result
            .decision
            .allowed
    );
}

#[test]
fn two_workers_on_a_crowded_table_never_over_admit() {
    let store = Arc::new(MemoryStore::default());
    let limit = Limit::new(Algorithm::SlidingWindow, 5, 3_600 * SECOND).unwrap();
    let admitted: Arc<Vec<AtomicU64>> = Arc::new((0..64).map(|_| AtomicU64::new(0)).collect());
    let workers: Vec<_> = (0..2)
        .map(|w| {
            let (store, admitted, limit) = (store.clone(), admitted.clone(), limit.clone());
            std::thread::spawn(move || {
                let t = table(40, WhenFull::Share);
                let mut x = 0x1234_5678u64 + w;
                for i in 0..4_000u64 {
                    x = crate::slots::splitmix(x);
                    let k = (x % 64) as usize;
                    let now = SECOND + i;
                    if let Ok(d) = consume(&*store, &t, 1_000 + k as u64, &limit, now, 1, 0) {
                        if d.result.decision.allowed {
                            admitted[k].fetch_add(1, Ordering::SeqCst);
                        }
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    let counts: Vec<u64> = admitted.iter().map(|a| a.load(Ordering::SeqCst)).collect();
    assert!(counts.iter().all(|&c| c <= 5), "{counts:?}");
    // 64 keys in a table sized for 40: most have an entry and all of its quota.
    assert!(
        counts.iter().filter(|&&c| c == 5).count() >= 40,
        "{counts:?}"
    );
}

#[test]
fn an_entry_rests_only_when_its_state_is_as_good_as_fresh() {
    // An entry may be reclaimed at its rest time: the key's state must
    // then admit exactly what a fresh key admits, for every algorithm.
    for algorithm in Algorithm::ALL {
        let limit = Limit::new(algorithm, 4, 10 * SECOND).unwrap().with_burst(6);
        let mut x = 99u64;
        let mut state: Option<sluice_core::Encoded> = None;
        let mut now = 1_000 * SECOND;
        for _ in 0..2_000 {
            x = crate::slots::splitmix(x);
            now += x % (3 * SECOND);
            let cost = 1 + (x >> 40) % 3;
            let outcome =
                sluice_core::decide(&limit, state.as_ref().map(|s| s.as_bytes()), now, cost);
            if let Some(new) = outcome.new_state {
                state = Some(new);
            }
            let rest_at = now + outcome.decision.reset;
            let at_rest =
                sluice_core::decide(&limit, state.as_ref().map(|s| s.as_bytes()), rest_at, 0);
            let fresh = sluice_core::decide(&limit, None, rest_at, 0);
            assert_eq!(
                at_rest.decision.remaining, fresh.decision.remaining,
                "{algorithm} at {now}"
            );
        }
    }
}

mod model {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    const QUOTA: u64 = 3;
    const WINDOW: Nanos = 10 * SECOND;

    /// Runs `ops` (key, nanoseconds later) against a table for one key (two
    /// buckets of 8) with a fixed window of QUOTA; returns, per key and
    /// window, the requests sent and admitted.
    fn run(ops: &[(u64, u64)]) -> HashMap<(u64, u64), (u64, u64)> {
        let store = MemoryStore::default();
        let t = table(1, WhenFull::Share);
        let limit = Limit::new(Algorithm::FixedWindow, QUOTA, WINDOW).unwrap();
        let mut now = 1_000 * SECOND;
        let mut seen = HashMap::new();
        for &(key, later) in ops {
            now += later;
            let d = consume(&store, &t, crate::slots::splitmix(key), &limit, now, 1, 0).unwrap();
            let entry = seen.entry((key, now / WINDOW)).or_insert((0, 0));
            entry.0 += 1;
            entry.1 += u64::from(d.result.decision.allowed);
        }
        seen
    }

    proptest! {
        #[test]
        fn up_to_its_size_every_key_is_exact(
            ops in proptest::collection::vec((0u64..16, 0u64..2 * SECOND), 1..300)
        ) {
            for ((key, window), (sent, admitted)) in run(&ops) {
                prop_assert_eq!(admitted, sent.min(QUOTA), "key {} window {}", key, window);
            }
        }

        #[test]
        fn past_its_size_no_key_is_admitted_beyond_its_quota(
            ops in proptest::collection::vec((0u64..64, 0u64..SECOND), 1..400)
        ) {
            for ((key, window), (_, admitted)) in run(&ops) {
                prop_assert!(admitted <= QUOTA, "key {} window {}: {}", key, window, admitted);
            }
        }
    }
}

#[test]
fn a_decision_written_after_a_later_one_is_made_at_the_later_time() {
    // Two workers: the one that read the earlier time writes second, so it
    // decides at the store's clock, read after the state.
    for algorithm in Algorithm::ALL {
        let store = MemoryStore::default();
        let t = table(16, WhenFull::Share);
        let limit = Limit::new(algorithm, 20, 60 * SECOND).unwrap();
        let start = 1_000 * SECOND;
        store.clock.store(start + 1_000_000, Ordering::SeqCst);
        let first = consume(&store, &t, 7, &limit, start + 1_000_000, 3, 0).unwrap();
        store.clock.store(start + 2_000_000, Ordering::SeqCst);
        let second = consume(&store, &t, 7, &limit, start, 3, 0).unwrap();
        assert_eq!(first.result.decision.remaining, 17, "{algorithm}");
        assert_eq!(second.result.decision.remaining, 14, "{algorithm}");
        assert_eq!(second.result.at, start + 2_000_000, "{algorithm}");
    }
}
