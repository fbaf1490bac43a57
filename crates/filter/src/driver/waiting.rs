//! Requests waiting for a permit of a concurrency limit in delay mode: a
//! request that such a limit denies is held (up to its rule's
//! `max_queued` per worker) and decided again, whole, at each fine tick of
//! the root context, until it is admitted or its `max_delay` passes. What
//! the root decides is carried out in the request's name: admitted or held
//! requests are resumed and handed their outcome, a check is made from the
//! root (its answers come back there, [`answered`]), a request out of time
//! gets its denial.

use super::host::Host;
use super::limiter::{call_failed, dispatch};
use super::outcome::{hold_from_root, resume_admitted, send_denial, unapplied};
use super::parts::{Shared, Waiter, WaiterCall};
use super::permits;
use super::renewal;
use super::request::View;
use super::worker::Worker;
use super::HOLD_TICK;
use crate::engine::{self, Denied, Verdict};
use crate::failure::CallFailure;
use crate::metrics::{MetricSink, RuleEvent};
use sluice_core::Nanos;
use std::rc::Rc;

/// Holds the request of `context`, denied by `denied` (which may wait),
/// for another try; `first` is when it first found no permit and until
/// when it may wait, set on the first call. Returns whether it waits.
pub(super) fn wait<H: Host>(
    w: &mut Worker<H>,
    host: &mut H,
    context: u32,
    runtime: &Shared<H>,
    denied: &Denied,
    first: &mut Option<(Nanos, Nanos)>,
) -> bool {
    let Some(wait) = denied.wait else {
        return false;
    };
    let now = host.now();
    let (since, deadline) = *first.get_or_insert((now, now.saturating_add(wait)));
    let rule = denied.report.rule;
    let max = runtime.plan.rules.get(rule).map_or(0, |r| r.max_queued);
    if now >= deadline || w.waiters.iter().filter(|o| o.rule == rule).count() >= max {
        return false;
    }
    w.waiters.push(Waiter {
        context,
        runtime: Rc::clone(runtime),
        since,
        deadline,
        rule,
    });
    host.set_tick_period(HOLD_TICK);
    true
}

/// Decides every waiting request again (from the root context's tick);
/// returns whether some still wait.
pub(super) fn retry<H: Host>(w: &mut Worker<H>, host: &mut H, root: u32) -> bool {
    for waiter in std::mem::take(&mut w.waiters) {
        // A request gone meanwhile left the list when its stream ended.
        if host.focus(waiter.context) {
            decide(w, host, root, waiter);
        }
    }
    !w.waiters.is_empty()
}

/// Decides every waiting request one last time, as out of time: the
/// worker's last root context is closing and no tick will come.
pub(super) fn end_all<H: Host>(w: &mut Worker<H>, host: &mut H, root: u32) {
    for mut waiter in std::mem::take(&mut w.waiters) {
        waiter.deadline = 0;
        if host.focus(waiter.context) {
            decide(w, host, root, waiter);
        }
    }
}

/// The request of `context` is gone: it no longer waits (a check in flight
/// for it gives back what its answer takes, as it is no longer alive).
pub(super) fn leave<H: Host>(w: &mut Worker<H>, context: u32) {
    w.waiters.retain(|o| o.context != context);
}

fn decide<H: Host>(w: &mut Worker<H>, host: &mut H, root: u32, waiter: Waiter<H>) {
    let runtime = Rc::clone(&waiter.runtime);
    let view = View {
        host: &*host,
        shown: None,
        body_size: 0,
    };
    let mut verdict = engine::evaluate(
        &runtime.plan,
        &runtime.hasher,
        runtime.holder,
        &view,
        &*host,
        &runtime.metrics,
        || host.now(),
    );
    renewal::queue_from(w, host, &runtime, &mut verdict);
    settle(w, host, root, waiter, &runtime, verdict);
}

/// Carries out `verdict` for a waiting request: a check is made from the
/// root context (its answers come to [`answered`]); one that could not be
/// made is decided by the failure mode.
fn settle<H: Host>(
    w: &mut Worker<H>,
    host: &mut H,
    root: u32,
    waiter: Waiter<H>,
    runtime: &Shared<H>,
    mut verdict: Verdict,
) {
    while let Verdict::Check(mut pending) = verdict {
        // The calls must be the root's: a request's end with it, unanswered.
        host.focus(root);
        let mut tokens = Vec::new();
        for call in 0..pending.call_count() {
            match dispatch(host, runtime, pending.body(call)) {
                Some(token) => tokens.push((token, call)),
                None => {
                    call_failed(w, host, runtime, CallFailure::Unreachable);
                    pending.record(call, None);
                }
            }
        }
        if !tokens.is_empty() {
            let call = WaiterCall {
                tokens,
                pending,
                waiter,
            };
            return w.waiter_calls.push(call);
        }
        verdict = engine::finish(&runtime.plan, pending, &*host, &runtime.metrics);
        renewal::queue_from(w, host, runtime, &mut verdict);
    }
    if !w.alive(waiter.context) || !host.focus(waiter.context) {
        return unapplied(w, host, runtime, verdict);
    }
    carry_out(w, host, waiter, runtime, verdict);
}

/// The answer (`None`: failed) to call `token`, if it is a check made for a
/// waiting request; returns whether it was.
pub(super) fn answered<H: Host>(
    w: &mut Worker<H>,
    host: &mut H,
    root: u32,
    token: u32,
    body: Option<&[u8]>,
) -> bool {
    let Some(at) = w
        .waiter_calls
        .iter()
        .position(|c| c.tokens.iter().any(|(t, _)| *t == token))
    else {
        return false;
    };
    let mut call = w.waiter_calls.swap_remove(at);
    let Some(position) = call.tokens.iter().position(|(t, _)| *t == token) else {
        return true;
    };
    let (_, index) = call.tokens.swap_remove(position);
    if !call.pending.record(index, body) {
        w.waiter_calls.push(call);
        return true;
    }
    let WaiterCall {
        pending, waiter, ..
    } = call;
    let runtime = Rc::clone(&waiter.runtime);
    let mut verdict = engine::finish(&runtime.plan, pending, &*host, &runtime.metrics);
    renewal::queue_from(w, host, &runtime, &mut verdict);
    if !w.alive(waiter.context) || !host.focus(waiter.context) {
        // Its client left meanwhile: what the answer took goes back.
        unapplied(w, host, &runtime, verdict);
        return true;
    }
    settle(w, host, root, waiter, &runtime, verdict);
    true
}

/// Carries out a final verdict for a waiting request.
fn carry_out<H: Host>(
    w: &mut Worker<H>,
    host: &mut H,
    waiter: Waiter<H>,
    runtime: &Shared<H>,
    verdict: Verdict,
) {
    let now = host.now();
    match verdict {
        Verdict::Deny(denied) if denied.wait.is_some() && now < waiter.deadline => {
            w.waiters.push(waiter);
        }
        Verdict::Deny(mut denied) => {
            runtime.metrics.rule(denied.report.rule, RuleEvent::Denied);
            let held = std::mem::take(&mut denied.held);
            permits::give_back(w, host, runtime, held);
            send_denial(host, &runtime.plan, &denied, None, None);
        }
        Verdict::Allow(admitted) => {
            runtime
                .metrics
                .delayed(waiter.rule, now.saturating_sub(waiter.since));
            resume_admitted(w, host, waiter.context, runtime, admitted);
        }
        Verdict::Delay(delayed) => {
            hold_from_root(w, host, waiter.context, runtime, delayed, None);
        }
        // Decided before it gets here.
        Verdict::Check(_) => {}
    }
}
