//! Local elastic limits: a local limit whose quota denies a request lends
//! it the key's extra allowance and the pool's headroom at once (see
//! [`super::elastic`]), consuming both or neither.

use super::elastic::{self, lent};
use super::local::{self, Entry};
use super::walk::{share, Applied, Walk};
use crate::config::checks::{compile_limit, LimitSite};
use crate::config::raw::{RawElastic, RawLimit};
use crate::config::{LimitKind, LocalElastic};
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

impl<V, S, M> Walk<'_, V, S, M>
where
    V: RequestView,
    S: SharedStore + ?Sized,
    M: MetricSink + ?Sized,
{
    /// Consumes local elastic limit `l` of `applied`, or, when it denies,
    /// borrows.
    pub(super) fn local_elastic(
        &mut self,
        applied: &Applied<'_, '_>,
        l: usize,
        limit: &LocalElastic,
    ) -> Result<(), Reported> {
        let (quota, mut decision) = self.take_quota(applied, l, &limit.local)?;
        if !decision.allowed {
            if !self.borrow_local(applied, limit) {
                return Err(applied.reported(l, quota, decision));
            }
            decision = lent(decision);
        }
        self.note_local(applied, l, quota, decision);
        Ok(())
    }

    /// Lends the request of `applied`, which `limit` denied, the key's extra
    /// allowance and the pool's headroom: consumes both, or neither.
    /// Returns whether it borrowed.
    fn borrow_local(&mut self, applied: &Applied<'_, '_>, limit: &LocalElastic) -> bool {
        let mark = self.tally.consumed.len();
        let elastic = &limit.elastic;
        let (weight, share_of_rule) = (applied.weight, applied.share);
        let extra = Entry {
            prefix: &elastic.place,
            shape: limit.local.keys,
            fingerprint: applied.fingerprint,
        };
        let taken = self.take_entry(applied.index, extra, &elastic.extra, weight, share_of_rule);
        if !matches!(taken, Ok(d) if d.allowed) {
            return false;
        }
        if !self.borrow_pool(elastic.pool, weight) {
            self.tally.refund_since(mark, &self.env);
            return false;
        }
        self.tally.borrowed.push(applied.index);
        true
    }

    /// Consumes `weight` of every limit of the pool rule `pool` at the
    /// pool's key; returns whether all admitted (the caller refunds).
    fn borrow_pool(&mut self, pool: usize, weight: u64) -> bool {
        let plan = self.env.plan;
        let mut pool_key = String::new();
        let Some(rule) = plan
            .rules
            .get(pool)
            .filter(|rule| self.request.write_key(&rule.key, &mut pool_key))
        else {
            return false;
        };
        let fingerprint = self.hasher.fingerprint(&pool_key);
        let pool_share = share(rule, self.request);
        for pool_limit in &rule.limits {
            // A local elastic limit's pool is local (see `elastic::compile`).
            let LimitKind::Local(pool_local) = &pool_limit.kind else {
                return false;
            };
            let quota = &pool_local.quota;
            let own = quota
                .override_index(&pool_key)
                .and_then(|i| quota.overrides.get(i));
            let taken = match own {
                Some(o) => self.take_key(&o.state_key, &o.limit, weight, pool_share),
                None => {
                    let entry = Entry {
                        prefix: &pool_local.state_prefix,
                        shape: pool_local.keys,
                        fingerprint,
                    };
                    self.take_entry(pool, entry, &quota.limit, weight, pool_share)
                }
            };
            if !matches!(taken, Ok(d) if d.allowed) {
                return false;
            }
        }
        true
    }
}
