//! The over-limit cache of global limits.
//!
//! When the limiter denies a key with a retry time, the deadline is kept in
//! shared data (one bounded slot table per global limit, like local state)
//! and the key is denied locally until then, without calling out. An entry
//! holds the deadline and the key's fingerprint, so that another key hashed
//! to the same slot is not denied.

use crate::local::SharedStore;
use sluice_core::Nanos;

/// The deadline cached at `slot_key` for the key with `fingerprint`, if it
/// is still ahead of `now`.
pub fn lookup<S: SharedStore + ?Sized>(
    store: &S,
    slot_key: &str,
    fingerprint: u64,
    now: Nanos,
) -> Option<Nanos> {
    let bytes = store.get(slot_key).0?;
    decode(&bytes, fingerprint).filter(|&deadline| deadline > now)
}

/// Caches at `slot_key` a denial of the key with `fingerprint` until `deadline`.
pub fn remember<S: SharedStore + ?Sized>(
    store: &S,
    slot_key: &str,
    fingerprint: u64,
    deadline: Nanos,
) {
    // A cache, not a counter: last writer wins.
    let _ = store.set(slot_key, &encode(deadline, fingerprint), None);
}

/// The stored form of an entry: the deadline, then the fingerprint.
fn encode(deadline: Nanos, fingerprint: u64) -> [u8; 16] {
    let mut out = [0; 16];
    let (a, b) = out.split_at_mut(8);
    a.copy_from_slice(&deadline.to_le_bytes());
    b.copy_from_slice(&fingerprint.to_le_bytes());
    out
}

/// The deadline of an entry if it belongs to `fingerprint`.
fn decode(bytes: &[u8], fingerprint: u64) -> Option<Nanos> {
    let deadline = u64::from_le_bytes(bytes.get(..8)?.try_into().ok()?);
    let owner = u64::from_le_bytes(bytes.get(8..16)?.try_into().ok()?);
    (owner == fingerprint).then_some(deadline)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::local::fake::MemoryStore;

    #[test]
    fn deny_cache_entries() {
        let e = encode(123, 456);
        assert_eq!(decode(&e, 456), Some(123));
        assert_eq!(decode(&e, 457), None);
        assert_eq!(decode(&e[..8], 456), None);
    }

    #[test]
    fn entries_hold_until_their_deadline() {
        let store = MemoryStore::default();
        assert_eq!(lookup(&store, "k", 7, 100), None);
        remember(&store, "k", 7, 200);
        assert_eq!(lookup(&store, "k", 7, 199), Some(200));
        assert_eq!(lookup(&store, "k", 7, 200), None);
        assert_eq!(lookup(&store, "k", 8, 100), None);
    }
}
