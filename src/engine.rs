//! The request path without the host: match rules, build keys, decide local
//! limits, prepare the global check, and merge its answer.
//!
//! Limits are decided in configuration order, each in its own
//! compare-and-swap loop. When an enforcing limit denies, every limit already
//! consumed for this request is refunded, so a denied request consumes
//! nothing. A shadow rule that would deny gives back its own consumption,
//! is reported, and never blocks the request.

use crate::config::{FailureMode, Plan, Rule};
use crate::global;
use crate::headers::{more_restrictive, Reported};
use crate::key::{Request, RequestView};
use crate::layout;
use crate::local::{self, Contended, SharedStore};
use crate::metrics::{GlobalEvent, MetricSink, RuleEvent};
use crate::slots::SlotHasher;
use sluice_core::{Decision, Limit, Nanos, SECOND};
use sluice_wire::{limiter_key, CheckRequest, CheckResponse, LimitSpec};

/// Every request costs one hit.
const COST: u64 = 1;

/// Where a consumed local limit's state lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    /// A hashed slot.
    Slot(u64),
    /// An override's dedicated key.
    Override(usize),
}

/// A local limit this request consumed, to refund if the request is denied.
#[derive(Debug, Clone, Copy)]
struct Consumed {
    rule: usize,
    limit: usize,
    target: Target,
}

/// What has happened to a request so far.
#[derive(Debug)]
struct Tally {
    now: Nanos,
    report: Option<Reported>,
    /// Rules that admitted the request (counted `allowed` if it passes).
    admitted: Vec<usize>,
    shadow_denied: Vec<usize>,
    consumed: Vec<Consumed>,
}

/// A global limit to check for this request.
#[derive(Debug, Clone)]
struct GlobalItem {
    rule: usize,
    limit: usize,
    shadow: bool,
    window: Nanos,
    requests: u64,
    fingerprint: u64,
    /// Index of the call that checks this item, and its position in it.
    call: usize,
    position: usize,
}

/// One `POST /v1/check` of a request.
#[derive(Debug)]
struct Call {
    body: Vec<u8>,
    limits: usize,
    /// The call's answer once received (`Some(None)`: it failed).
    answer: Option<Option<CheckResponse>>,
}

/// A request waiting for the limiter.
///
/// Enforcing and shadow limits go in separate calls: the limiter decides the
/// limits of one call together (a denial consumes nothing), and a shadow
/// denial must not stop the enforcing limits from being counted.
#[derive(Debug)]
pub struct PendingCheck {
    calls: Vec<Call>,
    items: Vec<GlobalItem>,
    tally: Tally,
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
            let limits = c.limits;
            c.answer = Some(body.and_then(|b| CheckResponse::parse(b, limits)));
        }
        self.calls.iter().all(|c| c.answer.is_some())
    }
}

/// An admitted request and what its response reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admitted {
    /// The most restrictive enforcing limit, for the rate-limit headers.
    pub report: Option<Reported>,
    /// Shadow rules that would have denied.
    pub shadow_denied: Vec<usize>,
}

/// A denied request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denied {
    /// The denying limit's decision (its rule is `report.rule`).
    pub report: Reported,
    /// Shadow rules that would have denied.
    pub shadow_denied: Vec<usize>,
}

/// What to do with a request.
#[derive(Debug)]
pub enum Verdict {
    /// Let it through.
    Allow(Admitted),
    /// Answer with the denial response.
    Deny(Denied),
    /// Ask the limiter, then call [`finish`].
    Check(PendingCheck),
}

/// The decision reported when contention or a failure prevents deciding:
/// deny, and suggest retrying in a second.
fn undecided(requests: u64) -> Decision {
    Decision::over_limit(requests, SECOND)
}

/// The override of limit `index` for the request's key, if any.
fn override_of(rule: &Rule, index: usize, override_set: Option<usize>) -> Option<(usize, &Limit)> {
    let o = override_set?;
    let ov = rule.override_sets.get(o)?.get(index)?.as_ref()?;
    Some((o, &ov.limit))
}

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
    let mut clock_read: Option<Nanos> = None;
    let request = Request::new(view, &plan.client_ip);
    let mut key = String::new();
    let mut store_key = String::new();
    let mut tally = Tally {
        now: 0,
        report: None,
        admitted: Vec::new(),
        shadow_denied: Vec::new(),
        consumed: Vec::new(),
    };
    let mut items: Vec<GlobalItem> = Vec::new();
    let mut limits: Vec<LimitSpec> = Vec::new();

    for (r, rule) in plan.rules.iter().enumerate() {
        if !rule.matcher.matches(&request) {
            continue;
        }
        if !request.write_key(&rule.key, &mut key) {
            metrics.rule(r, RuleEvent::Skipped);
            continue;
        }
        let now = *clock_read.get_or_insert_with(&clock);
        tally.now = now;
        let override_set = rule.overrides.get(key.as_str()).copied();
        let consumed_mark = tally.consumed.len();
        let items_mark = items.len();
        let mut fingerprint = None;
        let mut denied: Option<Reported> = None;

        for (l, rule_limit) in rule.limits.iter().enumerate() {
            let via_override = override_of(rule, l, override_set);
            let limit = via_override.map_or(&rule_limit.limit, |(_, limit)| limit);
            let fp = *fingerprint.get_or_insert_with(|| hasher.fingerprint(&key));
            let slot = fp.checked_rem(plan.local_max_keys).unwrap_or(0);
            if rule_limit.global {
                layout::slot_key(&mut store_key, &rule_limit.store_prefix, slot);
                let cached = store
                    .get(&store_key)
                    .0
                    .and_then(|bytes| global::decode_deny(&bytes, fp))
                    .filter(|&deadline| deadline > now);
                if let Some(deadline) = cached {
                    let remaining_time = deadline.saturating_sub(now);
                    denied = Some(Reported {
                        rule: r,
                        window: limit.window,
                        decision: global::cached_denial(limit, remaining_time),
                    });
                    break;
                }
                items.push(GlobalItem {
                    rule: r,
                    limit: l,
                    shadow: rule.shadow,
                    window: limit.window,
                    requests: limit.requests,
                    fingerprint: fp,
                    call: 0,
                    position: 0,
                });
                limits.push(LimitSpec::new(limiter_key(&rule.name, l, &key), limit));
                continue;
            }
            let target = match via_override {
                Some((o, _)) => Target::Override(o),
                None => Target::Slot(slot),
            };
            let Some(target_key) = local_key(plan, r, l, target, &mut store_key) else {
                continue;
            };
            match local::consume(store, target_key, limit, now, COST) {
                Ok(decision) if decision.allowed => {
                    tally.consumed.push(Consumed {
                        rule: r,
                        limit: l,
                        target,
                    });
                    if !rule.shadow {
                        tally.report = Some(more_restrictive(
                            tally.report,
                            Reported {
                                rule: r,
                                window: limit.window,
                                decision,
                            },
                        ));
                    }
                }
                Ok(decision) => {
                    denied = Some(Reported {
                        rule: r,
                        window: limit.window,
                        decision,
                    });
                    break;
                }
                Err(Contended) => {
                    metrics.global(GlobalEvent::CasExhausted);
                    denied = Some(Reported {
                        rule: r,
                        window: limit.window,
                        decision: undecided(limit.requests),
                    });
                    break;
                }
            }
        }

        match denied {
            None => tally.admitted.push(r),
            Some(_) if rule.shadow => {
                refund_from(plan, store, metrics, &mut tally, consumed_mark);
                items.truncate(items_mark);
                limits.truncate(items_mark);
                metrics.rule(r, RuleEvent::ShadowDenied);
                tally.shadow_denied.push(r);
            }
            Some(report) => {
                refund_from(plan, store, metrics, &mut tally, 0);
                metrics.rule(r, RuleEvent::Denied);
                return Verdict::Deny(Denied {
                    report,
                    shadow_denied: tally.shadow_denied,
                });
            }
        }
    }

    if items.is_empty() {
        return admit(metrics, tally);
    }
    let (mut enforcing, mut shadow) = (Vec::new(), Vec::new());
    for (item, limit) in items.iter_mut().zip(limits) {
        let group = if item.shadow {
            &mut shadow
        } else {
            &mut enforcing
        };
        item.position = group.len();
        group.push(limit);
    }
    let enforcing_call = if enforcing.is_empty() { None } else { Some(0) };
    let shadow_call = usize::from(enforcing_call.is_some());
    for item in &mut items {
        item.call = if item.shadow { shadow_call } else { 0 };
    }
    let calls = [enforcing, shadow]
        .into_iter()
        .filter(|limits| !limits.is_empty())
        .map(|limits| {
            let count = limits.len();
            let request = CheckRequest {
                domain: plan.domain.as_str().into(),
                hits: COST,
                limits,
            };
            Call {
                // Serializing plain structs does not fail; an empty body would
                // make the limiter answer 4xx, handled as a failure.
                body: serde_json::to_vec(&request).unwrap_or_default(),
                limits: count,
                answer: None,
            }
        })
        .collect();
    Verdict::Check(PendingCheck {
        calls,
        items,
        tally,
    })
}

/// Completes a request once every call of `pending` has an answer (see
/// [`PendingCheck::record`]). A failed call of enforcing limits applies the
/// limiter's `failure_mode`; a failed call of shadow limits is ignored.
pub fn finish<S, M>(plan: &Plan, pending: PendingCheck, store: &S, metrics: &M) -> Verdict
where
    S: SharedStore + ?Sized,
    M: MetricSink + ?Sized,
{
    let PendingCheck {
        calls,
        items,
        mut tally,
    } = pending;
    let mut denied: Option<Reported> = None;
    let mut failed: Option<&GlobalItem> = None;
    let mut key = String::new();
    for item in &items {
        let answer = calls
            .get(item.call)
            .and_then(|c| c.answer.as_ref())
            .and_then(Option::as_ref)
            .and_then(|a| a.limits.get(item.position));
        let Some(answer) = answer else {
            if !item.shadow && failed.is_none() {
                failed = Some(item);
            }
            continue;
        };
        let decision = answer.decision();
        let reported = Reported {
            rule: item.rule,
            window: item.window,
            decision,
        };
        if !decision.allowed {
            if decision.retry_after > 0 {
                remember_denial(
                    plan,
                    store,
                    item,
                    tally.now.saturating_add(decision.retry_after),
                    &mut key,
                );
            }
            if item.shadow {
                if !tally.shadow_denied.contains(&item.rule) {
                    metrics.rule(item.rule, RuleEvent::ShadowDenied);
                    tally.shadow_denied.push(item.rule);
                }
            } else if denied.is_none() {
                denied = Some(reported);
            }
        } else if !item.shadow {
            tally.report = Some(more_restrictive(tally.report, reported));
        }
    }
    if let Some(item) = failed {
        return on_failure(plan, item, tally, store, metrics);
    }
    if let Some(report) = denied {
        refund_from(plan, store, metrics, &mut tally, 0);
        metrics.rule(report.rule, RuleEvent::Denied);
        return Verdict::Deny(Denied {
            report,
            shadow_denied: tally.shadow_denied,
        });
    }
    admit(metrics, tally)
}

/// Applies `failure_mode` after the call of enforcing limits failed; `item`
/// is its first limit.
fn on_failure<S, M>(
    plan: &Plan,
    item: &GlobalItem,
    mut tally: Tally,
    store: &S,
    metrics: &M,
) -> Verdict
where
    S: SharedStore + ?Sized,
    M: MetricSink + ?Sized,
{
    let failure_mode = plan
        .limiter
        .as_ref()
        .map_or(FailureMode::Allow, |l| l.failure_mode);
    match failure_mode {
        FailureMode::Deny => {
            metrics.global(GlobalEvent::LimiterErrors);
            let report = Reported {
                rule: item.rule,
                window: item.window,
                decision: undecided(item.requests),
            };
            refund_from(plan, store, metrics, &mut tally, 0);
            metrics.rule(item.rule, RuleEvent::Denied);
            Verdict::Deny(Denied {
                report,
                shadow_denied: tally.shadow_denied,
            })
        }
        FailureMode::Allow => {
            metrics.global(GlobalEvent::FailureModeAllowed);
            admit(metrics, tally)
        }
    }
}

fn admit<M: MetricSink + ?Sized>(metrics: &M, tally: Tally) -> Verdict {
    for &rule in &tally.admitted {
        if !tally.shadow_denied.contains(&rule) {
            metrics.rule(rule, RuleEvent::Allowed);
        }
    }
    Verdict::Allow(Admitted {
        report: tally.report,
        shadow_denied: tally.shadow_denied,
    })
}

/// Writes the shared-data key of a local limit's state into `out`.
fn local_key<'k>(
    plan: &Plan,
    rule: usize,
    limit: usize,
    target: Target,
    out: &'k mut String,
) -> Option<&'k str> {
    let rule = plan.rules.get(rule)?;
    match target {
        Target::Slot(slot) => {
            layout::slot_key(out, &rule.limits.get(limit)?.store_prefix, slot);
        }
        Target::Override(o) => {
            let ov = rule.override_sets.get(o)?.get(limit)?.as_ref()?;
            out.clear();
            out.push_str(&ov.store_key);
        }
    }
    Some(out.as_str())
}

/// Refunds, newest first, the local limits consumed since `mark`.
fn refund_from<S, M>(plan: &Plan, store: &S, metrics: &M, tally: &mut Tally, mark: usize)
where
    S: SharedStore + ?Sized,
    M: MetricSink + ?Sized,
{
    let mut key = String::new();
    while tally.consumed.len() > mark {
        let Some(c) = tally.consumed.pop() else { break };
        let Some(rule) = plan.rules.get(c.rule) else {
            continue;
        };
        let limit = match c.target {
            Target::Override(o) => override_of(rule, c.limit, Some(o)).map(|(_, l)| l),
            Target::Slot(_) => rule.limits.get(c.limit).map(|l| &l.limit),
        };
        let (Some(limit), Some(target_key)) =
            (limit, local_key(plan, c.rule, c.limit, c.target, &mut key))
        else {
            continue;
        };
        if local::refund(store, target_key, limit, tally.now, COST).is_err() {
            metrics.global(GlobalEvent::CasExhausted);
        }
    }
}

/// Caches the limiter's denial of `item` until `deadline`.
fn remember_denial<S: SharedStore + ?Sized>(
    plan: &Plan,
    store: &S,
    item: &GlobalItem,
    deadline: Nanos,
    key: &mut String,
) {
    let Some(prefix) = plan
        .rules
        .get(item.rule)
        .and_then(|r| r.limits.get(item.limit))
        .map(|l| l.store_prefix.as_str())
    else {
        return;
    };
    let slot = item
        .fingerprint
        .checked_rem(plan.local_max_keys)
        .unwrap_or(0);
    layout::slot_key(key, prefix, slot);
    // A cache, not a counter: last writer wins.
    let _ = store.set(key, &global::encode_deny(deadline, item.fingerprint), None);
}

#[cfg(test)]
mod tests;
