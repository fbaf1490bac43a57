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

use super::tally::{Tally, Undo};
use crate::config::{Cost, CostSource, Plan};
use crate::local::{self, Contended, SharedStore};
use crate::rls::Descriptor;
use crate::table::{self, Shape, Spot, Step, Table};
use sluice_core::{Limit, Nanos};
use sluice_wire::LimitSpec;

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
}

/// Where a local limit's state lives in shared data: the one description
/// of it, kept past the request's decision (to refund, to settle).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LocalState {
    /// A key of its own (an override's).
    Key(String),
    /// The entry at `spot` of the key table of `shape` under `prefix`,
    /// for the key of `fingerprint`.
    Entry {
        prefix: String,
        shape: Shape,
        fingerprint: u64,
        spot: Spot,
    },
}

impl LocalState {
    /// Charges `cost` at `now`, whatever is left; returns whether the key
    /// was left with quota (not in debt).
    fn charge<S: SharedStore + ?Sized>(
        &self,
        store: &S,
        limit: &Limit,
        now: Nanos,
        cost: u64,
    ) -> Result<bool, Contended> {
        let allowed = match self {
            LocalState::Key(key) => local::measure_and_replace(store, key, |value| {
                match sluice_core::charge(limit, value, now, cost) {
                    Some(out) => (out.new_state, out.decision.allowed),
                    None => (None, true),
                }
            })?,
            // The key's entry, wherever it is now: an estimate of 0 placed
            // none.
            LocalState::Entry {
                prefix,
                shape,
                fingerprint,
                ..
            } => {
                let table = Table::new(prefix, *shape);
                let mut charged = |state: Option<&[u8]>| {
                    let out = sluice_core::charge(limit, state, now, cost);
                    let rest_at = |o: &sluice_core::Outcome| now.saturating_add(o.decision.reset);
                    Step {
                        write: out
                            .as_ref()
                            .and_then(|o| Some((o.new_state.clone()?, rest_at(o)))),
                        result: out.map_or(true, |o| o.decision.allowed),
                    }
                };
                let mut undo =
                    |state: &[u8], _: &bool| sluice_core::refund_at(limit, state, now, now, cost);
                table::decide(store, &table, *fingerprint, now, &mut charged, &mut undo)?.result
            }
        };
        Ok(allowed)
    }

    /// Gives back, at `now`, `cost` consumed at `admitted_at`.
    pub(super) fn refund<S: SharedStore + ?Sized>(
        &self,
        store: &S,
        limit: &Limit,
        admitted_at: Nanos,
        now: Nanos,
        cost: u64,
    ) -> Result<(), Contended> {
        match self {
            LocalState::Key(key) => local::refund_at(store, key, limit, admitted_at, now, cost),
            LocalState::Entry { prefix, spot, .. } => {
                table::refund(store, prefix, *spot, limit, admitted_at, now, cost)
            }
        }
    }
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
pub fn sources<'p>(plan: &'p Plan, owed: &Owed) -> &'p [CostSource] {
    match plan.rules.get(owed.rule).map(|r| &r.cost) {
        Some(Cost::Response(cost)) => &cost.sources,
        Some(Cost::Fixed(_) | Cost::Header(_)) | None => &[],
    }
}

impl Tally {
    /// Notes what rule `rule` owes once it admitted the request for
    /// `estimate`: the local limits consumed since `consumed_mark` (a rule
    /// with a response cost has local rate limits only), and the global
    /// limits added to the call since `global_mark`.
    pub(super) fn owe(
        &mut self,
        rule: usize,
        estimate: u64,
        consumed_mark: usize,
        global: (Vec<LimitSpec<'static>>, Vec<Descriptor>),
        shadow: bool,
    ) {
        let (global, descriptors) = global;
        let local = self
            .consumed
            .iter()
            .skip(consumed_mark)
            .filter_map(|undo| match undo {
                Undo::State { at, limit, .. } => Some((at.clone(), limit.clone())),
                Undo::Lease { .. } | Undo::Permit(_) => None,
            })
            .collect();
        self.owed.push(Owed {
            rule,
            estimate,
            admitted_at: self.now,
            local,
            global,
            descriptors,
            global_counted: true,
            shadow,
        });
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
