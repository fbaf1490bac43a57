//! Leased global limits (`sync: lease`): units of a key's quota the limiter
//! debited in advance, spent by this Envoy in shared data (see
//! [`crate::lease`]). A request spends from the lease, or asks for units
//! with its check; the answer installs the grant, and a failed call is
//! served from units still in hand.

use super::call::{Call, LeaseAsk, Via};
use super::global::{self, affordable, item};
use super::renewal::Renewal;
use super::tally::{Env, Tally, Undo};
use super::walk::{Applied, Walk};
use crate::config::checks::{compile_limit, field_path, LimitSite};
use crate::config::raw::{Mode, OnExceed, RawLimit, RawSync};
use crate::config::{parse_duration, LeasePolicy, LeasedLimit, LimitKind, Plan};
use crate::headers::Reported;
use crate::key::RequestView;
use crate::layout;
use crate::lease::{self, Lease, Take};
use crate::local::{Contended, SharedStore};
use crate::metrics::{GlobalEvent, MetricSink};
use sluice_core::{Algorithm, Decision, FieldError, Limit, Nanos, MILLISECOND, SECOND};
use sluice_wire::LimitResult;

/// How long a lease may be spent, unless `ttl` says otherwise.
pub const DEFAULT_LEASE_TTL: Nanos = sluice_core::SECOND;

/// Compiles a global limit with `sync` of mode lease.
pub(crate) fn compile(site: &LimitSite<'_>, raw: &RawLimit) -> Result<LimitKind, FieldError> {
    let limit = compile_limit(site.path, raw)?;
    let path = site.field("sync");
    let Some(raw_sync) = &raw.sync else {
        return Err(FieldError::at(path, "required with mode lease"));
    };
    let policy = compile_policy(site, &path, raw_sync, raw, &limit)?;
    Ok(LimitKind::Leased(LeasedLimit {
        global: global::built(site, limit),
        policy,
    }))
}

/// Checks a global limit's `sync` of mode lease (at `path`), for a limit
/// compiled to `limit`.
fn compile_policy(
    site: &LimitSite<'_>,
    path: &str,
    raw: &RawSync,
    raw_limit: &RawLimit,
    limit: &Limit,
) -> Result<LeasePolicy, FieldError> {
    let rule_mode = site.mode;
    let conflict = if rule_mode == Mode::Shadow {
        Some("a shadow rule's limits are checked per request")
    } else if raw_limit.on_exceed == OnExceed::Delay {
        Some("cannot be combined with on_exceed: delay")
    } else if raw_limit.elastic.is_some() {
        Some("cannot be combined with elastic")
    } else {
        None
    };
    if let Some(conflict) = conflict {
        return Err(FieldError::at(field_path(path, "mode"), conflict));
    }
    let share_path = field_path(path, "max_share");
    let text = raw
        .max_share
        .as_deref()
        .ok_or_else(|| FieldError::at(&share_path, "required with mode lease"))?;
    let share_ppm = parse_share(text).map_err(|m| FieldError::at(&share_path, m))?;
    let ttl = match raw.ttl.as_deref() {
        None => DEFAULT_LEASE_TTL,
        Some(text) => {
            let field = field_path(path, "ttl");
            let ttl = parse_duration(text).map_err(|m| FieldError::at(&field, m))?;
            if ttl < MILLISECOND {
                return Err(FieldError::at(field, "must be at least 1ms"));
            }
            ttl
        }
    };
    let policy = LeasePolicy {
        share_ppm,
        ttl,
        prefix: layout::lease_prefix(site.domain, site.rule, site.index),
    };
    if policy.max_units(limit) == 0 {
        return Err(FieldError::at(
            share_path,
            format!(
                "{text} of {} requests is less than one unit",
                limit.requests
            ),
        ));
    }
    Ok(policy)
}

/// Reads a share such as `"1%"` or `"0.25%"` into millionths.
fn parse_share(text: &str) -> Result<u64, String> {
    let expected = || {
        format!("must be a percentage above 0% and at most 100% with up to 4 decimals, such as \"1%\", got {text:?}")
    };
    let number = text.strip_suffix('%').ok_or_else(expected)?;
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(whole) || (!fraction.is_empty() && !digits(fraction)) || fraction.len() > 4 {
        return Err(expected());
    }
    let whole: u64 = whole.parse().map_err(|_| expected())?;
    let fraction: u64 = format!("{fraction:0<4}").parse().map_err(|_| expected())?;
    let ppm = whole.saturating_mul(10_000).saturating_add(fraction);
    if ppm == 0 || ppm > 1_000_000 {
        return Err(expected());
    }
    Ok(ppm)
}

/// What [`Walk::spend_lease`] did with a request's weight.
pub(super) enum Spend {
    /// Spent from the lease, which it left as this.
    Spent(Lease),
    /// Ask the limiter for `ask` units with the request's check (0: the
    /// request is checked alone), giving back `returned` units consumed
    /// `age` ago.
    Ask { ask: u64, returned: u64, age: Nanos },
}

impl<V, S, M> Walk<'_, V, S, M>
where
    V: RequestView,
    S: SharedStore + ?Sized,
    M: MetricSink + ?Sized,
{
    /// Spends leased limit `l` of `applied` from this Envoy's lease, or adds
    /// it to the call with its ask for units (unless it can never admit
    /// the request's weight, or the over-limit cache holds its key).
    pub(super) fn leased(
        &mut self,
        applied: &Applied<'_, '_>,
        l: usize,
        leased: &LeasedLimit,
    ) -> Result<(), Reported> {
        let global = &leased.global;
        let limit = affordable(applied, l, global)?;
        let now = self.tally.now;
        let mut asking = None;
        match self.spend_lease(applied, l, limit, &leased.policy) {
            Some(Spend::Spent(lease)) => {
                let decision = from_lease(limit.requests, &lease, now);
                self.tally.note(applied.reported(l, limit, decision));
                return Ok(());
            }
            Some(Spend::Ask { ask, returned, age }) => {
                let lease_ask = LeaseAsk {
                    slot: applied.slot,
                    asked: ask > 0,
                    returned,
                };
                asking = Some((lease_ask, ask, age));
            }
            None => {}
        }
        if let Err(denial) = self.not_cached(applied, l, global, limit) {
            if let Some((ask, ..)) = asking {
                cancel_ask(&self.env, &leased.policy, applied.fingerprint, ask);
            }
            return Err(denial);
        }
        let via = asking.map_or(Via::Alone, |(ask, ..)| Via::Leased(ask));
        let (item, mut spec) = item(applied, l, limit, via);
        if let Some((ask, units, age)) = asking {
            spec.lease = (units > 0).then_some(units);
            if ask.returned > 0 {
                spec.returned = Some(ask.returned);
                spec.returned_age_ms = Some(age.div_ceil(MILLISECOND));
            }
        }
        self.batch_of(applied).push(item, spec, applied.weight);
        Ok(())
    }

    /// Spends the request's weight from this Envoy's lease of global limit
    /// `l` of `applied` (starting its renewal when it runs low: the
    /// request's [`Renewal`]), or says what to ask the limiter for; `None` when
    /// the limit's share is below one unit for this key, or under heavy
    /// contention (the request is then checked alone).
    pub(super) fn spend_lease(
        &mut self,
        applied: &Applied<'_, '_>,
        l: usize,
        limit: &Limit,
        policy: &LeasePolicy,
    ) -> Option<Spend> {
        let max = policy.max_units(limit);
        if max == 0 {
            return None;
        }
        let wait = self.env.plan.limiter.as_ref().map_or(SECOND, |t| t.timeout);
        layout::slot_key(&mut self.scratch, &policy.prefix, applied.slot);
        let now = self.tally.now;
        let taken = lease::take(
            self.env.store,
            &self.scratch,
            applied.fingerprint,
            now,
            applied.weight,
            max,
            wait,
        );
        let (granted_at, lease) = match taken {
            Ok(Take::Spent { granted_at, lease }) => (granted_at, lease),
            Ok(Take::Renew {
                granted_at,
                lease,
                ask,
            }) => {
                self.tally
                    .renewal
                    .get_or_insert_with(|| Renewal::new(now))
                    .push(applied, l, limit, ask);
                (granted_at, lease)
            }
            Ok(Take::Ask { ask, returned, age }) => return Some(Spend::Ask { ask, returned, age }),
            Err(Contended) => {
                self.env.metrics.global(GlobalEvent::CasExhausted);
                return None;
            }
        };
        self.tally.consumed.push(Undo::Lease {
            key: self.scratch.clone(),
            fingerprint: applied.fingerprint,
            granted_at,
            weight: applied.weight,
        });
        Some(Spend::Spent(lease))
    }

    /// Ends the lease asks of the limits bound for calls: the request is
    /// denied before any call is made.
    pub(super) fn cancel_asks(&self) {
        for item in self.enforcing.items.iter().chain(&self.shadow.items) {
            let Some(ask) = item.lease() else { continue };
            if let Some((policy, _)) = lease_policy(self.env.plan, item.rule, item.limit) {
                cancel_ask(&self.env, policy, item.fingerprint, ask);
            }
        }
    }
}

/// After the call of enforcing limits failed: when each of its limits is
/// leased and this Envoy still holds enough of its lease, the request is
/// served from the leases (units in hand keep serving through an outage).
/// Returns whether it was; if not, nothing was spent.
pub(super) fn serve_from_leases<S, M>(
    env: &Env<'_, S, M>,
    calls: &[Call],
    tally: &mut Tally,
) -> bool
where
    S: SharedStore + ?Sized,
    M: MetricSink + ?Sized,
{
    let Some(call) = calls.iter().find(|c| !c.shadow) else {
        return false;
    };
    if call.batch.items.iter().any(|item| item.lease().is_none()) {
        return false;
    }
    let mark = tally.consumed.len();
    let mut key = String::new();
    let hits = call.batch.hits.unwrap_or(1);
    for (item, spec) in call.batch.items.iter().zip(&call.batch.limits) {
        let weight = spec.hits.unwrap_or(hits);
        let policy = lease_policy(env.plan, item.rule, item.limit);
        let (Some(ask), Some((policy, _))) = (item.lease(), policy) else {
            return false;
        };
        layout::slot_key(&mut key, &policy.prefix, ask.slot);
        let spent = lease::spend(env.store, &key, item.fingerprint, tally.now, weight);
        let Ok(Some(lease)) = spent else {
            tally.refund_since(mark, env);
            return false;
        };
        tally.consumed.push(Undo::Lease {
            key: key.clone(),
            fingerprint: item.fingerprint,
            granted_at: lease.granted_at,
            weight,
        });
        let reported = item.reported(from_lease(item.requests, &lease, tally.now));
        tally.note(reported);
    }
    true
}

/// The lease policy and limit of limit `limit` of rule `rule`, if it is
/// leased.
fn lease_policy(plan: &Plan, rule: usize, limit: usize) -> Option<(&LeasePolicy, &Limit)> {
    let rule_limit = plan.rules.get(rule)?.limits.get(limit)?;
    match &rule_limit.kind {
        LimitKind::Leased(leased) => Some((&leased.policy, &leased.global.quota.limit)),
        LimitKind::Local(_)
        | LimitKind::LocalElastic(_)
        | LimitKind::Global(_)
        | LimitKind::Coalesced(_)
        | LimitKind::GlobalElastic(_)
        | LimitKind::ServiceHeld(_)
        | LimitKind::Concurrency(_) => None,
    }
}

/// Ends `ask` of the key of `fingerprint`, not sent after all.
pub(super) fn cancel_ask<S, M>(
    env: &Env<'_, S, M>,
    policy: &LeasePolicy,
    fingerprint: u64,
    ask: LeaseAsk,
) where
    S: SharedStore + ?Sized,
    M: MetricSink + ?Sized,
{
    if !ask.asked && ask.returned == 0 {
        return;
    }
    let mut key = String::new();
    layout::slot_key(&mut key, &policy.prefix, ask.slot);
    if lease::cancel(env.store, &key, fingerprint, ask.returned).is_err() {
        env.metrics.global(GlobalEvent::CasExhausted);
    }
}

/// What a request spent from a lease reports: the limiter's remaining when
/// the lease was granted, plus what this Envoy still holds.
pub(super) fn from_lease(requests: u64, lease: &Lease, now: Nanos) -> Decision {
    Decision {
        allowed: true,
        limit: requests,
        remaining: lease.remaining.saturating_add(lease.left),
        reset: lease.reset_at.saturating_sub(now),
        retry_after: 0,
        delay: 0,
        denial: None,
    }
}

/// When a lease granted at `now` under `limit` stops being spendable: after
/// `ttl`, and never past the end of the current window for the algorithms
/// that count per window.
pub(super) fn lease_expiry(limit: &Limit, ttl: Nanos, now: Nanos) -> Nanos {
    let expiry = now.saturating_add(ttl);
    match limit.algorithm {
        Algorithm::FixedWindow | Algorithm::SlidingWindow | Algorithm::SlidingLog => {
            let window = limit.window.max(1);
            let end = (now / window).saturating_add(1).saturating_mul(window);
            expiry.min(end)
        }
        Algorithm::TokenBucket | Algorithm::Gcra | Algorithm::LeakyBucket => expiry,
    }
}

/// Ends the lease asks of `call`'s limits: installs what the limiter granted
/// (nothing when the call failed or the check was denied). Returns, per
/// item, the units this Envoy now holds for its key (0 for items without an
/// ask; empty when no item asked).
pub(super) fn settle_leases<S, M>(env: &Env<'_, S, M>, call: &Call, now: Nanos) -> Vec<u64>
where
    S: SharedStore + ?Sized,
    M: MetricSink + ?Sized,
{
    if !call
        .batch
        .items
        .iter()
        .any(|i| i.lease().is_some_and(|a| a.asked))
    {
        return Vec::new();
    }
    let answers = call.answered().map(|a| a.limits.as_slice());
    let mut held = vec![0; call.batch.items.len()];
    for (i, item) in call.batch.items.iter().enumerate() {
        let Some(ask) = item.lease().filter(|a| a.asked) else {
            continue;
        };
        let answer = answers.and_then(|a| a.get(i));
        let units = install_grant(
            env,
            item.rule,
            item.limit,
            ask.slot,
            item.fingerprint,
            answer,
            now,
        );
        if let Some(h) = held.get_mut(i) {
            *h = units;
        }
    }
    held
}

/// Ends the ask for units of the lease of limit `limit` of rule `rule` for
/// the key of `fingerprint` (in `slot`), made at `asked_at`: installs what
/// `answer` granted (nothing when there is none or it denied). Returns the
/// units this Envoy now holds for the key.
pub(super) fn install_grant<S, M>(
    env: &Env<'_, S, M>,
    rule: usize,
    limit: usize,
    slot: u64,
    fingerprint: u64,
    answer: Option<&LimitResult>,
    asked_at: Nanos,
) -> u64
where
    S: SharedStore + ?Sized,
    M: MetricSink + ?Sized,
{
    let Some((policy, limit)) = lease_policy(env.plan, rule, limit) else {
        return 0;
    };
    let (units, remaining, reset) = answer.filter(|a| a.allowed).map_or((0, 0, 0), |a| {
        (
            a.leased,
            a.remaining,
            a.reset_ms.saturating_mul(MILLISECOND),
        )
    });
    let mut key = String::new();
    layout::slot_key(&mut key, &policy.prefix, slot);
    let granted = lease::grant(
        env.store,
        &key,
        fingerprint,
        asked_at,
        units,
        lease_expiry(limit, policy.ttl, asked_at),
        remaining,
        asked_at.saturating_add(reset),
    );
    granted.unwrap_or_else(|Contended| {
        env.metrics.global(GlobalEvent::CasExhausted);
        0
    })
}
