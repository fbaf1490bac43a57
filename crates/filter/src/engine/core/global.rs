//! What every limit the `sluice-limiter` cluster decides shares: its
//! compiled form, the weight it can never admit, the over-limit cache
//! ([`super::deny_cache`]) read before its call, and its item in the call.

use super::call::{CacheSlot, Item, Wire};
use super::deny_cache;
use super::walk::{class_spec, Applied, Cx};
use crate::config::checks::{penalty, LimitSite};
use crate::config::plan::Penalty;
use crate::config::raw::RawLimit;
use crate::config::{GlobalLimit, Quota};
use crate::cost::metadata::{self, LimitRead, MetadataLimit, MetadataPlace};
use crate::headers::Reported;
use crate::key::RequestView;
use crate::layout;
use crate::local::SharedStore;
use crate::metrics::{MetricSink, RuleEvent};
use sluice_core::{Decision, Denial, FieldError, Limit, Nanos, MILLISECOND};
use sluice_wire::limiter_key;

/// The global limit of `limit` at `site`: its quota and its over-limit
/// cache.
pub(crate) fn built(
    site: &LimitSite<'_>,
    raw: &RawLimit,
    limit: Limit,
) -> Result<GlobalLimit, FieldError> {
    Ok(GlobalLimit {
        quota: Quota {
            limit,
            overrides: Vec::new(),
            penalty: penalty(site.path, raw)?,
        },
        deny_prefix: layout::deny_prefix(site.domain, site.rule, site.index).into(),
        from_metadata: None,
    })
}

/// Refuses `sync.max_share` and `sync.ttl` on a limit that is not leased.
pub(crate) fn refuse_lease_fields(site: &LimitSite<'_>, raw: &RawLimit) -> Result<(), FieldError> {
    match &raw.sync {
        Some(sync) if sync.max_share.is_some() || sync.ttl.is_some() => Err(FieldError::at(
            site.field("sync"),
            "max_share and ttl only apply with mode lease",
        )),
        Some(_) | None => Ok(()),
    }
}

/// Asks the limiter to hold the penalty box of `global`, if it has one, in
/// its check `item`.
pub(crate) fn ask_block(item: &mut Item<()>, global: &GlobalLimit) {
    if let (Penalty::Block(block), Wire::Limit(spec)) = (global.quota.penalty, &mut item.wire) {
        spec.block_ms = Some(block / MILLISECOND);
    }
}

/// The limit of `global` for the key of `applied`; a denial when it can
/// never admit the request's weight.
pub(crate) fn affordable<'g>(
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

impl<V, S, M> Cx<'_, V, S, M>
where
    V: RequestView,
    S: SharedStore + ?Sized,
    M: MetricSink + ?Sized,
{
    /// The item of global limit `l` of `applied` for its call; a denial
    /// when it can never admit the request's weight or the over-limit
    /// cache holds its key. Kept apart: the kinds checked this way share
    /// one copy.
    #[inline(never)]
    pub(crate) fn checked_item(
        &mut self,
        applied: &Applied<'_, '_>,
        l: usize,
        global: &GlobalLimit,
    ) -> Result<Item<()>, Reported> {
        let own = global.from_metadata.as_ref().and_then(|place| {
            let own = self.metadata_limit(applied, place)?;
            Some(own_limit(&global.quota.limit, own))
        });
        let mut item = match own {
            // The over-limit cache is not read: its denials were made
            // under another limit.
            Some(limit) if applied.weight > limit.soft_burst() => {
                return Err(applied.reported(l, &limit, too_costly(&limit)))
            }
            Some(limit) => item(applied, l, &limit, None),
            None => {
                let limit = affordable(applied, l, global)?;
                let cache = self.not_cached(applied, l, global, limit)?;
                item(applied, l, limit, cache)
            }
        };
        // The limiter holds the block; its denial is cached until it ends.
        ask_block(&mut item, global);
        Ok(item)
    }

    /// The limit the request of `applied` carries in its dynamic metadata
    /// at `place`; `None` (the configured limit applies) when it carries
    /// none or a malformed one, counted as `limit_metadata_invalid` once
    /// per request and rule.
    pub(crate) fn metadata_limit(
        &mut self,
        applied: &Applied<'_, '_>,
        place: &MetadataPlace,
    ) -> Option<MetadataLimit> {
        match metadata::read_limit(place, |path| self.request.property(path)) {
            LimitRead::Valid(limit) => Some(limit),
            LimitRead::Absent => None,
            LimitRead::Invalid => {
                // A rule's limits are walked together: remembering the
                // last rule counted is enough.
                if self.metadata_invalid_in != Some(applied.index) {
                    self.metadata_invalid_in = Some(applied.index);
                    let metrics = self.env.metrics;
                    metrics.rule(applied.index, RuleEvent::LimitMetadataInvalid);
                }
                None
            }
        }
    }

    /// Denies `limit` of global limit `l` of `applied` while the over-limit
    /// cache holds its key; else the cache slot a denial of it goes in
    /// (`None` unless the rule's requests all weigh the same).
    pub(crate) fn not_cached(
        &mut self,
        applied: &Applied<'_, '_>,
        l: usize,
        global: &GlobalLimit,
        limit: &Limit,
    ) -> Result<Option<CacheSlot>, Reported> {
        let shape = deny_cache::shape(&global.quota.limit, limit.requests);
        match self.cache_slot(applied, &global.deny_prefix, shape) {
            Some((_, Some(deadline))) => {
                let wait = deadline.saturating_sub(self.now());
                Err(applied.reported(l, limit, Decision::over_limit(limit.requests, wait)))
            }
            Some((slot, None)) => Ok(Some(slot)),
            None => Ok(None),
        }
    }

    /// The over-limit cache slot of the key of `applied` for a limit of
    /// `shape` (see [`deny_cache::shape`]) whose cache lives under
    /// `deny_prefix`, with the deadline of the denial it holds. Only
    /// denials of fixed-cost rules are cached: others need no slot.
    pub(crate) fn cache_slot(
        &mut self,
        applied: &Applied<'_, '_>,
        deny_prefix: &std::rc::Rc<str>,
        shape: u64,
    ) -> Option<(CacheSlot, Option<Nanos>)> {
        if !applied.fixed_cost() {
            return None;
        }
        layout::slot_key(&mut self.scratch, deny_prefix, applied.slot);
        let owner = deny_cache::owner(applied.fingerprint, shape);
        let now = self.now();
        let deadline =
            deny_cache::lookup(self.env.store, &self.scratch, owner, now).map(|d| d.until);
        let slot = CacheSlot {
            prefix: std::rc::Rc::clone(deny_prefix),
            slot: applied.slot,
            owner,
        };
        Some((slot, deadline))
    }
}

/// The item of `limit` of global limit `l` of `applied`, its denial cached
/// in `cache`. A lower priority class leaves room for the ones above it; a
/// denial that kept a reserve says nothing of the classes above, so it is
/// not cached.
pub(crate) fn item(
    applied: &Applied<'_, '_>,
    l: usize,
    limit: &Limit,
    cache: Option<CacheSlot>,
) -> Item<()> {
    let key = limiter_key(&applied.rule.name, l, applied.key);
    let spec = class_spec(key, limit, applied.share);
    Item {
        rule: applied.index,
        limit: l,
        window: limit.window,
        requests: limit.requests,
        fingerprint: applied.fingerprint,
        cache: cache.filter(|_| spec.reserve.is_none()),
        wire: Wire::Limit(spec),
        follow: (),
    }
}

/// `configured` with the requests and window of a request's own limit
/// `own` (its burst: its requests).
fn own_limit(configured: &Limit, own: MetadataLimit) -> Limit {
    Limit {
        requests: own.requests,
        window: own.unit.window(),
        burst: own.requests,
        ..configured.clone()
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
