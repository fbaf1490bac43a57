//! The request path without the host: match rules, build keys, decide local
//! limits, prepare the global check, and merge its answer.
//!
//! Limits are decided in configuration order, each in its own
//! compare-and-swap loop. When an enforcing limit denies, every limit already
//! consumed for this request is refunded, so a denied request consumes
//! nothing. A shadow rule that would deny gives back its own consumption,
//! is reported, and never blocks the request.
//!
//! Each limit of a rule that applies takes one of two steps: a local limit is
//! consumed in shared data; a global limit is denied at once if the
//! over-limit cache holds its key, or else joins the call of its kind
//! (enforcing or shadow) to the limiter, which [`finish`] completes.
//!
//! A limit in delay mode admits a request over its quota with a delay (the
//! core counts it as admitted at the time it conforms). An admitted request
//! with some delay from an enforcing rule is [`Verdict::Delay`]: the host
//! holds it for the longest of its delays, or, when it cannot hold it,
//! refuses it with [`Delayed::refuse`]. Shadow rules never hold a request.
//!
//! A request weighs its rule's [`Cost`] in each limit of the rule: that many
//! units are consumed (and refunded), and a global limit is checked with that
//! many hits. A weight above what a limit can ever admit is denied with
//! [`Denial::CostExceedsCapacity`].
//!
//! An elastic limit that denies a request lends it its extra allowance if
//! the pool rule has headroom: the request then consumes the key's extra
//! allowance and every limit of the pool instead of the limit itself (all or
//! nothing), and reports the limit with nothing remaining. Pool rules are
//! never applied on their own. A global elastic limit borrows in a second
//! call, made only when every enforcing denial of the first came from an
//! elastic limit that can borrow (the first call, denied, consumed nothing).

use crate::config::{
    Cost, Elastic, Entry, EntryValue, FailureMode, HeadersMode, LeasePolicy, LimitScope, Plan,
    Rule, RuleLimit, Sync,
};
use crate::headers::{more_restrictive, Reported};
use crate::key::{Request, RequestView};
use crate::layout;
use crate::lease::{self, Lease, Take};
use crate::local::{self, Contended, SharedStore};
use crate::metrics::{GlobalEvent, MetricSink, RuleEvent};
use crate::rls;
use crate::slots::{self, SlotHasher};
use sluice_core::{Algorithm, Decision, Denial, Limit, Nanos, MILLISECOND, SECOND};
use sluice_wire::{check_json, limiter_key, CheckResponse, LimitResult, LimitSpec};

/// What to do with a request.
#[derive(Debug)]
pub enum Verdict {
    /// Let it through.
    Allow(Admitted),
    /// Let it through once it has been held for [`Delayed::delay`].
    Delay(Delayed),
    /// Answer with the denial response.
    Deny(Denied),
    /// Ask the limiter, then call [`finish`].
    Check(PendingCheck),
}

/// An admitted request and what its response reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admitted {
    /// The most restrictive enforcing limit, for the rate-limit headers.
    pub report: Option<Reported>,
    /// Every enforcing limit that counted the request, in order (kept only
    /// for the IETF headers' policies).
    pub applied: Vec<Reported>,
    /// Shadow rules that would have denied.
    pub shadow_denied: Vec<usize>,
}

/// A denied request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denied {
    /// The denying limit's decision (its rule is `report.rule`).
    pub report: Reported,
    /// Every enforcing limit decided for the request, in order, the denying
    /// one last (kept only for the IETF headers' policies).
    pub applied: Vec<Reported>,
    /// Shadow rules that would have denied.
    pub shadow_denied: Vec<usize>,
}

/// An admitted request that conforms only after a delay.
///
/// Its limits are already consumed as of the time it conforms; the host
/// calls [`accept`](Self::accept) once it holds the request,
/// [`refuse`](Self::refuse) if it cannot hold it, and
/// [`give_back`](Self::give_back) if the client leaves while it waits.
#[derive(Debug)]
pub struct Delayed {
    /// How long to hold the request: the longest delay of its limits.
    pub delay: Nanos,
    /// The rule of the limit with that delay (its `max_queued` bounds the
    /// waiting requests, its metrics count the delay).
    pub rule: usize,
    /// The decision of that limit.
    limit: Reported,
    tally: Tally,
}

impl Delayed {
    /// When the request conforms: the decision time plus its delay (for a
    /// global limit, the filter's clock before the call).
    pub fn resume_at(&self) -> Nanos {
        self.tally.now.saturating_add(self.delay)
    }

    /// What the response reports once the request goes through.
    pub fn admitted(&self) -> Admitted {
        Admitted {
            report: self.tally.report,
            applied: self.tally.applied.clone(),
            shadow_denied: self.tally.shadow_denied.clone(),
        }
    }

    /// Counts the request as admitted and delayed, once it is held.
    pub fn accept<M: MetricSink + ?Sized>(&self, metrics: &M) {
        self.tally.count_allowed(metrics);
        metrics.delayed(self.rule, self.delay);
    }

    /// Denies the request instead of holding it (its rule's queue is full):
    /// what it consumed is refunded, and `retry-after` is its delay.
    pub fn refuse<S, M>(self, plan: &Plan, store: &S, metrics: &M) -> Denied
    where
        S: SharedStore + ?Sized,
        M: MetricSink + ?Sized,
    {
        let env = Env::new(plan, store, metrics);
        let mut report = self.limit;
        report.decision = Decision {
            allowed: false,
            remaining: 0,
            retry_after: self.delay,
            delay: 0,
            denial: Some(Denial::OverLimit),
            ..report.decision
        };
        self.tally.denied(report, &env)
    }

    /// Gives back at `now` what the request consumed locally, as admitted at
    /// the time it would have conformed: its client left while it waited.
    /// Global limits keep the consumption (the limiter has no refund).
    pub fn give_back<S, M>(mut self, plan: &Plan, store: &S, metrics: &M, now: Nanos)
    where
        S: SharedStore + ?Sized,
        M: MetricSink + ?Sized,
    {
        let env = Env::new(plan, store, metrics);
        self.tally.refund_at(0, &env, now);
    }
}

/// A request waiting for the limiter.
///
/// Enforcing and shadow limits go in separate calls: the limiter decides the
/// limits of one call together (a denial consumes nothing), and a shadow
/// denial must not stop the enforcing limits from being counted.
#[derive(Debug)]
pub struct PendingCheck {
    /// The enforcing call first, if any.
    calls: Vec<Call>,
    tally: Tally,
    /// This is the second call, where elastic limits borrow.
    borrowing: bool,
    /// What the rate limit service asked for besides its decision.
    reply: Option<rls::Reply>,
}

impl PendingCheck {
    /// Number of calls to make (one or two).
    pub fn call_count(&self) -> usize {
        self.calls.len()
    }

    /// The JSON body of call `call`.
    pub fn body(&self, call: usize) -> &[u8] {
        self.calls.get(call).map_or(&[], |c| c.body.as_slice())
    }

    /// Records the answer body of call `call` (`None`: error, timeout or
    /// non-200 status). Returns true once every call has an answer.
    pub fn record(&mut self, call: usize, body: Option<&[u8]>) -> bool {
        if let Some(c) = self.calls.get_mut(call) {
            let limits = c.batch.len();
            let answer = match body {
                Some(b) if c.rls => rls::decode_response(b, limits).map(|read| {
                    c.windows = read.windows;
                    if !c.shadow {
                        self.reply = Some(read.reply);
                    }
                    read.check
                }),
                Some(b) => CheckResponse::parse(b, limits),
                None => None,
            };
            c.unreadable = body.is_some() && answer.is_none();
            c.answer = Some(answer);
        }
        self.calls.iter().all(|c| c.answer.is_some())
    }

    /// Whether call `call` was answered with a body that could not be read.
    pub fn unreadable(&self, call: usize) -> bool {
        self.calls.get(call).is_some_and(|c| c.unreadable)
    }

    /// What the rate limit service asked for in its answer to the enforcing
    /// call, if it asked (`protocol: rls`); taken once.
    pub fn take_reply(&mut self) -> Option<rls::Reply> {
        self.reply.take()
    }

    /// The request's check, when it may share calls with requests that have
    /// the same (see [`crate::coalesce`]): one call, of enforcing limits that
    /// all coalesce, none of them elastic. Requests with equal bodies have
    /// the same check.
    pub fn coalescable(&self) -> Option<&[u8]> {
        let [call] = self.calls.as_slice() else {
            return None;
        };
        let all = call
            .batch
            .items
            .iter()
            .all(|item| item.coalesce && item.borrow.is_none());
        (!call.shadow && !self.borrowing && all).then_some(call.body.as_slice())
    }

    /// The body of one call carrying `n` requests with this check.
    pub fn batch_body(&self, domain: &str, n: u32) -> Vec<u8> {
        let Some(call) = self.calls.first() else {
            return Vec::new();
        };
        let batch = &call.batch;
        check_json(domain, batch.hits.unwrap_or(1), &batch.limits, Some(n))
    }

    /// Reads the answer `body` to a call carrying `n` requests with this
    /// check; `None` when it is malformed.
    pub fn parse_batch(&self, body: &[u8], n: u32) -> Option<CheckResponse> {
        let limits = self.calls.first().map_or(0, |c| c.batch.len());
        CheckResponse::parse_batch(body, limits, n)
    }

    /// Records this request's share of `answer` (see
    /// [`parse_batch`](Self::parse_batch); `None`: the call failed), the
    /// request being at `position` (0 first) in arrival order. A request
    /// among the first `admitted` is admitted with its own delay and reports
    /// what remained after the whole call; any later one is denied as the
    /// first refused one was.
    pub fn record_batch(&mut self, answer: Option<&CheckResponse>, position: u32) {
        let Some(call) = self.calls.first_mut() else {
            return;
        };
        call.answer = Some(answer.map(|a| share_of(a, position)));
    }

    /// Gives back what the request consumed locally: its client left before
    /// the limiter answered.
    pub fn abandon<S, M>(mut self, plan: &Plan, store: &S, metrics: &M)
    where
        S: SharedStore + ?Sized,
        M: MetricSink + ?Sized,
    {
        let env = Env::new(plan, store, metrics);
        self.tally.refund_since(0, &env);
    }
}

/// The answer of one request at `position` of a batch answered with
/// `batch`.
fn share_of(batch: &CheckResponse, position: u32) -> CheckResponse {
    let admitted = batch.admitted.unwrap_or(0);
    if position >= admitted {
        // Refused like the first refused one: the answer's limits are its.
        return CheckResponse {
            allowed: false,
            limits: batch.limits.clone(),
            admitted: None,
            delays_ms: Vec::new(),
        };
    }
    let delay_ms = usize::try_from(position)
        .ok()
        .and_then(|i| batch.delays_ms.get(i))
        .copied()
        .unwrap_or(0);
    CheckResponse {
        allowed: true,
        limits: batch
            .limits
            .iter()
            .map(|r| LimitResult {
                allowed: true,
                retry_after_ms: 0,
                delay_ms,
                ..*r
            })
            .collect(),
        admitted: None,
        delays_ms: Vec::new(),
    }
}

/// The capacity of the request's key and shared-data key buffers: most keys
/// fit, so that writing them allocates once.
const KEY_ROOM: usize = 64;

/// Decides a request's local limits and prepares its global check. `clock`
/// is read once, and only when some rule applies.
pub fn evaluate<V, S, M, C>(
    plan: &Plan,
    hasher: &SlotHasher,
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
    let request = Request::new(view, &plan.client_ip);
    let mut walk = Walk {
        env: Env::new(plan, store, metrics),
        request: &request,
        hasher,
        tally: Tally {
            now: 0,
            report: None,
            applied: Vec::new(),
            policies: matches!(plan.headers, HeadersMode::Ietf | HeadersMode::Both),
            delayed: None,
            admitted: Vec::new(),
            borrowed: Vec::new(),
            shadow_denied: Vec::new(),
            consumed: Vec::new(),
        },
        enforcing: Batch::default(),
        shadow: Batch::default(),
        // Room for a shared-data key (prefix and slot) without growing.
        scratch: String::with_capacity(KEY_ROOM),
    };
    let mut clock_read: Option<Nanos> = None;
    let mut key = String::with_capacity(KEY_ROOM);
    for (index, rule) in plan.rules.iter().enumerate() {
        if rule.pool || !rule.matcher.matches(&request) {
            continue;
        }
        if !request.write_key(&rule.key, &mut key) {
            metrics.rule(index, RuleEvent::Skipped);
            continue;
        }
        let weight = match weight(&rule.cost, &request) {
            Ok(0) => continue,
            Ok(weight) => weight,
            Err(Malformed) => {
                metrics.rule(index, RuleEvent::CostInvalid);
                1
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
        };
        if let Err(report) = walk.rule(&applied) {
            walk.cancel_asks();
            return walk.tally.deny(report, &walk.env);
        }
    }
    walk.into_verdict()
}

/// Completes a request once every call of `pending` has an answer (see
/// [`PendingCheck::record`]). A failed call of enforcing limits applies the
/// limiter's `failure_mode`; a failed call of shadow limits is ignored. When
/// only elastic limits that can borrow denied, the answer is the second
/// call, [`Verdict::Check`] again.
pub fn finish<S, M>(plan: &Plan, pending: PendingCheck, store: &S, metrics: &M) -> Verdict
where
    S: SharedStore + ?Sized,
    M: MetricSink + ?Sized,
{
    let env = Env::new(plan, store, metrics);
    let PendingCheck {
        calls,
        mut tally,
        borrowing,
        ..
    } = pending;
    let mut denied: Option<Reported> = None;
    // Every enforcing denial so far can be retried by borrowing.
    let mut can_borrow = !borrowing;
    let mut failed: Option<&GlobalItem> = None;
    let mut key = String::new();
    for call in &calls {
        let held = settle_leases(&env, call, tally.now);
        let Some(response) = call.answered() else {
            if !call.shadow && failed.is_none() {
                failed = call.batch.items.first();
            }
            continue;
        };
        for (i, (item, answer)) in call.batch.items.iter().zip(&response.limits).enumerate() {
            let mut decision = answer.decision();
            if let Some(&held) = held.get(i).filter(|_| item.lease.is_some()) {
                // What the key has left counts the units this Envoy holds.
                decision.remaining = decision.remaining.saturating_add(held);
            }
            // A rate limit service says its limit's window in its answer.
            let window = call.windows.get(i).copied().filter(|w| *w > 0);
            let item = &item.in_window(window);
            if decision.allowed {
                if !call.shadow {
                    tally.note_allowed(item, decision);
                }
                continue;
            }
            if decision.retry_after > 0 && item.cacheable {
                let deadline = tally.now.saturating_add(decision.retry_after);
                remember_denial(&env, item, deadline, &mut key);
            }
            if call.shadow {
                if !tally.shadow_denied.contains(&item.rule) {
                    metrics.rule(item.rule, RuleEvent::ShadowDenied);
                    tally.shadow_denied.push(item.rule);
                }
                continue;
            }
            can_borrow &= item.borrow.is_some();
            if denied.is_none() {
                denied = Some(match item.role {
                    Role::Own => item.reported(decision),
                    Role::Lent { own, .. } => own,
                });
            }
        }
    }
    if let Some(item) = failed {
        if serve_from_leases(&env, &calls, &mut tally) {
            return tally.admit(metrics);
        }
        return on_failure(&env, item, tally);
    }
    match denied {
        Some(_) if can_borrow => borrow_call(plan, calls, tally),
        Some(report) => tally.deny(report, &env),
        None => tally.admit(metrics),
    }
}

/// The second call of a request whose enforcing call was denied only by
/// elastic limits that can borrow: the same limits, each denied elastic
/// limit replaced by its extra allowance and its pool's limits.
fn borrow_call(plan: &Plan, calls: Vec<Call>, tally: Tally) -> Verdict {
    let mut batch = Batch::default();
    for call in calls.into_iter().filter(|c| !c.shadow) {
        let answers = call.answer.flatten().map(|a| a.limits).unwrap_or_default();
        let Batch {
            items,
            limits,
            hits,
            ..
        } = call.batch;
        let hits = hits.unwrap_or(1);
        for ((mut item, spec), answer) in items.into_iter().zip(limits).zip(answers) {
            let weight = spec.hits.unwrap_or(hits);
            let lent = match item.borrow.take() {
                Some(lent) if !answer.allowed => *lent,
                _ => {
                    // The first call settled its lease ask and returns.
                    item.lease = None;
                    let spec = LimitSpec {
                        lease: None,
                        returned: None,
                        returned_age_ms: None,
                        ..spec
                    };
                    batch.push(item, spec, weight);
                    continue;
                }
            };
            let own = item.reported(answer.decision());
            let Lend { extra, pool } = lent;
            let (extra_item, extra_spec) = extra;
            batch.push(extra_item.lent(own, true), extra_spec, weight);
            for (pool_item, pool_spec) in pool {
                batch.push(pool_item.lent(own, false), pool_spec, weight);
            }
        }
    }
    let calls = batch.into_call(&plan.domain, false).into_iter().collect();
    Verdict::Check(PendingCheck {
        calls,
        tally,
        borrowing: true,
        reply: None,
    })
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
struct Applied<'a> {
    index: usize,
    rule: &'a Rule,
    key: &'a str,
    fingerprint: u64,
    slot: u64,
    /// What the request weighs in this rule's limits (at least 1).
    weight: u64,
}

impl Applied<'_> {
    fn reported(&self, l: usize, limit: &Limit, decision: Decision) -> Reported {
        Reported {
            rule: self.index,
            limit: l,
            window: limit.window,
            decision,
        }
    }
}

/// A request being decided, rule after rule.
struct Walk<'a, V: RequestView, S: ?Sized, M: ?Sized> {
    env: Env<'a, S, M>,
    /// The request, for the keys of pool rules.
    request: &'a Request<'a, V>,
    hasher: &'a SlotHasher,
    tally: Tally,
    /// The global limits of enforcing rules, and of shadow rules.
    enforcing: Batch,
    shadow: Batch,
    /// Reused for shared-data keys.
    scratch: String,
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
    fn rule(&mut self, applied: &Applied<'_>) -> Result<(), Reported> {
        let consumed_mark = self.tally.consumed.len();
        let shadow_mark = self.shadow.len();
        let Err(report) = self.limits(applied) else {
            self.tally.admitted.push(applied.index);
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

    /// The first denial among the limits of `applied`.
    fn limits(&mut self, applied: &Applied<'_>) -> Result<(), Reported> {
        for (l, rule_limit) in applied.rule.limits.iter().enumerate() {
            match &rule_limit.scope {
                LimitScope::Local { .. } => self.local(applied, l, rule_limit)?,
                LimitScope::Global { deny_prefix } => {
                    self.global(applied, l, rule_limit, deny_prefix)?;
                }
            }
        }
        Ok(())
    }

    /// Consumes local limit `l` of `applied`, or, for an elastic limit that
    /// denies, borrows.
    fn local(
        &mut self,
        applied: &Applied<'_>,
        l: usize,
        rule_limit: &RuleLimit,
    ) -> Result<(), Reported> {
        let target = rule_limit
            .override_index(applied.key)
            .map_or(Target::Slot(applied.slot), Target::Override);
        let Some(limit) = target.limit(rule_limit) else {
            return Ok(());
        };
        let mut decision = match self.take(applied.index, l, rule_limit, target, applied.weight) {
            Ok(decision) => decision,
            Err(Contended) => {
                self.env.metrics.global(GlobalEvent::CasExhausted);
                return Err(applied.reported(l, limit, undecided(limit.requests)));
            }
        };
        if !decision.allowed {
            match &rule_limit.elastic {
                Some(elastic) if self.borrow_local(applied, l, rule_limit, elastic) => {
                    decision = lent(decision);
                }
                _ => return Err(applied.reported(l, limit, decision)),
            }
        }
        if !applied.rule.shadow {
            let reported = applied.reported(l, limit, decision);
            self.tally.note(reported);
            self.tally.note_delay(reported);
        }
        Ok(())
    }

    /// Consumes `weight` of local limit `l` of rule `rule` at `target`,
    /// remembering it for a refund when admitted.
    fn take(
        &mut self,
        rule: usize,
        l: usize,
        rule_limit: &RuleLimit,
        target: Target,
        weight: u64,
    ) -> Result<Decision, Contended> {
        let Some((limit, key)) = target.locate(rule_limit, &mut self.scratch) else {
            return Ok(Decision::over_limit(0, 0));
        };
        let decision = local::consume(self.env.store, key, limit, self.tally.now, weight)?;
        if decision.allowed {
            self.tally.consumed.push(Consumed {
                rule,
                limit: l,
                target,
                delay: decision.delay,
                weight,
            });
        }
        Ok(decision)
    }

    /// Lends the request of `applied`, which local elastic limit `l` denied,
    /// the key's extra allowance and the pool's headroom: consumes both, or
    /// neither. Returns whether it borrowed.
    fn borrow_local(
        &mut self,
        applied: &Applied<'_>,
        l: usize,
        rule_limit: &RuleLimit,
        elastic: &Elastic,
    ) -> bool {
        let mark = self.tally.consumed.len();
        let weight = applied.weight;
        let extra = Target::Extra(applied.slot);
        if !matches!(self.take(applied.index, l, rule_limit, extra, weight), Ok(d) if d.allowed) {
            return false;
        }
        let plan = self.env.plan;
        let mut pool_key = String::new();
        let pool = plan
            .rules
            .get(elastic.pool)
            .filter(|pool| self.request.write_key(&pool.key, &mut pool_key));
        let Some(pool) = pool else {
            self.tally.refund_since(mark, &self.env);
            return false;
        };
        let pool_slot = slot(plan, self.hasher.fingerprint(&pool_key));
        for (k, pool_limit) in pool.limits.iter().enumerate() {
            let target = pool_limit
                .override_index(&pool_key)
                .map_or(Target::Slot(pool_slot), Target::Override);
            if !matches!(self.take(elastic.pool, k, pool_limit, target, weight), Ok(d) if d.allowed)
            {
                self.tally.refund_since(mark, &self.env);
                return false;
            }
        }
        self.tally.borrowed.push(applied.index);
        true
    }

    /// Denies global limit `l` of `applied` if the over-limit cache holds
    /// its key, or adds it to the call it belongs to.
    fn global(
        &mut self,
        applied: &Applied<'_>,
        l: usize,
        rule_limit: &RuleLimit,
        deny_prefix: &str,
    ) -> Result<(), Reported> {
        if rule_limit.descriptor.is_some() {
            return self.service_held(applied, l, deny_prefix);
        }
        let limit = rule_limit.limit_for(applied.key);
        if applied.weight > limit.soft_burst() {
            return Err(applied.reported(l, limit, too_costly(limit)));
        }
        let now = self.tally.now;
        let mut ask = None;
        if let Sync::Lease(policy) = &rule_limit.sync {
            match self.spend_lease(applied, l, limit, policy) {
                Some(Take::Spent { lease, .. }) => {
                    let decision = from_lease(limit.requests, &lease, now);
                    let reported = applied.reported(l, limit, decision);
                    self.tally.note(reported);
                    return Ok(());
                }
                Some(Take::Ask {
                    ask: units,
                    returned,
                    age,
                }) => ask = Some((units, returned, age)),
                None => {}
            }
        }
        // Only denials of fixed-cost rules are cached: others need no read.
        let cached = if matches!(applied.rule.cost, Cost::Fixed(_)) {
            layout::slot_key(&mut self.scratch, deny_prefix, applied.slot);
            deny_cache::lookup(self.env.store, &self.scratch, applied.fingerprint, now)
        } else {
            None
        };
        if let Some(deadline) = cached {
            if let (Some((units, returned, _)), Sync::Lease(policy)) = (ask, &rule_limit.sync) {
                let ask = LeaseAsk {
                    slot: applied.slot,
                    asked: units > 0,
                    returned,
                };
                cancel_ask(&self.env, policy, applied.fingerprint, ask);
            }
            let denial = Decision::over_limit(limit.requests, deadline.saturating_sub(now));
            return Err(applied.reported(l, limit, denial));
        }
        let borrow = rule_limit
            .elastic
            .as_ref()
            .and_then(|elastic| self.lend_global(applied, l, elastic))
            .map(Box::new);
        let mut spec = LimitSpec::new(limiter_key(&applied.rule.name, l, applied.key), limit);
        let lease = ask.map(|(units, returned, age)| {
            spec.lease = (units > 0).then_some(units);
            if returned > 0 {
                spec.returned = Some(returned);
                spec.returned_age_ms = Some(age.div_ceil(MILLISECOND));
            }
            LeaseAsk {
                slot: applied.slot,
                asked: units > 0,
                returned,
            }
        });
        let batch = if applied.rule.shadow {
            &mut self.shadow
        } else {
            &mut self.enforcing
        };
        batch.push(
            GlobalItem {
                rule: applied.index,
                limit: l,
                window: limit.window,
                requests: limit.requests,
                fingerprint: applied.fingerprint,
                // A denial of an elastic limit may still borrow.
                cacheable: matches!(applied.rule.cost, Cost::Fixed(_)) && borrow.is_none(),
                role: Role::Own,
                borrow,
                coalesce: rule_limit.sync == Sync::Coalesce,
                lease,
            },
            spec,
            applied.weight,
        );
        Ok(())
    }

    /// Denies global limit `l` of `applied`, held by a rate limit service,
    /// if the over-limit cache holds its key, or adds its descriptor to the
    /// call it belongs to. Its quota and window are known only from the
    /// service's answer.
    fn service_held(
        &mut self,
        applied: &Applied<'_>,
        l: usize,
        deny_prefix: &str,
    ) -> Result<(), Reported> {
        let plan: &'a Plan = self.env.plan;
        let entries: &'a [Entry] = plan
            .rules
            .get(applied.index)
            .and_then(|r| r.limits.get(l))
            .and_then(|rl| rl.descriptor.as_deref())
            .unwrap_or_default();
        let now = self.tally.now;
        let cacheable = matches!(applied.rule.cost, Cost::Fixed(_));
        let cached = if cacheable {
            layout::slot_key(&mut self.scratch, deny_prefix, applied.slot);
            deny_cache::lookup(self.env.store, &self.scratch, applied.fingerprint, now)
        } else {
            None
        };
        let item = GlobalItem {
            rule: applied.index,
            limit: l,
            window: 0,
            requests: 0,
            fingerprint: applied.fingerprint,
            cacheable,
            role: Role::Own,
            borrow: None,
            coalesce: false,
            lease: None,
        };
        if let Some(deadline) = cached {
            return Err(item.reported(Decision::over_limit(0, deadline.saturating_sub(now))));
        }
        let mut value = String::new();
        let entries = entries
            .iter()
            .map(|e| {
                let value = match &e.value {
                    EntryValue::Fixed(text) => text.clone(),
                    EntryValue::Part(part) => {
                        // A part of the rule's key, which was built.
                        self.request
                            .write_key(std::slice::from_ref(part), &mut value);
                        value.clone()
                    }
                };
                (e.key.clone(), value)
            })
            .collect();
        let batch = if applied.rule.shadow {
            &mut self.shadow
        } else {
            &mut self.enforcing
        };
        batch.push_descriptor(
            item,
            rls::Descriptor {
                entries,
                hits: None,
            },
            applied.weight,
        );
        Ok(())
    }

    /// Spends the request's weight from this Envoy's lease of global limit
    /// `l` of `applied`, or says what to ask the limiter for; `None` when
    /// the limit's share is below one unit for this key, or under heavy
    /// contention (the request is then checked alone).
    fn spend_lease(
        &mut self,
        applied: &Applied<'_>,
        l: usize,
        limit: &Limit,
        policy: &LeasePolicy,
    ) -> Option<Take> {
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
        match taken {
            Ok(Take::Spent { granted_at, lease }) => {
                self.tally.consumed.push(Consumed {
                    rule: applied.index,
                    limit: l,
                    target: Target::Lease {
                        slot: applied.slot,
                        fingerprint: applied.fingerprint,
                        granted_at,
                    },
                    delay: 0,
                    weight: applied.weight,
                });
                Some(Take::Spent { granted_at, lease })
            }
            Ok(ask) => Some(ask),
            Err(Contended) => {
                self.env.metrics.global(GlobalEvent::CasExhausted);
                None
            }
        }
    }

    /// What global elastic limit `l` of `applied` checks in the second call
    /// if it denies; `None` when the pool rule's key cannot be built.
    fn lend_global(&self, applied: &Applied<'_>, l: usize, elastic: &Elastic) -> Option<Lend> {
        let pool = self.env.plan.rules.get(elastic.pool)?;
        let mut pool_key = String::new();
        if !self.request.write_key(&pool.key, &mut pool_key) {
            return None;
        }
        let item = |rule: usize, limit_index: usize, limit: &Limit| GlobalItem {
            rule,
            limit: limit_index,
            window: limit.window,
            requests: limit.requests,
            fingerprint: applied.fingerprint,
            cacheable: false,
            role: Role::Own,
            borrow: None,
            coalesce: false,
            lease: None,
        };
        let extra = (
            item(applied.index, l, &elastic.extra),
            LimitSpec::new(limiter_key(&elastic.place, l, applied.key), &elastic.extra),
        );
        let pool = pool
            .limits
            .iter()
            .enumerate()
            .map(|(k, pool_limit)| {
                let limit = pool_limit.limit_for(&pool_key);
                (
                    item(elastic.pool, k, limit),
                    LimitSpec::new(limiter_key(&pool.name, k, &pool_key), limit),
                )
            })
            .collect();
        Some(Lend { extra, pool })
    }

    /// Ends the lease asks of the limits bound for calls: the request is
    /// denied before any call is made.
    fn cancel_asks(&self) {
        let plan = self.env.plan;
        for item in self.enforcing.items.iter().chain(&self.shadow.items) {
            let Some(ask) = item.lease else { continue };
            let sync = plan
                .rules
                .get(item.rule)
                .and_then(|r| r.limits.get(item.limit))
                .map(|l| &l.sync);
            if let Some(Sync::Lease(policy)) = sync {
                cancel_ask(&self.env, policy, item.fingerprint, ask);
            }
        }
    }

    /// Admits the request, or asks the limiter about its global limits.
    fn into_verdict(self) -> Verdict {
        if self.enforcing.is_empty() && self.shadow.is_empty() {
            return self.tally.admit(self.env.metrics);
        }
        let domain = &self.env.plan.domain;
        let mut calls = Vec::with_capacity(2);
        calls.extend(self.enforcing.into_call(domain, false));
        calls.extend(self.shadow.into_call(domain, true));
        Verdict::Check(PendingCheck {
            calls,
            tally: self.tally,
            borrowing: false,
            reply: None,
        })
    }
}

/// After the call of enforcing limits failed: when each of its limits is
/// leased and this Envoy still holds enough of its lease, the request is
/// served from the leases (units in hand keep serving through an outage).
/// Returns whether it was; if not, nothing was spent.
fn serve_from_leases<S, M>(env: &Env<'_, S, M>, calls: &[Call], tally: &mut Tally) -> bool
where
    S: SharedStore + ?Sized,
    M: MetricSink + ?Sized,
{
    let Some(call) = calls.iter().find(|c| !c.shadow) else {
        return false;
    };
    if call.batch.items.iter().any(|item| item.lease.is_none()) {
        return false;
    }
    let mark = tally.consumed.len();
    let mut key = String::new();
    let hits = call.batch.hits.unwrap_or(1);
    for (item, spec) in call.batch.items.iter().zip(&call.batch.limits) {
        let weight = spec.hits.unwrap_or(hits);
        let rule_limit = env
            .plan
            .rules
            .get(item.rule)
            .and_then(|r| r.limits.get(item.limit));
        let (Some(ask), Some(rule_limit)) = (item.lease, rule_limit) else {
            return false;
        };
        let Sync::Lease(policy) = &rule_limit.sync else {
            return false;
        };
        layout::slot_key(&mut key, &policy.prefix, ask.slot);
        let spent = lease::spend(env.store, &key, item.fingerprint, tally.now, weight);
        let Ok(Some(lease)) = spent else {
            tally.refund_since(mark, env);
            return false;
        };
        tally.consumed.push(Consumed {
            rule: item.rule,
            limit: item.limit,
            target: Target::Lease {
                slot: ask.slot,
                fingerprint: item.fingerprint,
                granted_at: lease.granted_at,
            },
            delay: 0,
            weight,
        });
        let reported = item.reported(from_lease(item.requests, &lease, tally.now));
        tally.note(reported);
    }
    true
}

/// Applies `failure_mode` after the call of enforcing limits failed; `item`
/// is its first limit.
fn on_failure<S, M>(env: &Env<'_, S, M>, item: &GlobalItem, tally: Tally) -> Verdict
where
    S: SharedStore + ?Sized,
    M: MetricSink + ?Sized,
{
    let failure_mode = env
        .plan
        .limiter
        .as_ref()
        .map_or(FailureMode::Allow, |l| l.failure_mode);
    match failure_mode {
        FailureMode::Deny => {
            env.metrics.global(GlobalEvent::LimiterErrors);
            tally.deny(item.reported(undecided(item.requests)), env)
        }
        FailureMode::Allow => {
            env.metrics.global(GlobalEvent::FailureModeAllowed);
            tally.admit(env.metrics)
        }
    }
}

/// Caches the limiter's denial of `item` until `deadline`.
fn remember_denial<S, M>(env: &Env<'_, S, M>, item: &GlobalItem, deadline: Nanos, key: &mut String)
where
    S: SharedStore + ?Sized,
    M: ?Sized,
{
    let scope = env
        .plan
        .rules
        .get(item.rule)
        .and_then(|r| r.limits.get(item.limit))
        .map(|l| &l.scope);
    let Some(LimitScope::Global { deny_prefix }) = scope else {
        return;
    };
    layout::slot_key(key, deny_prefix, slot(env.plan, item.fingerprint));
    deny_cache::remember(env.store, key, item.fingerprint, deadline);
}

/// What has happened to a request so far.
#[derive(Debug)]
struct Tally {
    now: Nanos,
    report: Option<Reported>,
    /// Every enforcing limit that admitted, in order (only when `policies`).
    applied: Vec<Reported>,
    /// The headers list every limit's policy: keep `applied`.
    policies: bool,
    /// The enforcing limit with the longest delay, if any delays.
    delayed: Option<Reported>,
    /// Rules that admitted the request (counted `allowed` if it passes).
    admitted: Vec<usize>,
    /// Rules whose elastic limits lent the request their extra allowance
    /// (counted `borrowed` if it passes).
    borrowed: Vec<usize>,
    shadow_denied: Vec<usize>,
    consumed: Vec<Consumed>,
}

impl Tally {
    /// Notes what an enforcing global limit that admitted reports.
    fn note_allowed(&mut self, item: &GlobalItem, decision: Decision) {
        let reported = match item.role {
            Role::Own => item.reported(decision),
            Role::Lent { own, extra: true } => {
                self.borrowed.push(item.rule);
                Reported {
                    decision: lent(own.decision),
                    ..own
                }
            }
            // A pool is not reported.
            Role::Lent { extra: false, .. } => return,
        };
        self.note(reported);
        self.note_delay(reported);
    }

    /// Notes what an enforcing limit that admitted reports.
    fn note(&mut self, reported: Reported) {
        self.report = Some(more_restrictive(self.report, reported));
        if self.policies {
            self.applied.push(reported);
        }
    }

    /// Keeps `reported` as the delaying limit if it delays longest so far.
    fn note_delay(&mut self, reported: Reported) {
        let longest = self.delayed.map_or(0, |d| d.decision.delay);
        if reported.decision.delay > longest {
            self.delayed = Some(reported);
        }
    }

    /// Refunds, newest first, the local limits consumed since `mark`.
    fn refund_since<S, M>(&mut self, mark: usize, env: &Env<'_, S, M>)
    where
        S: SharedStore + ?Sized,
        M: MetricSink + ?Sized,
    {
        let now = self.now;
        self.refund_at(mark, env, now);
    }

    /// Refunds at `now`, newest first, the local limits consumed since
    /// `mark`; each was admitted when it conformed (the decision time plus
    /// its delay).
    fn refund_at<S, M>(&mut self, mark: usize, env: &Env<'_, S, M>, now: Nanos)
    where
        S: SharedStore + ?Sized,
        M: MetricSink + ?Sized,
    {
        let mut key = String::new();
        while self.consumed.len() > mark {
            let Some(c) = self.consumed.pop() else { break };
            let rule_limit = env
                .plan
                .rules
                .get(c.rule)
                .and_then(|r| r.limits.get(c.limit));
            if let Target::Lease {
                slot,
                fingerprint,
                granted_at,
            } = c.target
            {
                if let Some(Sync::Lease(policy)) = rule_limit.map(|l| &l.sync) {
                    layout::slot_key(&mut key, &policy.prefix, slot);
                    let back = lease::give_back(env.store, &key, fingerprint, granted_at, c.weight);
                    if back.is_err() {
                        env.metrics.global(GlobalEvent::CasExhausted);
                    }
                }
                continue;
            }
            let Some((limit, state_key)) = rule_limit.and_then(|l| c.target.locate(l, &mut key))
            else {
                continue;
            };
            let admitted_at = self.now.saturating_add(c.delay);
            if local::refund_at(env.store, state_key, limit, admitted_at, now, c.weight).is_err() {
                env.metrics.global(GlobalEvent::CasExhausted);
            }
        }
    }

    /// Denies the request for `report`, refunding everything it consumed.
    fn deny<S, M>(self, report: Reported, env: &Env<'_, S, M>) -> Verdict
    where
        S: SharedStore + ?Sized,
        M: MetricSink + ?Sized,
    {
        Verdict::Deny(self.denied(report, env))
    }

    /// [`deny`](Self::deny)'s denial.
    fn denied<S, M>(mut self, report: Reported, env: &Env<'_, S, M>) -> Denied
    where
        S: SharedStore + ?Sized,
        M: MetricSink + ?Sized,
    {
        self.refund_since(0, env);
        env.metrics.rule(report.rule, RuleEvent::Denied);
        let mut applied = std::mem::take(&mut self.applied);
        applied.push(report);
        Denied {
            report,
            applied,
            shadow_denied: self.shadow_denied,
        }
    }

    /// Lets the request through, or holds it when some limit delays it
    /// (counted once the host holds it: [`Delayed::accept`]).
    fn admit<M: MetricSink + ?Sized>(self, metrics: &M) -> Verdict {
        if let Some(limit) = self.delayed {
            return Verdict::Delay(Delayed {
                delay: limit.decision.delay,
                rule: limit.rule,
                limit,
                tally: self,
            });
        }
        self.count_allowed(metrics);
        Verdict::Allow(Admitted {
            report: self.report,
            applied: self.applied,
            shadow_denied: self.shadow_denied,
        })
    }

    /// Counts the rules that admitted the request, and those that lent it
    /// their extra allowance.
    fn count_allowed<M: MetricSink + ?Sized>(&self, metrics: &M) {
        for &rule in &self.admitted {
            if !self.shadow_denied.contains(&rule) {
                metrics.rule(rule, RuleEvent::Allowed);
            }
        }
        for &rule in &self.borrowed {
            metrics.rule(rule, RuleEvent::Borrowed);
        }
    }
}

/// A local limit this request consumed, to refund if the request is denied.
#[derive(Debug, Clone, Copy)]
struct Consumed {
    rule: usize,
    limit: usize,
    target: Target,
    /// The units consumed.
    weight: u64,
    /// The limit's delay: the request counts as admitted this long after
    /// the decision.
    delay: Nanos,
}

/// Where a consumed local limit's state lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    /// A hashed slot.
    Slot(u64),
    /// The dedicated key of the limit's override at this position.
    Override(usize),
    /// The extra allowance of an elastic limit, in this slot.
    Extra(u64),
    /// This Envoy's lease of a global limit, in this slot: the grant made
    /// at `granted_at` for the key of `fingerprint`.
    Lease {
        slot: u64,
        fingerprint: u64,
        granted_at: Nanos,
    },
}

impl Target {
    /// The limit deciding `rule_limit` at this target, and the shared-data
    /// key of its state (written into `out` for a slot); `None` for a global
    /// limit.
    fn locate<'a>(
        self,
        rule_limit: &'a RuleLimit,
        out: &'a mut String,
    ) -> Option<(&'a Limit, &'a str)> {
        let LimitScope::Local { state_prefix } = &rule_limit.scope else {
            return None;
        };
        match self {
            Target::Slot(slot) => {
                layout::slot_key(out, state_prefix, slot);
                Some((&rule_limit.limit, out.as_str()))
            }
            Target::Override(i) => {
                let o = rule_limit.overrides.get(i)?;
                Some((&o.limit, o.state_key.as_str()))
            }
            Target::Extra(slot) => {
                let elastic = rule_limit.elastic.as_ref()?;
                layout::slot_key(out, &elastic.place, slot);
                Some((&elastic.extra, out.as_str()))
            }
            Target::Lease { .. } => None,
        }
    }

    /// The limit deciding `rule_limit` at this target; `None` for a global
    /// limit.
    fn limit(self, rule_limit: &RuleLimit) -> Option<&Limit> {
        if !matches!(rule_limit.scope, LimitScope::Local { .. }) {
            return None;
        }
        match self {
            Target::Slot(_) => Some(&rule_limit.limit),
            Target::Override(i) => rule_limit.overrides.get(i).map(|o| &o.limit),
            Target::Extra(_) => rule_limit.elastic.as_ref().map(|e| &e.extra),
            Target::Lease { .. } => None,
        }
    }
}

/// A global limit to check for this request.
#[derive(Debug, Clone)]
struct GlobalItem {
    rule: usize,
    limit: usize,
    window: Nanos,
    requests: u64,
    fingerprint: u64,
    /// Whether a denial may be cached for the key: every request of the
    /// rule weighs the same (a fixed cost), so one denied until a deadline
    /// means all are.
    cacheable: bool,
    role: Role,
    /// For an elastic limit: what it checks in the second call if it denies.
    borrow: Option<Box<Lend>>,
    /// The limit may share calls with other requests.
    coalesce: bool,
    /// A leased limit's ask: its lease slot, and whether units were asked
    /// for (the grant, even of none, ends the ask).
    lease: Option<LeaseAsk>,
}

/// A leased limit's ask for units, made with the request's check.
#[derive(Debug, Clone, Copy)]
struct LeaseAsk {
    slot: u64,
    asked: bool,
    /// Units of the previous grant the ask gives back.
    returned: u64,
}

/// Ends `ask` of the key of `fingerprint`, not sent after all.
fn cancel_ask<S, M>(env: &Env<'_, S, M>, policy: &LeasePolicy, fingerprint: u64, ask: LeaseAsk)
where
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

impl GlobalItem {
    fn reported(&self, decision: Decision) -> Reported {
        Reported {
            rule: self.rule,
            limit: self.limit,
            window: self.window,
            decision,
        }
    }

    /// This item, or a copy with its window replaced by `window`.
    fn in_window(&self, window: Option<Nanos>) -> std::borrow::Cow<'_, GlobalItem> {
        match window {
            Some(window) => std::borrow::Cow::Owned(GlobalItem {
                window,
                ..self.clone()
            }),
            None => std::borrow::Cow::Borrowed(self),
        }
    }

    /// This item checked on behalf of an elastic limit that denied with
    /// `own`: its extra allowance (`extra`) or a limit of its pool.
    fn lent(self, own: Reported, extra: bool) -> GlobalItem {
        GlobalItem {
            role: Role::Lent { own, extra },
            ..self
        }
    }
}

/// Why a global limit is in a call.
#[derive(Debug, Clone, Copy)]
enum Role {
    /// A limit of a rule that applies to the request.
    Own,
    /// Borrowing for an elastic limit that denied with `own` (reported in
    /// its place): its extra allowance, or a limit of its pool.
    Lent { own: Reported, extra: bool },
}

/// What a global elastic limit checks in the second call instead of itself.
#[derive(Debug, Clone)]
struct Lend {
    /// The key's extra allowance.
    extra: (GlobalItem, LimitSpec<'static>),
    /// Each limit of the pool rule, at the pool's key.
    pool: Vec<(GlobalItem, LimitSpec<'static>)>,
}

/// The global limits bound for one call, added as the rules are decided.
#[derive(Debug, Default)]
struct Batch {
    items: Vec<GlobalItem>,
    /// The wire form of each item, in the same order.
    limits: Vec<LimitSpec<'static>>,
    /// With `protocol: rls`, the descriptor of each item instead.
    descriptors: Vec<rls::Descriptor>,
    /// The call's `hits`: the weight of its first limit. A limit weighing
    /// otherwise carries its own `hits`.
    hits: Option<u64>,
}

impl Batch {
    fn push(&mut self, item: GlobalItem, mut limit: LimitSpec<'static>, weight: u64) {
        if *self.hits.get_or_insert(weight) != weight {
            limit.hits = Some(weight);
        }
        self.items.push(item);
        self.limits.push(limit);
    }

    fn push_descriptor(&mut self, item: GlobalItem, mut descriptor: rls::Descriptor, weight: u64) {
        if *self.hits.get_or_insert(weight) != weight {
            descriptor.hits = Some(weight);
        }
        self.items.push(item);
        self.descriptors.push(descriptor);
    }

    fn len(&self) -> usize {
        self.items.len()
    }

    fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    fn truncate(&mut self, len: usize) {
        self.items.truncate(len);
        self.limits.truncate(len);
        self.descriptors.truncate(len);
        if self.items.is_empty() {
            self.hits = None;
        }
    }

    /// The call checking these limits; `None` when there are none.
    fn into_call(self, domain: &str, shadow: bool) -> Option<Call> {
        if self.is_empty() {
            return None;
        }
        if !self.descriptors.is_empty() {
            let body = rls::encode_request(domain, &self.descriptors, self.hits.unwrap_or(1));
            return Some(Call {
                shadow,
                batch: self,
                body,
                answer: None,
                rls: true,
                windows: Vec::new(),
                unreadable: false,
            });
        }
        let body = check_json(domain, self.hits.unwrap_or(1), &self.limits, None);
        Some(Call {
            shadow,
            batch: self,
            body,
            answer: None,
            rls: false,
            windows: Vec::new(),
            unreadable: false,
        })
    }
}

/// One `POST /v1/check` of a request: the global limits of the enforcing
/// rules, or those of the shadow rules.
#[derive(Debug)]
struct Call {
    shadow: bool,
    /// The limits checked, in the order of the answer's decisions.
    batch: Batch,
    body: Vec<u8>,
    /// The call's answer once received (`Some(None)`: it failed).
    answer: Option<Option<CheckResponse>>,
    /// A call to a rate limit service (`protocol: rls`).
    rls: bool,
    /// The windows its answer gave, per item (rate limit service only).
    windows: Vec<Nanos>,
    /// It was answered with a body that could not be read.
    unreadable: bool,
}

impl Call {
    /// The answer, if the call succeeded.
    fn answered(&self) -> Option<&CheckResponse> {
        self.answer
            .as_ref()
            .and_then(Option::as_ref)
            .filter(|a| a.limits.len() == self.batch.len())
    }
}

/// The plan, shared data and metrics a request is decided with.
struct Env<'a, S: ?Sized, M: ?Sized> {
    plan: &'a Plan,
    store: &'a S,
    metrics: &'a M,
}

impl<'a, S: ?Sized, M: ?Sized> Env<'a, S, M> {
    fn new(plan: &'a Plan, store: &'a S, metrics: &'a M) -> Self {
        Env {
            plan,
            store,
            metrics,
        }
    }
}

/// The decision reported when contention or a failure prevents deciding:
/// deny, and suggest retrying in a second.
fn undecided(requests: u64) -> Decision {
    Decision::over_limit(requests, SECOND)
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

/// When a lease granted at `now` under `limit` stops being spendable: after
/// `ttl`, and never past the end of the current window for the algorithms
/// that count per window.
fn lease_expiry(limit: &Limit, ttl: Nanos, now: Nanos) -> Nanos {
    let expiry = now.saturating_add(ttl);
    match limit.algorithm {
        Algorithm::FixedWindow | Algorithm::SlidingWindow | Algorithm::SlidingLog => {
            let window = limit.window.max(1);
            let end = (now / window).saturating_add(1).saturating_mul(window);
            expiry.min(end)
        }
        _ => expiry,
    }
}

/// Ends the lease asks of `call`'s limits: installs what the limiter granted
/// (nothing when the call failed or the check was denied). Returns, per
/// item, the units this Envoy now holds for its key (0 for items without an
/// ask; empty when no item asked).
fn settle_leases<S, M>(env: &Env<'_, S, M>, call: &Call, now: Nanos) -> Vec<u64>
where
    S: SharedStore + ?Sized,
    M: MetricSink + ?Sized,
{
    if !call
        .batch
        .items
        .iter()
        .any(|i| i.lease.is_some_and(|a| a.asked))
    {
        return Vec::new();
    }
    let answers = call.answered().map(|a| a.limits.as_slice());
    let mut key = String::new();
    let mut held = vec![0; call.batch.items.len()];
    for (i, item) in call.batch.items.iter().enumerate() {
        let Some(ask) = item.lease.filter(|a| a.asked) else {
            continue;
        };
        let Some(rule_limit) = env
            .plan
            .rules
            .get(item.rule)
            .and_then(|r| r.limits.get(item.limit))
        else {
            continue;
        };
        let Sync::Lease(policy) = &rule_limit.sync else {
            continue;
        };
        let answer = answers.and_then(|a| a.get(i));
        let (units, remaining, reset) = answer.filter(|a| a.allowed).map_or((0, 0, 0), |a| {
            (
                a.leased,
                a.remaining,
                a.reset_ms.saturating_mul(MILLISECOND),
            )
        });
        let limit = &rule_limit.limit;
        layout::slot_key(&mut key, &policy.prefix, ask.slot);
        let granted = lease::grant(
            env.store,
            &key,
            item.fingerprint,
            now,
            units,
            lease_expiry(limit, policy.ttl, now),
            remaining,
            now.saturating_add(reset),
        );
        match granted {
            Ok(units) => {
                if let Some(h) = held.get_mut(i) {
                    *h = units;
                }
            }
            Err(Contended) => env.metrics.global(GlobalEvent::CasExhausted),
        }
    }
    held
}

/// What an elastic limit that denied with `denial` reports once it lent the
/// request its extra allowance: admitted, with nothing of its own quota
/// remaining.
fn lent(denial: Decision) -> Decision {
    Decision {
        allowed: true,
        remaining: 0,
        retry_after: 0,
        delay: 0,
        denial: None,
        ..denial
    }
}

/// The slot of a key with `fingerprint` in a limit's slot table.
fn slot(plan: &Plan, fingerprint: u64) -> u64 {
    slots::slot_of(fingerprint, plan.local_max_keys)
}

mod deny_cache;

#[cfg(test)]
mod tests;
