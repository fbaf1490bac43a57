//! A request's own path: it asks the engine for a verdict, carries it out
//! (alone, through a coalescing group's shared call, or through the root),
//! adds the admitted response's headers, and gives back what it holds when
//! its stream ends.
//!
//! Each function takes the request out of the worker's table (`req`), so
//! that the worker's other parts stay reachable while it is changed.

use super::carry::{self, Final};
use super::coalesced::{self, MAX_BATCH};
use super::cost;
use super::host::{Action, Host, Map};
use super::limiter::{call_failed, grpc_answer, http_answer, send_check, Answer};
use super::outcome::{add_response_headers, add_service_response_headers, unapplied};
use super::parts::{Member, Shared};
use super::permits;
use super::renewal;
use super::request::{snapshot, Request};
use super::rooted;
use super::waiting;
use super::worker::Worker;
use crate::coalesce::Joined;
use crate::engine::{PendingCheck, Verdict};
use crate::failure::{self, CallFailure};
use crate::response;
use std::rc::Rc;

/// The request's headers are in (`end_of_stream`: it has no body).
pub(super) fn headers<H: Host>(
    w: &mut Worker<H>,
    host: &mut H,
    context: u32,
    req: &mut Request<H>,
    end_of_stream: bool,
) -> Action {
    let Some(runtime) = req.runtime.clone() else {
        return Action::Continue;
    };
    if runtime.plan.rules.is_empty() {
        return Action::Continue;
    }
    if runtime.plan.request_body && !end_of_stream {
        // Decided once the body is in. Envoy's proxy-wasm host delivers
        // no body to a filter that holds the headers, so they go on and
        // the body is held until the decision.
        req.awaiting_body = true;
        req.shown = Some(snapshot(host));
        return Action::Continue;
    }
    decide(w, host, context, req, &runtime, 0)
}

/// A chunk of the request's body is in.
pub(super) fn body<H: Host>(
    w: &mut Worker<H>,
    host: &mut H,
    context: u32,
    req: &mut Request<H>,
    body_size: usize,
    end_of_stream: bool,
) -> Action {
    if !req.awaiting_body {
        return Action::Continue;
    }
    if !end_of_stream {
        return Action::Pause;
    }
    req.awaiting_body = false;
    match req.runtime.clone() {
        Some(runtime) => decide(w, host, context, req, &runtime, body_size),
        None => Action::Continue,
    }
}

/// Decides the request (its body of `body_size` bytes in, if waited for)
/// and carries the verdict out.
fn decide<H: Host>(
    w: &mut Worker<H>,
    host: &mut H,
    context: u32,
    req: &mut Request<H>,
    runtime: &Shared<H>,
    body_size: usize,
) -> Action {
    let verdict = renewal::evaluate(w, host, runtime, req.shown.as_ref(), body_size);
    apply(w, host, context, req, runtime, verdict)
}

/// Carries out a verdict; returns whether the request continues.
fn apply<H: Host>(
    w: &mut Worker<H>,
    host: &mut H,
    context: u32,
    req: &mut Request<H>,
    runtime: &Shared<H>,
    verdict: Verdict,
) -> Action {
    match Final::of(verdict) {
        Ok(outcome) => carry::apply(w, host, context, req, runtime, outcome),
        Err(pending) => check(w, host, context, req, runtime, pending),
    }
}

/// Asks the limiter: in a coalescing group's next call, alone, or from the
/// root (see [`rooted`]) for a check that takes global permits or must
/// wait for charges its worker owes on its keys.
fn check<H: Host>(
    w: &mut Worker<H>,
    host: &mut H,
    context: u32,
    req: &mut Request<H>,
    runtime: &Shared<H>,
    pending: PendingCheck,
) -> Action {
    // The charges owed on its keys when it came, which it waits for.
    let last = w.owing.last();
    let owed = w.owing.owes(pending.limiter_keys(), last).then_some(last);
    if owed.is_some() || pending.takes_permits() {
        rooted::queue(w, host, context, runtime, pending, owed.unwrap_or(0));
        req.rooted = true;
        return Action::Pause;
    }
    // The root carries out a group's outcomes, without a snapshot of
    // headers.
    let signature = match pending.coalescable() {
        Some(signature) if req.shown.is_none() => signature.to_vec(),
        _ => return call_limiter(w, host, context, req, runtime, pending),
    };
    let member = Member {
        runtime: Rc::clone(runtime),
        pending,
    };
    match w.groups.join(&signature, context, member, MAX_BATCH) {
        Joined::Waiting => Action::Pause,
        Joined::Full(member) => call_limiter(w, host, context, req, runtime, member.pending),
        Joined::Call(member) => {
            req.group = Some(signature);
            let action = call_limiter(w, host, context, req, runtime, member.pending);
            if req.tokens.is_empty() {
                // Answered already (the call could not be made).
                own_call_ended(w, host, req);
            }
            action
        }
    }
}

/// This request's call ended: its group's next call is due.
fn own_call_ended<H: Host>(w: &mut Worker<H>, host: &mut H, req: &mut Request<H>) {
    if let Some(signature) = req.group.take() {
        coalesced::finished(w, host, &signature);
    }
}

/// Sends the check calls; the request waits until all are answered.
fn call_limiter<H: Host>(
    w: &mut Worker<H>,
    host: &mut H,
    context: u32,
    req: &mut Request<H>,
    runtime: &Shared<H>,
    mut pending: PendingCheck,
) -> Action {
    req.tokens = send_check(w, host, runtime, &mut pending);
    if req.tokens.is_empty() {
        let verdict = renewal::finish(w, host, runtime, pending);
        return apply(w, host, context, req, runtime, verdict);
    }
    req.pending = Some(pending);
    Action::Pause
}

/// The answer to call `token` made from this request's context.
pub(super) fn answered<H: Host>(
    w: &mut Worker<H>,
    host: &mut H,
    context: u32,
    req: &mut Request<H>,
    token: u32,
    answer: Answer,
) {
    let Some(runtime) = req.runtime.clone() else {
        return;
    };
    let own = req.tokens.iter().any(|(t, _)| *t == token);
    let carried = req.carrying.as_ref().is_some_and(|(s, _)| s.token == token);
    if !own && !carried {
        return;
    }
    let body = match answer {
        Answer::Http { body_size } => http_answer(w, host, Some(&runtime), body_size),
        Answer::Grpc { status, size } => {
            // gRPC status 0 is OK; any other is a failed call (the clock is
            // read only then, to tell a timeout from a refused connection).
            if status != 0 {
                let timeout = runtime.plan.limiter.as_ref().map_or(0, |l| l.timeout);
                let since = req.pending.as_ref().map_or(0, PendingCheck::decided_at);
                let timed_out = failure::timed_out(host.now().saturating_sub(since), timeout);
                if let Some(failure) = CallFailure::of_grpc(status, timed_out) {
                    call_failed(w, host, &runtime, failure);
                }
            }
            grpc_answer(host, status, size)
        }
    };
    if own {
        own_answered(w, host, context, req, &runtime, token, body.as_deref());
    } else {
        carried_answered(w, host, context, req, &runtime, body.as_deref());
    }
}

/// The answer to this request's own call `token` (`None`: failed).
fn own_answered<H: Host>(
    w: &mut Worker<H>,
    host: &mut H,
    context: u32,
    req: &mut Request<H>,
    runtime: &Shared<H>,
    token: u32,
    body: Option<&[u8]>,
) {
    let Some(position) = req.tokens.iter().position(|(t, _)| *t == token) else {
        return;
    };
    let (_, call) = req.tokens.swap_remove(position);
    let Some(mut pending) = req.pending.take() else {
        return;
    };
    let complete = pending.record(call, body);
    if pending.unreadable(call) {
        call_failed(w, host, runtime, CallFailure::Unreadable);
    }
    if !complete {
        req.pending = Some(pending);
        return;
    }
    req.reply = pending.take_reply();
    let verdict = renewal::finish(w, host, runtime, pending);
    if let Some(signature) = req.group.take() {
        if let Some(shared) = coalesced::carry(w, host, signature) {
            req.carrying = Some((shared, verdict));
            return;
        }
    }
    if apply(w, host, context, req, runtime, verdict) == Action::Continue {
        host.resume();
    }
}

/// The answer to the call this request carries: decides the requests it
/// carried, then applies this request's own outcome.
fn carried_answered<H: Host>(
    w: &mut Worker<H>,
    host: &mut H,
    context: u32,
    req: &mut Request<H>,
    runtime: &Shared<H>,
    body: Option<&[u8]>,
) {
    let Some((shared, verdict)) = req.carrying.take() else {
        return;
    };
    coalesced::carried(w, host, shared, body);
    // Handing out the answers moved the focus.
    host.focus(context);
    if apply(w, host, context, req, runtime, verdict) == Action::Continue {
        host.resume();
    }
}

/// The response's headers are in: what the root decided for the request is
/// its, the costs read, the rate-limit headers added.
pub(super) fn response_headers<H: Host>(host: &mut H, req: &mut Request<H>) {
    let Some(runtime) = req.runtime.clone() else {
        return;
    };
    if let Some(reader) = req.cost.as_mut() {
        cost::read_headers(&*host, &runtime, reader);
    }
    if let Some(admitted) = req.admitted.take() {
        add_response_headers(host, &runtime.plan, &admitted);
    }
    if let Some(reply) = req.reply.as_ref() {
        add_service_response_headers(host, &runtime.plan, reply);
    }
    if let Some(held) = req.held.take() {
        let (name, value) = response::delayed_header(held.delay);
        host.add_header(Map::ResponseHeaders, name, &value, false);
    }
}

/// A chunk of the response body is in.
pub(super) fn response_body<H: Host>(host: &H, req: &mut Request<H>, body_size: usize) {
    if let Some(reader) = req.cost.as_mut().filter(|r| r.reads_body()) {
        cost::read_body(host, reader, body_size);
    }
}

/// The response's trailers are in.
pub(super) fn response_trailers<H: Host>(host: &H, req: &mut Request<H>) {
    if let (Some(runtime), Some(reader)) = (req.runtime.as_ref(), req.cost.as_mut()) {
        cost::read_trailers(host, runtime, reader);
    }
}

/// The stream ended, whichever way: the request leaves its queue, group or
/// wait, and gives back what it consumed and holds; what it owes is
/// settled.
pub(super) fn leave<H: Host>(w: &mut Worker<H>, host: &mut H, context: u32, mut req: Request<H>) {
    if req.rooted {
        rooted::leave(w, host, context);
    }
    if !req.tokens.is_empty() {
        // Its call is dropped with it: the group calls again.
        own_call_ended(w, host, &mut req);
    }
    if let Some((shared, verdict)) = req.carrying.take() {
        // So is the call it carried: its requests get the failure mode.
        coalesced::carried(w, host, shared, None);
        if let Some(runtime) = req.runtime.as_ref() {
            unapplied(w, host, runtime, verdict);
        }
    }
    if let Some(member) = w.groups.leave(context) {
        renewal::abandon(w, host, &member.runtime, member.pending);
    }
    waiting::leave(w, context);
    let waited = w.queue.remove(context);
    if let (true, Some(held), Some(runtime)) = (waited, req.held.take(), req.runtime.as_ref()) {
        let resume_at = held.resume_at();
        let now = host.now();
        let taken = held.give_back(&runtime.plan, &*host, &runtime.metrics, now);
        cost::refund(w, host, runtime, taken, resume_at);
        // Never sent upstream: what it consumed is back, nothing to settle.
        req.cost = None;
    }
    let Some(runtime) = req.runtime.clone() else {
        return;
    };
    if let Some(pending) = req.pending.take() {
        // Its call is still out: what it took locally goes back.
        renewal::abandon(w, host, &runtime, pending);
    }
    permits::release(w, host, &runtime, std::mem::take(&mut req.holding));
    if let Some(reader) = req.cost.take() {
        cost::settle(w, host, &runtime, reader);
    }
}
