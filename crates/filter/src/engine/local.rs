//! Local limits: decided by this filter, each key's state in a shared-data
//! slot (or an override's own key), consumed in a compare-and-swap loop
//! ([`crate::local::consume`]) and refunded if the request is denied.

use super::elastic::{self, lent};
use super::tally::{undecided, Consumed, Target};
use super::walk::{reserve, Applied, Walk};
use crate::config::checks::{compile_limit, LimitSite};
use crate::config::raw::RawLimit;
use crate::config::{LimitKind, LocalLimit, Quota};
use crate::headers::Reported;
use crate::key::RequestView;
use crate::layout;
use crate::local::{self, Contended, SharedStore, Taken};
use crate::metrics::{GlobalEvent, MetricSink, RuleEvent};
use crate::table::{self, Placed, Table};
use sluice_core::{Decision, FieldError};

/// Where a local limit is taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Aim {
    /// The entry of the key with this fingerprint in the limit's table.
    Key(u64),
    /// The entry of the key with this fingerprint in the table of the
    /// limit's extra allowance (elastic).
    Extra(u64),
    /// The dedicated key of the override at this position.
    Override(usize),
}

/// Compiles a local limit: its quota, where its state lives, and its
/// elastic borrowing.
pub(crate) fn compile(site: &LimitSite<'_>, raw: &RawLimit) -> Result<LimitKind, FieldError> {
    let limit = compile_limit(site.path, raw)?;
    let state_prefix = layout::limit_prefix(site.domain, site.rule, site.index, &limit);
    let elastic = elastic::compile(site, raw, &limit)?;
    if raw.sync.is_some() {
        return Err(FieldError::at(
            site.field("sync"),
            "only applies to limits with scope global",
        ));
    }
    Ok(LimitKind::Local(LocalLimit {
        quota: Quota {
            limit,
            overrides: Vec::new(),
        },
        state_prefix,
        keys: site.keys,
        elastic,
    }))
}

impl<V, S, M> Walk<'_, V, S, M>
where
    V: RequestView,
    S: SharedStore + ?Sized,
    M: MetricSink + ?Sized,
{
    /// Consumes local limit `l` of `applied`, or, for an elastic limit that
    /// denies, borrows.
    pub(super) fn local(
        &mut self,
        applied: &Applied<'_, '_>,
        l: usize,
        local: &LocalLimit,
    ) -> Result<(), Reported> {
        let quota = &local.quota;
        let (aim, limit) = match quota.override_index(applied.key) {
            Some(i) => match quota.overrides.get(i) {
                Some(o) => (Aim::Override(i), &o.limit),
                None => return Ok(()),
            },
            None => (Aim::Key(applied.fingerprint), &quota.limit),
        };
        let taken = self.take(applied.index, l, local, aim, applied.weight, applied.share);
        let mut decision = match taken {
            Ok(decision) => decision,
            Err(Contended) => {
                self.env.metrics.global(GlobalEvent::CasExhausted);
                return Err(applied.reported(l, limit, undecided(limit.requests)));
            }
        };
        if !decision.allowed {
            match &local.elastic {
                Some(elastic) if self.borrow_local(applied, l, local, elastic) => {
                    decision = lent(decision);
                }
                _ => return Err(applied.reported(l, limit, decision)),
            }
        }
        if !applied.rule.shadow {
            let reported = applied.reported(l, limit, decision);
            self.tally.note(reported);
            self.tally.note_delay(reported);
        }
        Ok(())
    }

    /// Consumes `weight` of local limit `l` of rule `rule` at `aim`,
    /// remembering it for a refund when admitted.
    pub(super) fn take(
        &mut self,
        rule: usize,
        l: usize,
        local: &LocalLimit,
        aim: Aim,
        weight: u64,
        share: u8,
    ) -> Result<Decision, Contended> {
        let (store, now) = (self.env.store, self.tally.now);
        let (limit, prefix, fingerprint) = match aim {
            Aim::Override(i) => {
                let Some(o) = local.quota.overrides.get(i) else {
                    return Ok(Decision::over_limit(0, 0));
                };
                let reserve = reserve(&o.limit, share);
                let taken = local::consume(store, &o.state_key, &o.limit, now, weight, reserve)?;
                return Ok(self.consumed(rule, l, Target::Override(i), taken, weight));
            }
            Aim::Key(fingerprint) => (&local.quota.limit, &local.state_prefix, fingerprint),
            Aim::Extra(fingerprint) => match &local.elastic {
                Some(elastic) => (&elastic.extra, &elastic.place, fingerprint),
                None => return Ok(Decision::over_limit(0, 0)),
            },
        };
        let table = Table::new(prefix, local.keys);
        let reserve = reserve(limit, share);
        let decided = table::consume(store, &table, fingerprint, limit, now, weight, reserve)?;
        if decided.placed != Placed::Own {
            self.env.metrics.rule(rule, RuleEvent::TableFull);
        }
        let target = match aim {
            Aim::Extra(_) => Target::Extra(decided.spot),
            _ => Target::Entry {
                spot: decided.spot,
                fingerprint,
            },
        };
        Ok(self.consumed(rule, l, target, decided.result, weight))
    }

    /// Remembers what `taken` consumed at `target`, if it admitted.
    fn consumed(
        &mut self,
        rule: usize,
        l: usize,
        target: Target,
        taken: Taken,
        weight: u64,
    ) -> Decision {
        let decision = taken.decision;
        if decision.allowed {
            self.tally.consumed.push(Consumed {
                rule,
                limit: l,
                target,
                at: taken.at,
                delay: decision.delay,
                weight,
            });
        }
        decision
    }
}
