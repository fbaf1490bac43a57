//! Local limits: a compare-and-swap loop over Envoy shared data.
//!
//! Shared data has no create-if-absent primitive: setting a missing key with
//! cas 0 is unconditional, so two workers creating the same key at once would
//! lose an update. In Envoy, a set with a *non-zero* cas on a missing key
//! creates it, and on an existing key fails unless the cas matches. So a key
//! seen missing is created with cas [`CREATE_CAS`]: if another worker created
//! it first, the set fails with a mismatch and the loop reads again. (It would
//! wrongly succeed only if the existing entry's cas happened to equal
//! `CREATE_CAS`, a 2^-32 chance.)

use sluice_core::{Decision, Limit, Nanos};

/// The cas used to create a key that was seen missing.
pub const CREATE_CAS: u32 = u32::MAX;

/// Attempts per decision before giving up (and denying).
pub const MAX_ATTEMPTS: u32 = 64;

/// Why a shared-data write failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetError {
    /// Another writer changed (or created) the key since it was read.
    CasMismatch,
    /// Any other failure.
    Failed,
}

/// Envoy shared data as the filter uses it: one map shared by every worker.
pub trait SharedStore {
    /// The value and cas of `key`; `(None, None)` when missing.
    fn get(&self, key: &str) -> (Option<Vec<u8>>, Option<u32>);
    /// Writes `value` if the key's cas still equals `cas` (or, for a missing
    /// key, creates it whatever the non-zero `cas`). `None` writes unconditionally.
    fn set(&self, key: &str, value: &[u8], cas: Option<u32>) -> Result<(), SetError>;
}

/// The loop ran out of attempts (heavy contention) or the store failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Contended;

/// Decides one request of `cost` against `limit` for the state at `key`,
/// storing the new state atomically.
pub fn consume<S: SharedStore + ?Sized>(
    store: &S,
    key: &str,
    limit: &Limit,
    now: Nanos,
    cost: u64,
) -> Result<Decision, Contended> {
    for _ in 0..MAX_ATTEMPTS {
        let (value, cas) = store.get(key);
        let outcome = sluice_core::decide(limit, value.as_deref(), now, cost);
        let Some(state) = outcome.new_state else {
            return Ok(outcome.decision);
        };
        match store.set(key, state.as_bytes(), Some(cas.unwrap_or(CREATE_CAS))) {
            Ok(()) => return Ok(outcome.decision),
            Err(SetError::CasMismatch) => continue,
            Err(SetError::Failed) => return Err(Contended),
        }
    }
    Err(Contended)
}

/// Gives back `cost` consumed at `admitted_at` from the state at `key`.
pub fn refund<S: SharedStore + ?Sized>(
    store: &S,
    key: &str,
    limit: &Limit,
    admitted_at: Nanos,
    cost: u64,
) -> Result<(), Contended> {
    for _ in 0..MAX_ATTEMPTS {
        let (value, cas) = store.get(key);
        let Some(value) = value else {
            return Ok(());
        };
        let Some(state) = sluice_core::refund(limit, &value, admitted_at, cost) else {
            return Ok(());
        };
        match store.set(key, state.as_bytes(), Some(cas.unwrap_or(CREATE_CAS))) {
            Ok(()) => return Ok(()),
            Err(SetError::CasMismatch) => continue,
            Err(SetError::Failed) => return Err(Contended),
        }
    }
    Err(Contended)
}

/// Reads the value at `key`, or stores `candidate` there if the key is
/// missing; every caller gets the same value even when several race.
pub fn load_or_create<S: SharedStore + ?Sized>(
    store: &S,
    key: &str,
    candidate: &[u8],
) -> Result<Vec<u8>, Contended> {
    for _ in 0..MAX_ATTEMPTS {
        if let (Some(value), _) = store.get(key) {
            return Ok(value);
        }
        match store.set(key, candidate, Some(CREATE_CAS)) {
            Ok(()) => return Ok(candidate.to_vec()),
            Err(SetError::CasMismatch) => continue,
            Err(SetError::Failed) => return Err(Contended),
        }
    }
    Err(Contended)
}

/// An in-memory store with Envoy's shared-data semantics, for tests.
#[cfg(test)]
pub mod fake {
    use super::{SetError, SharedStore};
    use std::collections::HashMap;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Mutex;

    /// Envoy's rules: cas values count up from 1 and skip 0; a non-zero cas
    /// must match on an existing key; a missing key is always created.
    #[derive(Default)]
    pub struct MemoryStore {
        map: Mutex<HashMap<String, (Vec<u8>, u32)>>,
        next_cas: AtomicU32,
        /// Fail this many upcoming sets with a cas mismatch.
        pub inject_mismatches: AtomicU32,
    }

    impl MemoryStore {
        /// The stored value of `key`.
        pub fn value(&self, key: &str) -> Option<Vec<u8>> {
            self.map.lock().ok()?.get(key).map(|(v, _)| v.clone())
        }

        /// Number of keys stored.
        pub fn key_count(&self) -> usize {
            self.map.lock().map(|m| m.len()).unwrap_or(0)
        }
    }

    impl SharedStore for MemoryStore {
        fn get(&self, key: &str) -> (Option<Vec<u8>>, Option<u32>) {
            match self.map.lock().ok().and_then(|m| m.get(key).cloned()) {
                Some((v, cas)) => (Some(v), Some(cas)),
                None => (None, None),
            }
        }

        fn set(&self, key: &str, value: &[u8], cas: Option<u32>) -> Result<(), SetError> {
            if self
                .inject_mismatches
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
            {
                return Err(SetError::CasMismatch);
            }
            let mut map = self.map.lock().map_err(|_| SetError::Failed)?;
            if let Some((_, current)) = map.get(key) {
                if cas.is_some_and(|c| c != 0 && c != *current) {
                    return Err(SetError::CasMismatch);
                }
            }
            let mut next = self.next_cas.fetch_add(1, Ordering::SeqCst).wrapping_add(1);
            if next == 0 {
                next = self.next_cas.fetch_add(1, Ordering::SeqCst).wrapping_add(1);
            }
            map.insert(key.to_string(), (value.to_vec(), next));
            Ok(())
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::fake::MemoryStore;
    use super::*;
    use sluice_core::{Algorithm, SECOND};
    use std::sync::atomic::Ordering;
    use std::sync::Arc;

    fn limit(algorithm: Algorithm, requests: u64) -> Limit {
        Limit::new(algorithm, requests, 60 * SECOND).unwrap()
    }

    #[test]
    fn admits_exactly_the_limit() {
        let store = MemoryStore::default();
        for algorithm in Algorithm::ALL {
            let l = limit(algorithm, 5);
            let key = format!("k/{algorithm}");
            let allowed = (0..8)
                .filter(|_| {
                    consume(&store, &key, &l, 1_000 * SECOND, 1)
                        .unwrap()
                        .allowed
                })
                .count();
            assert_eq!(allowed, 5, "{algorithm}");
        }
    }

    #[test]
    fn retries_after_cas_mismatch() {
        let store = MemoryStore::default();
        let l = limit(Algorithm::FixedWindow, 3);
        store.inject_mismatches.store(5, Ordering::SeqCst);
        assert!(consume(&store, "k", &l, SECOND, 1).unwrap().allowed);
        assert_eq!(store.inject_mismatches.load(Ordering::SeqCst), 0);
        // Two more fit, then the limit holds: the retried write was applied once.
        assert!(consume(&store, "k", &l, SECOND, 1).unwrap().allowed);
        assert!(consume(&store, "k", &l, SECOND, 1).unwrap().allowed);
        assert!(!consume(&store, "k", &l, SECOND, 1).unwrap().allowed);
    }

    #[test]
    fn gives_up_after_max_attempts() {
        let store = MemoryStore::default();
        let l = limit(Algorithm::TokenBucket, 3);
        store
            .inject_mismatches
            .store(MAX_ATTEMPTS, Ordering::SeqCst);
        assert_eq!(consume(&store, "k", &l, SECOND, 1), Err(Contended));
        assert_eq!(store.value("k"), None);
        assert!(consume(&store, "k", &l, SECOND, 1).unwrap().allowed);
    }

    #[test]
    fn creation_race_loses_no_update() {
        // A worker that saw the key missing must not overwrite a key another
        // worker created meanwhile.
        let store = MemoryStore::default();
        let l = limit(Algorithm::FixedWindow, 10);
        assert!(consume(&store, "k", &l, SECOND, 1).unwrap().allowed);
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
            assert!(consume(&store, &key, &l, SECOND, 1).unwrap().allowed);
            assert!(consume(&store, &key, &l, SECOND, 1).unwrap().allowed);
            assert!(!consume(&store, &key, &l, SECOND, 1).unwrap().allowed);
            refund(&store, &key, &l, SECOND, 1).unwrap();
            assert!(
                consume(&store, &key, &l, SECOND, 1).unwrap().allowed,
                "{algorithm}"
            );
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
                            .filter(|_| match consume(&*store, "hot", &l, 5 * SECOND, 1) {
                                Ok(d) => d.allowed,
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
}
