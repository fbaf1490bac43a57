//! Concurrency limits in the memory store's checks: decided by
//! sluice-core's `permits::acquire` beside the rate limits, all or nothing.

use super::{lease_of, Decided};
use crate::store::{StoreError, StoreItem};
use sluice_core::permits;
use sluice_core::{
    decide_all_leased, decide_batch, Algorithm, Check, Lease, Limit, Nanos, Outcome, SECOND,
};

/// The store contract's refusal of a batch carrying a concurrency limit.
pub(in crate::store) fn refuse_batched_permits(
    items: &[StoreItem],
    requests: u32,
) -> Result<(), StoreError> {
    if requests > 1 && items.iter().any(|i| matches!(i, StoreItem::Permits(_))) {
        return Err(StoreError::Protocol(
            "a batch cannot carry a concurrency limit".into(),
        ));
    }
    Ok(())
}

/// A limit that refuses whatever its state (a fixed window of 1 asked for
/// 2): added to the rate limits of a check that a concurrency limit
/// refused, so that sluice-core reports them as it reports any denied
/// check, decided without consuming.
const REFUSED: Limit = Limit {
    algorithm: Algorithm::FixedWindow,
    requests: 1,
    window: SECOND,
    burst: 1,
    precision: 1,
    soft_percent: 0,
    max_delay: None,
};

/// Decides `items` (their stored `states`, in order) at `now`: the
/// concurrency limits by `permits::acquire`, the rate limits by
/// sluice-core's batch or leased decision, all or nothing across both;
/// refused whatever they allow when a penalty box holds one (`blocked`).
pub(super) fn decide_items(
    items: &[StoreItem],
    states: &[Option<&[u8]>],
    now: Nanos,
    requests: u32,
    blocked: bool,
) -> Decided {
    let taken: Vec<Option<Outcome>> = items
        .iter()
        .zip(states)
        .map(|(item, &state)| match item {
            StoreItem::Permits(p) => {
                Some(permits::acquire(&p.permits, state, p.holder, now, p.hits))
            }
            StoreItem::Rate(_) => None,
        })
        .collect();
    let permits_admit = taken.iter().flatten().all(|o| o.decision.allowed);
    let mut checks: Vec<Check<'_>> = items
        .iter()
        .zip(states)
        .filter_map(|(item, &state)| {
            item.rate().map(|r| Check {
                reserve: r.reserve,
                ..Check::new(&r.limit, state, r.hits)
            })
        })
        .collect();
    let rates = checks.len();
    if !permits_admit || blocked {
        checks.push(Check::new(&REFUSED, None, 2));
    }
    let mut rate = if requests == 1 && items.iter().any(StoreItem::leases) {
        let leases: Vec<Lease> = items
            .iter()
            .filter_map(StoreItem::rate)
            .map(|r| lease_of(r, now))
            .collect();
        Decided::leased(decide_all_leased(&checks, &leases, now))
    } else {
        Decided::batch(decide_batch(&checks, now, requests))
    };
    rate.decisions.truncate(rates);
    rate.new_states.truncate(rates);
    rate.leased.truncate(rates);
    rate.with_permits(items, states, taken, now)
}

impl Decided {
    /// The rate limits' outcome with the concurrency limits' (`taken`, per
    /// item) put in item order: their permits kept when the check is
    /// admitted, else what `acquire` reports without taking.
    fn with_permits(
        self,
        items: &[StoreItem],
        states: &[Option<&[u8]>],
        taken: Vec<Option<Outcome>>,
        now: Nanos,
    ) -> Decided {
        if taken.iter().all(Option::is_none) {
            return self;
        }
        let admitted = self.admitted > 0;
        let mut rate_decisions = self.decisions.into_iter();
        let mut rate_states = self.new_states.into_iter();
        let mut rate_leased = self.leased.into_iter();
        let granted = !rate_leased.as_slice().is_empty();
        let (mut decisions, mut new_states, mut leased) = (Vec::new(), Vec::new(), Vec::new());
        for ((item, &state), took) in items.iter().zip(states).zip(taken) {
            let (d, s, k) = match (item, took) {
                (StoreItem::Permits(p), Some(o)) => {
                    let kept = if admitted {
                        (o.decision, o.new_state)
                    } else if o.decision.allowed {
                        let peek = permits::acquire(&p.permits, state, p.holder, now, 0);
                        (peek.decision, None)
                    } else {
                        (o.decision, None)
                    };
                    (Some(kept.0), kept.1, Some(0))
                }
                _ => (
                    rate_decisions.next(),
                    rate_states.next().flatten(),
                    rate_leased.next(),
                ),
            };
            decisions.extend(d);
            new_states.push(s);
            leased.extend(k.filter(|_| granted));
        }
        Decided {
            admitted: self.admitted,
            decisions,
            new_states,
            delays: self.delays,
            leased,
        }
    }
}
