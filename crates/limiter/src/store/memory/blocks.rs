//! Penalty boxes in the memory store: a rate item with a `block` that
//! refuses over its limit stores when its key's block ends, as an entry of
//! its own (`<state id>|block`) in the shard of the item's state, going
//! when the block ends. While it lives, every check carrying the item is
//! refused, consuming nothing. A block that finds its shard full is not
//! stored (the refusal stands, without a block).

use super::{Decided, Shard};
use crate::store::StoreItem;
use sluice_core::{Decision, Nanos};
use std::sync::MutexGuard;

/// What ends a block entry's id (no state id ends so: theirs end with a
/// window or `concurrency`).
const SUFFIX: &str = "|block";

/// The id of the block entry of the state `id`.
fn block_id(id: &str) -> String {
    format!("{id}{SUFFIX}")
}

/// Whether `id` is a block entry's.
pub(super) fn is_block(id: &str) -> bool {
    id.ends_with(SUFFIX)
}

/// When the block stored as `state` ends.
fn end_of(state: &[u8]) -> Nanos {
    state
        .get(..8)
        .and_then(|b| <[u8; 8]>::try_from(b).ok())
        .map_or(0, u64::from_le_bytes)
}

/// Per item, how long its key stays blocked from `now` (0: not blocked).
pub(super) fn waits(
    items: &[StoreItem],
    pos: &[usize],
    guards: &[MutexGuard<'_, Shard>],
    now: Nanos,
) -> Vec<Nanos> {
    items
        .iter()
        .zip(pos)
        .map(|(item, &p)| match (item.rate(), guards.get(p)) {
            (Some(r), Some(g)) if r.block > 0 => g
                .map
                .get(block_id(&r.id).as_str())
                .map_or(0, |e| end_of(&e.state).saturating_sub(now)),
            _ => 0,
        })
        .collect()
}

/// Reports the blocked items of a check (`waits`) as blocked, or, when
/// none is, starts the block of each blocking item that refused over its
/// limit (an item of weight 0 reads: it starts none).
pub(super) fn apply(
    items: &[StoreItem],
    pos: &[usize],
    guards: &mut [MutexGuard<'_, Shard>],
    outcome: &mut Decided,
    waits: &[Nanos],
    requests: u32,
    now: Nanos,
) {
    let blocked = waits.iter().any(|&w| w > 0);
    if !blocked && outcome.admitted >= requests.max(1) {
        return;
    }
    for (((item, &p), d), &wait) in items
        .iter()
        .zip(pos)
        .zip(outcome.decisions.iter_mut())
        .zip(waits)
    {
        let (Some(r), Some(g)) = (item.rate(), guards.get_mut(p)) else {
            continue;
        };
        if wait > 0 {
            *d = Decision::blocked(r.limit.requests, wait);
        } else if !blocked && r.block > 0 && r.hits > 0 && d.starts_block() {
            let id = block_id(&r.id);
            let new = !g.map.contains_key(id.as_str());
            if new && g.map.len() >= g.cap {
                continue;
            }
            g.blocks += usize::from(new);
            let end = now.saturating_add(r.block);
            g.put(&id, &end.to_le_bytes(), end);
            *d = d.with_block(r.block);
        }
    }
}
