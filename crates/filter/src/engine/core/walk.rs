//! Deciding a request rule after rule: each limit of a rule that applies
//! takes the step of its kind, which the registry ([`Steps`], implemented
//! in [`crate::engine::kinds`]) chooses; the walk knows no kind.

use super::call::{Batch, Item};
use super::env::Env;
use super::follow::FollowUp;
use super::pending::PendingCheck;
use super::tally::{Refusal, Tally};
use super::verdict::Verdict;
use crate::config::{AtRequest, Cost, Plan, Rule, RuleLimit};
use crate::cost::metadata;
use crate::headers::Reported;
use crate::key::{Request, RequestView};
use crate::local::{SharedStore, When};
use crate::metrics::{MetricSink, RuleEvent};
use crate::slots::{self, SlotHasher};
use sluice_core::{Decision, Holder, Limit, Nanos};
use sluice_wire::{LimitSpec, CONCURRENCY};

/// The capacity of the request's key and shared-data key buffers: most keys
/// fit, so that writing them allocates once.
const KEY_ROOM: usize = 64;

/// The step of every kind of limit: the registry's one `match` over the
/// kinds.
pub(crate) trait Steps: FollowUp {
    /// Decides limit `l` (`limit`) of `applied`: consumes it, or adds it to
    /// the call it belongs to; the refusal of a limit that denies.
    fn step<'a, V, S, M>(
        walk: &mut Walk<'a, V, S, M, Self>,
        applied: &Applied<'a, '_>,
        l: usize,
        limit: &'a RuleLimit,
    ) -> Result<(), Refusal>
    where
        V: RequestView,
        S: SharedStore + ?Sized,
        M: MetricSink + ?Sized;
}

/// Decides a request's local limits and prepares its global check. `clock`
/// is read once, and only when some rule applies: at its first use, which
/// for a local limit is after its state's get ([`When`]); `holder` holds the
/// permits of concurrency limits (see [`crate::engine::concurrency`]).
pub(crate) fn evaluate<K, V, S, M, C>(
    plan: &Plan,
    hasher: &SlotHasher,
    holder: Holder,
    view: &V,
    store: &S,
    metrics: &M,
    clock: C,
) -> Verdict<K>
where
    K: Steps,
    V: RequestView,
    S: SharedStore + ?Sized,
    M: MetricSink + ?Sized,
    C: Fn() -> Nanos,
{
    let request = Request::new(view, &plan.client_ip).with_jwt_payload(&plan.jwt_payload);
    let mut walk = Walk {
        cx: Cx {
            env: Env::new(plan, store, metrics),
            request: &request,
            hasher,
            holder,
            tally: Tally::new(plan, holder),
            clock: When::Unread(&clock),
            // Room for a shared-data key (prefix and slot) without growing.
            scratch: String::with_capacity(KEY_ROOM),
            metadata_invalid_in: None,
        },
        enforcing: Batch::default(),
        shadow: Batch::default(),
    };
    let mut key = String::with_capacity(KEY_ROOM);
    let matching = plan
        .rule_index
        .matching(&request, &plan.rules, |r| &r.matcher);
    for (index, rule) in matching {
        if !request.write_key(&rule.key, &mut key) {
            metrics.rule(index, RuleEvent::Skipped);
            continue;
        }
        let owes = matches!(rule.cost, Cost::Response(_));
        let weight = match weight(&rule.cost, &request) {
            // A response cost is settled later, whatever its estimate.
            Ok(0) if !owes => continue,
            Ok(weight) => weight,
            Err(Malformed) => {
                metrics.rule(index, RuleEvent::CostInvalid);
                u64::from(!owes)
            }
        };
        let fingerprint = hasher.fingerprint(&key);
        let applied = Applied {
            index,
            rule,
            key: &key,
            fingerprint,
            slot: slot(plan, fingerprint),
            weight,
            share: share(rule, &request),
        };
        let walked = walk.rule(&applied);
        // A rule that applies has the request's time, whatever its limits
        // read (none read it twice).
        walk.cx.now();
        if let Err(refusal) = walked {
            walk.cancel_asks();
            let mut denied = walk.cx.tally.denied(refusal, &walk.cx.env);
            denied.key = Some(key);
            return Verdict::Deny(denied);
        }
    }
    walk.into_verdict()
}

/// The cost header was missing or not a non-negative integer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Malformed;

/// What the request weighs in a rule of `cost`; 0 means the rule does not
/// count it. A header value of only digits too large for `u64` weighs
/// `u64::MAX` (more than any limit admits).
fn weight<'a, V: RequestView>(cost: &'a Cost, request: &Request<'a, V>) -> Result<u64, Malformed> {
    let name = match cost.at_request() {
        AtRequest::Fixed(weight) => return Ok(weight),
        AtRequest::Header(name) => name,
        AtRequest::Metadata(place) => {
            let value = request.property(&place.property()).ok_or(Malformed)?;
            return metadata::count(&value).ok_or(Malformed);
        }
        AtRequest::Body(path) => return request.body_field(path).ok_or(Malformed),
    };
    let value = request.header(name).ok_or(Malformed)?;
    let digits = value.trim_matches(|c: char| c == ' ' || c == '\t');
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(Malformed);
    }
    // Only digits: parsing fails only on overflow.
    Ok(digits.parse().unwrap_or(u64::MAX))
}

/// A rule that applies to the request, and the request's key for it.
pub(crate) struct Applied<'a, 'k> {
    pub(crate) index: usize,
    pub(crate) rule: &'a Rule,
    pub(crate) key: &'k str,
    pub(crate) fingerprint: u64,
    pub(crate) slot: u64,
    /// What the request weighs in this rule's limits (at least 1).
    pub(crate) weight: u64,
    /// The percent of each local limit of the rule the request's priority
    /// class may use (100 without classes).
    pub(crate) share: u8,
}

impl Applied<'_, '_> {
    pub(crate) fn reported(&self, l: usize, limit: &Limit, decision: Decision) -> Reported {
        Reported {
            rule: self.index,
            limit: l,
            window: limit.window,
            decision,
        }
    }

    /// Whether every request of the rule weighs the same.
    pub(crate) fn fixed_cost(&self) -> bool {
        matches!(self.rule.cost, Cost::Fixed(_))
    }
}

/// What a kind's step decides a limit with: the request, the shared data
/// and what happened to the request so far (its calls aside).
pub(crate) struct Cx<'a, V: RequestView, S: ?Sized, M: ?Sized> {
    pub(crate) env: Env<'a, S, M>,
    /// The request, for the keys of pool rules.
    pub(crate) request: &'a Request<'a, V>,
    pub(crate) hasher: &'a SlotHasher,
    /// Who holds the permits this request takes.
    pub(crate) holder: Holder,
    pub(crate) tally: Tally,
    /// The request's time, read at its first use (then in `tally.now`).
    pub(crate) clock: When<'a>,
    /// Reused for shared-data keys.
    pub(crate) scratch: String,
    /// The last rule whose `limit_metadata_invalid` this request counted:
    /// once per rule, however many of its limits read a malformed limit.
    pub(crate) metadata_invalid_in: Option<usize>,
}

impl<V: RequestView, S: SharedStore + ?Sized, M: ?Sized> Cx<'_, V, S, M> {
    /// The request's time, read now if nothing has read it yet.
    pub(crate) fn now(&mut self) -> Nanos {
        let now = self.clock.now();
        self.tally.now = now;
        now
    }

    /// Keeps the request's time `when` read, if it did.
    pub(crate) fn timed(&mut self, when: When<'_>) {
        if let (When::Unread(_), Some(now)) = (self.clock, when.read()) {
            self.clock = When::Read(now);
            self.tally.now = now;
        }
    }
}

/// A request being decided, rule after rule.
pub(crate) struct Walk<'a, V: RequestView, S: ?Sized, M: ?Sized, F> {
    pub(crate) cx: Cx<'a, V, S, M>,
    /// The global limits of enforcing rules, and of shadow rules.
    enforcing: Batch<F>,
    shadow: Batch<F>,
}

impl<'a, V, S, M, K> Walk<'a, V, S, M, K>
where
    V: RequestView,
    S: SharedStore + ?Sized,
    M: MetricSink + ?Sized,
    K: Steps,
{
    /// Decides the limits of `applied` in order. A shadow rule that would
    /// deny gives back its own consumption and drops its global limits;
    /// an enforcing rule's refusal is returned.
    fn rule(&mut self, applied: &Applied<'a, '_>) -> Result<(), Refusal> {
        let consumed_mark = self.cx.tally.consumed.len();
        let owed_mark = self.cx.tally.owed.len();
        let shadow_mark = self.shadow.len();
        let global_mark = self.batch_of(applied).len();
        let Err(refusal) = self.limits(applied) else {
            self.cx.tally.admitted.push(applied.index);
            if matches!(applied.rule.cost, Cost::Response(_)) {
                let (mut global, descriptors) = self.batch_of(applied).since(global_mark);
                // Permits are given back at the stream's end, not charged.
                global.retain(|spec| spec.algorithm != CONCURRENCY);
                let global = (global, descriptors);
                let (rule, estimate) = (applied.index, applied.weight);
                let shadow = applied.rule.shadow;
                // What is owed is settled as consumed now: a refund's age
                // counts from it (a global-only rule has not read it yet).
                self.cx.now();
                let tally = &mut self.cx.tally;
                tally.owe(rule, estimate, consumed_mark, global, shadow);
            }
            return Ok(());
        };
        if !applied.rule.shadow {
            return Err(refusal);
        }
        self.cx.tally.refund_since(consumed_mark, &self.cx.env);
        self.cx.tally.owed.truncate(owed_mark);
        self.shadow.truncate(shadow_mark);
        self.cx
            .env
            .metrics
            .rule(applied.index, RuleEvent::ShadowDenied);
        self.cx.tally.shadow_denied.push(applied.index);
        Ok(())
    }

    /// The first refusal among the limits of `applied`, each decided by its
    /// kind.
    fn limits(&mut self, applied: &Applied<'a, '_>) -> Result<(), Refusal> {
        for (l, rule_limit) in applied.rule.limits.iter().enumerate() {
            K::step(self, applied, l, rule_limit)?;
        }
        Ok(())
    }

    /// Adds `item`, checked with the request's weight, to the call the
    /// global limits of `applied` go in.
    pub(crate) fn push(&mut self, applied: &Applied<'_, '_>, item: Item<K>) {
        self.batch_of(applied).push(item, applied.weight);
    }

    /// The call the global limits of `applied` go in.
    fn batch_of(&mut self, applied: &Applied<'_, '_>) -> &mut Batch<K> {
        if applied.rule.shadow {
            &mut self.shadow
        } else {
            &mut self.enforcing
        }
    }

    /// Ends what the limits bound for calls asked for: the request is
    /// denied before any call is made.
    fn cancel_asks(&self) {
        for item in self.enforcing.items.iter().chain(&self.shadow.items) {
            item.follow.cancel(&self.cx.env, item);
        }
    }

    /// Admits the request, or asks the limiter about its global limits.
    fn into_verdict(self) -> Verdict<K> {
        let Walk {
            cx,
            enforcing,
            shadow,
        } = self;
        if enforcing.is_empty() && shadow.is_empty() {
            return cx.tally.admit(cx.env.metrics);
        }
        let domain = &cx.env.plan.domain;
        let mut calls = Vec::with_capacity(2);
        for (batch, is_shadow) in [(enforcing, false), (shadow, true)] {
            let permits = batch.items.iter().any(|i| i.follow.takes_permits());
            let holder = permits.then_some(cx.holder);
            calls.extend(batch.into_call(domain, is_shadow, holder));
        }
        Verdict::Check(Box::new(PendingCheck {
            calls,
            tally: cx.tally,
            borrowing: false,
            reply: None,
        }))
    }
}

/// The share of `rule`'s limits the request's priority class may use.
pub(crate) fn share<'a, V: RequestView>(rule: &'a Rule, request: &Request<'a, V>) -> u8 {
    let Some(priority) = &rule.priority else {
        return 100;
    };
    let mut value = String::new();
    let present = request.write_key(std::slice::from_ref(&priority.from), &mut value);
    priority.share_of(present.then_some(value.as_str()))
}

/// The units of `limit` a priority class with `share` percent must leave
/// free: `100 − share` percent of what a fresh key admits, rounded down.
pub(crate) fn reserve(limit: &Limit, share: u8) -> u64 {
    // Without priority classes every request has the whole limit.
    if share >= 100 {
        return 0;
    }
    let kept = u128::from(100 - share);
    u64::try_from(u128::from(limit.soft_burst()) * kept / 100).unwrap_or(u64::MAX)
}

/// The wire form of `limit` under limiter key `key` for a request of a
/// priority class with `share` percent: with the reserve it leaves for the
/// classes above it, if any.
pub(crate) fn class_spec(key: String, limit: &Limit, share: u8) -> LimitSpec<'static> {
    LimitSpec {
        reserve: Some(reserve(limit, share)).filter(|&r| r > 0),
        ..LimitSpec::new(key, limit)
    }
}

/// The slot of a key with `fingerprint` in a limit's slot table.
pub(crate) fn slot(plan: &Plan, fingerprint: u64) -> u64 {
    slots::slot_of(fingerprint, plan.local_max_keys)
}
