//! How many Envoys report a bucket, counted through the store so that every
//! limiter sharing it agrees: each stream adds 1 to the bucket's presence
//! counter on its first report in each presence window (a fixed window
//! aligned to the epoch), and reads the counter (adds 0) on the others.
//! The estimate is the most seen in this window or the previous one, so a
//! window just started does not read as fewer Envoys, and an Envoy gone
//! stops counting after two windows.
//!
//! A count is **settled** once this stream read it at two reports of one
//! window (this one or the previous): Envoy reports every 5 s, so the second
//! read comes after every Envoy reporting the bucket added itself in that
//! window. A single read may precede the others' (a bucket's first window,
//! or a window that began just before this stream's report).

use crate::store::StoreItem;
use sluice_core::{Algorithm, Limit, Nanos};

/// The presence counter's quota: far more Envoys than any fleet has.
const MAX_ENVOYS: u64 = 1 << 32;

/// One stream's view of a bucket's presence counter.
#[derive(Debug, Clone)]
pub struct Presence {
    window: Nanos,
    /// The window last counted in (`None`: never).
    index: Option<u64>,
    previous: u64,
    current: u64,
    /// Whether the previous window's count was settled.
    previous_settled: bool,
    /// Reads in the current window.
    reads: u32,
}

impl Presence {
    /// A view over windows of `window` (at least 1 ms).
    pub fn new(window: Nanos) -> Presence {
        Presence {
            window: window.max(sluice_core::MILLISECOND),
            index: None,
            previous: 0,
            current: 0,
            previous_settled: false,
            reads: 0,
        }
    }

    /// The store item to send at `now` for the counter `id`: adds this
    /// stream once per window.
    pub fn item(&self, id: &str, now: Nanos) -> Option<StoreItem> {
        let limit = Limit::new(Algorithm::FixedWindow, MAX_ENVOYS, self.window).ok()?;
        let hits = u64::from(self.index != Some(now / self.window));
        Some(StoreItem::new(format!("rlqs-envoys:{id}"), limit, hits))
    }

    /// Records the counter's `remaining` as read at `now`.
    pub fn observe(&mut self, now: Nanos, remaining: u64) {
        let count = MAX_ENVOYS.saturating_sub(remaining);
        let index = now / self.window;
        match self.index {
            Some(i) if i == index => {
                self.current = self.current.max(count);
                self.reads = self.reads.saturating_add(1);
            }
            Some(i) => {
                let follows = i + 1 == index;
                self.previous = if follows { self.current } else { 0 };
                self.previous_settled = follows && self.reads >= 2;
                self.current = count;
                self.reads = 1;
                self.index = Some(index);
            }
            None => {
                self.current = count;
                self.reads = 1;
                self.index = Some(index);
            }
        }
    }

    /// Whether the count holds every Envoy reporting the bucket (see the
    /// module's doc).
    pub fn settled(&self) -> bool {
        self.reads >= 2 || self.previous_settled
    }

    /// The Envoys reporting the bucket: at least this one.
    pub fn envoys(&self) -> u64 {
        self.previous.max(self.current).max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::SECOND;

    #[test]
    fn a_count_read_once_at_a_window_start_is_not_settled() {
        // Envoy A counted alone at its first report; B joined later in that
        // window; A's next report is the first of a new window, before B's.
        let mut a = Presence::new(10 * SECOND);
        a.observe(9 * SECOND, MAX_ENVOYS - 1);
        a.observe(14 * SECOND, MAX_ENVOYS - 1);
        assert_eq!(a.envoys(), 1);
        assert!(!a.settled());
        a.observe(19 * SECOND, MAX_ENVOYS - 2);
        assert_eq!(a.envoys(), 2);
        assert!(a.settled());
    }

    #[test]
    fn counts_once_per_window_and_remembers_the_previous_one() {
        let mut p = Presence::new(10 * SECOND);
        assert_eq!(p.envoys(), 1);
        let first = p.item("b", 3 * SECOND).unwrap();
        assert_eq!(first.hits(), 1);
        assert_eq!(first.rate().unwrap().limit.window, 10 * SECOND);
        p.observe(3 * SECOND, MAX_ENVOYS - 1);
        assert!(!p.settled());
        assert_eq!(p.item("b", 4 * SECOND).unwrap().hits(), 0);
        p.observe(4 * SECOND, MAX_ENVOYS - 3);
        assert_eq!(p.envoys(), 3);
        assert!(p.settled());
        // A new window: counted again, the previous window still read.
        assert_eq!(p.item("b", 11 * SECOND).unwrap().hits(), 1);
        p.observe(11 * SECOND, MAX_ENVOYS - 1);
        assert_eq!(p.envoys(), 3);
        // Read once here, but twice in the previous window.
        assert!(p.settled());
        p.observe(21 * SECOND, MAX_ENVOYS - 1);
        assert_eq!(p.envoys(), 1);
        assert!(!p.settled());
        // A gap of more than a window forgets the old count.
        p.observe(45 * SECOND, MAX_ENVOYS - 2);
        assert_eq!(p.envoys(), 2);
        assert!(!p.settled());
    }
}
