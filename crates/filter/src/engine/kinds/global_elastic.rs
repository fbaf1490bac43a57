//! Global elastic limits: checked per request; one its quota denies may
//! borrow (see [`crate::engine::core::elastic`]) in a second call, made
//! only when every enforcing denial of the first came from an elastic limit
//! that can borrow (the first call, denied, consumed nothing). The item
//! carries what it checks in the second call ([`Lend`]); each item there
//! carries whom it lends for ([`Lent`]).

use crate::config::checks::{compile_limit, LimitSite};
use crate::config::raw::{RawElastic, RawLimit};
use crate::config::{Elastic, GlobalElastic, LimitKind};
use crate::engine::core::call::{Item, Wire};
use crate::engine::core::elastic::{self, lent};
use crate::engine::core::global::{self, affordable};
use crate::engine::core::tally::Tally;
use crate::engine::core::walk::{class_spec, share, Applied, Cx};
use crate::headers::Reported;
use crate::key::RequestView;
use crate::local::SharedStore;
use crate::metrics::MetricSink;
use sluice_core::{FieldError, Limit};
use sluice_wire::{limiter_key, LimitResult};

/// What a global elastic limit checks in the second call instead of itself.
#[derive(Debug)]
pub struct Lend {
    /// The key's extra allowance.
    extra: Item<()>,
    /// Each limit of the pool rule, at the pool's key.
    pool: Vec<Item<()>>,
}

/// An item of the second call, borrowing for an elastic limit that denied
/// with `own` (reported in its place): its extra allowance (`extra`), or a
/// limit of its pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lent {
    own: Reported,
    extra: bool,
}

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
        global: global::built(site, raw, limit)?,
        elastic,
    }))
}

/// Denies global elastic limit `l` of `applied` if it can never admit the
/// request's weight or the over-limit cache holds its key; else its item
/// for the call, with what it checks in the second call if it denies (none
/// when the pool rule's key cannot be built). Its denial may still borrow:
/// never cached.
pub(crate) fn step<V, S, M>(
    cx: &mut Cx<'_, V, S, M>,
    applied: &Applied<'_, '_>,
    l: usize,
    limit: &GlobalElastic,
) -> Result<Item<Option<Lend>>, Reported>
where
    V: RequestView,
    S: SharedStore + ?Sized,
    M: MetricSink + ?Sized,
{
    let global = &limit.global;
    let quota = affordable(applied, l, global)?;
    cx.not_cached(applied, l, global, quota)?;
    let lend = lend(cx, applied, l, &limit.elastic);
    Ok(global::item(applied, l, quota, None).with(lend))
}

/// What global elastic limit `l` of `applied` checks in the second call if
/// it denies; `None` when the pool rule's key cannot be built.
fn lend<V, S, M>(
    cx: &Cx<'_, V, S, M>,
    applied: &Applied<'_, '_>,
    l: usize,
    elastic: &Elastic,
) -> Option<Lend>
where
    V: RequestView,
    S: SharedStore + ?Sized,
    M: MetricSink + ?Sized,
{
    let pool = cx.env.plan.rules.get(elastic.pool)?;
    let mut pool_key = String::new();
    if !cx.request.write_key(&pool.key, &mut pool_key) {
        return None;
    }
    // Each class borrows its share of the extra allowance and the pool.
    let item = |rule: usize, limit_index: usize, limit: &Limit, key: String, share: u8| Item {
        rule,
        limit: limit_index,
        window: limit.window,
        requests: limit.requests,
        fingerprint: applied.fingerprint,
        cache: None,
        wire: Wire::Limit(class_spec(key, limit, share)),
        follow: (),
    };
    let extra_key = limiter_key(&elastic.place, l, applied.key);
    let extra = item(applied.index, l, &elastic.extra, extra_key, applied.share);
    let pool_share = share(pool, cx.request);
    let pool = pool
        .limits
        .iter()
        .enumerate()
        .map(|(k, pool_limit)| {
            let limit = pool_limit
                .quota()
                .map_or(pool_limit.limit(), |q| q.limit_for(&pool_key));
            let key = limiter_key(&pool.name, k, &pool_key);
            item(elastic.pool, k, limit, key, pool_share)
        })
        .collect();
    Some(Lend { extra, pool })
}

/// What `item`, an elastic limit denied with `answer` in the first call,
/// checks in the second: its extra allowance and its pool's limits, each
/// lending for it.
pub(crate) fn borrowing<F>(
    item: &Item<F>,
    lend: Lend,
    answer: &LimitResult,
) -> impl Iterator<Item = Item<Lent>> {
    let own = item.reported(answer.decision());
    let Lend { extra, pool } = lend;
    std::iter::once(extra.with(Lent { own, extra: true })).chain(
        pool.into_iter()
            .map(move |p| p.with(Lent { own, extra: false })),
    )
}

/// Notes what an item lending for an elastic limit reports once admitted:
/// a limit of the pool nothing, the extra allowance the elastic limit as
/// lent.
pub(crate) fn admitted(lent_for: &Lent, tally: &mut Tally) {
    if !lent_for.extra {
        return;
    }
    tally.borrowed.push(lent_for.own.rule);
    let reported = Reported {
        decision: lent(lent_for.own.decision),
        ..lent_for.own
    };
    tally.note(reported);
    tally.note_delay(reported);
}

/// What a denial of an item lending for an elastic limit reports: the
/// elastic limit's own denial.
pub(crate) fn refused(lent_for: &Lent) -> Reported {
    lent_for.own
}
