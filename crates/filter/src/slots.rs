//! Keyed hashing of key text: a key's 64-bit fingerprint, and the slot of
//! keys whose state is one shared-data entry per slot.
//!
//! Local rate and concurrency limits keep their keys in key tables
//! ([`crate::table`]), where the fingerprint tags each key's entry. Leases
//! and over-limit caches of global limits use `local_max_keys` slots: a slot
//! is `fingerprint % local_max_keys`, and a key whose slot another key holds
//! checks the fingerprint and misses (asks the limiter). The hash key (the seed) is
//! chosen once per domain and kept in shared data, so every worker agrees
//! while clients cannot precompute where their keys land without knowing it.

use std::hash::Hasher;

/// Keyed hashing of key text into slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotHasher {
    k0: u64,
    k1: u64,
}

/// Length of a stored seed.
pub const SEED_LEN: usize = 16;

impl SlotHasher {
    /// A hasher keyed by a stored seed; `None` when `bytes` is not a seed.
    pub fn from_seed(bytes: &[u8]) -> Option<SlotHasher> {
        let k0 = u64::from_le_bytes(bytes.get(..8)?.try_into().ok()?);
        let k1 = u64::from_le_bytes(bytes.get(8..SEED_LEN)?.try_into().ok()?);
        Some(SlotHasher { k0, k1 })
    }

    /// A seed derived from `entropy`: the fallback when the host gives no
    /// random bytes (the filter draws its seed from the host's random
    /// source; see `src/host/random.rs`).
    pub fn new_seed(entropy: u64) -> [u8; SEED_LEN] {
        // Spread the time's bits over both halves of the key.
        let k0 = splitmix(entropy);
        let k1 = splitmix(k0 ^ entropy.rotate_left(32));
        let mut seed = [0; SEED_LEN];
        let (a, b) = seed.split_at_mut(8);
        a.copy_from_slice(&k0.to_le_bytes());
        b.copy_from_slice(&k1.to_le_bytes());
        seed
    }

    /// The 64-bit keyed hash of `key`.
    pub fn fingerprint(&self, key: &str) -> u64 {
        // std's SipHash-2-4 is the keyed hash we need; it is deprecated only
        // in favour of the unkeyed DefaultHasher.
        #[allow(deprecated)]
        let mut hasher = std::hash::SipHasher::new_with_keys(self.k0, self.k1);
        hasher.write(key.as_bytes());
        hasher.finish()
    }
}

/// The slot of a key with `fingerprint` among `slots` (which must be
/// non-zero; zero gives slot 0).
pub fn slot_of(fingerprint: u64, slots: u64) -> u64 {
    fingerprint.checked_rem(slots).unwrap_or(0)
}

/// SplitMix64's finaliser: spreads `x`'s bits over the result.
pub(crate) fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_round_trips_and_keys_the_hash() {
        let a =
            SlotHasher::from_seed(&SlotHasher::new_seed(1)).unwrap_or(SlotHasher { k0: 0, k1: 0 });
        let b =
            SlotHasher::from_seed(&SlotHasher::new_seed(2)).unwrap_or(SlotHasher { k0: 0, k1: 0 });
        assert_ne!(a, b);
        assert_eq!(a.fingerprint("203.0.113.7"), a.fingerprint("203.0.113.7"));
        assert_ne!(a.fingerprint("203.0.113.7"), b.fingerprint("203.0.113.7"));
        assert_eq!(SlotHasher::from_seed(&[1, 2, 3]), None);
    }

    #[test]
    fn slots_are_bounded_and_spread() {
        let h =
            SlotHasher::from_seed(&SlotHasher::new_seed(42)).unwrap_or(SlotHasher { k0: 0, k1: 0 });
        let mut counts = [0u32; 16];
        for i in 0..16_000 {
            let slot = slot_of(h.fingerprint(&format!("10.0.{}.{}", i / 256, i % 256)), 16);
            assert!(slot < 16);
            counts[slot as usize] += 1;
        }
        assert!(
            counts.iter().all(|&c| (800..1200).contains(&c)),
            "{counts:?}"
        );
        assert_eq!(slot_of(h.fingerprint("x"), 1), 0);
        assert_eq!(slot_of(h.fingerprint("x"), 0), 0);
    }
}
