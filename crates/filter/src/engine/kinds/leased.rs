//! Leased global limits (`sync: lease`): units of a key's quota the limiter
//! debited in advance, spent by this Envoy in shared data (see
//! [`crate::lease`]). A request spends from the lease, or asks for units
//! with its check; the answer installs the grant, and a failed call is
//! served from units still in hand.

use crate::config::checks::{compile_limit, field_path, LimitSite};
use crate::config::raw::{Mode, OnExceed, RawLimit, RawSync};
use crate::config::{parse_duration, LeasePolicy, LeasedLimit, LimitKind};
use crate::engine::core::call::{Item, Wire};
use crate::engine::core::env::Env;
use crate::engine::core::global::{self, affordable, item};
use crate::engine::core::renewal::{install_grant, slot_key, LeaseSlot, Renewal};
use crate::engine::core::tally::Tally;
use crate::engine::core::undo::Undo;
use crate::engine::core::walk::{Applied, Cx};
use crate::headers::Reported;
use crate::key::RequestView;
use crate::layout;
use crate::lease::{self, Lease, Take};
use crate::local::{Contended, SharedStore};
use crate::metrics::{GlobalEvent, MetricSink};
use sluice_core::{Decision, FieldError, Limit, Nanos, MILLISECOND, SECOND};
use sluice_wire::{limiter_key, LimitResult};

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
        global: global::built(site, raw, limit)?,
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

/// A leased limit's ask for units, made with the request's check: what
/// follows its answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseAsk {
    /// The lease asked for.
    pub(crate) slot: LeaseSlot,
    /// Whether units were asked for (the grant, even of none, ends the ask).
    pub(crate) asked: bool,
    /// Units of the previous grant the ask gives back.
    pub(crate) returned: u64,
}

/// What [`spend`] did with a request's weight.
enum Spend {
    /// Spent from the lease, which it left as this.
    Spent(Lease),
    /// Ask the limiter for `ask` units with the request's check (0: the
    /// request is checked alone), giving back `returned` units consumed
    /// `age` ago.
    Ask { ask: u64, returned: u64, age: Nanos },
}

/// Spends leased limit `l` of `applied` from this Envoy's lease (`None`),
/// or its item for the call, with its ask for units if it makes one
/// (unless it can never admit the request's weight, or the over-limit
/// cache holds its key).
pub(crate) fn step<V, S, M>(
    cx: &mut Cx<'_, V, S, M>,
    applied: &Applied<'_, '_>,
    l: usize,
    leased: &LeasedLimit,
) -> Result<Option<Item<Option<LeaseAsk>>>, Reported>
where
    V: RequestView,
    S: SharedStore + ?Sized,
    M: MetricSink + ?Sized,
{
    let global = &leased.global;
    let limit = affordable(applied, l, global)?;
    let now = cx.now();
    let mut asking = None;
    match spend(cx, applied, l, limit, &leased.policy) {
        Some(Spend::Spent(lease)) => {
            let decision = from_lease(limit.requests, &lease, now);
            cx.tally.note(applied.reported(l, limit, decision));
            return Ok(None);
        }
        Some(Spend::Ask { ask, returned, age }) => {
            let slot = LeaseSlot {
                key: slot_key(&leased.policy.prefix, applied.slot),
                fingerprint: applied.fingerprint,
                limit: limit.clone(),
                ttl: leased.policy.ttl,
            };
            let lease_ask = LeaseAsk {
                slot,
                asked: ask > 0,
                returned,
            };
            asking = Some((lease_ask, ask, age));
        }
        None => {}
    }
    let cache = match cx.not_cached(applied, l, global, limit) {
        Ok(cache) => cache,
        Err(denial) => {
            if let Some((ask, ..)) = &asking {
                cancel(&cx.env, ask);
            }
            return Err(denial);
        }
    };
    let mut item = item(applied, l, limit, cache);
    if let (Some((ask, units, age)), Wire::Limit(spec)) = (&asking, &mut item.wire) {
        spec.lease = (*units > 0).then_some(*units);
        if ask.returned > 0 {
            spec.returned = Some(ask.returned);
            spec.returned_age_ms = Some(age.div_ceil(MILLISECOND));
        }
    }
    Ok(Some(item.with(asking.map(|(ask, ..)| ask))))
}

/// Spends the request's weight from this Envoy's lease of global limit `l`
/// of `applied` (starting its renewal when it runs low: the request's
/// [`Renewal`]), or says what to ask the limiter for; `None` when the
/// limit's share is below one unit for this key, or under heavy contention
/// (the request is then checked alone).
fn spend<V, S, M>(
    cx: &mut Cx<'_, V, S, M>,
    applied: &Applied<'_, '_>,
    l: usize,
    limit: &Limit,
    policy: &LeasePolicy,
) -> Option<Spend>
where
    V: RequestView,
    S: SharedStore + ?Sized,
    M: MetricSink + ?Sized,
{
    let max = policy.max_units(limit);
    if max == 0 {
        return None;
    }
    let wait = cx.env.plan.limiter.as_ref().map_or(SECOND, |t| t.timeout);
    let key = slot_key(&policy.prefix, applied.slot);
    let now = cx.now();
    let (fingerprint, weight) = (applied.fingerprint, applied.weight);
    let taken = lease::take(cx.env.store, &key, fingerprint, now, weight, max, wait);
    let (granted_at, lease) = match taken {
        Ok(Take::Spent { granted_at, lease }) => (granted_at, lease),
        Ok(Take::Renew {
            granted_at,
            lease,
            ask,
        }) => {
            let slot = LeaseSlot {
                key: key.clone(),
                fingerprint,
                limit: limit.clone(),
                ttl: policy.ttl,
            };
            let limiter = limiter_key(&applied.rule.name, l, applied.key);
            cx.tally
                .renewal
                .get_or_insert_with(|| Renewal::new(now))
                .push(slot, limiter, ask);
            (granted_at, lease)
        }
        Ok(Take::Ask { ask, returned, age }) => return Some(Spend::Ask { ask, returned, age }),
        Err(Contended) => {
            cx.env.metrics.global(GlobalEvent::CasExhausted);
            return None;
        }
    };
    cx.tally.consumed.push(Undo::Lease {
        key,
        fingerprint,
        granted_at,
        weight,
    });
    Some(Spend::Spent(lease))
}

/// Installs what the limiter granted `ask` (nothing when the call failed or
/// the check was denied): the units this Envoy now holds for the key, if
/// units were asked for.
pub(crate) fn settle<S, M>(
    env: &Env<'_, S, M>,
    ask: &LeaseAsk,
    answer: Option<&LimitResult>,
    now: Nanos,
) -> Option<u64>
where
    S: SharedStore + ?Sized,
    M: MetricSink + ?Sized,
{
    ask.asked
        .then(|| install_grant(env, &ask.slot, answer, now))
}

/// Serves `item`, whose call failed, from the lease of `ask` if this Envoy
/// still holds `weight` units of it: what it reports; `None` if not
/// (nothing spent).
pub(crate) fn serve_unanswered<S, M, F>(
    env: &Env<'_, S, M>,
    ask: &LeaseAsk,
    item: &Item<F>,
    weight: u64,
    tally: &mut Tally,
) -> Option<Decision>
where
    S: SharedStore + ?Sized,
    M: MetricSink + ?Sized,
{
    let key = &ask.slot.key;
    let spent = lease::spend(env.store, key, item.fingerprint, tally.now, weight);
    let Ok(Some(lease)) = spent else {
        return None;
    };
    tally.consumed.push(Undo::Lease {
        key: key.clone(),
        fingerprint: item.fingerprint,
        granted_at: lease.granted_at,
        weight,
    });
    Some(from_lease(item.requests, &lease, tally.now))
}

/// Ends `ask`, not sent after all.
pub(crate) fn cancel<S, M>(env: &Env<'_, S, M>, ask: &LeaseAsk)
where
    S: SharedStore + ?Sized,
    M: MetricSink + ?Sized,
{
    if !ask.asked && ask.returned == 0 {
        return;
    }
    let slot = &ask.slot;
    if lease::cancel(env.store, &slot.key, slot.fingerprint, ask.returned).is_err() {
        env.metrics.global(GlobalEvent::CasExhausted);
    }
}

/// What a request spent from a lease reports: the limiter's remaining when
/// the lease was granted, plus what this Envoy still holds.
fn from_lease(requests: u64, lease: &Lease, now: Nanos) -> Decision {
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
