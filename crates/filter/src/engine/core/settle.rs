//! Costs known from the response: a rule with `cost: {"estimate",
//! "response"}` admits a request for its estimate, and once the response
//! says what the request cost (or its stream ends without saying), the
//! difference is charged, possibly into debt, or refunded.
//!
//! What a request owes is an [`Owed`] per such rule that admitted it: where
//! its local limits' states are, and the wire form of its global limits. The
//! host reads the response ([`crate::cost`]), then settles: local limits
//! here, by compare-and-swap ([`Owed::settle_local`]); global ones in a
//! `POST /v1/charge` ([`Owed::adjustment`]).

use super::call::CacheSlot;
pub use super::undo::LocalState;
use crate::config::{Cost, CountWhen, Plan, PricedSource};
use crate::local::{Contended, SharedStore};
use crate::rls::Descriptor;
use sluice_core::{Limit, Nanos};
use sluice_wire::LimitSpec;
use std::rc::Rc;

/// What a request admitted by a rule with a response cost settles when its
/// response says what it cost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owed {
    /// The rule.
    pub rule: usize,
    /// What the request was admitted for.
    pub estimate: u64,
    /// When (the limits count the estimate as consumed then).
    pub admitted_at: Nanos,
    /// The local limits that counted the estimate: where their state is,
    /// and the limit.
    pub local: Vec<(LocalState, Limit)>,
    /// The global limits, as checked.
    pub global: Vec<LimitSpec<'static>>,
    /// The rate limit service's descriptors of its limits (`protocol: rls`).
    pub descriptors: Vec<Descriptor>,
    /// Whether the limiter counted the estimate: false when the check
    /// failed and `failure_mode: allow` let the request through, so the
    /// whole cost is charged.
    pub global_counted: bool,
    /// Whether the rule is in shadow mode (its global limits went in the
    /// shadow call).
    pub shadow: bool,
    /// For a limit counted by outcome: which responses keep the unit.
    pub(crate) outcome: Option<OwedOutcome>,
}

/// What a limit counted by its response's outcome owes: its unit is kept
/// when the response matches (`estimate` is the weight; the actual cost is
/// the weight or 0).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OwedOutcome {
    /// Which responses count.
    pub(crate) when: Rc<CountWhen>,
    /// Where a rate limit service's over-limit answer to the stream-end
    /// charge is cached.
    pub(crate) cache: Option<CacheSlot>,
}

/// What one settlement does to a limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Adjustment {
    /// Consume this much more, whatever is left (possibly into debt).
    Charge(u64),
    /// Give this much back, as consumed at the admission.
    Refund(u64),
}

impl Adjustment {
    /// The adjustment from `counted` to `actual`; `None` when they agree.
    pub fn between(counted: u64, actual: u64) -> Option<Adjustment> {
        match actual.cmp(&counted) {
            std::cmp::Ordering::Greater => Some(Adjustment::Charge(actual - counted)),
            std::cmp::Ordering::Less => Some(Adjustment::Refund(counted - actual)),
            std::cmp::Ordering::Equal => None,
        }
    }
}

impl Owed {
    /// Settles the local limits at `now` for a request that cost `actual`
    /// (the estimate when the response did not say). Returns whether some
    /// limit was left in debt.
    pub fn settle_local<S: SharedStore + ?Sized>(
        &self,
        store: &S,
        actual: u64,
        now: Nanos,
    ) -> Result<bool, Contended> {
        let Some(adjustment) = Adjustment::between(self.estimate, actual) else {
            return Ok(false);
        };
        let mut debt = false;
        for (state, limit) in &self.local {
            match adjustment {
                Adjustment::Charge(cost) => debt |= !state.charge(store, limit, now, cost)?,
                Adjustment::Refund(cost) => {
                    state.refund(store, limit, self.admitted_at, now, cost)?;
                }
            }
        }
        Ok(debt)
    }

    /// What the global limits need for a request that cost `actual`.
    pub fn adjustment(&self, actual: u64) -> Option<Adjustment> {
        if self.global.is_empty() && self.descriptors.is_empty() {
            return None;
        }
        let counted = if self.global_counted {
            self.estimate
        } else {
            0
        };
        Adjustment::between(counted, actual)
    }
}

/// Where the response of a request says what it cost, for each rule it
/// owes: the plan's sources of rule `owed.rule`.
pub fn sources<'p>(plan: &'p Plan, owed: &Owed) -> &'p [PricedSource] {
    match plan.rules.get(owed.rule).map(|r| &r.cost) {
        Some(Cost::Response(cost)) => &cost.sources,
        Some(Cost::Fixed(_) | Cost::Header(_) | Cost::Metadata(_)) | None => &[],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_adjustment_is_the_difference() {
        assert_eq!(Adjustment::between(10, 25), Some(Adjustment::Charge(15)));
        assert_eq!(Adjustment::between(10, 4), Some(Adjustment::Refund(6)));
        assert_eq!(Adjustment::between(7, 7), None);
    }
}
