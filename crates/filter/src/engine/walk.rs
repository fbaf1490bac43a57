//! Deciding a request rule after rule: each limit of a rule that applies
//! takes the step of its kind (the one `match` over [`LimitKind`]).

use super::call::{Batch, Via};
use super::pending::PendingCheck;
use super::tally::{Env, Tally};
use super::verdict::Verdict;
use crate::config::{Cost, Estimate, LimitKind, Plan, Rule};
use crate::headers::Reported;
use crate::key::{Request, RequestView};
use crate::local::SharedStore;
use crate::metrics::{MetricSink, RuleEvent};
use crate::slots::{self, SlotHasher};
use sluice_core::{Decision, Holder, Limit, Nanos};
use sluice_wire::LimitSpec;

/// The capacity of the request's key and shared-data key buffers: most keys
/// fit, so that writing them allocates once.
const KEY_ROOM: usize = 64;

/// Decides a request's local limits and prepares its global check. `clock`
/// is read once, and only when some rule applies; `holder` holds the
/// permits of concurrency limits (see [`super::concurrency`]).
pub fn evaluate<V, S, M, C>(
    plan: &Plan,
    hasher: &SlotHasher,
    holder: Holder,
    view: &V,
    store: &S,
    metrics: &M,
    clock: C,
) -> Verdict
where
    V: RequestView,
    S: SharedStore + ?Sized,
    M: MetricSink + ?Sized,
    C: Fn() -> Nanos,
{
    let request = Request::new(view, &plan.client_ip).with_jwt_payload(&plan.jwt_payload);
    let mut walk = Walk {
        env: Env::new(plan, store, metrics),
        request: &request,
        hasher,
        holder,
        tally: Tally::new(plan, holder),
        enforcing: Batch::default(),
        shadow: Batch::default(),
        // Room for a shared-data key (prefix and slot) without growing.
        scratch: String::with_capacity(KEY_ROOM),
    };
    let mut clock_read: Option<Nanos> = None;
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
        walk.tally.now = *clock_read.get_or_insert_with(&clock);
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
        if let Err(report) = walk.rule(&applied) {
            walk.cancel_asks();
            return walk.tally.deny(report, &walk.env);
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
    let name = match cost {
        Cost::Fixed(weight) => return Ok(*weight),
        Cost::Header(name) => name,
        Cost::Response(response) => match &response.estimate {
            Estimate::Fixed(estimate) => return Ok(*estimate),
            Estimate::Header(name) => name,
            Estimate::Body(path) => return request.body_field(path).ok_or(Malformed),
        },
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
pub(super) struct Applied<'a, 'k> {
    pub(super) index: usize,
    pub(super) rule: &'a Rule,
    pub(super) key: &'k str,
    pub(super) fingerprint: u64,
    pub(super) slot: u64,
    /// What the request weighs in this rule's limits (at least 1).
    pub(super) weight: u64,
    /// The percent of each local limit of the rule the request's priority
    /// class may use (100 without classes).
    pub(super) share: u8,
}

impl Applied<'_, '_> {
    pub(super) fn reported(&self, l: usize, limit: &Limit, decision: Decision) -> Reported {
        Reported {
            rule: self.index,
            limit: l,
            window: limit.window,
            decision,
        }
    }

    /// Whether every request of the rule weighs the same.
    pub(super) fn fixed_cost(&self) -> bool {
        matches!(self.rule.cost, Cost::Fixed(_))
    }
}

/// A request being decided, rule after rule.
pub(super) struct Walk<'a, V: RequestView, S: ?Sized, M: ?Sized> {
    pub(super) env: Env<'a, S, M>,
    /// The request, for the keys of pool rules.
    pub(super) request: &'a Request<'a, V>,
    pub(super) hasher: &'a SlotHasher,
    /// Who holds the permits this request takes.
    pub(super) holder: Holder,
    pub(super) tally: Tally,
    /// The global limits of enforcing rules, and of shadow rules.
    pub(super) enforcing: Batch,
    pub(super) shadow: Batch,
    /// Reused for shared-data keys.
    pub(super) scratch: String,
}

impl<'a, V, S, M> Walk<'a, V, S, M>
where
    V: RequestView,
    S: SharedStore + ?Sized,
    M: MetricSink + ?Sized,
{
    /// Decides the limits of `applied` in order. A shadow rule that would
    /// deny gives back its own consumption and drops its global limits;
    /// an enforcing rule's denial is returned.
    fn rule(&mut self, applied: &Applied<'a, '_>) -> Result<(), Reported> {
        let consumed_mark = self.tally.consumed.len();
        let shadow_mark = self.shadow.len();
        let global_mark = self.batch_of(applied).len();
        let Err(report) = self.limits(applied) else {
            self.tally.admitted.push(applied.index);
            if matches!(applied.rule.cost, Cost::Response(_)) {
                let global = self.batch_of(applied).since(global_mark);
                let (rule, estimate) = (applied.index, applied.weight);
                let shadow = applied.rule.shadow;
                self.tally
                    .owe(rule, estimate, consumed_mark, global, shadow);
            }
            return Ok(());
        };
        if !applied.rule.shadow {
            return Err(report);
        }
        self.tally.refund_since(consumed_mark, &self.env);
        self.shadow.truncate(shadow_mark);
        self.env
            .metrics
            .rule(applied.index, RuleEvent::ShadowDenied);
        self.tally.shadow_denied.push(applied.index);
        Ok(())
    }

    /// The first denial among the limits of `applied`, each decided by its
    /// kind.
    fn limits(&mut self, applied: &Applied<'a, '_>) -> Result<(), Reported> {
        for (l, rule_limit) in applied.rule.limits.iter().enumerate() {
            match &rule_limit.kind {
                LimitKind::Local(local) => self.local(applied, l, local)?,
                LimitKind::LocalElastic(limit) => self.local_elastic(applied, l, limit)?,
                LimitKind::Global(global) => self.global(applied, l, global, Via::Alone)?,
                LimitKind::Coalesced(global) => self.global(applied, l, global, Via::Coalesced)?,
                LimitKind::Leased(leased) => self.leased(applied, l, leased)?,
                LimitKind::GlobalElastic(limit) => self.global_elastic(applied, l, limit)?,
                LimitKind::ServiceHeld(held) => self.service_held(applied, l, held)?,
                LimitKind::Concurrency(c) => self.concurrency(applied, l, c)?,
            }
        }
        Ok(())
    }

    /// The call the global limits of `applied` go in.
    pub(super) fn batch_of(&mut self, applied: &Applied<'_, '_>) -> &mut Batch {
        if applied.rule.shadow {
            &mut self.shadow
        } else {
            &mut self.enforcing
        }
    }

    /// Admits the request, or asks the limiter about its global limits.
    fn into_verdict(self) -> Verdict {
        if self.enforcing.is_empty() && self.shadow.is_empty() {
            return self.tally.admit(self.env.metrics);
        }
        let domain = &self.env.plan.domain;
        let mut calls = Vec::with_capacity(2);
        let holder = self.holder;
        calls.extend(self.enforcing.into_call(domain, false, holder));
        calls.extend(self.shadow.into_call(domain, true, holder));
        Verdict::Check(PendingCheck {
            calls,
            tally: self.tally,
            borrowing: false,
            reply: None,
        })
    }
}

/// The share of `rule`'s limits the request's priority class may use.
pub(super) fn share<'a, V: RequestView>(rule: &'a Rule, request: &Request<'a, V>) -> u8 {
    let Some(priority) = &rule.priority else {
        return 100;
    };
    let mut value = String::new();
    let present = request.write_key(std::slice::from_ref(&priority.from), &mut value);
    priority.share_of(present.then_some(value.as_str()))
}

/// The units of `limit` a priority class with `share` percent must leave
/// free: `100 − share` percent of what a fresh key admits, rounded down.
pub(super) fn reserve(limit: &Limit, share: u8) -> u64 {
    let kept = u128::from(100 - share.min(100));
    u64::try_from(u128::from(limit.soft_burst()) * kept / 100).unwrap_or(u64::MAX)
}

/// The wire form of `limit` under limiter key `key` for a request of a
/// priority class with `share` percent: with the reserve it leaves for the
/// classes above it, if any.
pub(super) fn class_spec(key: String, limit: &Limit, share: u8) -> LimitSpec<'static> {
    LimitSpec {
        reserve: Some(reserve(limit, share)).filter(|&r| r > 0),
        ..LimitSpec::new(key, limit)
    }
}

/// The slot of a key with `fingerprint` in a limit's slot table.
pub(super) fn slot(plan: &Plan, fingerprint: u64) -> u64 {
    slots::slot_of(fingerprint, plan.local_max_keys)
}
