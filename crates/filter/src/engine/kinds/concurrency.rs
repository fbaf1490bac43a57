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
//! back when the stream ends (see `crates/filter/src/driver/permits.rs`); a
//! refused request gives back at once what it took (its undo log).

use crate::config::checks::{field_path, rate_fields, LimitSite};
use crate::config::raw::{OnExceed, Protocol, RawLimit, Scope};
use crate::config::{ConcurrencyLimit, LimitKind, PermitPlace};
use crate::engine::core::call::{Item, Wire};
use crate::engine::core::held::rest;
pub use crate::engine::core::held::{new_holder, release_local, renew_local, Held, HeldPermit};
use crate::engine::core::tally::{undecided, Refusal};
use crate::engine::core::undo::Undo;
use crate::engine::core::walk::{Applied, Cx};
use crate::headers::Reported;
use crate::key::RequestView;
use crate::layout;
use crate::local::{Contended, SharedStore};
use crate::metrics::{GlobalEvent, MetricSink, RuleEvent};
use crate::table::{self, Placed, Step, Table};
use sluice_core::permits::{self, Permits};
use sluice_core::{
    parse_duration, Decision, Denial, FieldError, Nanos, MAX_REQUESTS, MILLISECOND, SECOND,
};
use sluice_wire::{limiter_key, LimitSpec};

/// The permits a global concurrency limit asks the limiter for with the
/// request's check: what follows its answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PermitAsk {
    /// How long the permits count after a renewal, once the call admits.
    pub(crate) ttl: Nanos,
    /// How long a request it denies may wait for a permit instead.
    pub(crate) wait: Option<Nanos>,
}

/// `permit_ttl` when not given.
pub const DEFAULT_PERMIT_TTL: Nanos = 30 * SECOND;
/// The shortest `permit_ttl`: renewals run about a third of it apart.
pub const MIN_PERMIT_TTL: Nanos = SECOND;
/// The longest `permit_ttl`.
pub const MAX_PERMIT_TTL: Nanos = 3600 * SECOND;
/// The longest wait for a permit (`max_delay` in delay mode).
pub const MAX_PERMIT_WAIT: Nanos = 60 * SECOND;

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
        (OnExceed::Block, _) => Err(FieldError::at(
            site.field("on_exceed"),
            "block does not apply to concurrency limits",
        )),
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

/// Takes the permits of concurrency limit `l` of `applied`: locally at
/// once (`None`), globally in the request's check (its item).
pub(crate) fn step<V, S, M>(
    cx: &mut Cx<'_, V, S, M>,
    applied: &Applied<'_, '_>,
    l: usize,
    limit: &ConcurrencyLimit,
) -> Result<Option<Item<PermitAsk>>, Refusal>
where
    V: RequestView,
    S: SharedStore + ?Sized,
    M: MetricSink + ?Sized,
{
    let p = &limit.permits;
    // A concurrency limit has no window: its policy header says none.
    let report = |decision| Reported {
        rule: applied.index,
        limit: l,
        window: 0,
        decision,
    };
    // A request denied over the limit may wait for a permit (see
    // `Tally::denied`).
    let refusal = |decision| Refusal {
        report: report(decision),
        wait: limit.max_wait,
    };
    let weight = permit_weight(applied);
    if weight > p.max {
        return Err(refusal(too_many(p.max)));
    }
    let (prefix, keys) = match &limit.place {
        PermitPlace::Local(prefix, keys) => (prefix, *keys),
        PermitPlace::Global => return Ok(Some(global_permits(applied, l, limit))),
    };
    let (holder, now) = (cx.holder, cx.now());
    let table = Table::new(prefix, keys);
    let mut acquire = |state: Option<&[u8]>| {
        let out = permits::acquire(p, state, holder, now, weight);
        Step {
            write: out.new_state.map(|s| rest(s, now)),
            result: out.decision,
        }
    };
    let mut undo = |state: &[u8], _: &Decision| permits::release(Some(state), holder, now, weight);
    let taken = table::decide(
        cx.env.store,
        &table,
        applied.fingerprint,
        now,
        &mut acquire,
        &mut undo,
    );
    let (decision, spot) = match taken {
        Ok(d) => {
            if d.placed != Placed::Own {
                cx.env.metrics.rule(applied.index, RuleEvent::TableFull);
            }
            (d.result, d.spot)
        }
        Err(Contended) => {
            cx.env.metrics.global(GlobalEvent::CasExhausted);
            return Err(refusal(undecided(p.max)));
        }
    };
    if !decision.allowed {
        return Err(refusal(decision));
    }
    cx.tally.consumed.push(Undo::Permit(HeldPermit {
        key: table::bucket_key(prefix, spot),
        fingerprint: spot.fingerprint,
        weight,
        holder,
        ttl: p.ttl,
        rule: applied.index,
    }));
    if !applied.rule.shadow {
        cx.tally.note(report(decision));
    }
    Ok(None)
}

/// The item of global concurrency limit `l` of `applied` in the request's
/// check: the limiter takes its permits with the check's other limits, all
/// or nothing (the answer's handling notes them held).
fn global_permits(
    applied: &Applied<'_, '_>,
    l: usize,
    limit: &ConcurrencyLimit,
) -> Item<PermitAsk> {
    let p = &limit.permits;
    let spec = LimitSpec {
        hits: Some(permit_weight(applied)),
        ..LimitSpec::permits(limiter_key(&applied.rule.name, l, applied.key), p)
    };
    Item {
        rule: applied.index,
        limit: l,
        window: 0,
        requests: p.max,
        fingerprint: applied.fingerprint,
        cache: None,
        wire: Wire::Limit(spec),
        follow: PermitAsk {
            ttl: p.ttl,
            wait: limit.max_wait,
        },
    }
}

/// The permits a request of `applied` holds: its weight, at least 1. Only
/// a cost known from the response weighs 0 (an estimate of 0), and such a
/// request still holds one permit, so that a cap on the estimates in
/// flight also caps how many requests of 0 are in flight.
fn permit_weight(applied: &Applied<'_, '_>) -> u64 {
    applied.weight.max(1)
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
