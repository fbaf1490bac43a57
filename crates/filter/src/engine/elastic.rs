//! Elastic limits: a request its own quota denies passes if the key's extra
//! allowance (`ceiling - requests` per window) and every limit of the pool
//! rule admit it; it then consumes both instead of the limit (all or
//! nothing), and reports the limit with nothing remaining. A local elastic
//! limit borrows at once; a global one in a second call, made only when
//! every enforcing denial of the first came from an elastic limit that can
//! borrow (the first call, denied, consumed nothing).

use super::call::{Batch, Call, GlobalItem, Lend, Via};
use super::local::Aim;
use super::pending::PendingCheck;
use super::tally::Tally;
use super::verdict::Verdict;
use super::walk::{class_spec, share, Applied, Walk};
use crate::config::checks::{field_path, LimitSite};
use crate::config::raw::{Mode, OnExceed, RawCost, RawLimit, RawRule, Scope};
use crate::config::{Elastic, GlobalLimit, LimitKind, LocalLimit, Plan, Rule, Sync};
use crate::key::RequestView;
use crate::layout;
use crate::local::SharedStore;
use crate::metrics::MetricSink;
use sluice_core::{Decision, FieldError, Limit, MAX_REQUESTS};
use sluice_wire::{limiter_key, LimitSpec};

/// Compiles the `elastic` of a limit compiled to `limit`; `None` without.
pub(crate) fn compile(
    site: &LimitSite<'_>,
    raw: &RawLimit,
    limit: &Limit,
) -> Result<Option<Elastic>, FieldError> {
    let Some(raw_elastic) = &raw.elastic else {
        return Ok(None);
    };
    let elastic_path = site.field("elastic");
    if site.mode == Mode::Shadow {
        return Err(FieldError::at(
            elastic_path,
            "not available in a rule with mode shadow",
        ));
    }
    if raw.on_exceed == OnExceed::Delay {
        return Err(FieldError::at(
            elastic_path,
            "cannot be combined with on_exceed: delay",
        ));
    }
    let extra = extra_allowance(&elastic_path, limit, raw_elastic)?;
    let label = layout::elastic_label(site.rule);
    let place = match raw.scope {
        Scope::Local => layout::limit_prefix(site.domain, &label, site.index, &extra),
        Scope::Global => label,
    };
    // The pool's index is set once every rule is known.
    Ok(Some(Elastic {
        extra,
        pool: usize::MAX,
        pool_name: raw_elastic.pool.clone(),
        place,
    }))
}

/// The extra allowance of an elastic limit: `ceiling - requests` per window,
/// the burst scaled by the same ratio (at least 1).
fn extra_allowance(
    path: &str,
    limit: &Limit,
    raw: &crate::config::raw::RawElastic,
) -> Result<Limit, FieldError> {
    let field = field_path(path, "ceiling");
    if raw.ceiling <= limit.requests || raw.ceiling > MAX_REQUESTS {
        return Err(FieldError::at(
            field,
            format!(
                "must be above the limit's requests ({}) and at most {MAX_REQUESTS}, got {}",
                limit.requests, raw.ceiling
            ),
        ));
    }
    let requests = raw.ceiling - limit.requests;
    let scaled = u128::from(limit.burst) * u128::from(requests) / u128::from(limit.requests);
    let extra = Limit {
        requests,
        burst: u64::try_from(scaled).unwrap_or(u64::MAX).max(1),
        soft_percent: 0,
        max_delay: None,
        ..limit.clone()
    };
    extra
        .validate()
        .map_err(|e| FieldError::at(field, format!("the extra allowance {}", e.message)))?;
    Ok(extra)
}

/// Refuses settings of a pool rule that would have no effect: a pool is
/// consulted only by elastic limits, with the borrowing request's weight.
pub(crate) fn check_pool_rule(path: &str, rule: &RawRule) -> Result<(), FieldError> {
    let m = &rule.matcher;
    if m.path_prefix.is_some() || m.path.is_some() || !m.methods.is_empty() || !m.headers.is_empty()
    {
        return Err(FieldError::at(
            field_path(path, "match"),
            "a pool rule is consulted only by elastic limits, never matched on its own: remove match",
        ));
    }
    if rule.cost != RawCost::default() {
        return Err(FieldError::at(
            field_path(path, "cost"),
            "a pool rule is consumed with the borrowing request's weight: remove cost",
        ));
    }
    if rule.mode == Mode::Shadow {
        return Err(FieldError::at(
            field_path(path, "mode"),
            "a pool rule cannot be in shadow mode",
        ));
    }
    Ok(())
}

/// Points every elastic limit at its pool rule, and checks the pool: it
/// exists, is another rule, has no elastic limits and no delay mode, and
/// its limits are decided where the elastic limit is (all local or all
/// global).
pub(crate) fn resolve_pools(rules: &mut [Rule]) -> Result<(), FieldError> {
    let mut resolved = Vec::new();
    for (i, rule) in rules.iter().enumerate() {
        for (j, rule_limit) in rule.limits.iter().enumerate() {
            let Some(elastic) = rule_limit.elastic() else {
                continue;
            };
            let field = format!("rules[{i}].limits[{j}].elastic.pool");
            let name = &elastic.pool_name;
            let p = rules
                .iter()
                .position(|r| &r.name == name)
                .ok_or_else(|| FieldError::at(&field, format!("no rule is named {name:?}")))?;
            let pool = rules
                .get(p)
                .ok_or_else(|| FieldError::at(&field, "no such rule"))?;
            if p == i {
                return Err(FieldError::at(field, "a rule cannot be its own pool"));
            }
            let local = rule_limit.is_local();
            for (k, pool_limit) in pool.limits.iter().enumerate() {
                let problem = if pool_limit.concurrency().is_some() {
                    Some("is a concurrency limit; a pool cannot be".to_string())
                } else if pool_limit.elastic().is_some() {
                    Some("is itself elastic; a pool cannot be".to_string())
                } else if pool_limit.limit().max_delay.is_some() {
                    Some("is in delay mode; a pool cannot be".to_string())
                } else if pool_limit.is_local() != local {
                    let (this, that) = if local {
                        ("local", "global")
                    } else {
                        ("global", "local")
                    };
                    Some(format!(
                        "is {that}; a {this} elastic limit needs a {this} pool"
                    ))
                } else {
                    None
                };
                if let Some(problem) = problem {
                    return Err(FieldError::at(
                        field,
                        format!("rule {name:?}: its limits[{k}] {problem}"),
                    ));
                }
            }
            resolved.push((i, j, p));
        }
    }
    for (i, j, p) in resolved {
        let elastic = match rules
            .get_mut(i)
            .and_then(|r| r.limits.get_mut(j))
            .map(|l| &mut l.kind)
        {
            Some(LimitKind::Local(local)) => local.elastic.as_mut(),
            Some(LimitKind::Global(GlobalLimit {
                sync: Sync::Elastic(elastic),
                ..
            })) => Some(elastic),
            _ => None,
        };
        if let Some(elastic) = elastic {
            elastic.pool = p;
        }
    }
    Ok(())
}

impl<V, S, M> Walk<'_, V, S, M>
where
    V: RequestView,
    S: SharedStore + ?Sized,
    M: MetricSink + ?Sized,
{
    /// Lends the request of `applied`, which local elastic limit `l` denied,
    /// the key's extra allowance and the pool's headroom: consumes both, or
    /// neither. Returns whether it borrowed.
    pub(super) fn borrow_local(
        &mut self,
        applied: &Applied<'_, '_>,
        l: usize,
        local: &LocalLimit,
        elastic: &Elastic,
    ) -> bool {
        let mark = self.tally.consumed.len();
        let weight = applied.weight;
        let extra = Aim::Extra(applied.fingerprint);
        let taken = self.take(applied.index, l, local, extra, weight, applied.share);
        if !matches!(taken, Ok(d) if d.allowed) {
            return false;
        }
        let plan = self.env.plan;
        let mut pool_key = String::new();
        let pool = plan
            .rules
            .get(elastic.pool)
            .filter(|pool| self.request.write_key(&pool.key, &mut pool_key));
        let Some(pool) = pool else {
            self.tally.refund_since(mark, &self.env);
            return false;
        };
        let pool_fingerprint = self.hasher.fingerprint(&pool_key);
        for (k, pool_limit) in pool.limits.iter().enumerate() {
            // A local elastic limit's pool is local (see `resolve_pools`).
            let LimitKind::Local(pool_local) = &pool_limit.kind else {
                self.tally.refund_since(mark, &self.env);
                return false;
            };
            let target = pool_local
                .quota
                .override_index(&pool_key)
                .map_or(Aim::Key(pool_fingerprint), Aim::Override);
            let pool_share = share(pool, self.request);
            let taken = self.take(elastic.pool, k, pool_local, target, weight, pool_share);
            if !matches!(taken, Ok(d) if d.allowed) {
                self.tally.refund_since(mark, &self.env);
                return false;
            }
        }
        self.tally.borrowed.push(applied.index);
        true
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

/// What an elastic limit that denied with `denial` reports once it lent the
/// request its extra allowance: admitted, with nothing of its own quota
/// remaining.
pub(super) fn lent(denial: Decision) -> Decision {
    Decision {
        allowed: true,
        remaining: 0,
        retry_after: 0,
        delay: 0,
        denial: None,
        ..denial
    }
}
