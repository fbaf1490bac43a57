//! Consuming local state, which the kinds decided by this filter share:
//! a key's entry in a key table, or an override's own key, consumed in a
//! compare-and-swap loop ([`crate::local::consume`]) and logged for the
//! refund ([`Undo::State`]).

use super::tally::{push_one, undecided};
use super::undo::{LocalState, Undo};
use super::walk::{reserve, Applied, Cx};
use crate::config::checks::{penalty, LimitSite};
use crate::config::plan::Penalty;
use crate::config::raw::RawLimit;
use crate::config::{LocalLimit, Quota};
use crate::headers::Reported;
use crate::key::RequestView;
use crate::layout;
use crate::local::{self, Contended, SharedStore, Taken};
use crate::metrics::{GlobalEvent, MetricSink, RuleEvent};
use crate::table::{self, Placed, Shape, Table};
use sluice_core::{Decision, FieldError, Limit};
use std::rc::Rc;

/// The local limit of `limit` at `site`; `sync` is refused.
pub(crate) fn built(
    site: &LimitSite<'_>,
    raw: &RawLimit,
    limit: Limit,
) -> Result<LocalLimit, FieldError> {
    if raw.sync.is_some() {
        return Err(FieldError::at(
            site.field("sync"),
            "only applies to limits with scope global",
        ));
    }
    Ok(LocalLimit {
        state_prefix: layout::limit_prefix(site.domain, site.rule, site.index, &limit).into(),
        quota: Quota {
            limit,
            overrides: Vec::new(),
            penalty: penalty(site.path, raw)?,
        },
        keys: site.keys,
        block_prefix: layout::block_prefix(site.domain, site.rule, site.index).into(),
    })
}

impl<V, S, M> Cx<'_, V, S, M>
where
    V: RequestView,
    S: SharedStore + ?Sized,
    M: MetricSink + ?Sized,
{
    /// Consumes the key's quota of local limit `l` of `applied` (its
    /// override's, if it has one): the limit that decided, and its
    /// decision; a denial when contention prevents deciding.
    pub(crate) fn take_quota<'l>(
        &mut self,
        applied: &Applied<'_, '_>,
        l: usize,
        local: &'l LocalLimit,
    ) -> Result<(&'l Limit, Decision), Reported> {
        let quota = &local.quota;
        let own = quota
            .override_index(applied.key)
            .and_then(|i| quota.overrides.get(i));
        if let Penalty::Block(_) = quota.penalty {
            let limit = own.map_or(&quota.limit, |o| &o.limit);
            if let Some(refused) = self.local_block(applied, local, limit) {
                return Ok((limit, refused));
            }
        }
        let (weight, share) = (applied.weight, applied.share);
        let (limit, taken) = match own {
            Some(o) => (
                &o.limit,
                self.take_key(&o.state_key, &o.limit, weight, share),
            ),
            None => {
                let entry = Entry {
                    prefix: &local.state_prefix,
                    shape: local.keys,
                    fingerprint: applied.fingerprint,
                };
                let taken = self.take_entry(applied.index, entry, &quota.limit, weight, share);
                (&quota.limit, taken)
            }
        };
        match (taken, quota.penalty) {
            (Ok(decision), Penalty::None) => Ok((limit, decision)),
            (Ok(decision), Penalty::Block(block)) => {
                Ok((limit, self.local_penalty(applied, local, decision, block)))
            }
            (Err(Contended), Penalty::None | Penalty::Block(_)) => {
                self.env.metrics.global(GlobalEvent::CasExhausted);
                Err(applied.reported(l, limit, undecided(limit.requests)))
            }
        }
    }

    /// Notes what local limit `l` of an enforcing `applied` reports once it
    /// admitted.
    pub(crate) fn note_local(
        &mut self,
        applied: &Applied<'_, '_>,
        l: usize,
        limit: &Limit,
        decision: Decision,
    ) {
        if !applied.rule.shadow {
            let reported = applied.reported(l, limit, decision);
            self.tally.note(reported);
            self.tally.note_delay(reported);
        }
    }

    /// Consumes `weight` of `limit` in the dedicated shared-data key `key`,
    /// remembering it for a refund when admitted.
    pub(crate) fn take_key(
        &mut self,
        key: &Rc<str>,
        limit: &Limit,
        weight: u64,
        share: u8,
    ) -> Result<Decision, Contended> {
        let mut when = self.clock;
        let reserve = reserve(limit, share);
        let taken = local::consume_when(self.env.store, key, limit, &mut when, weight, reserve);
        self.timed(when);
        let taken = taken?;
        Ok(self.consumed(LocalState::Key(Rc::clone(key)), limit, taken, weight))
    }

    /// Consumes `weight` of `limit` in the entry of a key table (counting
    /// `rule`'s `table_full` when the key has no entry of its own),
    /// remembering it for a refund when admitted.
    pub(crate) fn take_entry(
        &mut self,
        rule: usize,
        entry: Entry<'_>,
        limit: &Limit,
        weight: u64,
        share: u8,
    ) -> Result<Decision, Contended> {
        let table = Table::new(entry.prefix, entry.shape);
        let reserve = reserve(limit, share);
        let mut when = self.clock;
        let decided = table::consume_when(
            self.env.store,
            &table,
            entry.fingerprint,
            limit,
            &mut when,
            weight,
            reserve,
        );
        self.timed(when);
        let decided = decided?;
        if decided.placed != Placed::Own {
            self.env.metrics.rule(rule, RuleEvent::TableFull);
        }
        let at = LocalState::Entry {
            prefix: Rc::clone(entry.prefix),
            shape: entry.shape,
            fingerprint: entry.fingerprint,
            spot: decided.spot,
        };
        Ok(self.consumed(at, limit, decided.result, weight))
    }

    /// Remembers what `taken` consumed at `at`, if it admitted.
    fn consumed(&mut self, at: LocalState, limit: &Limit, taken: Taken, weight: u64) -> Decision {
        let decision = taken.decision;
        if decision.allowed {
            let undo = Undo::State {
                at,
                limit: limit.clone(),
                admitted_at: taken.at.saturating_add(decision.delay),
                weight,
            };
            push_one(&mut self.tally.consumed, undo);
        }
        decision
    }
}

/// The entry of a key in a key table.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Entry<'a> {
    /// The prefix of the table's buckets.
    pub(crate) prefix: &'a Rc<str>,
    pub(crate) shape: Shape,
    pub(crate) fingerprint: u64,
}
