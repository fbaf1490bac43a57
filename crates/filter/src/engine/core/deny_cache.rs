//! The over-limit cache of global limits.
//!
//! When the limiter denies a key with a retry time, the deadline is kept in
//! shared data (one bounded slot table per global limit, like local state)
//! and the key is denied locally until then, without calling out. An entry
//! holds the deadline and its owner: the key's fingerprint mixed with the
//! shape of the limit that denied it ([`owner`]), so that another key
//! hashed to the same slot is not denied, nor the same key under a limit
//! that a new configuration changed.

use crate::local::SharedStore;
use sluice_core::{Limit, Nanos};

/// The owner of a cached denial: the key's `fingerprint` mixed with
/// [`shape`] of the limit that denied it.
pub fn owner(fingerprint: u64, shape: u64) -> u64 {
    fingerprint ^ shape
}

/// What a global limit decides under: `limit`'s algorithm, window, burst
/// and soft allowance, and `requests` (the key's own, an override's
/// included). A configuration that changes any of them finds no denial
/// cached under another: the limiter decides the key again at once.
pub fn shape(limit: &Limit, requests: u64) -> u64 {
    let words = [
        u64::from(limit.algorithm.code()),
        limit.window,
        limit.burst,
        u64::from(limit.soft_percent),
        requests,
    ];
    // A word at a time (every global request computes it), then
    // splitmix64's finaliser: owners of one key under two shapes differ in
    // many bits.
    let mut h: u64 = 0;
    for word in words {
        h = (h.rotate_left(5) ^ word).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// A cached denial.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Denied {
    /// Denied until then.
    pub until: Nanos,
    /// The limiter's penalty box holds the key until then (not only its
    /// quota).
    pub blocked: bool,
}

/// The denial cached at `slot_key` for `owner` (see [`owner`]), if it is
/// still ahead of `now`.
pub fn lookup<S: SharedStore + ?Sized>(
    store: &S,
    slot_key: &str,
    owner: u64,
    now: Nanos,
) -> Option<Denied> {
    let bytes = store.get(slot_key).0?;
    decode(&bytes, owner).filter(|d| d.until > now)
}

/// Caches at `slot_key` a denial of `owner` (see [`owner`]).
pub fn remember<S: SharedStore + ?Sized>(store: &S, slot_key: &str, owner: u64, denied: Denied) {
    // A cache, not a counter: last writer wins.
    let _ = store.set(slot_key, &encode(denied, owner), None);
}

/// The stored form of an entry: the deadline, the fingerprint, then 1 for
/// a block.
fn encode(denied: Denied, fingerprint: u64) -> [u8; 17] {
    let mut out = [0; 17];
    out[..8].copy_from_slice(&denied.until.to_le_bytes());
    out[8..16].copy_from_slice(&fingerprint.to_le_bytes());
    out[16] = u8::from(denied.blocked);
    out
}

/// The denial of an entry if it belongs to `fingerprint` (an entry of 16
/// bytes, as written before blocks were cached, is no block).
fn decode(bytes: &[u8], fingerprint: u64) -> Option<Denied> {
    let until = u64::from_le_bytes(bytes.get(..8)?.try_into().ok()?);
    let owner = u64::from_le_bytes(bytes.get(8..16)?.try_into().ok()?);
    let blocked = bytes.get(16).is_some_and(|&b| b == 1);
    (owner == fingerprint).then_some(Denied { until, blocked })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::local::fake::MemoryStore;

    #[test]
    fn deny_cache_entries() {
        let denied = |until, blocked| Denied { until, blocked };
        let e = encode(denied(123, false), 456);
        assert_eq!(decode(&e, 456), Some(denied(123, false)));
        assert_eq!(decode(&e, 457), None);
        assert_eq!(decode(&e[..8], 456), None);
        // An entry of 16 bytes reads as no block.
        assert_eq!(decode(&e[..16], 456), Some(denied(123, false)));
        let b = encode(denied(9, true), 456);
        assert_eq!(decode(&b, 456), Some(denied(9, true)));
    }

    #[test]
    fn entries_hold_until_their_deadline() {
        let store = MemoryStore::default();
        assert_eq!(lookup(&store, "k", 7, 100), None);
        let quota = Denied {
            until: 200,
            blocked: false,
        };
        remember(&store, "k", 7, quota);
        assert_eq!(lookup(&store, "k", 7, 199), Some(quota));
        assert_eq!(lookup(&store, "k", 7, 200), None);
        assert_eq!(lookup(&store, "k", 8, 100), None);
    }

    #[test]
    fn a_changed_limit_finds_no_denial_of_the_old_one() {
        let limit = Limit {
            algorithm: sluice_core::Algorithm::Gcra,
            requests: 10,
            window: 60 * sluice_core::SECOND,
            burst: 10,
            precision: 1,
            soft_percent: 0,
            max_delay: None,
        };
        let base = shape(&limit, 10);
        assert_eq!(base, shape(&limit, 10));
        let changed = [
            Limit {
                algorithm: sluice_core::Algorithm::TokenBucket,
                ..limit
            },
            Limit {
                window: 61 * sluice_core::SECOND,
                ..limit
            },
            Limit { burst: 11, ..limit },
            Limit {
                soft_percent: 10,
                ..limit
            },
        ];
        let mut shapes: Vec<u64> = changed.iter().map(|l| shape(l, 10)).collect();
        shapes.push(shape(&limit, 11));
        let store = MemoryStore::default();
        let boxed = Denied {
            until: 200,
            blocked: true,
        };
        remember(&store, "k", owner(7, base), boxed);
        assert_eq!(lookup(&store, "k", owner(7, base), 100), Some(boxed));
        for other in shapes {
            assert_ne!(other, base);
            assert_eq!(lookup(&store, "k", owner(7, other), 100), None);
        }
        // max_delay and precision do not change what the limiter decides
        // for a key already denied
        let delayed = Limit {
            max_delay: Some(sluice_core::SECOND),
            ..limit
        };
        assert_eq!(shape(&delayed, 10), base);
    }
}
