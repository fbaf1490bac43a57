//! Completing a request once the limiter answered: each item's kind settles
//! its answer (its follow-up: a lease installs its grant, permits are held,
//! an elastic denial may borrow in a second call), a denial is cached, then
//! the request is admitted, denied (refunding what it consumed), or given
//! the limiter's `failure_mode`.

use super::call::{Batch, CacheSlot, Call, Item};
use super::deny_cache;
use super::env::Env;
use super::follow::FollowUp;
use super::held::HeldPermit;
use super::pending::PendingCheck;
use super::tally::{undecided, Refusal, Tally};
use super::verdict::Verdict;
use crate::config::{FailureMode, Plan};
use crate::headers::Reported;
use crate::layout;
use crate::local::SharedStore;
use crate::metrics::{GlobalEvent, MetricSink, RuleEvent};
use sluice_core::Nanos;
use sluice_wire::LimitResult;

/// Keeps a denial in the over-limit cache's slot `cache`.
fn cache_denial<S: SharedStore + ?Sized>(store: &S, cache: &CacheSlot, denied: deny_cache::Denied) {
    let mut key = String::new();
    layout::slot_key(&mut key, &cache.prefix, cache.slot);
    deny_cache::remember(store, &key, cache.owner, denied);
}

/// Completes a request once every call of `pending` has an answer (see
/// [`PendingCheck::record`]). A failed call of enforcing limits applies the
/// limiter's `failure_mode`; a failed call of shadow limits is ignored. When
/// only elastic limits that can borrow denied, the answer is the second
/// call, [`Verdict::Check`] again.
pub(crate) fn finish<F, S, M>(
    plan: &Plan,
    pending: PendingCheck<F>,
    store: &S,
    metrics: &M,
) -> Verdict<F>
where
    F: FollowUp,
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
    let mut denied: Option<(Refusal, Option<String>)> = None;
    // Every enforcing denial so far can be retried by borrowing.
    let mut can_borrow = !borrowing;
    let mut failed: Option<&Item<F>> = None;
    for call in &calls {
        let Some(answer) = call.answered() else {
            // What the items asked for besides their decisions is not granted.
            for item in &call.batch.items {
                item.follow.settle(&env, item, None, tally.now);
            }
            if !call.shadow && failed.is_none() {
                failed = call.batch.items.first();
            }
            uncounted(&mut tally, call.shadow, false);
            continue;
        };
        if answer.allowed {
            hold_permits(&mut tally, call);
        } else if call.shadow {
            uncounted(&mut tally, true, true);
        }
        for (i, (item, result)) in call.batch.items.iter().zip(&answer.limits).enumerate() {
            let reported = reported(&env, call, i, item, result, tally.now);
            let decision = reported.decision;
            if decision.allowed {
                if !call.shadow {
                    item.follow.admitted(reported, &mut tally);
                }
                continue;
            }
            if let Some(cache) = item.cache.as_ref().filter(|_| decision.retry_after > 0) {
                let denied = deny_cache::Denied {
                    until: tally.now.saturating_add(decision.retry_after),
                    blocked: result.blocked,
                };
                cache_denial(env.store, cache, denied);
            }
            if call.shadow {
                if !tally.shadow_denied.contains(&item.rule) {
                    metrics.rule(item.rule, RuleEvent::ShadowDenied);
                    tally.shadow_denied.push(item.rule);
                }
                continue;
            }
            can_borrow &= item.follow.may_borrow();
            if denied.is_none() {
                denied = Some((item.follow.refusal(reported), request_key(plan, item)));
            }
        }
    }
    if let Some(item) = failed {
        if serve_unanswered(&env, &calls, &mut tally) {
            return tally.admit(metrics);
        }
        return on_failure(&env, item, tally);
    }
    match denied {
        Some(_) if can_borrow => borrow_call(plan, calls, tally),
        Some(denial) => keyed_denial(tally, denial, &env),
        None => note_taken(tally, &calls).admit(metrics),
    }
}

/// The denial of `refusal`, carrying the request's `key` (see
/// [`request_key`]).
fn keyed_denial<S, M, F>(
    tally: Tally,
    (refusal, key): (Refusal, Option<String>),
    env: &Env<'_, S, M>,
) -> Verdict<F>
where
    S: SharedStore + ?Sized,
    M: MetricSink + ?Sized,
{
    let mut denied = tally.denied(refusal, env);
    denied.key = key;
    Verdict::Deny(denied)
}

/// The request's key under `item`'s rule, read back from its limiter key
/// (`rule/limit/key`, see [`sluice_wire::limiter_key`]): for top limited
/// keys and the access log, as a local refusal gives it. `None` for a rate
/// limit service's descriptors and a pool's key (another name's).
fn request_key<F>(plan: &Plan, item: &Item<F>) -> Option<String> {
    let spec = item.spec()?;
    let rule = plan.rules.get(item.rule)?;
    let rest = spec
        .key
        .strip_prefix(rule.name.as_str())?
        .strip_prefix('/')?;
    let (index, key) = rest.split_once('/')?;
    (index.parse::<usize>().ok()? == item.limit).then(|| key.to_string())
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

/// Notes the global rate limits the answered enforcing calls consumed,
/// once they admitted: what a request held in delay mode gives back if its
/// client leaves. Only such a request copies them.
fn note_taken<F: FollowUp>(mut tally: Tally, calls: &[Call<F>]) -> Tally {
    if tally.delayed.is_none() {
        return tally;
    }
    let admitted = calls.iter().filter(|c| !c.shadow);
    for call in admitted.filter(|c| c.answered().is_some_and(|a| a.allowed)) {
        let (specs, _) = call.batch.since(0);
        let items = call.batch.items.iter().filter(|i| i.spec().is_some());
        for (item, spec) in items.zip(specs) {
            if item.follow.counted_alone() {
                tally.taken.push(spec);
            }
        }
    }
    tally
}

/// Notes the permits the admitted `call` took (a denied check takes
/// nothing).
fn hold_permits<F: FollowUp>(tally: &mut Tally, call: &Call<F>) {
    let hits = call.batch.hits();
    for item in &call.batch.items {
        let (Some(spec), Some(ttl)) = (item.spec(), item.follow.permit_ttl()) else {
            continue;
        };
        tally.global_permits.push(HeldPermit {
            key: spec.key.to_string(),
            fingerprint: 0,
            weight: item.weight(hits),
            holder: tally.holder,
            ttl,
            rule: item.rule,
        });
    }
}

/// What item `i` of the answered `call` reports given its answer `result`,
/// once its kind settled what it asked for besides its decision: units a
/// leased key holds here count as remaining, and a rate limit service's
/// answer gives its limit's window.
fn reported<F, S, M>(
    env: &Env<'_, S, M>,
    call: &Call<F>,
    i: usize,
    item: &Item<F>,
    result: &LimitResult,
    now: Nanos,
) -> Reported
where
    F: FollowUp,
    S: SharedStore + ?Sized,
    M: MetricSink + ?Sized,
{
    let mut decision = result.decision();
    if let Some(held) = item.follow.settle(env, item, Some(result), now) {
        decision.remaining = decision.remaining.saturating_add(held);
    }
    let window = call.windows.get(i).copied().filter(|w| *w > 0);
    Reported {
        window: window.unwrap_or(item.window),
        ..item.reported(decision)
    }
}

/// After the call of enforcing limits failed: when each of its limits can
/// serve the request without the limiter (a leased limit whose lease still
/// holds enough), it is served so (units in hand keep serving through an
/// outage). Returns whether it was; if not, nothing was taken.
fn serve_unanswered<F, S, M>(env: &Env<'_, S, M>, calls: &[Call<F>], tally: &mut Tally) -> bool
where
    F: FollowUp,
    S: SharedStore + ?Sized,
    M: MetricSink + ?Sized,
{
    let Some(call) = calls.iter().find(|c| !c.shadow) else {
        return false;
    };
    if !call
        .batch
        .items
        .iter()
        .all(|i| i.follow.serves_unanswered())
    {
        return false;
    }
    let mark = tally.consumed.len();
    let hits = call.batch.hits();
    for item in &call.batch.items {
        let weight = item.weight(hits);
        let Some(decision) = item.follow.serve_unanswered(env, item, weight, tally) else {
            tally.refund_since(mark, env);
            return false;
        };
        tally.note(item.reported(decision));
    }
    true
}

/// Applies `failure_mode` after the call of enforcing limits failed; `item`
/// is its first limit.
fn on_failure<F, S, M>(env: &Env<'_, S, M>, item: &Item<F>, tally: Tally) -> Verdict<F>
where
    F: FollowUp,
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
            let refusal = Refusal {
                report: item.reported(undecided(item.requests)),
                wait: item.follow.wait(),
            };
            tally.deny(refusal, env)
        }
        FailureMode::Allow => {
            env.metrics.global(GlobalEvent::FailureModeAllowed);
            tally.admit(env.metrics)
        }
    }
}

/// The second call of a request whose enforcing call was denied only by
/// limits that can borrow: each item's kind says what it checks there.
fn borrow_call<F: FollowUp>(plan: &Plan, calls: Vec<Call<F>>, tally: Tally) -> Verdict<F> {
    let mut batch = Batch::default();
    for call in calls.into_iter().filter(|c| !c.shadow) {
        let answers = call.answer.flatten().map(|a| a.limits).unwrap_or_default();
        let hits = call.batch.hits();
        for (item, answer) in call.batch.items.into_iter().zip(answers) {
            let weight = item.weight(hits);
            F::again(item, &answer, weight, &mut batch);
        }
    }
    let permits = batch.items.iter().any(|i| i.follow.takes_permits());
    let holder = permits.then_some(tally.holder);
    let calls = batch
        .into_call(&plan.domain, false, holder)
        .into_iter()
        .collect();
    Verdict::Check(Box::new(PendingCheck {
        calls,
        tally,
        borrowing: true,
        reply: None,
    }))
}
