//! The undo log of a request: what it consumed, as plain data that says
//! where (a local state, a lease's slot, permits), so that a denial gives it
//! back newest first without the plan or the limit's kind. [`LocalState`] is
//! the one description of where a local limit's state lives, kept past the
//! decision by what a response cost settles too.

use super::held::{release_local, HeldPermit};
use crate::lease;
use crate::local::{self, Contended, SharedStore};
use crate::table::{self, Shape, Spot, Step, Table};
use sluice_core::{Limit, Nanos};
use std::rc::Rc;

/// Where a local limit's state lives in shared data: the one description
/// of it, kept past the request's decision (to refund, to settle).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LocalState {
    /// A key of its own (an override's).
    Key(Rc<str>),
    /// The entry at `spot` of the key table of `shape` under `prefix`,
    /// for the key of `fingerprint`.
    Entry {
        prefix: Rc<str>,
        shape: Shape,
        fingerprint: u64,
        spot: Spot,
    },
}

impl LocalState {
    /// Charges `cost` at `now`, whatever is left; returns whether the key
    /// was left with quota (not in debt).
    pub(crate) fn charge<S: SharedStore + ?Sized>(
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
    pub(crate) fn refund<S: SharedStore + ?Sized>(
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

/// Something this request consumed, to give back if it is denied: plain
/// data, undone without the plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Undo {
    /// `weight` units of `limit` consumed in local state `at`, counted as
    /// admitted at `admitted_at` (the decision time plus its delay).
    State {
        at: LocalState,
        limit: Limit,
        admitted_at: Nanos,
        weight: u64,
    },
    /// `weight` units spent from this Envoy's lease in the slot at `key`:
    /// the grant made at `granted_at` for the key of `fingerprint`.
    Lease {
        key: String,
        fingerprint: u64,
        granted_at: Nanos,
        weight: u64,
    },
    /// Local permits taken.
    Permit(HeldPermit),
}

impl Undo {
    /// Gives back at `now` what this consumed.
    pub(crate) fn undo<S: SharedStore + ?Sized>(
        self,
        store: &S,
        now: Nanos,
    ) -> Result<(), Contended> {
        match self {
            Undo::State {
                at,
                limit,
                admitted_at,
                weight,
            } => at.refund(store, &limit, admitted_at, now, weight),
            Undo::Lease {
                key,
                fingerprint,
                granted_at,
                weight,
            } => lease::give_back(store, &key, fingerprint, granted_at, weight),
            Undo::Permit(permit) => release_local(store, &permit, now),
        }
    }
}
