//! Global elastic limits: checked per request; one its quota denies may
//! borrow (see [`super::elastic`]) in a second call, made only when every
//! enforcing denial of the first came from an elastic limit that can borrow
//! (the first call, denied, consumed nothing).

use super::call::{Batch, Call, GlobalItem, Lend, Via};
use super::elastic;
use super::global::{self, affordable, item};
use super::pending::PendingCheck;
use super::tally::Tally;
use super::verdict::Verdict;
use super::walk::{class_spec, share, Applied, Walk};
use crate::config::checks::{compile_limit, LimitSite};
use crate::config::raw::{RawElastic, RawLimit};
use crate::config::{Elastic, GlobalElastic, LimitKind, Plan};
use crate::headers::Reported;
use crate::key::RequestView;
use crate::local::SharedStore;
use crate::metrics::MetricSink;
use sluice_core::{FieldError, Limit};
use sluice_wire::{limiter_key, LimitSpec};

/// Compiles a global limit with `elastic` (checked per request, or
/// configured to coalesce: a request that may borrow is checked alone).
pub(crate) fn compile(
    site: &LimitSite<'_>,
    raw: &RawLimit,
    raw_elastic: &RawElastic,
) -> Result<LimitKind, FieldError> {
    let limit = compile_limit(site.path, raw)?;
    let elastic = elastic::compile(site, raw, raw_elastic, &limit, false)?;
    global::refuse_lease_fields(site, raw)?;
    Ok(LimitKind::GlobalElastic(GlobalElastic {
        global: global::built(site, limit),
        elastic,
    }))
}

impl<V, S, M> Walk<'_, V, S, M>
where
    V: RequestView,
    S: SharedStore + ?Sized,
    M: MetricSink + ?Sized,
{
    /// Denies global elastic limit `l` of `applied` if it can never admit
    /// the request's weight or the over-limit cache holds its key, or adds
    /// it to the call, with what it checks in the second call if it denies.
    pub(super) fn global_elastic(
        &mut self,
        applied: &Applied<'_, '_>,
        l: usize,
        limit: &GlobalElastic,
    ) -> Result<(), Reported> {
        let global = &limit.global;
        let quota = affordable(applied, l, global)?;
        self.not_cached(applied, l, global, quota)?;
        let via = match self.lend_global(applied, l, &limit.elastic) {
            Some(lend) => Via::Elastic(Box::new(lend)),
            None => Via::Alone,
        };
        let (item, spec) = item(applied, l, quota, via);
        // A denial may still borrow: never cached.
        let item = GlobalItem {
            cacheable: false,
            ..item
        };
        self.batch_of(applied).push(item, spec, applied.weight);
        Ok(())
    }

    /// What global elastic limit `l` of `applied` checks in the second call
    /// if it denies; `None` when the pool rule's key cannot be built.
    pub(super) fn lend_global(
        &self,
        applied: &Applied<'_, '_>,
        l: usize,
        elastic: &Elastic,
    ) -> Option<Lend> {
        let pool = self.env.plan.rules.get(elastic.pool)?;
        let mut pool_key = String::new();
        if !self.request.write_key(&pool.key, &mut pool_key) {
            return None;
        }
        let item = |rule: usize, limit_index: usize, limit: &Limit| GlobalItem {
            rule,
            limit: limit_index,
            window: limit.window,
            requests: limit.requests,
            fingerprint: applied.fingerprint,
            cacheable: false,
            via: Via::Alone,
        };
        // Each class borrows its share of the extra allowance and the pool.
        let extra_key = limiter_key(&elastic.place, l, applied.key);
        let extra = (
            item(applied.index, l, &elastic.extra),
            class_spec(extra_key, &elastic.extra, applied.share),
        );
        let pool_share = share(pool, self.request);
        let pool = pool
            .limits
            .iter()
            .enumerate()
            .map(|(k, pool_limit)| {
                let limit = pool_limit
                    .quota()
                    .map_or(pool_limit.limit(), |q| q.limit_for(&pool_key));
                let key = limiter_key(&pool.name, k, &pool_key);
                (
                    item(elastic.pool, k, limit),
                    class_spec(key, limit, pool_share),
                )
            })
            .collect();
        Some(Lend { extra, pool })
    }
}

/// The second call of a request whose enforcing call was denied only by
/// elastic limits that can borrow: the same limits, each denied elastic
/// limit replaced by its extra allowance and its pool's limits.
pub(super) fn borrow_call(plan: &Plan, calls: Vec<Call>, tally: Tally) -> Verdict {
    let mut batch = Batch::default();
    for call in calls.into_iter().filter(|c| !c.shadow) {
        let answers = call.answer.flatten().map(|a| a.limits).unwrap_or_default();
        let Batch {
            items,
            limits,
            hits,
            ..
        } = call.batch;
        let hits = hits.unwrap_or(1);
        for ((mut item, spec), answer) in items.into_iter().zip(limits).zip(answers) {
            let weight = spec.hits.unwrap_or(hits);
            let lent = match std::mem::replace(&mut item.via, Via::Alone) {
                Via::Elastic(lent) if !answer.allowed => *lent,
                via => {
                    // Permits are asked for again; nothing else is.
                    if let Via::Permit(ttl) = via {
                        item.via = Via::Permit(ttl);
                    }
                    // The first call settled its lease ask and returns.
                    let spec = LimitSpec {
                        lease: None,
                        returned: None,
                        returned_age_ms: None,
                        ..spec
                    };
                    batch.push(item, spec, weight);
                    continue;
                }
            };
            let own = item.reported(answer.decision());
            let Lend { extra, pool } = lent;
            let (extra_item, extra_spec) = extra;
            let lent = |item: GlobalItem, extra: bool| GlobalItem {
                via: Via::Lent { own, extra },
                ..item
            };
            batch.push(lent(extra_item, true), extra_spec, weight);
            for (pool_item, pool_spec) in pool {
                batch.push(lent(pool_item, false), pool_spec, weight);
            }
        }
    }
    let calls = batch
        .into_call(&plan.domain, false, tally.holder)
        .into_iter()
        .collect();
    Verdict::Check(PendingCheck {
        calls,
        tally,
        borrowing: true,
        reply: None,
    })
}
