//! Requests waiting for a permit of a concurrency limit in delay mode: a
//! request that such a limit denies is held (up to its rule's
//! `max_queued` per worker) and decided again, whole, at each fine tick of
//! the root context, until it is admitted or its `max_delay` passes. What
//! the root decides is carried out in the request's name: admitted or held
//! requests are resumed and handed their outcome, a check is made from the
//! root (its answers come back there, [`answered`]), a request out of time
//! gets its denial.

use super::clock::{now, HOLD_TICK};
use super::limiter::{call_failed, dispatch};
use super::outcome::{deny, hold_from_root, resume_admitted, unapplied};
use super::permits;
use super::renewal;
use super::request::HostRequest;
use super::runtime::Runtime;
use super::shared_data::HostStore;
use super::state::{self, Waiter, WaiterCall};
use proxy_wasm::hostcalls;
use sluice_core::Nanos;
use sluice_filter::engine::{self, Denied, Verdict};
use sluice_filter::failure::CallFailure;
use sluice_filter::metrics::{MetricSink, RuleEvent};
use std::rc::Rc;

/// Holds the request of `context`, denied by `denied` (which may wait),
/// for another try; `first` is when it first found no permit and until
/// when it may wait, set on the first call. Returns whether it waits.
pub(super) fn wait(
    context: u32,
    runtime: &Rc<Runtime>,
    denied: &Denied,
    first: &mut Option<(Nanos, Nanos)>,
) -> bool {
    let Some(wait) = denied.wait else {
        return false;
    };
    let now = now();
    let (since, deadline) = *first.get_or_insert((now, now.saturating_add(wait)));
    let rule = denied.report.rule;
    let max = runtime.plan.rules.get(rule).map_or(0, |r| r.max_queued);
    if now >= deadline {
        return false;
    }
    let waiter = Waiter {
        context,
        runtime: Rc::clone(runtime),
        since,
        deadline,
        rule,
    };
    if !state::add_waiter(waiter, max) {
        return false;
    }
    let _ = hostcalls::set_tick_period(HOLD_TICK);
    true
}

/// Decides every waiting request again (from the root context's tick);
/// returns whether some still wait.
pub(super) fn retry(root: u32) -> bool {
    for waiter in state::take_waiters() {
        // A context gone meanwhile left in on_done.
        if hostcalls::set_effective_context(waiter.context).is_ok() {
            decide(root, waiter);
        }
    }
    state::any_waiter()
}

/// Decides every waiting request one last time, as out of time: the VM's
/// last root context is closing and no tick will come.
pub(super) fn end_all(root: u32) {
    for mut waiter in state::take_waiters() {
        waiter.deadline = 0;
        if hostcalls::set_effective_context(waiter.context).is_ok() {
            decide(root, waiter);
        }
    }
}

fn decide(root: u32, waiter: Waiter) {
    let runtime = Rc::clone(&waiter.runtime);
    let mut verdict = engine::evaluate(
        &runtime.plan,
        &runtime.hasher,
        runtime.holder,
        &HostRequest { body_size: 0 },
        &HostStore,
        &runtime.metrics,
        now,
    );
    renewal::queue_from(&runtime, &mut verdict);
    settle(root, waiter, &runtime, verdict);
}

/// Carries out `verdict` for a waiting request: a check is made from the
/// root context (its answers come to [`answered`]); one that could not be
/// made is decided by the failure mode.
fn settle(root: u32, waiter: Waiter, runtime: &Rc<Runtime>, mut verdict: Verdict) {
    while let Verdict::Check(mut pending) = verdict {
        // The calls must be the root's: a request's end with it, unanswered.
        let _ = hostcalls::set_effective_context(root);
        let mut tokens = Vec::new();
        for call in 0..pending.call_count() {
            match dispatch(runtime, pending.body(call)) {
                Some(token) => tokens.push((token, call)),
                None => {
                    call_failed(runtime, CallFailure::Unreachable);
                    pending.record(call, None);
                }
            }
        }
        if !tokens.is_empty() {
            let call = WaiterCall {
                tokens,
                pending,
                waiter,
                gone: false,
            };
            return state::add_waiter_call(call);
        }
        verdict = engine::finish(&runtime.plan, pending, &HostStore, &runtime.metrics);
        renewal::queue_from(runtime, &mut verdict);
    }
    if hostcalls::set_effective_context(waiter.context).is_err() {
        return unapplied(runtime, verdict);
    }
    carry_out(waiter, runtime, verdict);
}

/// The answer (`None`: failed) to call `token`, if it is a check made for a
/// waiting request; returns whether it was.
pub(super) fn answered(root: u32, token: u32, body: Option<&[u8]>) -> bool {
    let Some(mut call) = state::take_waiter_call(token) else {
        return false;
    };
    let Some(position) = call.tokens.iter().position(|(t, _)| *t == token) else {
        return true;
    };
    let (_, index) = call.tokens.swap_remove(position);
    let complete = call.pending.record(index, body);
    if !complete {
        state::add_waiter_call(call);
        return true;
    }
    let WaiterCall {
        pending,
        waiter,
        gone,
        ..
    } = call;
    let runtime = Rc::clone(&waiter.runtime);
    let mut verdict = engine::finish(&runtime.plan, pending, &HostStore, &runtime.metrics);
    renewal::queue_from(&runtime, &mut verdict);
    if gone || hostcalls::set_effective_context(waiter.context).is_err() {
        // Its client left meanwhile: what the answer took goes back.
        unapplied(&runtime, verdict);
        return true;
    }
    settle(root, waiter, &runtime, verdict);
    true
}

/// Carries out a final verdict for a waiting request.
fn carry_out(waiter: Waiter, runtime: &Rc<Runtime>, verdict: Verdict) {
    let now = now();
    match verdict {
        Verdict::Deny(denied) if denied.wait.is_some() && now < waiter.deadline => {
            state::keep_waiter(waiter);
        }
        Verdict::Deny(mut denied) => {
            runtime.metrics.rule(denied.report.rule, RuleEvent::Denied);
            let held = std::mem::take(&mut denied.held);
            permits::give_back(runtime, held);
            deny(&runtime.plan, &denied);
        }
        Verdict::Allow(admitted) => {
            runtime
                .metrics
                .delayed(waiter.rule, now.saturating_sub(waiter.since));
            resume_admitted(waiter.context, runtime, admitted);
        }
        Verdict::Delay(delayed) => hold_from_root(waiter.context, runtime, delayed),
        // Decided before it gets here.
        Verdict::Check(_) => {}
    }
}
