//! The penalty box (`on_exceed: block`) of the limits decided here and by
//! the limiter: a key the limit refuses is refused for the block's length
//! from that refusal, whatever the limit would allow.
//!
//! A local limit keeps its blocks in a table of its own in shared data (so
//! every worker of the Envoy refuses the key), the same size as its state's
//! key table: an entry holds when the key's block ends, and rests then. When
//! both buckets of a key hold live blocks, a new block takes the place of
//! the one that ends first ([`WhenFull::Evict`], counted as `table_full`):
//! that key is let in early, and memory stays bounded by `local_max_keys`
//! blocks per limit. A global
//! limit's blocks are the limiter's (`block_ms` of its check).

use super::walk::{Applied, Cx};
use crate::config::LocalLimit;
use crate::key::RequestView;
use crate::local::{Contended, SharedStore};
use crate::metrics::{MetricSink, RuleEvent};
use crate::table::{self, Placed, Shape, Step, Table, WhenFull};
use sluice_core::{Decision, Encoded, Limit, Nanos};

/// The block table of `local`.
pub(crate) fn block_table(local: &LocalLimit) -> Table<'_> {
    let shape = Shape {
        buckets: local.keys.buckets,
        when_full: WhenFull::Evict,
    };
    Table::new(&local.block_prefix, shape)
}

/// When the block stored as `state` ends (0 for no block).
fn block_end(state: Option<&[u8]>) -> Nanos {
    state
        .and_then(|s| s.get(..8))
        .and_then(|b| <[u8; 8]>::try_from(b).ok())
        .map_or(0, u64::from_le_bytes)
}

/// When the block of the key with `fingerprint` in `table` ends, if it is
/// still blocked at `now`.
pub(crate) fn blocked_until<S: SharedStore + ?Sized>(
    store: &S,
    table: &Table<'_>,
    fingerprint: u64,
    now: Nanos,
) -> Option<Nanos> {
    let read = table::decide(
        store,
        table,
        fingerprint,
        now,
        &mut |state| Step {
            write: None,
            result: block_end(state),
        },
        &mut |_, _| None,
    );
    read.ok().map(|d| d.result).filter(|&end| end > now)
}

/// Blocks the key with `fingerprint` in `table` until `end` (a later block
/// already there stays); how it came by its entry.
pub(crate) fn start_block<S: SharedStore + ?Sized>(
    store: &S,
    table: &Table<'_>,
    fingerprint: u64,
    now: Nanos,
    end: Nanos,
) -> Result<Placed, Contended> {
    table::decide(
        store,
        table,
        fingerprint,
        now,
        &mut |state| {
            let end = block_end(state).max(end);
            Step {
                write: Some((Encoded::from_bytes(&end.to_le_bytes()), end)),
                result: (),
            }
        },
        &mut |_, _| None,
    )
    .map(|d| d.placed)
}

impl<V, S, M> Cx<'_, V, S, M>
where
    V: RequestView,
    S: SharedStore + ?Sized,
    M: MetricSink + ?Sized,
{
    /// The refusal of `limit` of local limit `local` when the key of
    /// `applied` is blocked.
    pub(crate) fn local_block(
        &mut self,
        applied: &Applied<'_, '_>,
        local: &LocalLimit,
        limit: &Limit,
    ) -> Option<Decision> {
        let now = self.now();
        let table = block_table(local);
        let end = blocked_until(self.env.store, &table, applied.fingerprint, now)?;
        self.env.metrics.rule(applied.index, RuleEvent::Blocked);
        Some(Decision::blocked(limit.requests, end.saturating_sub(now)))
    }

    /// `decision` of local limit `local` for the key of `applied`: when it
    /// refuses over the limit, the start of a block of `block` (the plain
    /// refusal if the block cannot be stored).
    pub(crate) fn local_penalty(
        &mut self,
        applied: &Applied<'_, '_>,
        local: &LocalLimit,
        decision: Decision,
        block: Nanos,
    ) -> Decision {
        if !decision.starts_block() {
            return decision;
        }
        let now = self.now();
        let table = block_table(local);
        let end = now.saturating_add(block);
        match start_block(self.env.store, &table, applied.fingerprint, now, end) {
            Ok(placed) => {
                let metrics = self.env.metrics;
                metrics.rule(applied.index, RuleEvent::BlocksStarted);
                // A block that took another's place: the table is full.
                if placed != Placed::Own {
                    metrics.rule(applied.index, RuleEvent::TableFull);
                }
                decision.with_block(block)
            }
            Err(Contended) => decision,
        }
    }
}
