//! The permits one worker's requests hold, by key and holder: what the
//! worker renews while they are held, about every third of their
//! `permit_ttl`, so that they keep counting for as long as the requests
//! live (and stop counting `permit_ttl` after a crashed worker's last
//! renewal). See [`crate::engine::concurrency`].

use crate::engine::concurrency::HeldPermit;
use sluice_core::{Holder, Nanos};
use std::collections::HashMap;

/// Where a permit is counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Place {
    /// In this Envoy's shared data.
    Local,
    /// By the limiter.
    Global,
}

#[derive(Debug)]
struct Entry {
    /// Requests holding permits of this key.
    requests: u64,
    ttl: Nanos,
    renewed_at: Nanos,
}

/// A key due for renewal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Due {
    /// Where it is counted.
    pub place: Place,
    /// The shared-data key of the bucket (local) or the limiter key (global).
    pub key: String,
    /// The entry in the bucket (local; 0 for global permits).
    pub fingerprint: u64,
    /// Whose permits.
    pub holder: Holder,
    /// For how long to renew them.
    pub ttl: Nanos,
}

/// The keys a worker's requests hold permits of.
#[derive(Debug, Default)]
pub struct Holdings {
    entries: HashMap<(Place, String, u64, Holder), Entry>,
}

impl Holdings {
    /// A request took `permit` at `now` (its acquisition counts as a
    /// renewal).
    pub fn add(&mut self, place: Place, permit: &HeldPermit, now: Nanos) {
        let key = (place, permit.key.clone(), permit.fingerprint, permit.holder);
        let entry = self.entries.entry(key).or_insert(Entry {
            requests: 0,
            ttl: permit.ttl,
            renewed_at: now,
        });
        entry.requests = entry.requests.saturating_add(1);
        entry.ttl = entry.ttl.min(permit.ttl);
        entry.renewed_at = entry.renewed_at.max(now);
    }

    /// A request gave `permit` back.
    pub fn remove(&mut self, place: Place, permit: &HeldPermit) {
        let key = (place, permit.key.clone(), permit.fingerprint, permit.holder);
        let gone = self.entries.get_mut(&key).is_some_and(|e| {
            e.requests = e.requests.saturating_sub(1);
            e.requests == 0
        });
        if gone {
            self.entries.remove(&key);
        }
    }

    /// The keys whose last renewal is a third of their ttl old or more at
    /// `now`, each taken as renewed now.
    pub fn due(&mut self, now: Nanos) -> Vec<Due> {
        let mut due = Vec::new();
        for ((place, key, fingerprint, holder), entry) in &mut self.entries {
            if now.saturating_sub(entry.renewed_at) >= entry.ttl / 3 {
                entry.renewed_at = now;
                due.push(Due {
                    place: *place,
                    key: key.clone(),
                    fingerprint: *fingerprint,
                    holder: *holder,
                    ttl: entry.ttl,
                });
            }
        }
        due
    }

    /// Keys held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::SECOND;

    fn permit(key: &str) -> HeldPermit {
        HeldPermit {
            key: key.to_string(),
            fingerprint: 0,
            weight: 1,
            holder: 9,
            ttl: 30 * SECOND,
            rule: 0,
        }
    }

    #[test]
    fn a_key_is_renewed_every_third_of_its_ttl_while_some_request_holds_it() {
        let mut h = Holdings::default();
        h.add(Place::Local, &permit("a"), 0);
        h.add(Place::Local, &permit("a"), 5 * SECOND);
        h.add(Place::Global, &permit("a"), 0);
        assert!(h.due(9 * SECOND).is_empty());
        let due = h.due(10 * SECOND);
        assert_eq!(due.len(), 1);
        assert_eq!(due[0].place, Place::Global);
        let due = h.due(15 * SECOND);
        assert_eq!((due.len(), due[0].place), (1, Place::Local));
        h.remove(Place::Local, &permit("a"));
        assert_eq!(h.len(), 2);
        h.remove(Place::Local, &permit("a"));
        h.remove(Place::Global, &permit("a"));
        assert!(h.is_empty());
        assert!(h.due(100 * SECOND).is_empty());
    }
}
