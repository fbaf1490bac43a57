//! The store's identity of a limit's state.

use sluice_core::{Limit, MILLISECOND};
use sluice_wire::{push_key_hash, MAX_KEY_BYTES};

/// Appends `key`, or, when longer than [`MAX_KEY_BYTES`] (an RLS
/// descriptor's value can be as long as a gRPC message), `#` and its hash:
/// a stored identity is never longer than its scope plus 512 bytes plus its
/// suffix. Keys that share a hash share a state, which errs on the side of
/// limiting. The HTTP API refuses longer keys, so only RLS and RLQS keys
/// are hashed.
fn push_key(id: &mut String, key: &str) {
    if key.len() <= MAX_KEY_BYTES {
        id.push_str(key);
    } else {
        push_key_hash(id, key);
    }
}

/// The identity of a limit's state: `scope/key|algorithm|window_ms`. The
/// algorithm and the window are part of it, so two limits on one key (say
/// 10/s and 1000/h) keep separate states and a state never meets another
/// algorithm; the count and the burst are not, so a limit whose count
/// changes keeps its state. `scope` is the check's domain (RLS domains
/// come escaped and prefixed with `rls:`, which no HTTP API domain has).
pub fn state_id(scope: &str, key: &str, limit: &Limit) -> String {
    let window = (limit.window / MILLISECOND).to_string();
    let algorithm = limit.algorithm.name();
    let mut id = String::with_capacity(
        scope.len() + key.len().min(MAX_KEY_BYTES) + algorithm.len() + window.len() + 3,
    );
    id.push_str(scope);
    id.push('/');
    push_key(&mut id, key);
    id.push('|');
    id.push_str(algorithm);
    id.push('|');
    id.push_str(&window);
    id
}

/// The identity of a concurrency limit's state: `scope/key|concurrency`.
/// Neither the permits nor the ttl are part of it, so a limit whose count
/// or ttl changes keeps its holders; no rate algorithm is named
/// `concurrency`, so it never meets a rate limit's state.
pub fn permits_id(scope: &str, key: &str) -> String {
    let mut id = String::with_capacity(scope.len() + key.len().min(MAX_KEY_BYTES) + 13);
    id.push_str(scope);
    id.push('/');
    push_key(&mut id, key);
    id.push_str("|concurrency");
    id
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::{Algorithm, SECOND};

    #[test]
    fn the_identity_names_scope_key_algorithm_and_window() {
        let limit = Limit::new(Algorithm::Gcra, 100, 60 * SECOND).unwrap();
        assert_eq!(
            state_id("demo", "per-ip/1.2.3.4", &limit),
            "demo/per-ip/1.2.3.4|gcra|60000"
        );
        let other = Limit::new(Algorithm::Gcra, 7, 60 * SECOND).unwrap();
        assert_eq!(state_id("d", "k", &limit), state_id("d", "k", &other));
        assert_eq!(permits_id("demo", "conc/0/a"), "demo/conc/0/a|concurrency");
    }

    #[test]
    fn keys_longer_than_512_bytes_are_kept_as_their_hash() {
        let limit = Limit::new(Algorithm::Gcra, 100, 60 * SECOND).unwrap();
        let fits = "k".repeat(MAX_KEY_BYTES);
        assert_eq!(
            state_id("rls:d", &fits, &limit),
            format!("rls:d/{fits}|gcra|60000")
        );
        let long = "v".repeat(1 << 20);
        let id = state_id("rls:d", &long, &limit);
        assert!(
            id.starts_with("rls:d/#") && id.ends_with("|gcra|60000"),
            "{id}"
        );
        assert_eq!(id.len(), "rls:d/#".len() + 16 + "|gcra|60000".len());
        assert_eq!(id, state_id("rls:d", &long, &limit));
        let other = format!("{}w", &long[1..]);
        assert_ne!(id, state_id("rls:d", &other, &limit));
        let permits = permits_id("rls:d", &long);
        assert_eq!(permits.len(), "rls:d/#".len() + 16 + "|concurrency".len());
    }
}
