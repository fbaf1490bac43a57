//! Charges and refunds after the response ([`Store::adjust`]): one call of
//! the script's `adjust` mode per slot, each key applied on its own.
//!
//! [`Store::adjust`]: crate::store::Store::adjust

use super::script::{parse_reply, MICROS};
use super::{hash_slot, redis_key, RedisStore};
use crate::store::{AdjustItem, StoreError};
use futures_util::future::join_all;
use sluice_core::{Adjust, Decision};
use std::collections::BTreeMap;
use std::time::Instant;

/// Appends one item's script arguments, in a check's layout: the charge as
/// the cost, the refund as returned units with their age (microseconds).
fn push_adjust_args(args: &mut Vec<String>, item: &AdjustItem) {
    let limit = &item.limit;
    let (charge, refund, age) = match item.adjust {
        Adjust::Charge(n) => (n, 0, 0),
        // Ages come in whole milliseconds: exact in microseconds.
        Adjust::Refund { cost, age } => (0, cost, age / MICROS),
    };
    args.extend([
        limit.algorithm.code().to_string(),
        limit.requests.to_string(),
        (limit.window / MICROS).to_string(),
        limit.burst.to_string(),
        limit.precision.to_string(),
        limit.soft_percent.to_string(),
        charge.to_string(),
        limit
            .max_delay
            .map(|d| d.div_ceil(MICROS).to_string())
            .unwrap_or_default(),
        "0".into(),
        refund.to_string(),
        age.to_string(),
        "0".into(),
        "0".into(),
    ]);
}

impl RedisStore {
    /// One call of the script's `adjust` mode over `items` (all in one
    /// slot): one decision per item, a query after its adjustment.
    /// `now_us` overrides the server clock (tests; the keys then get no
    /// expiry).
    pub async fn run_adjust(
        &self,
        items: &[&AdjustItem],
        now_us: Option<u64>,
    ) -> Result<Vec<Decision>, StoreError> {
        let keys: Vec<String> = items.iter().map(|i| redis_key(&i.id)).collect();
        let mut args = vec![
            "adjust".to_string(),
            now_us.map(|t| t.to_string()).unwrap_or_default(),
            String::new(),
            "1".to_string(),
        ];
        for item in items {
            push_adjust_args(&mut args, item);
        }
        let started = Instant::now();
        let reply = self.bounded(self.call(&keys, &args)).await?;
        self.round_trips.observe(started.elapsed());
        self.mark(None);
        Ok(parse_reply(&reply, items.len())?.decisions)
    }

    /// [`Store::adjust`](crate::store::Store::adjust): one call per slot
    /// (one on a single server), run concurrently; any slot's error is the
    /// answer's, whatever the other slots applied.
    pub(super) async fn adjust_items(
        &self,
        items: &[AdjustItem],
    ) -> Result<Vec<Decision>, StoreError> {
        let mut slots: BTreeMap<u16, Vec<(usize, &AdjustItem)>> = BTreeMap::new();
        for (i, item) in items.iter().enumerate() {
            let slot = if self.cluster {
                hash_slot(redis_key(&item.id).as_bytes())
            } else {
                0
            };
            slots.entry(slot).or_default().push((i, item));
        }
        let calls = slots.values().map(|group| {
            let refs: Vec<&AdjustItem> = group.iter().map(|&(_, item)| item).collect();
            async move { self.run_adjust(&refs, None).await }
        });
        let mut decisions: Vec<Option<Decision>> = vec![None; items.len()];
        for (group, reply) in slots.values().zip(join_all(calls).await) {
            for (&(i, _), d) in group.iter().zip(reply?) {
                if let Some(slot) = decisions.get_mut(i) {
                    *slot = Some(d);
                }
            }
        }
        decisions
            .into_iter()
            .collect::<Option<Vec<Decision>>>()
            .ok_or_else(|| StoreError::Protocol("missing decision".into()))
    }
}
