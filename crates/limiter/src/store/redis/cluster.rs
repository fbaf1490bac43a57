//! A check across Redis Cluster slots: its items grouped by slot, and the
//! slots' outcomes merged into one verdict.

use super::{hash_slot, redis_key, ScriptOutcome};
use crate::store::{RateItem, StoreError, StoreItem, Verdict};
use sluice_core::{Decision, Nanos};
use std::collections::BTreeMap;

/// `items` grouped by slot, each group in the check's order.
pub(super) fn by_slot(items: &[StoreItem]) -> Vec<Vec<&StoreItem>> {
    let mut groups: BTreeMap<u16, Vec<&StoreItem>> = BTreeMap::new();
    for item in items {
        groups
            .entry(hash_slot(redis_key(item.id()).as_bytes()))
            .or_default()
            .push(item);
    }
    groups.into_values().collect()
}

/// A slot's items to refund: each gives back the lease it was granted with
/// the request, and returns nothing again; a concurrency limit gives back
/// its permits.
pub(super) fn with_leases_back(group: &[&StoreItem], leased: &[u64]) -> Vec<StoreItem> {
    group
        .iter()
        .zip(leased.iter().chain(std::iter::repeat(&0)))
        .map(|(item, &k)| match item {
            StoreItem::Rate(r) => StoreItem::Rate(RateItem {
                lease: k,
                returned: 0,
                returned_age: 0,
                ..r.clone()
            }),
            StoreItem::Permits(_) => (*item).clone(),
        })
        .collect()
}

/// One verdict from each slot's outcome, with `admitted` of `requests`
/// admitted by every slot; any slot's error is the check's.
pub(super) fn merge(
    items: &[StoreItem],
    groups: &[Vec<&StoreItem>],
    outcomes: Vec<Result<ScriptOutcome, StoreError>>,
    admitted: u32,
    requests: u32,
) -> Result<Verdict, StoreError> {
    let mut decisions: Vec<Option<Decision>> = vec![None; items.len()];
    let mut leased = vec![0u64; items.len()];
    let mut delays: Vec<Nanos> = Vec::new();
    for (g, o) in groups.iter().zip(outcomes) {
        let o = o?;
        let granted = o.leased.iter().chain(std::iter::repeat(&0));
        for ((item, d), &k) in g.iter().zip(o.decisions).zip(granted) {
            let Some(p) = items.iter().position(|x| std::ptr::eq(x, *item)) else {
                continue;
            };
            if let Some(slot) = decisions.get_mut(p) {
                *slot = Some(d);
            }
            // Refunded with the request when another slot denied.
            if let (Some(l), true) = (leased.get_mut(p), admitted == requests) {
                *l = k;
            }
        }
        // Each admitted request waits for the longest of its slots.
        if !o.delays.is_empty() {
            delays.resize(admitted as usize, 0);
            for (all, d) in delays.iter_mut().zip(o.delays) {
                *all = (*all).max(d);
            }
        }
    }
    if delays.iter().all(|&d| d == 0) {
        delays.clear();
    }
    let decisions: Option<Vec<Decision>> = decisions.into_iter().collect();
    let decisions = decisions.ok_or_else(|| StoreError::Protocol("missing decision".into()))?;
    Ok(Verdict {
        allowed: admitted == requests,
        admitted,
        decisions,
        delays,
        capacity_denied: false,
        leased: granted(leased),
    })
}

/// The per-item grants of a verdict: empty when none was granted.
pub(super) fn granted(leased: Vec<u64>) -> Vec<u64> {
    if leased.iter().any(|&k| k > 0) {
        leased
    } else {
        Vec::new()
    }
}
