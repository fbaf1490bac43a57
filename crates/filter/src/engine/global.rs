//! Global limits decided by the `sluice-limiter` cluster, checked per
//! request: denied at once while the over-limit cache holds the key
//! ([`super::deny_cache`]), else added to the call of the request's
//! enforcing or shadow limits. How a limit's checks reach the limiter
//! (`sync`) picks its kind's module: [`super::coalesced`],
//! [`super::leased`], or [`super::elastic`] for an elastic limit.

use super::call::{GlobalItem, LeaseAsk, Via};
use super::deny_cache;
use super::elastic;
use super::leased::{self, cancel_ask, from_lease, Spend};
use super::walk::{class_spec, Applied, Walk};
use crate::config::checks::{compile_limit, LimitSite};
use crate::config::raw::{RawLimit, RawSync, SyncMode};
use crate::config::{GlobalLimit, LimitKind, Quota, Sync};
use crate::headers::Reported;
use crate::key::RequestView;
use crate::layout;
use crate::local::SharedStore;
use crate::metrics::MetricSink;
use sluice_core::{Decision, Denial, FieldError, Limit, Nanos, MILLISECOND};
use sluice_wire::limiter_key;

/// Compiles a global limit: its quota, its over-limit cache, and how its
/// checks reach the limiter (an elastic limit's checks go per request).
pub(crate) fn compile(site: &LimitSite<'_>, raw: &RawLimit) -> Result<LimitKind, FieldError> {
    let limit = compile_limit(site.path, raw)?;
    let elastic = elastic::compile(site, raw, &limit)?;
    let sync = match &raw.sync {
        None => Sync::PerRequest,
        Some(raw_sync) => compile_sync(site, raw_sync, raw, &limit)?,
    };
    let sync = match (elastic, sync) {
        // Leases refuse elastic limits (see `leased::compile`).
        (Some(elastic), Sync::PerRequest | Sync::Coalesce) => Sync::Elastic(elastic),
        (_, sync) => sync,
    };
    Ok(LimitKind::Global(GlobalLimit {
        quota: Quota {
            limit,
            overrides: Vec::new(),
        },
        deny_prefix: layout::deny_prefix(site.domain, site.rule, site.index),
        sync,
    }))
}

/// Checks a global limit's `sync`.
fn compile_sync(
    site: &LimitSite<'_>,
    raw: &RawSync,
    raw_limit: &RawLimit,
    limit: &Limit,
) -> Result<Sync, FieldError> {
    let path = site.field("sync");
    match raw.mode {
        SyncMode::Lease => leased::compile(site, &path, raw, raw_limit, limit),
        _ if raw.max_share.is_some() || raw.ttl.is_some() => Err(FieldError::at(
            path,
            "max_share and ttl only apply with mode lease",
        )),
        SyncMode::Coalesce => Ok(Sync::Coalesce),
        _ => Ok(Sync::PerRequest),
    }
}

impl<V, S, M> Walk<'_, V, S, M>
where
    V: RequestView,
    S: SharedStore + ?Sized,
    M: MetricSink + ?Sized,
{
    /// Denies global limit `l` of `applied` if the over-limit cache holds
    /// its key, spends its lease, or adds it to the call it belongs to.
    pub(super) fn global(
        &mut self,
        applied: &Applied<'_, '_>,
        l: usize,
        global: &GlobalLimit,
    ) -> Result<(), Reported> {
        let limit = global.quota.limit_for(applied.key);
        if applied.weight > limit.soft_burst() {
            return Err(applied.reported(l, limit, too_costly(limit)));
        }
        let now = self.tally.now;
        let mut via = Via::Alone;
        // A lease ask's units, and the age of the units it returns.
        let (mut ask_units, mut returned_age) = (0, 0);
        match &global.sync {
            Sync::PerRequest | Sync::Elastic(_) => {}
            Sync::Coalesce => via = Via::Coalesced,
            Sync::Lease(policy) => match self.spend_lease(applied, l, limit, policy) {
                Some(Spend::Spent(lease)) => {
                    let decision = from_lease(limit.requests, &lease, now);
                    self.tally.note(applied.reported(l, limit, decision));
                    return Ok(());
                }
                Some(Spend::Ask { ask, returned, age }) => {
                    (ask_units, returned_age) = (ask, age);
                    via = Via::Leased(LeaseAsk {
                        slot: applied.slot,
                        asked: ask > 0,
                        returned,
                    });
                }
                None => {}
            },
        }
        let shape = deny_cache::shape(&global.quota.limit, limit.requests);
        if let Some(deadline) = self.cached_denial(applied, &global.deny_prefix, shape) {
            if let (Via::Leased(ask), Sync::Lease(policy)) = (&via, &global.sync) {
                cancel_ask(&self.env, policy, applied.fingerprint, *ask);
            }
            let denial = Decision::over_limit(limit.requests, deadline.saturating_sub(now));
            return Err(applied.reported(l, limit, denial));
        }
        if let Sync::Elastic(elastic) = &global.sync {
            if let Some(lend) = self.lend_global(applied, l, elastic) {
                via = Via::Elastic(Box::new(lend));
            }
        }
        // A lower priority class leaves room for the ones above it.
        let key = limiter_key(&applied.rule.name, l, applied.key);
        let mut spec = class_spec(key, limit, applied.share);
        if let Via::Leased(ask) = &via {
            spec.lease = (ask_units > 0).then_some(ask_units);
            if ask.returned > 0 {
                spec.returned = Some(ask.returned);
                spec.returned_age_ms = Some(returned_age.div_ceil(MILLISECOND));
            }
        }
        let item = GlobalItem {
            rule: applied.index,
            limit: l,
            window: limit.window,
            requests: limit.requests,
            fingerprint: applied.fingerprint,
            // A denial of an elastic limit may still borrow; one that kept a
            // reserve says nothing of the classes above.
            cacheable: applied.fixed_cost()
                && spec.reserve.is_none()
                && !matches!(via, Via::Elastic(_)),
            via,
        };
        self.batch_of(applied).push(item, spec, applied.weight);
        Ok(())
    }

    /// The deadline of a cached denial of the key of `applied` by a limit
    /// of `shape` (see [`deny_cache::shape`]), whose cache lives under
    /// `deny_prefix`. Only denials of fixed-cost rules are cached: others
    /// need no read.
    pub(super) fn cached_denial(
        &mut self,
        applied: &Applied<'_, '_>,
        deny_prefix: &str,
        shape: u64,
    ) -> Option<Nanos> {
        if !applied.fixed_cost() {
            return None;
        }
        layout::slot_key(&mut self.scratch, deny_prefix, applied.slot);
        deny_cache::lookup(
            self.env.store,
            &self.scratch,
            deny_cache::owner(applied.fingerprint, shape),
            self.tally.now,
        )
    }
}

/// The denial of a weight above what `limit` can ever admit: retrying does
/// not help. Decided without the key's state, so nothing is reported
/// remaining.
fn too_costly(limit: &Limit) -> Decision {
    Decision {
        allowed: false,
        limit: limit.requests,
        remaining: 0,
        reset: 0,
        retry_after: 0,
        delay: 0,
        denial: Some(Denial::CostExceedsCapacity),
    }
}
