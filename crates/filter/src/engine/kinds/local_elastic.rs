//! Local elastic limits: a local limit whose quota denies a request lends
//! it the key's extra allowance and the pool's headroom at once (see
//! [`crate::engine::core::elastic`]), consuming both or neither.

use crate::config::checks::{compile_limit, LimitSite};
use crate::config::raw::{RawElastic, RawLimit};
use crate::config::{LimitKind, LocalElastic};
use crate::engine::core::elastic::{self, lent};
use crate::engine::core::local::{self, Entry};
use crate::engine::core::walk::{share, Applied, Cx};
use crate::headers::Reported;
use crate::key::RequestView;
use crate::local::SharedStore;
use crate::metrics::MetricSink;
use sluice_core::FieldError;

/// Compiles a local limit with `elastic`.
pub(crate) fn compile(
    site: &LimitSite<'_>,
    raw: &RawLimit,
    raw_elastic: &RawElastic,
) -> Result<LimitKind, FieldError> {
    let limit = compile_limit(site.path, raw)?;
    let elastic = elastic::compile(site, raw, raw_elastic, &limit, true)?;
    let local = local::built(site, raw, limit)?;
    Ok(LimitKind::LocalElastic(LocalElastic { local, elastic }))
}

/// Consumes local elastic limit `l` of `applied`, or, when it denies,
/// borrows.
pub(crate) fn step<V, S, M>(
    cx: &mut Cx<'_, V, S, M>,
    applied: &Applied<'_, '_>,
    l: usize,
    limit: &LocalElastic,
) -> Result<(), Reported>
where
    V: RequestView,
    S: SharedStore + ?Sized,
    M: MetricSink + ?Sized,
{
    let (quota, mut decision) = cx.take_quota(applied, l, &limit.local)?;
    if !decision.allowed {
        if !borrow(cx, applied, limit) {
            return Err(applied.reported(l, quota, decision));
        }
        decision = lent(decision);
    }
    cx.note_local(applied, l, quota, decision);
    Ok(())
}

/// Lends the request of `applied`, which `limit` denied, the key's extra
/// allowance and the pool's headroom: consumes both, or neither. Returns
/// whether it borrowed.
fn borrow<V, S, M>(
    cx: &mut Cx<'_, V, S, M>,
    applied: &Applied<'_, '_>,
    limit: &LocalElastic,
) -> bool
where
    V: RequestView,
    S: SharedStore + ?Sized,
    M: MetricSink + ?Sized,
{
    let mark = cx.tally.consumed.len();
    let elastic = &limit.elastic;
    let weight = applied.weight;
    let extra = Entry {
        prefix: &elastic.place,
        shape: limit.local.keys,
        fingerprint: applied.fingerprint,
    };
    let taken = cx.take_entry(applied.index, extra, &elastic.extra, weight, applied.share);
    if !matches!(taken, Ok(d) if d.allowed) {
        return false;
    }
    if !borrow_pool(cx, elastic.pool, weight) {
        cx.tally.refund_since(mark, &cx.env);
        return false;
    }
    cx.tally.borrowed.push(applied.index);
    true
}

/// Consumes `weight` of every limit of the pool rule `pool` at the pool's
/// key; returns whether all admitted (the caller refunds).
fn borrow_pool<V, S, M>(cx: &mut Cx<'_, V, S, M>, pool: usize, weight: u64) -> bool
where
    V: RequestView,
    S: SharedStore + ?Sized,
    M: MetricSink + ?Sized,
{
    let plan = cx.env.plan;
    let mut pool_key = String::new();
    let Some(rule) = plan
        .rules
        .get(pool)
        .filter(|rule| cx.request.write_key(&rule.key, &mut pool_key))
    else {
        return false;
    };
    let fingerprint = cx.hasher.fingerprint(&pool_key);
    let pool_share = share(rule, cx.request);
    for pool_limit in &rule.limits {
        // A local elastic limit's pool is local (see `elastic::compile`).
        let Some(pool_local) = pool_limit.local() else {
            return false;
        };
        let quota = &pool_local.quota;
        let own = quota
            .override_index(&pool_key)
            .and_then(|i| quota.overrides.get(i));
        let taken = match own {
            Some(o) => cx.take_key(&o.state_key, &o.limit, weight, pool_share),
            None => {
                let entry = Entry {
                    prefix: &pool_local.state_prefix,
                    shape: pool_local.keys,
                    fingerprint,
                };
                cx.take_entry(pool, entry, &quota.limit, weight, pool_share)
            }
        };
        if !matches!(taken, Ok(d) if d.allowed) {
            return false;
        }
    }
    true
}
