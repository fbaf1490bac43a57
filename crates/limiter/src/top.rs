//! Top limited keys: a Space-Saving summary (Metwally, Agrawal, El Abbadi,
//! 2005) of the refusals of each domain, over two rotating windows.
//!
//! A summary holds at most [`ENTRIES`] keys. A refusal of a key it holds
//! adds to its count; one of a new key takes the place of the entry with
//! the lowest count `m` and starts at `m + 1` with an error of `m`. So a
//! count is an upper bound of the key's refusals, the error bounds the
//! overcount, and any key refused more than `total / ENTRIES` times is held.
//!
//! "Recent": refusals go to the current window; once it is `window` old it
//! becomes the previous one (dropping the one before), and a read merges
//! the two. A read so covers the last `window` to `2 × window` of refusals.
//!
//! Memory is fixed: at most `--top-domains` domains ×
//! 2 windows × [`ENTRIES`] entries, each its shown key (16 bytes hashed, up
//! to 512 clear), its limit's name and about 100 bytes of bookkeeping.

use sluice_core::Nanos;
use std::collections::{BTreeSet, HashMap};
use std::fmt::Write as _;
use std::sync::{Mutex, RwLock};

/// How keys are shown (`--introspection-keys`): in the API, the metric and
/// the summaries themselves, so a hashed key is never kept clear.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KeyDisplay {
    /// As the check named it.
    Clear,
    /// The first 16 hex digits of the SHA-256 of the key.
    #[default]
    Hashed,
}

impl KeyDisplay {
    /// `key` as shown.
    pub fn show(self, key: &str) -> String {
        match self {
            KeyDisplay::Clear => key.to_string(),
            KeyDisplay::Hashed => {
                let digest = ring::digest::digest(&ring::digest::SHA256, key.as_bytes());
                let mut out = String::with_capacity(16);
                for b in digest.as_ref().iter().take(8) {
                    let _ = write!(out, "{b:02x}");
                }
                out
            }
        }
    }
}

/// The key and the limit a store identity names (see
/// [`state_id`](crate::store::state_id)): `scope/key|algorithm|window_ms`
/// gives `key` and `algorithm/window_ms`, `scope/key|concurrency` gives
/// `key` and `concurrency`.
pub fn split_id<'a>(scope: &str, id: &'a str) -> (&'a str, &'a str) {
    let rest = id
        .strip_prefix(scope)
        .and_then(|r| r.strip_prefix('/'))
        .unwrap_or(id);
    if let Some(key) = rest.strip_suffix("|concurrency") {
        return (key, "concurrency");
    }
    let mut parts = rest.rsplitn(3, '|');
    let (window, algorithm, key) = (parts.next(), parts.next(), parts.next());
    match (key, algorithm, window) {
        (Some(key), Some(_), Some(_)) => (key, &rest[key.len() + 1..]),
        _ => (rest, ""),
    }
}

/// Entries of one summary (per domain and window).
pub const ENTRIES: usize = 256;

/// One key as a summary holds it: the key shown and its limit.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Subject {
    /// The key, clear or hashed.
    pub key: String,
    /// The limit that refused it.
    pub limit: String,
}

/// One entry read from a summary: `refusals` bounds the key's refusals
/// from above, `refusals - error` from below.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counted {
    /// The key and its limit.
    pub subject: Subject,
    /// Upper bound of its refusals.
    pub refusals: u64,
    /// How much of `refusals` may come from other keys.
    pub error: u64,
}

/// A Space-Saving summary of at most `capacity` entries.
#[derive(Debug, Clone)]
pub struct SpaceSaving {
    capacity: usize,
    slots: Vec<Counted>,
    index: HashMap<Subject, usize>,
    /// (count, slot): the entry to replace is the first.
    order: BTreeSet<(u64, usize)>,
}

impl SpaceSaving {
    /// An empty summary of at most `capacity` entries (at least 1).
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        SpaceSaving {
            capacity,
            slots: Vec::with_capacity(capacity),
            index: HashMap::with_capacity(capacity),
            order: BTreeSet::new(),
        }
    }

    /// Counts `n` refusals of `subject`.
    pub fn add(&mut self, subject: Subject, n: u64) {
        if let Some(&slot) = self.index.get(&subject) {
            self.bump(slot, n, 0);
            return;
        }
        if self.slots.len() < self.capacity {
            let slot = self.slots.len();
            self.index.insert(subject.clone(), slot);
            self.slots.push(Counted {
                subject,
                refusals: 0,
                error: 0,
            });
            self.order.insert((0, slot));
            self.bump(slot, n, 0);
            return;
        }
        let Some(&(min, slot)) = self.order.iter().next() else {
            return;
        };
        if let Some(old) = self.slots.get_mut(slot) {
            self.index.remove(&old.subject);
            old.subject = subject.clone();
            old.error = 0;
            self.index.insert(subject, slot);
        }
        self.bump(slot, n, min);
    }

    /// Adds `n` to the count of `slot`, its error set to `error` when
    /// positive (a replaced entry).
    fn bump(&mut self, slot: usize, n: u64, error: u64) {
        let Some(entry) = self.slots.get_mut(slot) else {
            return;
        };
        self.order.remove(&(entry.refusals, slot));
        entry.refusals = entry.refusals.saturating_add(n);
        if error > 0 {
            entry.error = error;
        }
        self.order.insert((entry.refusals, slot));
    }

    /// The lowest count when full (what a key not held may have had), else 0.
    pub fn floor(&self) -> u64 {
        if self.slots.len() < self.capacity {
            return 0;
        }
        self.order.iter().next().map_or(0, |&(c, _)| c)
    }

    /// Every entry, in no order.
    pub fn entries(&self) -> &[Counted] {
        &self.slots
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// True when nothing was counted.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }
}

/// Merges two summaries of one domain: a key held by one only may have
/// had up to the other's floor there, counted as error.
pub fn merge(a: &SpaceSaving, b: &SpaceSaving) -> Vec<Counted> {
    let mut out: HashMap<&Subject, Counted> = HashMap::new();
    for (this, other) in [(a, b), (b, a)] {
        for e in this.entries() {
            let merged = out.entry(&e.subject).or_insert_with(|| Counted {
                subject: e.subject.clone(),
                refusals: 0,
                error: 0,
            });
            merged.refusals = merged.refusals.saturating_add(e.refusals);
            merged.error = merged.error.saturating_add(e.error);
            if !other.index.contains_key(&e.subject) {
                merged.refusals = merged.refusals.saturating_add(other.floor());
                merged.error = merged.error.saturating_add(other.floor());
            }
        }
    }
    let mut list: Vec<Counted> = out.into_values().collect();
    list.sort_by(|x, y| {
        y.refusals
            .cmp(&x.refusals)
            .then_with(|| x.subject.cmp(&y.subject))
    });
    list
}

/// One domain's two windows.
#[derive(Debug)]
struct Windows {
    started: Nanos,
    current: SpaceSaving,
    previous: SpaceSaving,
}

impl Windows {
    fn new(now: Nanos) -> Self {
        Windows {
            started: now,
            current: SpaceSaving::new(ENTRIES),
            previous: SpaceSaving::new(ENTRIES),
        }
    }

    /// Moves the windows on to `now`.
    fn roll(&mut self, now: Nanos, window: Nanos) {
        let age = now.saturating_sub(self.started);
        if age < window {
            return;
        }
        let fresh = SpaceSaving::new(ENTRIES);
        if age < window.saturating_mul(2) {
            self.previous = std::mem::replace(&mut self.current, fresh);
            self.started = self.started.saturating_add(window);
        } else {
            self.previous = SpaceSaving::new(ENTRIES);
            self.current = fresh;
            self.started = now;
        }
    }
}

/// The top limited keys of every domain, at most `domains` of them.
#[derive(Debug)]
pub struct TopKeys {
    window: Nanos,
    domains: usize,
    display: KeyDisplay,
    by_domain: RwLock<HashMap<String, Mutex<Windows>>>,
}

impl TopKeys {
    /// Summaries over windows of `window`, for at most `domains` domains
    /// (refusals of further domains are not counted), keys kept as
    /// `display` shows them.
    pub fn new(window: Nanos, domains: usize, display: KeyDisplay) -> Self {
        TopKeys {
            window: window.max(1),
            domains,
            display,
            by_domain: RwLock::new(HashMap::new()),
        }
    }

    /// How keys are shown.
    pub fn display(&self) -> KeyDisplay {
        self.display
    }

    /// Counts `n` refusals of `key` under `limit` in `domain` at `now`.
    pub fn refused(&self, domain: &str, key: &str, limit: &str, n: u64, now: Nanos) {
        if n == 0 {
            return;
        }
        let subject = Subject {
            key: self.display.show(key),
            limit: limit.to_string(),
        };
        self.record(domain, subject, n, now);
    }

    /// Counts `n` refusals of `subject` (a key already as shown).
    fn record(&self, domain: &str, subject: Subject, n: u64, now: Nanos) {
        {
            let map = self.by_domain.read().unwrap_or_else(|e| e.into_inner());
            if let Some(w) = map.get(domain) {
                let mut w = w.lock().unwrap_or_else(|e| e.into_inner());
                w.roll(now, self.window);
                w.current.add(subject, n);
                return;
            }
        }
        let mut map = self.by_domain.write().unwrap_or_else(|e| e.into_inner());
        if !map.contains_key(domain) && map.len() >= self.domains {
            return;
        }
        let w = map
            .entry(domain.to_string())
            .or_insert_with(|| Mutex::new(Windows::new(now)));
        let w = w.get_mut().unwrap_or_else(|e| e.into_inner());
        w.roll(now, self.window);
        w.current.add(subject, n);
    }

    /// The `n` keys of `domain` refused most over the last windows, most
    /// refused first.
    pub fn top(&self, domain: &str, n: usize, now: Nanos) -> Vec<Counted> {
        let map = self.by_domain.read().unwrap_or_else(|e| e.into_inner());
        let Some(w) = map.get(domain) else {
            return Vec::new();
        };
        let mut w = w.lock().unwrap_or_else(|e| e.into_inner());
        w.roll(now, self.window);
        let mut list = merge(&w.current, &w.previous);
        list.truncate(n);
        list
    }

    /// The domains counted, sorted.
    pub fn domains(&self) -> Vec<String> {
        let map = self.by_domain.read().unwrap_or_else(|e| e.into_inner());
        let mut names: Vec<String> = map.keys().cloned().collect();
        names.sort();
        names
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subject(key: &str) -> Subject {
        Subject {
            key: key.to_string(),
            limit: "l".to_string(),
        }
    }

    /// A flood key among 1,000,000 distinct keys comes first, the summary
    /// never holds more than its entries, and every count's error bound
    /// holds against the exact counts.
    #[test]
    fn a_flood_key_among_a_million_distinct_keys_comes_first() {
        let mut s = SpaceSaving::new(ENTRIES);
        let mut exact: HashMap<String, u64> = HashMap::new();
        let mut total = 0u64;
        for i in 0..1_000_000u64 {
            let key = format!("k{i}");
            s.add(subject(&key), 1);
            *exact.entry(key).or_default() += 1;
            total += 1;
            if i % 50 == 0 {
                s.add(subject("flood"), 1);
                *exact.entry("flood".into()).or_default() += 1;
                total += 1;
            }
            assert!(s.len() <= ENTRIES);
        }
        let top = merge(&s, &SpaceSaving::new(ENTRIES));
        assert_eq!(top[0].subject.key, "flood");
        assert_eq!(exact["flood"], 20_000);
        for e in &top {
            let truth = exact[&e.subject.key];
            assert!(e.refusals >= truth, "{e:?} under {truth}");
            assert!(e.refusals - e.error <= truth, "{e:?} over {truth}");
            assert!(e.error <= total / ENTRIES as u64, "{e:?}");
        }
        assert_eq!(s.len(), ENTRIES);
        assert_eq!(s.index.len(), ENTRIES);
        assert_eq!(s.order.len(), ENTRIES);
    }

    #[test]
    fn counts_are_exact_while_the_keys_fit() {
        let mut s = SpaceSaving::new(4);
        for (k, n) in [("a", 5), ("b", 3), ("a", 2), ("c", 1)] {
            s.add(subject(k), n);
        }
        let top = merge(&s, &SpaceSaving::new(4));
        let got: Vec<(&str, u64, u64)> = top
            .iter()
            .map(|c| (c.subject.key.as_str(), c.refusals, c.error))
            .collect();
        assert_eq!(got, vec![("a", 7, 0), ("b", 3, 0), ("c", 1, 0)]);
    }

    #[test]
    fn a_new_key_in_a_full_summary_replaces_the_lowest_with_its_error() {
        let mut s = SpaceSaving::new(2);
        s.add(subject("a"), 5);
        s.add(subject("b"), 2);
        s.add(subject("c"), 1);
        let top = merge(&s, &SpaceSaving::new(2));
        let got: Vec<(&str, u64, u64)> = top
            .iter()
            .map(|c| (c.subject.key.as_str(), c.refusals, c.error))
            .collect();
        assert_eq!(got, vec![("a", 5, 0), ("c", 3, 2)]);
    }

    #[test]
    fn refusals_older_than_two_windows_are_forgotten() {
        let top = TopKeys::new(100, 16, KeyDisplay::Clear);
        top.record("d", subject("old"), 9, 0);
        top.record("d", subject("new"), 1, 150);
        let now: Vec<(String, u64)> = top
            .top("d", 10, 150)
            .into_iter()
            .map(|c| (c.subject.key, c.refusals))
            .collect();
        assert_eq!(now, vec![("old".to_string(), 9), ("new".to_string(), 1)]);
        let later: Vec<(String, u64)> = top
            .top("d", 10, 250)
            .into_iter()
            .map(|c| (c.subject.key, c.refusals))
            .collect();
        assert_eq!(later, vec![("new".to_string(), 1)]);
        assert!(top.top("d", 10, 1_000).is_empty());
    }

    #[test]
    fn an_identity_splits_into_its_key_and_its_limit() {
        assert_eq!(
            split_id("demo", "demo/g/0/a|b|gcra|60000"),
            ("g/0/a|b", "gcra|60000")
        );
        assert_eq!(
            split_id("demo", "demo/conc/x|concurrency"),
            ("conc/x", "concurrency")
        );
    }

    #[test]
    fn hashed_keys_are_the_first_16_hex_digits_of_their_sha256() {
        // sha256("alice") = 2bd806c97f0e00af1a1fc3328fa763a9269723c8db8fac4f93af71db186d6e90
        assert_eq!(KeyDisplay::Hashed.show("alice"), "2bd806c97f0e00af");
        assert_eq!(KeyDisplay::Clear.show("alice"), "alice");
        let top = TopKeys::new(1_000, 2, KeyDisplay::Hashed);
        top.refused("d", "alice", "l", 3, 0);
        let got = top.top("d", 1, 0);
        assert_eq!(got[0].subject.key, "2bd806c97f0e00af");
        assert_eq!(got[0].refusals, 3);
    }

    #[test]
    fn domains_beyond_the_cap_are_not_counted() {
        let top = TopKeys::new(1_000, 2, KeyDisplay::Clear);
        for d in ["a", "b", "c"] {
            top.record(d, subject("k"), 1, 0);
        }
        assert_eq!(top.domains(), vec!["a".to_string(), "b".to_string()]);
        assert!(top.top("c", 10, 0).is_empty());
    }
}
