//! The requests one worker holds in delay mode, without the host.
//!
//! Each entry is an HTTP context waiting until its resume time. Entries are
//! released in order of resume time (ties in arrival order), and each rule
//! holds at most its `max_queued` entries at once, so a flood costs bounded
//! memory. Rules are counted by name, so that requests queued under one
//! configuration still count against the same rule of the next one.

use sluice_core::Nanos;
use std::collections::{BTreeMap, HashMap};

/// The queue of one worker's VM.
#[derive(Debug, Default)]
pub struct Queue {
    /// Entries by (resume time, arrival number).
    waiting: BTreeMap<(Nanos, u64), Entry>,
    /// The position in `waiting` of each context.
    by_context: HashMap<u32, (Nanos, u64)>,
    /// Entries per rule name.
    per_rule: HashMap<String, usize>,
    /// Arrival counter, to order equal resume times.
    arrivals: u64,
}

#[derive(Debug)]
struct Entry {
    context: u32,
    rule: String,
}

/// Why a request was not queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Its rule already holds `max_queued` requests.
    Full,
    /// The context is already waiting.
    AlreadyQueued,
}

impl Queue {
    /// Queues `context` until `resume_at`, counted against `rule`, unless
    /// `rule` already holds `max_queued` requests.
    pub fn push(
        &mut self,
        context: u32,
        rule: &str,
        resume_at: Nanos,
        max_queued: usize,
    ) -> Result<(), Refused> {
        if self.by_context.contains_key(&context) {
            return Err(Refused::AlreadyQueued);
        }
        let held = self.per_rule.get(rule).copied().unwrap_or(0);
        if held >= max_queued {
            return Err(Refused::Full);
        }
        let position = (resume_at, self.arrivals);
        self.arrivals = self.arrivals.wrapping_add(1);
        self.waiting.insert(
            position,
            Entry {
                context,
                rule: rule.to_string(),
            },
        );
        self.by_context.insert(context, position);
        self.per_rule
            .insert(rule.to_string(), held.saturating_add(1));
        Ok(())
    }

    /// Removes and returns, in order, the contexts whose resume time is at
    /// or before `now`.
    pub fn take_due(&mut self, now: Nanos) -> Vec<u32> {
        let mut due = Vec::new();
        while let Some(entry) = self.waiting.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let entry = entry.remove();
            self.forget(&entry);
            due.push(entry.context);
        }
        due
    }

    /// Removes and returns every waiting context, in order.
    pub fn take_all(&mut self) -> Vec<u32> {
        self.take_due(Nanos::MAX)
    }

    /// Removes `context` if it waits; returns whether it did.
    pub fn remove(&mut self, context: u32) -> bool {
        let Some(position) = self.by_context.get(&context).copied() else {
            return false;
        };
        match self.waiting.remove(&position) {
            Some(entry) => {
                self.forget(&entry);
                true
            }
            None => {
                self.by_context.remove(&context);
                false
            }
        }
    }

    /// Whether `context` waits.
    pub fn contains(&self, context: u32) -> bool {
        self.by_context.contains_key(&context)
    }

    /// Requests waiting.
    pub fn len(&self) -> usize {
        self.waiting.len()
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    /// Requests of `rule` waiting.
    pub fn held(&self, rule: &str) -> usize {
        self.per_rule.get(rule).copied().unwrap_or(0)
    }

    /// The earliest resume time, if anything waits.
    pub fn next_due(&self) -> Option<Nanos> {
        self.waiting.keys().next().map(|&(at, _)| at)
    }

    fn forget(&mut self, entry: &Entry) {
        self.by_context.remove(&entry.context);
        if let Some(held) = self.per_rule.get_mut(&entry.rule) {
            *held = held.saturating_sub(1);
            if *held == 0 {
                self.per_rule.remove(&entry.rule);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_in_resume_order_then_arrival_order() {
        let mut q = Queue::default();
        q.push(1, "a", 300, 10).unwrap();
        q.push(2, "a", 100, 10).unwrap();
        q.push(3, "b", 200, 10).unwrap();
        q.push(4, "a", 100, 10).unwrap();
        assert_eq!(q.next_due(), Some(100));
        assert_eq!(q.take_due(99), Vec::<u32>::new());
        assert_eq!(q.take_due(100), vec![2, 4]);
        assert_eq!(q.take_due(250), vec![3]);
        assert_eq!(q.len(), 1);
        assert_eq!(q.take_due(1000), vec![1]);
        assert!(q.is_empty());
        assert_eq!(q.next_due(), None);
    }

    #[test]
    fn each_rule_holds_at_most_its_bound() {
        let mut q = Queue::default();
        assert_eq!(q.push(1, "a", 10, 2), Ok(()));
        assert_eq!(q.push(2, "a", 20, 2), Ok(()));
        assert_eq!(q.push(3, "a", 5, 2), Err(Refused::Full));
        // another rule has its own bound
        assert_eq!(q.push(4, "b", 5, 1), Ok(()));
        assert_eq!(q.push(5, "b", 5, 1), Err(Refused::Full));
        assert_eq!((q.held("a"), q.held("b"), q.len()), (2, 1, 3));
        // a released or removed request frees its place
        assert_eq!(q.take_due(10), vec![4, 1]);
        assert_eq!(q.push(3, "a", 30, 2), Ok(()));
        assert_eq!(q.push(6, "a", 30, 2), Err(Refused::Full));
        assert!(q.remove(2));
        assert_eq!(q.push(6, "a", 30, 2), Ok(()));
        assert_eq!(q.held("a"), 2);
    }

    #[test]
    fn a_context_waits_once() {
        let mut q = Queue::default();
        q.push(1, "a", 10, 5).unwrap();
        assert_eq!(q.push(1, "a", 20, 5), Err(Refused::AlreadyQueued));
        assert_eq!(q.len(), 1);
    }

    #[test]
    fn removal_forgets_the_context_and_its_rule() {
        let mut q = Queue::default();
        q.push(1, "a", 10, 5).unwrap();
        q.push(2, "a", 20, 5).unwrap();
        assert!(q.contains(1));
        assert!(q.remove(1));
        assert!(!q.contains(1));
        assert!(!q.remove(1));
        assert!(!q.remove(99));
        assert_eq!(q.held("a"), 1);
        assert_eq!(q.take_due(100), vec![2]);
        // a released context is no longer waiting: removing it is a no-op
        assert!(!q.remove(2));
        assert_eq!(q.held("a"), 0);
        assert!(q.per_rule.is_empty() && q.by_context.is_empty());
    }

    #[test]
    fn take_all_empties_in_order() {
        let mut q = Queue::default();
        q.push(7, "a", Nanos::MAX, 5).unwrap();
        q.push(8, "b", 3, 5).unwrap();
        assert_eq!(q.take_all(), vec![8, 7]);
        assert!(q.is_empty());
        assert_eq!(q.held("a"), 0);
    }
}
