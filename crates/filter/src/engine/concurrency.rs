//! Concurrency limits: a request takes `weight` permits of its key when
//! admitted and gives them back when its stream ends, however it ends.
//!
//! Local permits live in a key table ([`crate::table`]), an entry per key
//! as local rate limits keep theirs, taken and given back by
//! compare-and-swap, so every worker of the Envoy sees one exact count. Global permits are taken by the limiter in
//! the request's check, with its rate limits, all or nothing. Either way
//! each worker's configuration is a **holder** (see
//! [`sluice_core::permits`]): it renews the permits its requests hold, and
//! a holder that stops (a crashed Envoy) loses its permits after
//! `permit_ttl`.
//!
//! What an admitted request holds is its [`Held`] list: the host gives it
//! back when the stream ends (see `src/host/filter.rs`); a refused request
//! gives back at once what it took ([`super::tally`]).

use super::call::{GlobalItem, Via};
use super::tally::{undecided, Undo};
use super::walk::{Applied, Walk};
use crate::config::checks::{field_path, rate_fields, LimitSite};
use crate::config::raw::{OnExceed, Protocol, RawLimit, Scope};
use crate::config::{ConcurrencyLimit, LimitKind, PermitPlace};
use crate::headers::Reported;
use crate::key::RequestView;
use crate::layout;
use crate::local::{self, Contended, SharedStore};
use crate::metrics::{GlobalEvent, MetricSink, RuleEvent};
use crate::slots::SlotHasher;
use crate::table::{self, Placed, Step, Table};
use sluice_core::permits::{self, Holder, Permits};
use sluice_core::{
    parse_duration, Decision, Denial, Encoded, FieldError, Nanos, MAX_REQUESTS, MILLISECOND, SECOND,
};
use sluice_wire::{limiter_key, LimitSpec};

/// `permit_ttl` when not given.
pub const DEFAULT_PERMIT_TTL: Nanos = 30 * SECOND;
/// The shortest `permit_ttl`: renewals run about a third of it apart.
pub const MIN_PERMIT_TTL: Nanos = SECOND;
/// The longest `permit_ttl`.
pub const MAX_PERMIT_TTL: Nanos = 3600 * SECOND;
/// The longest wait for a permit (`max_delay` in delay mode).
pub const MAX_PERMIT_WAIT: Nanos = 60 * SECOND;

/// Permits an admitted request holds until its stream ends.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Held {
    /// Permits in this Envoy's shared data.
    pub local: Vec<HeldPermit>,
    /// Permits the limiter holds for this Envoy.
    pub global: Vec<HeldPermit>,
}

/// Permits of one key, held by one holder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldPermit {
    /// The shared-data key of the key table's bucket (local) or the limiter
    /// key (global).
    pub key: String,
    /// The entry in the bucket (local; 0 for global permits).
    pub fingerprint: u64,
    /// The units held.
    pub weight: u64,
    /// Who holds them: the configuration that took them.
    pub holder: Holder,
    /// How long they count after a renewal.
    pub ttl: Nanos,
    /// The rule whose limit took them (its gauge counts them).
    pub rule: usize,
}

impl Held {
    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.local.is_empty() && self.global.is_empty()
    }
}

/// Gives back, at `now`, the local permit `held` (by compare-and-swap).
pub fn release_local<S: SharedStore + ?Sized>(
    store: &S,
    held: &HeldPermit,
    now: Nanos,
) -> Result<(), Contended> {
    table::update_entry(store, &held.key, held.fingerprint, |state, _| {
        let released = permits::release(Some(state), held.holder, now, held.weight);
        (released.map(|s| rest(s, now)), ())
    })
    .map(|_| ())
}

/// A permits state with the instant it rests: when its last permit expires
/// unless renewed (at once when none is held).
fn rest(state: Encoded, now: Nanos) -> (Encoded, Nanos) {
    let rest_at = permits::expires_at(Some(state.as_bytes()), now).unwrap_or(now);
    (state, rest_at)
}

/// Keeps, at `now`, the local permits of `holder` in the entry of
/// `fingerprint` of the bucket at `key` for `ttl` more. Returns whether the
/// holder still held some there.
pub fn renew_local<S: SharedStore + ?Sized>(
    store: &S,
    key: &str,
    fingerprint: u64,
    holder: Holder,
    now: Nanos,
    ttl: Nanos,
) -> Result<bool, Contended> {
    let held = table::update_entry(store, key, fingerprint, |state, _| {
        let held = permits::held_by(Some(state), holder, now) > 0;
        let renewed = permits::renew(Some(state), holder, now, ttl);
        (renewed.map(|s| rest(s, now)), held)
    })?;
    Ok(held.unwrap_or(false))
}

/// A holder for a configuration of `domain` loaded now: the next number of
/// the Envoy's counter of loaded configurations, hashed with the domain's
/// seed (which differs between Envoys), so that holders differ within an
/// Envoy for sure and between Envoys but for a 2^-64 chance.
pub fn new_holder<S: SharedStore + ?Sized>(
    store: &S,
    domain: &str,
    hasher: &SlotHasher,
) -> Result<Holder, Contended> {
    let number = local::measure_and_replace(store, &layout::holders_key(domain), |value| {
        let last = value
            .and_then(|v| <[u8; 8]>::try_from(v).ok())
            .map_or(0, u64::from_le_bytes);
        let next = last.wrapping_add(1);
        (Some(next.to_le_bytes()), next)
    })?;
    let mut text = String::from("holder/");
    crate::decimal::push_u64(&mut text, number);
    Ok(hasher.fingerprint(&text))
}

/// Compiles a concurrency limit (a limit with `concurrency`).
pub(crate) fn compile(
    site: &LimitSite<'_>,
    raw: &RawLimit,
    max: u64,
) -> Result<LimitKind, FieldError> {
    let descriptor = [("descriptor", raw.descriptor.is_some())];
    let mut given = rate_fields(raw).into_iter().chain(descriptor);
    if let Some((field, _)) = given.find(|(_, given)| *given) {
        return Err(FieldError::at(
            site.field(field),
            "does not apply to a concurrency limit",
        ));
    }
    let max_wait = max_wait(site, raw)?;
    if !(1..=MAX_REQUESTS).contains(&max) {
        return Err(FieldError::at(
            site.field("concurrency"),
            format!("must be between 1 and {MAX_REQUESTS}, got {max}"),
        ));
    }
    let ttl = permit_ttl(&site.field("permit_ttl"), raw.permit_ttl.as_deref())?;
    let place = match (raw.scope, site.protocol) {
        (Scope::Local, _) => {
            let prefix = layout::permits_prefix(site.domain, site.rule, site.index);
            PermitPlace::Local(prefix, site.keys)
        }
        (Scope::Global, Protocol::Sluice) => PermitPlace::Global,
        (Scope::Global, Protocol::Rls) => {
            return Err(FieldError::at(
                site.field("scope"),
                "a global concurrency limit needs limiter.protocol sluice \
                 (a rate limit service cannot be given permits back)",
            ));
        }
    };
    Ok(LimitKind::Concurrency(ConcurrencyLimit {
        permits: Permits { max, ttl },
        place,
        max_wait,
    }))
}

/// How long a request may wait for a permit (`on_exceed: delay` with
/// `max_delay`, 1 ms to [`MAX_PERMIT_WAIT`]); `None` denies at once.
fn max_wait(site: &LimitSite<'_>, raw: &RawLimit) -> Result<Option<Nanos>, FieldError> {
    let field = site.field("max_delay");
    match (raw.on_exceed, raw.max_delay.as_deref()) {
        (OnExceed::Deny, None) => Ok(None),
        (OnExceed::Deny, Some(_)) => {
            Err(FieldError::at(field, "only applies with on_exceed: delay"))
        }
        (OnExceed::Delay, None) => Err(FieldError::at(field, "required with on_exceed: delay")),
        (OnExceed::Delay, Some(text)) => {
            let wait = parse_duration(text).map_err(|m| FieldError::at(&field, m))?;
            if !(MILLISECOND..=MAX_PERMIT_WAIT).contains(&wait) {
                return Err(FieldError::at(field, "must be from 1ms to 60s"));
            }
            Ok(Some(wait))
        }
    }
}

fn permit_ttl(path: &str, raw: Option<&str>) -> Result<Nanos, FieldError> {
    let Some(text) = raw else {
        return Ok(DEFAULT_PERMIT_TTL);
    };
    let ttl = parse_duration(text).map_err(|e| FieldError::at(path, e))?;
    if !(MIN_PERMIT_TTL..=MAX_PERMIT_TTL).contains(&ttl) || ttl % MILLISECOND != 0 {
        return Err(FieldError::at(
            path,
            "must be whole milliseconds from 1s to 1h",
        ));
    }
    Ok(ttl)
}

/// The JSON path of a limit's `permit_ttl` given without `concurrency`.
pub(crate) fn stray_ttl(site: &LimitSite<'_>) -> FieldError {
    FieldError::at(
        field_path(site.path, "permit_ttl"),
        "only applies to concurrency limits",
    )
}

impl<V, S, M> Walk<'_, V, S, M>
where
    V: RequestView,
    S: SharedStore + ?Sized,
    M: MetricSink + ?Sized,
{
    /// Takes the permits of concurrency limit `l` of `applied`: locally at
    /// once, globally in the request's check.
    pub(super) fn concurrency(
        &mut self,
        applied: &Applied<'_, '_>,
        l: usize,
        limit: &ConcurrencyLimit,
    ) -> Result<(), Reported> {
        let p = &limit.permits;
        // A concurrency limit has no window: its policy header says none.
        let report = |decision| Reported {
            rule: applied.index,
            limit: l,
            window: 0,
            decision,
        };
        if applied.weight > p.max {
            return Err(report(too_many(p.max)));
        }
        let (prefix, keys) = match &limit.place {
            PermitPlace::Local(prefix, keys) => (prefix, *keys),
            PermitPlace::Global => return self.global_permits(applied, l, p),
        };
        let (holder, now, weight) = (self.holder, self.tally.now, applied.weight);
        let table = Table::new(prefix, keys);
        let mut acquire = |state: Option<&[u8]>| {
            let out = permits::acquire(p, state, holder, now, weight);
            Step {
                write: out.new_state.map(|s| rest(s, now)),
                result: out.decision,
            }
        };
        let mut undo =
            |state: &[u8], _: &Decision| permits::release(Some(state), holder, now, weight);
        let taken = table::decide(
            self.env.store,
            &table,
            applied.fingerprint,
            now,
            &mut acquire,
            &mut undo,
        );
        let (decision, spot) = match taken {
            Ok(d) => {
                if d.placed != Placed::Own {
                    self.env.metrics.rule(applied.index, RuleEvent::TableFull);
                }
                (d.result, d.spot)
            }
            Err(Contended) => {
                self.env.metrics.global(GlobalEvent::CasExhausted);
                return Err(report(undecided(p.max)));
            }
        };
        if !decision.allowed {
            return Err(report(decision));
        }
        self.tally.consumed.push(Undo::Permit(HeldPermit {
            key: table::bucket_key(prefix, spot),
            fingerprint: spot.fingerprint,
            weight,
            holder,
            ttl: p.ttl,
            rule: applied.index,
        }));
        if !applied.rule.shadow {
            self.tally.note(report(decision));
        }
        Ok(())
    }
}

impl<V, S, M> Walk<'_, V, S, M>
where
    V: RequestView,
    S: SharedStore + ?Sized,
    M: MetricSink + ?Sized,
{
    /// Adds the permits of global concurrency limit `l` of `applied` to
    /// the request's check: the limiter takes them with the check's other
    /// limits, all or nothing ([`super::finish`] notes them held).
    fn global_permits(
        &mut self,
        applied: &Applied<'_, '_>,
        l: usize,
        p: &Permits,
    ) -> Result<(), Reported> {
        let spec = LimitSpec::permits(limiter_key(&applied.rule.name, l, applied.key), p);
        let item = GlobalItem {
            rule: applied.index,
            limit: l,
            window: 0,
            requests: p.max,
            fingerprint: applied.fingerprint,
            cacheable: false,
            via: Via::Permit(p.ttl),
        };
        self.batch_of(applied).push(item, spec, applied.weight);
        Ok(())
    }
}

/// The denial of a weight above the permits: retrying does not help.
fn too_many(max: u64) -> Decision {
    Decision {
        allowed: false,
        limit: max,
        remaining: 0,
        reset: 0,
        retry_after: 0,
        delay: 0,
        denial: Some(Denial::CostExceedsCapacity),
    }
}
