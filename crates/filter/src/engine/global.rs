//! Global limits decided by the `sluice-limiter` cluster, checked per
//! request: denied at once while the over-limit cache holds the key
//! ([`super::deny_cache`]), else added to the call of the request's
//! enforcing or shadow limits. The other kinds the limiter decides
//! ([`super::coalesced`], [`super::leased`], [`super::global_elastic`])
//! build on the helpers here.

use super::call::{GlobalItem, Via};
use super::deny_cache;
use super::walk::{class_spec, Applied, Walk};
use crate::config::checks::{compile_limit, LimitSite};
use crate::config::raw::RawLimit;
use crate::config::{GlobalLimit, LimitKind, Quota};
use crate::headers::Reported;
use crate::key::RequestView;
use crate::layout;
use crate::local::SharedStore;
use crate::metrics::MetricSink;
use sluice_core::{Decision, Denial, FieldError, Limit, Nanos};
use sluice_wire::{limiter_key, LimitSpec};

/// Compiles a global limit checked per request.
pub(crate) fn compile(site: &LimitSite<'_>, raw: &RawLimit) -> Result<LimitKind, FieldError> {
    let limit = compile_limit(site.path, raw)?;
    refuse_lease_fields(site, raw)?;
    Ok(LimitKind::Global(built(site, limit)))
}

/// The global limit of `limit` at `site`: its quota and its over-limit
/// cache.
pub(super) fn built(site: &LimitSite<'_>, limit: Limit) -> GlobalLimit {
    GlobalLimit {
        quota: Quota {
            limit,
            overrides: Vec::new(),
        },
        deny_prefix: layout::deny_prefix(site.domain, site.rule, site.index),
    }
}

/// Refuses `sync.max_share` and `sync.ttl` on a limit that is not leased.
pub(super) fn refuse_lease_fields(site: &LimitSite<'_>, raw: &RawLimit) -> Result<(), FieldError> {
    match &raw.sync {
        Some(sync) if sync.max_share.is_some() || sync.ttl.is_some() => Err(FieldError::at(
            site.field("sync"),
            "max_share and ttl only apply with mode lease",
        )),
        Some(_) | None => Ok(()),
    }
}

impl<V, S, M> Walk<'_, V, S, M>
where
    V: RequestView,
    S: SharedStore + ?Sized,
    M: MetricSink + ?Sized,
{
    /// Denies global limit `l` of `applied` if it can never admit the
    /// request's weight or the over-limit cache holds its key, or adds it
    /// to the call it belongs to, with `via`.
    pub(super) fn global(
        &mut self,
        applied: &Applied<'_, '_>,
        l: usize,
        global: &GlobalLimit,
        via: Via,
    ) -> Result<(), Reported> {
        let limit = affordable(applied, l, global)?;
        self.not_cached(applied, l, global, limit)?;
        let (item, spec) = item(applied, l, limit, via);
        self.batch_of(applied).push(item, spec, applied.weight);
        Ok(())
    }

    /// Denies `limit` of global limit `l` of `applied` while the over-limit
    /// cache holds its key.
    pub(super) fn not_cached(
        &mut self,
        applied: &Applied<'_, '_>,
        l: usize,
        global: &GlobalLimit,
        limit: &Limit,
    ) -> Result<(), Reported> {
        let shape = deny_cache::shape(&global.quota.limit, limit.requests);
        match self.cached_denial(applied, &global.deny_prefix, shape) {
            Some(deadline) => {
                let wait = deadline.saturating_sub(self.tally.now);
                Err(applied.reported(l, limit, Decision::over_limit(limit.requests, wait)))
            }
            None => Ok(()),
        }
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

/// The limit of `global` for the key of `applied`; a denial when it can
/// never admit the request's weight.
pub(super) fn affordable<'g>(
    applied: &Applied<'_, '_>,
    l: usize,
    global: &'g GlobalLimit,
) -> Result<&'g Limit, Reported> {
    let limit = global.quota.limit_for(applied.key);
    if applied.weight > limit.soft_burst() {
        return Err(applied.reported(l, limit, too_costly(limit)));
    }
    Ok(limit)
}

/// The item and wire form of `limit` of global limit `l` of `applied`,
/// checked with `via`. A lower priority class leaves room for the ones
/// above it; a denial is cached only for a fixed-cost rule without a
/// reserve (one that kept a reserve says nothing of the classes above).
pub(super) fn item(
    applied: &Applied<'_, '_>,
    l: usize,
    limit: &Limit,
    via: Via,
) -> (GlobalItem, LimitSpec<'static>) {
    let key = limiter_key(&applied.rule.name, l, applied.key);
    let spec = class_spec(key, limit, applied.share);
    let item = GlobalItem {
        rule: applied.index,
        limit: l,
        window: limit.window,
        requests: limit.requests,
        fingerprint: applied.fingerprint,
        cacheable: applied.fixed_cost() && spec.reserve.is_none(),
        via,
    };
    (item, spec)
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
