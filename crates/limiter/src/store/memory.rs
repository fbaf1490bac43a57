//! The embedded store: key states in sharded hash maps, for one instance.
//!
//! A check locks the shards of its keys in index order (so two checks never
//! deadlock), decides every limit with one clock reading, and writes back only
//! when all allowed. An entry is dropped once its state is back to full (its
//! `reset` has passed), by [`MemoryStore::sweep`] or when a full shard makes room.
//!
//! A charge ([`Store::adjust`]) writes each key on its own, under its
//! shard's lock, with the core's `charge` or `refund_at`; a key in debt
//! goes only once its `reset` (debt included) has passed.
//!
//! A concurrency limit's entry holds its holders' permits and goes once the
//! last of them expires (`permits::expires_at`).
//!
//! Memory is bounded by `max_keys`. When a shard is full even after dropping
//! the entries that are back to full, a check that needs a new key in it is
//! **denied** (nothing is consumed; `retry_after` is [`FULL_RETRY_AFTER`]): the
//! store errs on the side of limiting and never admits a key it cannot track.

use super::{AdjustItem, PermitsOutcome, RateItem, Store, StoreError, StoreItem, Verdict};
use crate::clock::Clock;
use sluice_core::permits::{self, Holder};
use sluice_core::{
    refund_at, BatchOutcome, Decision, Denial, Lease, LeasedOutcome, Nanos, MILLISECOND, SECOND,
};
use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::{Arc, Mutex, MutexGuard};

/// What a check denied for lack of room tells the client to wait.
pub const FULL_RETRY_AFTER: Nanos = SECOND;

/// The shortest time between two in-line sweeps of one full shard, so a flood
/// of new keys does not rescan a full shard on every check.
const INLINE_SWEEP_EVERY: Nanos = 10 * MILLISECOND;

/// Sizing of a [`MemoryStore`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryConfig {
    /// Number of shards (rounded up to a power of two, and down to at most
    /// `max_keys`, so every shard holds at least one key).
    pub shards: usize,
    /// Most keys held at once, over all shards.
    pub max_keys: usize,
}

impl Default for MemoryConfig {
    fn default() -> Self {
        MemoryConfig {
            shards: 64,
            max_keys: 1_000_000,
        }
    }
}

#[derive(Debug)]
struct Entry {
    state: Vec<u8>,
    /// When the state is back to full and the entry can go.
    full_at: Nanos,
}

#[derive(Debug, Default)]
struct Shard {
    map: HashMap<Box<str>, Entry>,
    next_inline_sweep: Nanos,
    /// Most keys this shard holds; the shards' caps add up to `max_keys`.
    cap: usize,
    /// Of its entries, the penalty boxes' (see [`blocks`]).
    blocks: usize,
    /// No entry is back to full before this (a lower bound: exact after a
    /// sweep, lowered by every write), so a sweep that could free nothing
    /// is skipped without scanning: a flood of new keys against a full
    /// shard costs a comparison, not a scan of the shard, per check.
    earliest: Nanos,
}

impl Shard {
    fn sweep(&mut self, now: Nanos) -> usize {
        if now < self.earliest {
            return 0;
        }
        let before = self.map.len();
        let mut earliest = Nanos::MAX;
        let mut blocks_gone = 0;
        self.map.retain(|id, e| {
            let keep = e.full_at > now;
            if keep {
                earliest = earliest.min(e.full_at);
            } else if blocks::is_block(id) {
                blocks_gone += 1;
            }
            keep
        });
        self.earliest = earliest;
        self.blocks = self.blocks.saturating_sub(blocks_gone);
        before.saturating_sub(self.map.len())
    }

    /// Stores `bytes` as the state of `id`, going at `full_at`.
    fn put(&mut self, id: &str, bytes: &[u8], full_at: Nanos) {
        self.earliest = self.earliest.min(full_at);
        match self.map.get_mut(id) {
            Some(e) => {
                e.state.clear();
                e.state.extend_from_slice(bytes);
                e.full_at = full_at;
            }
            None => {
                self.map.insert(
                    id.into(),
                    Entry {
                        state: bytes.to_vec(),
                        full_at,
                    },
                );
            }
        }
    }

    /// Stores a permits state that a release or a renewal changed: it goes
    /// when its last permit expires, at once when none is held.
    fn put_permits(&mut self, id: &str, bytes: &[u8], now: Nanos) {
        match permits::expires_at(Some(bytes), now) {
            Some(at) => self.put(id, bytes, at),
            None => {
                self.map.remove(id);
            }
        }
    }
}

/// The in-memory store.
pub struct MemoryStore {
    shards: Box<[Mutex<Shard>]>,
    mask: usize,
    max_keys: usize,
    hasher: RandomState,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore")
            .field("shards", &self.shards.len())
            .field("max_keys", &self.max_keys)
            .finish()
    }
}

fn lock(shard: &Mutex<Shard>) -> MutexGuard<'_, Shard> {
    // A panic while holding the lock cannot leave a half-written entry (entries
    // are replaced whole), so a poisoned shard is still sound to use.
    shard.lock().unwrap_or_else(|e| e.into_inner())
}

impl MemoryStore {
    /// An empty store sized by `config`, reading time from `clock`.
    pub fn new(config: MemoryConfig, clock: Arc<dyn Clock>) -> Self {
        let max_keys = config.max_keys.max(1);
        let mut n = config.shards.clamp(1, 1 << 16).next_power_of_two();
        while n > max_keys {
            n /= 2;
        }
        // `max_keys` split exactly: the first `max_keys % n` shards hold one more.
        let (base, extra) = (max_keys / n, max_keys % n);
        MemoryStore {
            shards: (0..n)
                .map(|i| {
                    Mutex::new(Shard {
                        cap: base + usize::from(i < extra),
                        ..Shard::default()
                    })
                })
                .collect(),
            mask: n.saturating_sub(1),
            max_keys,
            hasher: RandomState::new(),
            clock,
        }
    }

    fn shard_of(&self, id: &str) -> usize {
        // Truncating the hash is fine: only its low bits pick the shard.
        (self.hasher.hash_one(id) as usize) & self.mask
    }

    /// Keys currently held.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| lock(s).map.len()).sum()
    }

    /// True when no key is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drops every entry whose state is back to full; returns how many.
    pub fn sweep(&self) -> usize {
        let now = self.clock.now();
        self.shards.iter().map(|s| lock(s).sweep(now)).sum()
    }

    /// Decides `requests` identical requests over `items` together, each at
    /// its own weight; never waits for anything but the shard locks.
    fn decide(&self, items: &[StoreItem], requests: u32) -> Verdict {
        let requests = requests.max(1);
        let now = self.clock.now();
        let ids: Vec<&str> = items.iter().map(StoreItem::id).collect();
        let (mut guards, pos) = self.lock_shards(&ids);
        let full = self.make_room(items, &pos, &mut guards, now);
        let waits = blocks::waits(items, &pos, &guards, now);
        let blocked = waits.iter().any(|&w| w > 0);
        let mut outcome = {
            let states: Vec<Option<&[u8]>> = ids
                .iter()
                .zip(&pos)
                .map(|(id, &p)| {
                    guards
                        .get(p)
                        .and_then(|g| g.map.get(*id))
                        .map(|e| e.state.as_slice())
                })
                .collect();
            decide_items(items, &states, now, requests, blocked)
        };
        // A blocked check takes no room: it is refused for its block.
        if let Some(full) = full.filter(|_| !blocked) {
            return denied_for_room(items, &pos, &mut guards, outcome, &full, now);
        }
        blocks::apply(
            items,
            &pos,
            &mut guards,
            &mut outcome,
            &waits,
            requests,
            now,
        );
        write_states(items, &pos, &mut guards, &outcome, now);
        Verdict {
            allowed: outcome.admitted >= requests,
            admitted: outcome.admitted,
            decisions: outcome.decisions,
            delays: outcome.delays,
            capacity_denied: false,
            leased: outcome.leased,
        }
    }

    /// Gives back, then renews, `holder`'s permits (see [`Store::permits`]).
    fn permits_op(
        &self,
        holder: Holder,
        ttl: Nanos,
        release: &[(String, u64)],
        renew: &[String],
    ) -> PermitsOutcome {
        let now = self.clock.now();
        let ids: Vec<&str> = release
            .iter()
            .map(|(id, _)| id.as_str())
            .chain(renew.iter().map(String::as_str))
            .collect();
        let (mut guards, pos) = self.lock_shards(&ids);
        let mut flags = ids.iter().zip(&pos).enumerate().map(|(i, (id, &p))| {
            let Some(g) = guards.get_mut(p) else {
                return false;
            };
            let state = g.map.get(*id).map(|e| e.state.as_slice());
            let (held, new) = match release.get(i) {
                Some(&(_, hits)) => (
                    permits::held_by(state, holder, now) > 0,
                    permits::release(state, holder, now, hits),
                ),
                None => (
                    permits::held_by(state, holder, now) > 0,
                    permits::renew(state, holder, now, ttl),
                ),
            };
            if let Some(new) = new {
                g.put_permits(id, new.as_bytes(), now);
            }
            held
        });
        let released = flags.by_ref().take(release.len()).collect();
        let renewed = flags.collect();
        PermitsOutcome { released, renewed }
    }

    /// Charges or refunds each item (see [`Store::adjust`]).
    fn adjust_op(&self, items: &[AdjustItem]) -> Vec<Decision> {
        let now = self.clock.now();
        let ids: Vec<&str> = items.iter().map(|i| i.id.as_str()).collect();
        let (mut guards, pos) = self.lock_shards(&ids);
        items
            .iter()
            .zip(&pos)
            .map(|(item, &p)| match guards.get_mut(p) {
                Some(g) => adjust_one(g, item, now),
                None => full_decision(item.limit.requests),
            })
            .collect()
    }

    /// Locks the shards of `ids` in index order; returns the guards and,
    /// per id, the position of its shard's guard.
    fn lock_shards(&self, ids: &[&str]) -> (Vec<MutexGuard<'_, Shard>>, Vec<usize>) {
        let shard_ids: Vec<usize> = ids.iter().map(|id| self.shard_of(id)).collect();
        let mut order = shard_ids.clone();
        order.sort_unstable();
        order.dedup();
        let guards = order
            .iter()
            .filter_map(|&i| self.shards.get(i).map(lock))
            .collect();
        let pos = shard_ids
            .iter()
            .map(|s| order.binary_search(s).unwrap_or(0))
            .collect();
        (guards, pos)
    }

    /// Checks that every shard has room for the new keys of this check,
    /// sweeping a full shard first. Returns, when some shard stays full, which
    /// items could not get a key.
    fn make_room(
        &self,
        items: &[StoreItem],
        pos: &[usize],
        guards: &mut [MutexGuard<'_, Shard>],
        now: Nanos,
    ) -> Option<Vec<bool>> {
        let mut new_per_guard = vec![0usize; guards.len()];
        let mut is_new = vec![false; items.len()];
        for ((item, &p), new) in items.iter().zip(pos).zip(is_new.iter_mut()) {
            if let (Some(g), Some(n)) = (guards.get(p), new_per_guard.get_mut(p)) {
                if !g.map.contains_key(item.id()) {
                    *new = true;
                    *n = n.saturating_add(1);
                }
            }
        }
        let mut lacking = vec![false; guards.len()];
        for ((g, &n), lack) in guards
            .iter_mut()
            .zip(&new_per_guard)
            .zip(lacking.iter_mut())
        {
            if n == 0 || g.map.len().saturating_add(n) <= g.cap {
                continue;
            }
            if now >= g.next_inline_sweep {
                g.sweep(now);
                g.next_inline_sweep = now.saturating_add(INLINE_SWEEP_EVERY);
            }
            *lack = g.map.len().saturating_add(n) > g.cap;
        }
        if !lacking.iter().any(|&l| l) {
            return None;
        }
        Some(
            pos.iter()
                .zip(&is_new)
                .map(|(&p, &new)| new && lacking.get(p).copied().unwrap_or(true))
                .collect(),
        )
    }
}

impl Store for MemoryStore {
    async fn check_batch(&self, items: &[StoreItem], requests: u32) -> Result<Verdict, StoreError> {
        refuse_batched_permits(items, requests)?;
        Ok(self.decide(items, requests))
    }

    async fn permits(
        &self,
        holder: Holder,
        ttl: Nanos,
        release: &[(String, u64)],
        renew: &[String],
    ) -> Result<PermitsOutcome, StoreError> {
        Ok(self.permits_op(holder, ttl, release, renew))
    }

    async fn adjust(&self, items: &[AdjustItem]) -> Result<Vec<Decision>, StoreError> {
        Ok(self.adjust_op(items))
    }

    async fn healthy(&self) -> bool {
        true
    }

    fn status(&self) -> super::StoreStatus {
        super::StoreStatus {
            up: true,
            keys: Some((self.len(), self.max_keys)),
            blocked: Some(self.shards.iter().map(|s| lock(s).blocks).sum()),
        }
    }

    fn kind(&self) -> &'static str {
        "memory"
    }
}

/// One item of a charge, in its locked shard: the new state stored until
/// its `reset`; a new key in a shard that stays full is not stored.
fn adjust_one(g: &mut Shard, item: &AdjustItem, now: Nanos) -> Decision {
    let id = item.id.as_str();
    let state = g.map.get(id).map(|e| e.state.as_slice());
    let out = match sluice_core::adjust(&item.limit, state, now, item.adjust) {
        Some(out) => out,
        // No debt for this algorithm: nothing charged.
        None => sluice_core::decide(&item.limit, state, now, 0),
    };
    let Some(new) = out.new_state else {
        return out.decision;
    };
    if !g.map.contains_key(id) && g.map.len() >= g.cap {
        if now >= g.next_inline_sweep {
            g.sweep(now);
            g.next_inline_sweep = now.saturating_add(INLINE_SWEEP_EVERY);
        }
        if g.map.len() >= g.cap {
            return full_decision(item.limit.requests);
        }
    }
    g.put(id, new.as_bytes(), now.saturating_add(out.decision.reset));
    out.decision
}

/// An item's lease terms at the clock reading `now`.
fn lease_of(item: &RateItem, now: Nanos) -> Lease {
    Lease {
        take: item.lease,
        returned: item.returned,
        returned_at: now.saturating_sub(item.returned_age),
    }
}

mod blocks;
mod permits_items;
use permits_items::decide_items;
pub(super) use permits_items::refuse_batched_permits;

/// What a check decided, batched or leased, before it is stored.
struct Decided {
    admitted: u32,
    decisions: Vec<Decision>,
    new_states: Vec<Option<sluice_core::Encoded>>,
    delays: Vec<Nanos>,
    leased: Vec<u64>,
}

impl Decided {
    fn batch(o: BatchOutcome) -> Decided {
        Decided {
            admitted: o.admitted,
            decisions: o.decisions,
            new_states: o.new_states,
            delays: o.delays,
            leased: Vec::new(),
        }
    }

    fn leased(o: LeasedOutcome) -> Decided {
        // One request: its wait is the longest of its limits', if any.
        let wait = o.decisions.iter().map(|d| d.delay).max().unwrap_or(0);
        let leased = if o.granted.iter().any(|&k| k > 0) {
            o.granted
        } else {
            Vec::new()
        };
        Decided {
            admitted: u32::from(o.allowed),
            decisions: o.decisions,
            new_states: o.new_states,
            delays: if o.allowed && wait > 0 {
                vec![wait]
            } else {
                Vec::new()
            },
            leased,
        }
    }
}

/// A check denied because a shard had no room for one of its new keys
/// (`full`, per item): nothing is consumed, but the returns of the keys
/// held are applied, since returning is not consuming.
fn denied_for_room(
    items: &[StoreItem],
    pos: &[usize],
    guards: &mut [MutexGuard<'_, Shard>],
    outcome: Decided,
    full: &[bool],
    now: Nanos,
) -> Verdict {
    let rates = items
        .iter()
        .zip(pos)
        .filter_map(|(i, p)| Some((i.rate()?, p)));
    for (item, &p) in rates.filter(|(i, _)| i.returned != 0) {
        let Some(e) = guards
            .get_mut(p)
            .and_then(|g| g.map.get_mut(item.id.as_str()))
        else {
            continue;
        };
        let l = lease_of(item, now);
        if let Some(back) = refund_at(&item.limit, &e.state, l.returned_at, now, l.returned) {
            // Fuller than before: its old expiry is late enough.
            e.state.clear();
            e.state.extend_from_slice(back.as_bytes());
        }
    }
    let decisions = outcome
        .decisions
        .into_iter()
        .zip(items.iter().zip(full))
        .map(|(d, (item, &no_room))| {
            if no_room {
                full_decision(item.quota())
            } else {
                d
            }
        })
        .collect();
    Verdict {
        allowed: false,
        admitted: 0,
        decisions,
        delays: Vec::new(),
        capacity_denied: true,
        leased: Vec::new(),
    }
}

/// Writes the new states of a decided check, each with when it is back to
/// full (denied checks carry states only where a clock step was repaired).
fn write_states(
    items: &[StoreItem],
    pos: &[usize],
    guards: &mut [MutexGuard<'_, Shard>],
    outcome: &Decided,
    now: Nanos,
) {
    for ((item, &p), (state, d)) in items
        .iter()
        .zip(pos)
        .zip(outcome.new_states.iter().zip(&outcome.decisions))
    {
        let (Some(state), Some(g)) = (state, guards.get_mut(p)) else {
            continue;
        };
        let bytes = state.as_bytes();
        let full_at = match item {
            StoreItem::Rate(_) => now.saturating_add(d.reset),
            StoreItem::Permits(_) => permits::expires_at(Some(bytes), now).unwrap_or(now),
        };
        g.put(item.id(), bytes, full_at);
    }
}

/// The decision reported for a limit whose key found no room.
fn full_decision(limit: u64) -> Decision {
    Decision {
        allowed: false,
        limit,
        remaining: 0,
        reset: FULL_RETRY_AFTER,
        retry_after: FULL_RETRY_AFTER,
        delay: 0,
        denial: Some(Denial::OverLimit),
    }
}
