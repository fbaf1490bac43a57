//! The over-limit cache of global limits.
//!
//! When the limiter denies a key with a retry time, the deadline is cached in
//! shared data (one bounded slot table per limit, like local state) and the
//! key is denied locally until then without calling out. The call-out's JSON
//! is [`sluice_wire`]'s.

use sluice_core::{Decision, Limit, Nanos};

/// The stored form of an over-limit cache entry: the deadline and the key's
/// fingerprint (so a colliding key in the same slot is not denied).
pub fn encode_deny(deadline: Nanos, fingerprint: u64) -> [u8; 16] {
    let mut out = [0; 16];
    let (a, b) = out.split_at_mut(8);
    a.copy_from_slice(&deadline.to_le_bytes());
    b.copy_from_slice(&fingerprint.to_le_bytes());
    out
}

/// The deadline of a cache entry if it belongs to `fingerprint`.
pub fn decode_deny(bytes: &[u8], fingerprint: u64) -> Option<Nanos> {
    let deadline = u64::from_le_bytes(bytes.get(..8)?.try_into().ok()?);
    let owner = u64::from_le_bytes(bytes.get(8..16)?.try_into().ok()?);
    (owner == fingerprint).then_some(deadline)
}

/// The denial reported while a key is in the over-limit cache.
pub fn cached_denial(limit: &Limit, remaining_time: Nanos) -> Decision {
    Decision::over_limit(limit.requests, remaining_time)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deny_cache_entries() {
        let e = encode_deny(123, 456);
        assert_eq!(decode_deny(&e, 456), Some(123));
        assert_eq!(decode_deny(&e, 457), None);
        assert_eq!(decode_deny(&e[..8], 456), None);
    }
}
