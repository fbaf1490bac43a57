//! Completing a request once the limiter answered: each answer settles its
//! limit by kind (a lease installs its grant, a denial is cached, an
//! elastic denial may borrow in a second call), then the request is
//! admitted, denied (refunding what it consumed), or given the limiter's
//! `failure_mode`.

use super::call::{Call, GlobalItem, Via};
use super::concurrency::HeldPermit;
use super::deny_cache;
use super::elastic::lent;
use super::global_elastic::borrow_call;
use super::leased::{serve_from_leases, settle_leases};
use super::pending::PendingCheck;
use super::tally::{undecided, Env, Tally};
use super::verdict::Verdict;
use super::walk::slot;
use crate::config::{FailureMode, Plan};
use crate::headers::Reported;
use crate::layout;
use crate::local::SharedStore;
use crate::metrics::{GlobalEvent, MetricSink, RuleEvent};
use sluice_core::{Decision, Nanos};

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
    for call in &calls {
        let held = settle_leases(&env, call, tally.now);
        if call.answered().is_none() {
            if !call.shadow && failed.is_none() {
                failed = call.batch.items.first();
            }
            uncounted(&mut tally, call.shadow, false);
            continue;
        }
        hold_permits(&mut tally, call);
        note_taken(&mut tally, call);
        if call.shadow && !call.answered().is_some_and(|a| a.allowed) {
            uncounted(&mut tally, true, true);
        }
        for (item, decision) in decisions(call, held) {
            if decision.allowed {
                if !call.shadow {
                    note_allowed(&mut tally, &item, decision);
                }
                continue;
            }
            if decision.retry_after > 0 && item.cacheable {
                remember_denial(&env, &item, tally.now.saturating_add(decision.retry_after));
            }
            if call.shadow {
                if !tally.shadow_denied.contains(&item.rule) {
                    metrics.rule(item.rule, RuleEvent::ShadowDenied);
                    tally.shadow_denied.push(item.rule);
                }
                continue;
            }
            can_borrow &= matches!(item.via, Via::Elastic(_));
            if denied.is_none() {
                denied = Some(match item.via {
                    Via::Lent { own, .. } => own,
                    _ => item.reported(decision),
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

/// Notes that the limiter did not count the estimates of the rules whose
/// global limits were in the enforcing (or the shadow) call: it failed (so
/// the whole cost is charged later), or, `forget`, a shadow call denied
/// (shadow rules only observe: nothing is charged later).
fn uncounted(tally: &mut Tally, shadow: bool, forget: bool) {
    for owed in tally.owed.iter_mut().filter(|o| o.shadow == shadow) {
        if forget {
            owed.global.clear();
            owed.descriptors.clear();
        } else {
            owed.global_counted = false;
        }
    }
}

/// Notes the global rate limits the answered enforcing `call` consumed,
/// when it admitted: what a request held in delay mode gives back if its
/// client leaves. Limits that share calls or leases are left out (the
/// units they spend are not this request's alone).
fn note_taken(tally: &mut Tally, call: &Call) {
    if call.shadow || !call.answered().is_some_and(|a| a.allowed) {
        return;
    }
    let specs = call.batch.limits_since(0);
    for (item, spec) in call.batch.items.iter().zip(specs) {
        if matches!(item.via, Via::Alone | Via::Elastic(_)) {
            tally.taken.push(spec);
        }
    }
}

/// Notes the permits the answered `call` took: all of its concurrency
/// limits', when it admitted (a denied check takes nothing).
fn hold_permits(tally: &mut Tally, call: &Call) {
    if !call.answered().is_some_and(|a| a.allowed) {
        return;
    }
    let hits = call.batch.hits.unwrap_or(1);
    for (item, spec) in call.batch.items.iter().zip(&call.batch.limits) {
        if let Via::Permit(ttl) = item.via {
            tally.global_permits.push(HeldPermit {
                key: spec.key.to_string(),
                fingerprint: 0,
                weight: spec.hits.unwrap_or(hits),
                holder: tally.holder,
                ttl,
                rule: item.rule,
            });
        }
    }
}

/// The decision of each item of the answered `call`, given the units this
/// Envoy `held` per item once its lease asks were settled: what a leased key
/// has left counts them, and a rate limit service's answer gives its limit's
/// window.
fn decisions(
    call: &Call,
    held: Vec<u64>,
) -> impl Iterator<Item = (std::borrow::Cow<'_, GlobalItem>, Decision)> + '_ {
    let answers = call.answered().map_or(&[][..], |a| a.limits.as_slice());
    call.batch
        .items
        .iter()
        .zip(answers)
        .enumerate()
        .map(move |(i, (item, answer))| {
            let mut decision = answer.decision();
            if let Some(&held) = held.get(i).filter(|_| item.lease().is_some()) {
                decision.remaining = decision.remaining.saturating_add(held);
            }
            let window = call.windows.get(i).copied().filter(|w| *w > 0);
            (item.in_window(window), decision)
        })
}

/// Notes what an enforcing global limit that admitted reports: a limit of
/// an elastic limit's pool reports nothing, its extra allowance reports the
/// elastic limit as lent.
fn note_allowed(tally: &mut Tally, item: &GlobalItem, decision: Decision) {
    let reported = match item.via {
        Via::Lent { own, extra: true } => {
            tally.borrowed.push(item.rule);
            Reported {
                decision: lent(own.decision),
                ..own
            }
        }
        Via::Lent { extra: false, .. } => return,
        _ => item.reported(decision),
    };
    tally.note(reported);
    tally.note_delay(reported);
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
fn remember_denial<S, M>(env: &Env<'_, S, M>, item: &GlobalItem, deadline: Nanos)
where
    S: SharedStore + ?Sized,
    M: ?Sized,
{
    let Some(rule_limit) = env.rule_limit(item.rule, item.limit) else {
        return;
    };
    let Some(deny_prefix) = rule_limit.deny_prefix() else {
        return;
    };
    // A limit held by a rate limit service has no shape in this configuration.
    let shape = rule_limit
        .quota()
        .map_or(0, |q| deny_cache::shape(&q.limit, item.requests));
    let mut key = String::new();
    layout::slot_key(&mut key, deny_prefix, slot(env.plan, item.fingerprint));
    let owner = deny_cache::owner(item.fingerprint, shape);
    deny_cache::remember(env.store, &key, owner, deadline);
}
