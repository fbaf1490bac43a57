//! The limit kinds, one module each (its compile step, its step, what it
//! does with the limiter's answer, its undo and its duty after the
//! response), and the registry: the one place that lists them. Every
//! `match` over [`LimitKind`] and over the follow-ups of the kinds'
//! items ([`Follow`]) is here or in `limit.rs` (what a compiled limit is,
//! whatever its kind) and names every kind, so that the compiler lists
//! what a new kind must handle. The kinds import the core
//! ([`crate::engine::core`]); no kind imports another.

mod assemble;
pub(crate) mod by_outcome;
pub(crate) mod coalesced;
pub mod concurrency;
pub(crate) mod global;
pub(crate) mod global_elastic;
pub(crate) mod leased;
mod limit;
pub(crate) mod local;
pub(crate) mod local_elastic;
pub mod quota;
pub(crate) mod service_held;

use self::concurrency::PermitAsk;
use self::global_elastic::{Lend, Lent};
use self::leased::LeaseAsk;
use crate::config::checks::{field_path, refuse_block, LimitSite};
use crate::config::plan::{Counted, LimitKind, Quota, RuleLimit};
use crate::config::raw::{
    OnExceed, Protocol, RawCountWhen, RawLimit, RawMetadataPlace, Scope, SyncMode,
};
use crate::cost::metadata::MetadataPlace;
use crate::engine::core::call::{Batch, Item, Wire};
use crate::engine::core::env::Env;
use crate::engine::core::follow::FollowUp;
use crate::engine::core::tally::{Refusal, Tally};
use crate::engine::core::walk::{Applied, Steps, Walk};
use crate::headers::Reported;
use crate::key::RequestView;
use crate::local::SharedStore;
use crate::metrics::MetricSink;
use sluice_core::{Decision, FieldError, Limit, Nanos};
use sluice_wire::LimitResult;

/// Compiles a limit by its kind: the one place a raw limit's settings pick
/// its kind, each kind compiling its own part.
pub(crate) fn compile(site: &LimitSite<'_>, raw: &RawLimit) -> Result<LimitKind, FieldError> {
    let kind = compile_kind(site, raw)?;
    let kind = match &raw.count_when {
        None => kind,
        Some(when) => counted_by_outcome(site, raw, when, kind)?,
    };
    match &raw.limit_from_metadata {
        None => Ok(kind),
        Some(place) => limited_from_metadata(site, place, kind),
    }
}

/// A limit `kind` whose requests may carry their own limit at `place`;
/// refused, naming the field, for a kind not checked once per request by
/// the limiter (nothing else can take a limit per request).
fn limited_from_metadata(
    site: &LimitSite<'_>,
    place: &RawMetadataPlace,
    mut kind: LimitKind,
) -> Result<LimitKind, FieldError> {
    let field = site.field("limit_from_metadata");
    for (name, text) in [("namespace", &place.namespace), ("key", &place.key)] {
        if text.is_empty() {
            return Err(FieldError::at(
                field_path(&field, name),
                "must not be empty",
            ));
        }
    }
    let slot = match &mut kind {
        LimitKind::Global(global) => &mut global.from_metadata,
        LimitKind::ServiceHeld(held) => &mut held.from_metadata,
        LimitKind::Local(_) | LimitKind::LocalElastic(_) => {
            return Err(FieldError::at(field, "only for global limits (scope global)"))
        }
        LimitKind::Coalesced(_)
        | LimitKind::Leased(_)
        | LimitKind::GlobalElastic(_)
        | LimitKind::Concurrency(_)
        | LimitKind::ByOutcome(_) => {
            return Err(FieldError::at(
                field,
                "only for a global limit checked per request: not with sync, elastic, concurrency or count_when",
            ))
        }
    };
    *slot = Some(MetadataPlace {
        namespace: place.namespace.clone(),
        key: place.key.clone(),
    });
    Ok(kind)
}

/// A limit `kind` (compiled without its `count_when`) counted by outcome;
/// refused, naming the field, for a kind that cannot give back a unit.
fn counted_by_outcome(
    site: &LimitSite<'_>,
    raw: &RawLimit,
    when: &RawCountWhen,
    kind: LimitKind,
) -> Result<LimitKind, FieldError> {
    let refused = |field: &str| FieldError::at(site.field(field), by_outcome::NOT_COUNTED);
    let counted = match kind {
        LimitKind::Local(local) => Counted::Local(local),
        LimitKind::Global(global) => Counted::Global(global),
        LimitKind::ServiceHeld(held) => Counted::Service(held),
        LimitKind::LocalElastic(_) | LimitKind::GlobalElastic(_) => return Err(refused("elastic")),
        LimitKind::Coalesced(_) | LimitKind::Leased(_) => return Err(refused("sync")),
        LimitKind::Concurrency(_) => return Err(refused("concurrency")),
        LimitKind::ByOutcome(_) => return Err(refused("count_when")),
    };
    by_outcome::compile(site, raw, when, counted)
}

/// Compiles a limit by its kind, its `count_when` aside.
fn compile_kind(site: &LimitSite<'_>, raw: &RawLimit) -> Result<LimitKind, FieldError> {
    if let Some(max) = raw.concurrency {
        refuse_block(site.path, raw, "concurrency limits")?;
        return concurrency::compile(site, raw, max);
    }
    if raw.permit_ttl.is_some() {
        return Err(concurrency::stray_ttl(site));
    }
    let sync = raw.sync.as_ref().map_or(SyncMode::PerRequest, |s| s.mode);
    match (raw.scope, site.protocol) {
        (Scope::Global, Protocol::Rls) => {
            refuse_block(
                site.path,
                raw,
                "limits a rate limit service holds (protocol rls)",
            )?;
            service_held::compile(site, raw)
        }
        _ if raw.descriptor.is_some() => Err(FieldError::at(
            site.field("descriptor"),
            "only for global limits with limiter.protocol rls",
        )),
        (Scope::Local, Protocol::Sluice | Protocol::Rls) => match &raw.elastic {
            None => local::compile(site, raw),
            Some(elastic) => {
                refuse_block(site.path, raw, "elastic limits")?;
                local_elastic::compile(site, raw, elastic)
            }
        },
        (Scope::Global, Protocol::Sluice) => match (sync, &raw.elastic) {
            (SyncMode::Lease, _) => {
                refuse_block(site.path, raw, "global limits with sync lease")?;
                leased::compile(site, raw)
            }
            (SyncMode::PerRequest | SyncMode::Coalesce, Some(elastic)) => {
                refuse_block(site.path, raw, "elastic limits")?;
                global_elastic::compile(site, raw, elastic)
            }
            (SyncMode::Coalesce, None) => coalesced::compile(site, raw),
            (SyncMode::PerRequest, None) => global::compile(site, raw),
        },
    }
}

/// The quota of limit `j` (of `kind`) an override replaces for a key; why
/// not for a kind that takes no overrides.
pub(crate) fn overridable(j: usize, kind: &mut LimitKind) -> Result<&mut Quota, String> {
    match kind {
        LimitKind::LocalElastic(_) | LimitKind::GlobalElastic(_) => Err(format!(
            "limit {j} is elastic, and elastic limits take no overrides"
        )),
        LimitKind::Local(l) => Ok(&mut l.quota),
        LimitKind::Global(g) | LimitKind::Coalesced(g) => Ok(&mut g.quota),
        LimitKind::Leased(l) => Ok(&mut l.global.quota),
        LimitKind::ServiceHeld(_) => Err(format!(
            "limit {j} is held by the rate limit service: override it there"
        )),
        LimitKind::Concurrency(_) => Err(format!(
            "limit {j} is a concurrency limit, which takes no overrides \
             (give the override a limit index)"
        )),
        LimitKind::ByOutcome(b) => match &mut b.counted {
            Counted::Local(l) => Ok(&mut l.quota),
            Counted::Global(g) => Ok(&mut g.quota),
            Counted::Service(_) => Err(format!(
                "limit {j} is held by the rate limit service: override it there"
            )),
        },
    }
}

/// What a rule whose cost comes from the response charges after it in a
/// limit of `kind`: the rate limit; `None` for a limit a rate limit service
/// holds (charged by a second call, with the difference as its hits) and
/// for a concurrency limit (its permits, the estimate's weight, are held
/// until the stream ends: a cap on the tokens in flight); or the field at
/// fault and why the kind refuses it.
pub(crate) fn charged_after_response(
    kind: &LimitKind,
) -> Result<Option<&Limit>, (&'static str, &'static str)> {
    use crate::config::cost::RESPONSE_ONLY;
    match kind {
        LimitKind::LocalElastic(_) | LimitKind::GlobalElastic(_) => Err(("elastic", RESPONSE_ONLY)),
        LimitKind::Local(local) => Ok(Some(&local.quota.limit)),
        LimitKind::Global(global) => Ok(Some(&global.quota.limit)),
        LimitKind::Coalesced(_) | LimitKind::Leased(_) => Err(("sync", RESPONSE_ONLY)),
        // A request waiting for a permit would wait with its estimate unsettled.
        LimitKind::Concurrency(c) if c.max_wait.is_some() => Err(("on_exceed", RESPONSE_ONLY)),
        LimitKind::ServiceHeld(_) | LimitKind::Concurrency(_) => Ok(None),
        LimitKind::ByOutcome(_) => Err((
            "count_when",
            "a limit counted by outcome weighs requests when they come: \
             not in a rule whose cost comes from the response",
        )),
    }
}

/// Refuses, at `at` (the rule's `priority`), a limit that classes cannot
/// share: they share rate limits, local or checked with the limiter per
/// request, whose reserve is room now, for one request.
pub(crate) fn check_priority(
    at: &str,
    limits: &[RuleLimit],
    raw: &[RawLimit],
) -> Result<(), FieldError> {
    for (j, (limit, raw)) in limits.iter().zip(raw).enumerate() {
        let why = match &limit.kind {
            _ if raw.on_exceed == OnExceed::Delay => Some("a limit in delay mode"),
            LimitKind::Local(_)
            | LimitKind::LocalElastic(_)
            | LimitKind::Global(_)
            | LimitKind::GlobalElastic(_) => None,
            LimitKind::Coalesced(_) => Some("a global limit with sync coalesce"),
            LimitKind::Leased(_) => Some("a global limit with sync lease"),
            LimitKind::Concurrency(_) => Some("a concurrency limit"),
            LimitKind::ServiceHeld(_) => Some("held by a rate limit service (protocol rls)"),
            LimitKind::ByOutcome(b) => match b.counted {
                Counted::Local(_) | Counted::Global(_) => None,
                Counted::Service(_) => Some("held by a rate limit service (protocol rls)"),
            },
        };
        if let Some(why) = why {
            return Err(FieldError::at(
                at,
                format!(
                    "applies to rate limits, local or global per request; limits[{j}] is {why}"
                ),
            ));
        }
    }
    Ok(())
}

/// What a global limit's item in a call does with the answer, by kind.
#[derive(Debug)]
pub enum Follow {
    /// Checked for this request alone (per request, a leased limit that
    /// asks nothing, an elastic limit that cannot borrow, or held by a
    /// rate limit service): the answer is read as it comes.
    Alone,
    /// May share its call with requests that have the same check.
    Coalesced,
    /// A leased limit's ask for units, made with the check.
    Leased(LeaseAsk),
    /// An elastic limit: what it checks in the second call if it denies.
    Elastic(Box<Lend>),
    /// Borrowing in the second call for an elastic limit that denied.
    Lent(Lent),
    /// A concurrency limit's permits.
    Permit(PermitAsk),
}

impl Steps for Follow {
    fn step<'a, V, S, M>(
        walk: &mut Walk<'a, V, S, M, Self>,
        applied: &Applied<'a, '_>,
        l: usize,
        limit: &'a RuleLimit,
    ) -> Result<(), Refusal>
    where
        V: RequestView,
        S: SharedStore + ?Sized,
        M: MetricSink + ?Sized,
    {
        let cx = &mut walk.cx;
        let item = match &limit.kind {
            LimitKind::Local(local) => return Ok(local::step(cx, applied, l, local)?),
            LimitKind::LocalElastic(limit) => {
                return Ok(local_elastic::step(cx, applied, l, limit)?)
            }
            LimitKind::Global(global) => global::step(cx, applied, l, global)?.with(Follow::Alone),
            LimitKind::Coalesced(global) => {
                coalesced::step(cx, applied, l, global)?.with(Follow::Coalesced)
            }
            LimitKind::Leased(leased) => match leased::step(cx, applied, l, leased)? {
                None => return Ok(()),
                Some(item) => item.map(|ask| ask.map_or(Follow::Alone, Follow::Leased)),
            },
            LimitKind::GlobalElastic(limit) => global_elastic::step(cx, applied, l, limit)?
                .map(|lend| lend.map_or(Follow::Alone, |lend| Follow::Elastic(Box::new(lend)))),
            LimitKind::ServiceHeld(held) => {
                service_held::step(cx, applied, l, held)?.with(Follow::Alone)
            }
            LimitKind::Concurrency(c) => match concurrency::step(cx, applied, l, c)? {
                None => return Ok(()),
                Some(item) => item.map(Follow::Permit),
            },
            LimitKind::ByOutcome(b) => {
                let item = match &b.counted {
                    Counted::Local(local) => {
                        local::step(cx, applied, l, local)?;
                        None
                    }
                    Counted::Global(global) => Some(by_outcome::global_item(applied, l, global)?),
                    Counted::Service(held) => Some(service_held::step(cx, applied, l, held)?),
                };
                match by_outcome::owe(cx, applied, b, item) {
                    None => return Ok(()),
                    Some(item) => item.with(Follow::Alone),
                }
            }
        };
        walk.push(applied, item);
        Ok(())
    }
}

impl FollowUp for Follow {
    fn permit_ttl(&self) -> Option<Nanos> {
        match self {
            Follow::Permit(ask) => Some(ask.ttl),
            Follow::Alone
            | Follow::Coalesced
            | Follow::Leased(_)
            | Follow::Elastic(_)
            | Follow::Lent(_) => None,
        }
    }

    fn wait(&self) -> Option<Nanos> {
        match self {
            Follow::Permit(ask) => ask.wait,
            Follow::Alone
            | Follow::Coalesced
            | Follow::Leased(_)
            | Follow::Elastic(_)
            | Follow::Lent(_) => None,
        }
    }

    fn coalesces(&self) -> bool {
        match self {
            Follow::Coalesced => true,
            Follow::Alone
            | Follow::Leased(_)
            | Follow::Elastic(_)
            | Follow::Lent(_)
            | Follow::Permit(_) => false,
        }
    }

    fn counted_alone(&self) -> bool {
        match self {
            Follow::Alone | Follow::Elastic(_) => true,
            Follow::Coalesced | Follow::Leased(_) | Follow::Lent(_) | Follow::Permit(_) => false,
        }
    }

    fn settle<S, M>(
        &self,
        env: &Env<'_, S, M>,
        _item: &Item<Self>,
        answer: Option<&LimitResult>,
        now: Nanos,
    ) -> Option<u64>
    where
        S: SharedStore + ?Sized,
        M: MetricSink + ?Sized,
    {
        match self {
            Follow::Leased(ask) => leased::settle(env, ask, answer, now),
            Follow::Alone
            | Follow::Coalesced
            | Follow::Elastic(_)
            | Follow::Lent(_)
            | Follow::Permit(_) => None,
        }
    }

    fn admitted(&self, reported: Reported, tally: &mut Tally) {
        match self {
            Follow::Lent(lent) => global_elastic::admitted(lent, tally),
            Follow::Alone
            | Follow::Coalesced
            | Follow::Leased(_)
            | Follow::Elastic(_)
            | Follow::Permit(_) => {
                tally.note(reported);
                tally.note_delay(reported);
            }
        }
    }

    fn refusal(&self, reported: Reported) -> Refusal {
        let report = match self {
            Follow::Lent(lent) => global_elastic::refused(lent),
            Follow::Alone
            | Follow::Coalesced
            | Follow::Leased(_)
            | Follow::Elastic(_)
            | Follow::Permit(_) => reported,
        };
        Refusal {
            report,
            wait: self.wait(),
        }
    }

    fn may_borrow(&self) -> bool {
        match self {
            Follow::Elastic(_) => true,
            Follow::Alone
            | Follow::Coalesced
            | Follow::Leased(_)
            | Follow::Lent(_)
            | Follow::Permit(_) => false,
        }
    }

    fn again(mut item: Item<Self>, answer: &LimitResult, weight: u64, batch: &mut Batch<Self>) {
        let follow = std::mem::replace(&mut item.follow, Follow::Alone);
        match follow {
            Follow::Elastic(lend) if !answer.allowed => {
                for lent in global_elastic::borrowing(&item, *lend, answer) {
                    batch.push(lent.map(Follow::Lent), weight);
                }
                return;
            }
            // Permits are asked for again; nothing else is.
            Follow::Permit(ask) => item.follow = Follow::Permit(ask),
            Follow::Alone
            | Follow::Coalesced
            | Follow::Leased(_)
            | Follow::Elastic(_)
            | Follow::Lent(_) => {}
        }
        // The first call settled its lease ask and returns.
        match &mut item.wire {
            Wire::Limit(spec) => {
                spec.lease = None;
                spec.returned = None;
                spec.returned_age_ms = None;
            }
            Wire::Descriptor(_) => {}
        }
        batch.push(item, weight);
    }

    fn serves_unanswered(&self) -> bool {
        match self {
            Follow::Leased(_) => true,
            Follow::Alone
            | Follow::Coalesced
            | Follow::Elastic(_)
            | Follow::Lent(_)
            | Follow::Permit(_) => false,
        }
    }

    fn serve_unanswered<S, M>(
        &self,
        env: &Env<'_, S, M>,
        item: &Item<Self>,
        weight: u64,
        tally: &mut Tally,
    ) -> Option<Decision>
    where
        S: SharedStore + ?Sized,
        M: MetricSink + ?Sized,
    {
        match self {
            Follow::Leased(ask) => leased::serve_unanswered(env, ask, item, weight, tally),
            Follow::Alone
            | Follow::Coalesced
            | Follow::Elastic(_)
            | Follow::Lent(_)
            | Follow::Permit(_) => None,
        }
    }

    fn cancel<S, M>(&self, env: &Env<'_, S, M>, _item: &Item<Self>)
    where
        S: SharedStore + ?Sized,
        M: MetricSink + ?Sized,
    {
        match self {
            Follow::Leased(ask) => leased::cancel(env, ask),
            Follow::Alone
            | Follow::Coalesced
            | Follow::Elastic(_)
            | Follow::Lent(_)
            | Follow::Permit(_) => {}
        }
    }
}
