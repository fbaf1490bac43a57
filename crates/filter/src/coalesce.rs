//! Coalescing of global checks on one worker: while a check is in flight,
//! requests with the same check wait for the next call, which carries them
//! all (the limiter admits the first of them in arrival order, each all or
//! nothing).
//!
//! A group is keyed by its check's body (same domain, limits, keys and
//! weights). Its calls go one at a time: the first by the request that finds
//! nothing in flight, the next ones by the root context (a request's call
//! ends with the request; the root lives as long as the worker). The host
//! makes the calls; this type only keeps who waits for what.

use std::collections::{HashMap, VecDeque};
use std::rc::Rc;

/// The groups of one worker; `T` is what a waiting request leaves behind
/// (its pending check).
#[derive(Debug)]
pub struct Coalescer<T> {
    groups: HashMap<Rc<[u8]>, Group<T>>,
    /// The group each waiting request is in, by context id (its key
    /// shared, not copied).
    member_of: HashMap<u32, Rc<[u8]>>,
}

impl<T> Default for Coalescer<T> {
    fn default() -> Self {
        Coalescer {
            groups: HashMap::new(),
            member_of: HashMap::new(),
        }
    }
}

#[derive(Debug)]
struct Group<T> {
    /// Its signature, the key it is stored under.
    key: Rc<[u8]>,
    /// A call of this check is in flight.
    in_flight: bool,
    /// Requests waiting for the next call, in arrival order.
    waiting: VecDeque<(u32, T)>,
}

/// What a request that joins a group does.
#[derive(Debug, PartialEq, Eq)]
pub enum Joined<T> {
    /// Nothing was in flight: it makes its own call now, and the group's
    /// next call waits for it (report it with [`Coalescer::finished`]).
    Call(T),
    /// It waits for the group's next call.
    Waiting,
    /// The group already holds `max_waiting` requests: it makes its own
    /// call, outside the group.
    Full(T),
}

impl<T> Coalescer<T> {
    /// Adds the request of `context` with check `signature`.
    pub fn join(
        &mut self,
        signature: &[u8],
        context: u32,
        payload: T,
        max_waiting: usize,
    ) -> Joined<T> {
        // Found without copying the signature: only a new group keeps one.
        let Some(group) = self.groups.get_mut(signature) else {
            let key: Rc<[u8]> = Rc::from(signature);
            let group = Group {
                key: Rc::clone(&key),
                in_flight: true,
                waiting: VecDeque::new(),
            };
            self.groups.insert(key, group);
            return Joined::Call(payload);
        };
        if group.waiting.len() >= max_waiting {
            return Joined::Full(payload);
        }
        group.waiting.push_back((context, payload));
        self.member_of.insert(context, Rc::clone(&group.key));
        Joined::Waiting
    }

    /// The call in flight for `signature` ended (answered, failed, or
    /// dropped with the request that made it). Returns whether requests wait
    /// for the next call (take them with [`take`](Self::take)); if none
    /// wait, the group is gone.
    pub fn finished(&mut self, signature: &[u8]) -> bool {
        let Some(group) = self.groups.get_mut(signature) else {
            return false;
        };
        group.in_flight = false;
        if group.waiting.is_empty() {
            self.groups.remove(signature);
            return false;
        }
        true
    }

    /// Takes up to `max_batch` waiting requests of `signature`, oldest
    /// first, for a call now in flight; empty when a call is already in
    /// flight or nobody waits.
    pub fn take(&mut self, signature: &[u8], max_batch: usize) -> Vec<(u32, T)> {
        let Some(group) = self.groups.get_mut(signature) else {
            return Vec::new();
        };
        if group.in_flight {
            return Vec::new();
        }
        let n = group.waiting.len().min(max_batch);
        let batch: Vec<(u32, T)> = group.waiting.drain(..n).collect();
        if batch.is_empty() {
            self.groups.remove(signature);
            return batch;
        }
        group.in_flight = true;
        for (context, _) in &batch {
            self.member_of.remove(context);
        }
        batch
    }

    /// The signatures of groups whose requests wait with no call in flight.
    pub fn ready(&self) -> Vec<Vec<u8>> {
        self.groups
            .iter()
            .filter(|(_, g)| !g.in_flight && !g.waiting.is_empty())
            .map(|(s, _)| s.to_vec())
            .collect()
    }

    /// Whether some group waits for a call to be made.
    pub fn any_ready(&self) -> bool {
        self.groups
            .values()
            .any(|g| !g.in_flight && !g.waiting.is_empty())
    }

    /// Takes out the waiting request of `context` (its client left).
    pub fn leave(&mut self, context: u32) -> Option<T> {
        let signature = self.member_of.remove(&context)?;
        let group = self.groups.get_mut(&signature)?;
        let at = group.waiting.iter().position(|(c, _)| *c == context)?;
        let (_, payload) = group.waiting.remove(at)?;
        if group.waiting.is_empty() && !group.in_flight {
            self.groups.remove(&signature);
        }
        Some(payload)
    }

    /// Whether no group waits nor has a call in flight.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.groups.is_empty() && self.member_of.is_empty()
    }

    /// Takes out every waiting request (the worker's last root is closing).
    pub fn drain(&mut self) -> Vec<(u32, T)> {
        self.member_of.clear();
        self.groups.drain().flat_map(|(_, g)| g.waiting).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_request_calls_and_the_next_ones_wait_in_order() {
        let mut c = Coalescer::default();
        assert_eq!(c.join(b"k", 1, "a", 10), Joined::Call("a"));
        assert_eq!(c.join(b"k", 2, "b", 10), Joined::Waiting);
        assert_eq!(c.join(b"k", 3, "c", 10), Joined::Waiting);
        // Another check has its own group.
        assert_eq!(c.join(b"j", 4, "d", 10), Joined::Call("d"));
        // Nothing is taken while the first call is in flight.
        assert!(c.take(b"k", 10).is_empty());
        assert!(!c.any_ready());
        assert!(c.finished(b"k"));
        assert_eq!(c.ready(), vec![b"k".to_vec()]);
        assert_eq!(c.take(b"k", 10), vec![(2, "b"), (3, "c")]);
        // In flight again: later arrivals wait for the call after it.
        assert_eq!(c.join(b"k", 5, "e", 10), Joined::Waiting);
        assert!(c.finished(b"k"));
        assert_eq!(c.take(b"k", 10), vec![(5, "e")]);
        assert!(!c.finished(b"k"));
        // The group is gone: the next request calls at once.
        assert_eq!(c.join(b"k", 6, "f", 10), Joined::Call("f"));
    }

    #[test]
    fn batches_and_groups_are_bounded() {
        let mut c = Coalescer::default();
        assert_eq!(c.join(b"k", 1, 1, 2), Joined::Call(1));
        assert_eq!(c.join(b"k", 2, 2, 2), Joined::Waiting);
        assert_eq!(c.join(b"k", 3, 3, 2), Joined::Waiting);
        assert_eq!(c.join(b"k", 4, 4, 2), Joined::Full(4));
        c.finished(b"k");
        assert_eq!(c.take(b"k", 1), vec![(2, 2)]);
        c.finished(b"k");
        assert_eq!(c.take(b"k", 1), vec![(3, 3)]);
    }

    #[test]
    fn a_request_that_leaves_is_taken_out() {
        let mut c = Coalescer::default();
        c.join(b"k", 1, 1, 10);
        c.join(b"k", 2, 2, 10);
        c.join(b"k", 3, 3, 10);
        assert_eq!(c.leave(2), Some(2));
        assert_eq!(c.leave(2), None);
        // The caller is not a member: leaving does nothing.
        assert_eq!(c.leave(1), None);
        c.finished(b"k");
        assert_eq!(c.take(b"k", 10), vec![(3, 3)]);
        assert_eq!(c.leave(3), None);
    }

    #[test]
    fn a_group_whose_last_member_leaves_with_nothing_in_flight_is_gone() {
        let mut c = Coalescer::default();
        c.join(b"k", 1, 1, 10);
        c.join(b"k", 2, 2, 10);
        assert!(c.finished(b"k"));
        assert_eq!(c.leave(2), Some(2));
        assert!(!c.any_ready());
        assert_eq!(c.join(b"k", 3, 3, 10), Joined::Call(3));
    }

    #[test]
    fn drain_takes_every_waiting_request() {
        let mut c = Coalescer::default();
        c.join(b"k", 1, 1, 10);
        c.join(b"k", 2, 2, 10);
        c.join(b"j", 3, 3, 10);
        c.join(b"j", 4, 4, 10);
        let mut all = c.drain();
        all.sort_unstable();
        assert_eq!(all, vec![(2, 2), (4, 4)]);
        assert_eq!(c.join(b"k", 5, 5, 10), Joined::Call(5));
    }
}
