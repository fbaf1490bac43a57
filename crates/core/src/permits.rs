//! Concurrency limits: permits taken when a request is admitted and given
//! back when it ends, so that at most `max` units are in flight per key.
//!
//! A key's state lists its **holders** (a holder is one filter VM, one
//! worker of one Envoy), each with the permits it holds and when they
//! expire. A holder renews its entries while its requests live
//! ([`renew`]); an entry not renewed within `ttl` (its holder crashed or
//! lost its way to the store) no longer counts, so a dead holder's permits
//! come back at most `ttl` after its last renewal. While every holder lives
//! and renews, the count is exact: no more than `max` units are ever held.
//!
//! The stored form is the format version, [`PERMITS_CODE`], then one
//! 24-byte entry per holder: holder, count, expiry (little-endian `u64`s).
//! Bytes in any other form read as no permits held.

use crate::state::{u64_at, Encoded, VERSION};
use crate::{Decision, Denial, Nanos, Outcome, SECOND};

/// The tag of a permits state (after the version byte); no algorithm uses it.
pub const PERMITS_CODE: u8 = 0x40;

/// The most holders one key's state lists: a new holder is refused while
/// this many other holders have live permits on the key.
pub const MAX_HOLDERS: usize = 512;

/// What a refused request is told to wait: when a permit comes back is
/// unknown, so a second.
pub const PERMIT_RETRY_AFTER: Nanos = SECOND;

/// Bytes per holder entry.
const ENTRY: usize = 24;

/// Who holds permits: one filter VM (a worker of one Envoy).
pub type Holder = u64;

/// A concurrency limit: at most `max` units held at once per key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Permits {
    /// Units in flight at once (at least 1).
    pub max: u64,
    /// How long a holder's permits count after its last acquire or renewal.
    pub ttl: Nanos,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    holder: Holder,
    count: u64,
    expires: Nanos,
}

/// The live entries of `state` at `now`, and whether any expired one was
/// dropped.
fn live(state: Option<&[u8]>, now: Nanos) -> (Vec<Entry>, bool) {
    let payload = match state {
        Some([VERSION, PERMITS_CODE, rest @ ..]) if rest.len() % ENTRY == 0 => rest,
        _ => return (Vec::new(), false),
    };
    let mut entries = Vec::with_capacity(payload.len() / ENTRY);
    let mut dropped = false;
    for at in (0..payload.len()).step_by(ENTRY) {
        let (Some(holder), Some(count), Some(expires)) = (
            u64_at(payload, at),
            u64_at(payload, at + 8),
            u64_at(payload, at + 16),
        ) else {
            break;
        };
        if expires > now && count > 0 {
            entries.push(Entry {
                holder,
                count,
                expires,
            });
        } else {
            dropped = true;
        }
    }
    (entries, dropped)
}

fn encode(entries: &[Entry]) -> Encoded {
    let mut out = Vec::with_capacity(2 + entries.len() * ENTRY);
    out.push(VERSION);
    out.push(PERMITS_CODE);
    for e in entries {
        out.extend_from_slice(&e.holder.to_le_bytes());
        out.extend_from_slice(&e.count.to_le_bytes());
        out.extend_from_slice(&e.expires.to_le_bytes());
    }
    Encoded::heap(out)
}

fn held(entries: &[Entry]) -> u64 {
    entries.iter().fold(0u64, |n, e| n.saturating_add(e.count))
}

/// Takes `cost` permits for `holder` at `now` if no more than `p.max` units
/// would then be held; the holder's permits then expire `p.ttl` from now.
///
/// A cost of 0 asks whether one more unit fits, taking nothing; a cost
/// above `p.max` is denied with [`Denial::CostExceedsCapacity`]. A refused
/// request takes nothing; its `retry_after` is [`PERMIT_RETRY_AFTER`]. The
/// decision's `remaining` is the units still free; `reset` is 0.
pub fn acquire(
    p: &Permits,
    state: Option<&[u8]>,
    holder: Holder,
    now: Nanos,
    cost: u64,
) -> Outcome {
    let max = p.max.max(1);
    let (mut entries, dropped) = live(state, now);
    let in_use = held(&entries);
    let rewrite = dropped.then(|| encode(&entries));
    let probe = cost.max(1);
    let position = entries.iter().position(|e| e.holder == holder);
    let room = position.is_some() || entries.len() < MAX_HOLDERS;
    if probe > max || !room || in_use.saturating_add(probe) > max {
        let denial = if probe > max {
            Denial::CostExceedsCapacity
        } else {
            Denial::OverLimit
        };
        let wait = if probe > max { 0 } else { PERMIT_RETRY_AFTER };
        return Outcome {
            decision: Decision {
                allowed: false,
                limit: max,
                remaining: max.saturating_sub(in_use),
                reset: wait,
                retry_after: wait,
                delay: 0,
                denial: Some(denial),
            },
            new_state: rewrite,
        };
    }
    let after = if cost == 0 { in_use } else { in_use + cost };
    let decision = Decision {
        allowed: true,
        limit: max,
        remaining: max - after,
        reset: 0,
        retry_after: 0,
        delay: 0,
        denial: None,
    };
    if cost == 0 {
        return Outcome {
            decision,
            new_state: rewrite,
        };
    }
    let expires = now.saturating_add(p.ttl);
    match position.and_then(|i| entries.get_mut(i)) {
        Some(e) => {
            e.count = e.count.saturating_add(cost);
            e.expires = expires;
        }
        None => entries.push(Entry {
            holder,
            count: cost,
            expires,
        }),
    }
    Outcome {
        decision,
        new_state: Some(encode(&entries)),
    }
}

/// Gives back `cost` permits of `holder` at `now` (no more than it holds).
/// Returns the state to store, or `None` when nothing changed.
pub fn release(state: Option<&[u8]>, holder: Holder, now: Nanos, cost: u64) -> Option<Encoded> {
    let (mut entries, dropped) = live(state, now);
    let position = entries.iter().position(|e| e.holder == holder);
    let changed = match position {
        Some(i) if cost > 0 => {
            let gone = entries.get_mut(i).is_some_and(|e| {
                e.count = e.count.saturating_sub(cost);
                e.count == 0
            });
            if gone {
                entries.remove(i);
            }
            true
        }
        _ => false,
    };
    (changed || dropped).then(|| encode(&entries))
}

/// Keeps the permits `holder` holds at `now` for `ttl` more. Returns the
/// state to store, or `None` when nothing changed (the holder holds
/// nothing: its permits expired or were never taken).
pub fn renew(state: Option<&[u8]>, holder: Holder, now: Nanos, ttl: Nanos) -> Option<Encoded> {
    let (mut entries, dropped) = live(state, now);
    let expires = now.saturating_add(ttl);
    let renewed = entries
        .iter_mut()
        .find(|e| e.holder == holder)
        .map(|e| e.expires = e.expires.max(expires))
        .is_some();
    (renewed || dropped).then(|| encode(&entries))
}

/// The units held at `now`.
pub fn in_use(state: Option<&[u8]>, now: Nanos) -> u64 {
    held(&live(state, now).0)
}

/// The units `holder` holds at `now`.
pub fn held_by(state: Option<&[u8]>, holder: Holder, now: Nanos) -> u64 {
    live(state, now)
        .0
        .iter()
        .find(|e| e.holder == holder)
        .map_or(0, |e| e.count)
}

/// When the last permit of the state expires if nobody renews it (`None`:
/// nothing is held at `now`); a store may forget the key then.
pub fn expires_at(state: Option<&[u8]>, now: Nanos) -> Option<Nanos> {
    live(state, now).0.iter().map(|e| e.expires).max()
}

#[cfg(test)]
mod tests;
