//! Local limits: decided by this filter, each key's state in a shared-data
//! slot (or an override's own key), consumed in a compare-and-swap loop
//! ([`crate::local::consume`]) and refunded if the request is denied.

use super::elastic::{self, lent};
use super::tally::{undecided, Consumed, Target};
use super::walk::{Applied, Walk};
use crate::config::checks::{compile_limit, LimitSite};
use crate::config::raw::RawLimit;
use crate::config::{LimitKind, LocalLimit, Quota};
use crate::headers::Reported;
use crate::key::RequestView;
use crate::layout;
use crate::local::{self, Contended, SharedStore};
use crate::metrics::{GlobalEvent, MetricSink};
use sluice_core::{Decision, FieldError};

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
        let (target, limit) = match quota.override_index(applied.key) {
            Some(i) => match quota.overrides.get(i) {
                Some(o) => (Target::Override(i), &o.limit),
                None => return Ok(()),
            },
            None => (Target::Slot(applied.slot), &quota.limit),
        };
        let mut decision = match self.take(applied.index, l, local, target, applied.weight) {
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

    /// Consumes `weight` of local limit `l` of rule `rule` at `target`,
    /// remembering it for a refund when admitted.
    pub(super) fn take(
        &mut self,
        rule: usize,
        l: usize,
        local: &LocalLimit,
        target: Target,
        weight: u64,
    ) -> Result<Decision, Contended> {
        let Some((limit, key)) = target.locate(local, &mut self.scratch) else {
            return Ok(Decision::over_limit(0, 0));
        };
        let decision = local::consume(self.env.store, key, limit, self.tally.now, weight)?;
        if decision.allowed {
            self.tally.consumed.push(Consumed {
                rule,
                limit: l,
                target,
                delay: decision.delay,
                weight,
            });
        }
        Ok(decision)
    }
}
