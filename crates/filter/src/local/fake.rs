use super::{SetError, SharedStore};
use sluice_core::Nanos;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;

/// Envoy's rules: cas values count up from 1 and skip 0; a non-zero cas
/// must match on an existing key; a missing key is always created.
#[derive(Default)]
pub struct MemoryStore {
    map: Mutex<HashMap<String, (Vec<u8>, u32)>>,
    next_cas: AtomicU32,
    /// Fail this many upcoming sets with a cas mismatch.
    pub inject_mismatches: AtomicU32,
    /// Sets refused with a cas mismatch so far (injected or real).
    pub mismatches: AtomicU64,
    /// The time the store tells ([`SharedStore::clock`]); 0 tells none.
    pub clock: AtomicU64,
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
            self.mismatches.fetch_add(1, Ordering::SeqCst);
            return Err(SetError::CasMismatch);
        }
        let mut map = self.map.lock().map_err(|_| SetError::Failed)?;
        if let Some((_, current)) = map.get(key) {
            if cas.is_some_and(|c| c != 0 && c != *current) {
                self.mismatches.fetch_add(1, Ordering::SeqCst);
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

    fn clock(&self) -> Option<Nanos> {
        Some(self.clock.load(Ordering::SeqCst)).filter(|&t| t > 0)
    }
}
