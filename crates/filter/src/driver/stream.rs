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
use super::limiter::{call_failed, grpc_answer, http_answer, record_answer, send_check, Answer};
use super::outcome::{add_response_headers, add_service_response_headers, unapplied};
use super::parts::{Member, Shared};
use super::permits;
use super::quota;
use super::renewal;
use super::request::{snapshot, Phase, Request};
use super::rooted;
use super::topkeys;
use super::waiting;
use super::worker::Worker;
use crate::coalesce::Joined;
use crate::config::{HeadersWhileBody, RequestBody};
use crate::engine::{PendingCheck, Verdict};
use crate::failure::{self, CallFailure};
use crate::response;
use std::rc::Rc;

/// Answers a request for a path the filter serves itself (the quota
/// endpoint, the top limited keys' list): `None` for any other. `:path` is
/// read once, and only when such a path is configured.
fn own_path<H: Host>(host: &mut H, req: &mut Request<H>, runtime: &Shared<H>) -> Option<Action> {
    let plan = &runtime.plan;
    let top = plan
        .top_limited_keys
        .as_ref()
        .and_then(|t| t.path.as_deref());
    if plan.quota_endpoint.is_none() && top.is_none() {
        return None;
    }
    let raw = host.header(Map::RequestHeaders, ":path")?;
    let (own, query) = raw.split_once('?').unwrap_or((&raw, ""));
    if plan.quota_endpoint.as_deref() == Some(own) {
        return Some(quota::serve(host, req, runtime, query));
    }
    (top == Some(own)).then(|| topkeys::serve(host, req, runtime))
}

/// The request's headers are in (`end_of_stream`: it has no body).
pub(super) fn headers<H: Host>(
    w: &mut Worker<H>,
    host: &mut H,
    context: u32,
    req: &mut Request<H>,
    end_of_stream: bool,
) -> Action {
    let runtime = Rc::clone(&req.runtime);
    if let Some(action) = own_path(host, req, &runtime) {
        return action;
    }
    if runtime.plan.rules.is_empty() {
        req.phase = Phase::Decided;
        return Action::Continue;
    }
    if let (RequestBody::Read(headers), false) = (runtime.plan.request_body, end_of_stream) {
        // Decided once the body is in, which is held until then. Envoy's
        // proxy-wasm host delivers no body to a filter that holds the
        // headers unless the plugin allows it (`hold`): otherwise they go on.
        req.phase = Phase::AwaitingBody { seen: 0 };
        req.shown = Some(snapshot(host));
        return match headers {
            HeadersWhileBody::Forward => Action::Continue,
            HeadersWhileBody::Hold => Action::Pause,
        };
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
    let Phase::AwaitingBody { seen } = &mut req.phase else {
        return Action::Continue;
    };
    if !end_of_stream {
        *seen = body_size;
        return Action::Pause;
    }
    let runtime = Rc::clone(&req.runtime);
    decide(w, host, context, req, &runtime, body_size)
}

/// The request's trailers are in, which end it: one still waiting for its
/// body is decided on what of it came (a request must not pass undecided
/// by ending with trailers).
pub(super) fn trailers<H: Host>(
    w: &mut Worker<H>,
    host: &mut H,
    context: u32,
    req: &mut Request<H>,
) -> Action {
    let Phase::AwaitingBody { seen } = req.phase else {
        return Action::Continue;
    };
    let runtime = Rc::clone(&req.runtime);
    decide(w, host, context, req, &runtime, seen)
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
    pending: Box<PendingCheck>,
) -> Action {
    // The charges owed on its keys when it came, which it waits for.
    let last = w.owing.last();
    let owed = w.owing.owes(pending.limiter_keys(), last).then_some(last);
    if owed.is_some() || pending.takes_permits() {
        rooted::queue(w, host, context, runtime, *pending, owed.unwrap_or(0));
        req.phase = Phase::Rooted;
        return Action::Pause;
    }
    // The root carries out a group's outcomes, without a snapshot of
    // headers.
    let mut pending = pending;
    let signature = match req.shown.is_none().then(|| pending.take_signature()) {
        Some(Some(signature)) => signature,
        Some(None) | None => return call_limiter(w, host, context, req, runtime, pending, None),
    };
    let member = Member {
        runtime: Rc::clone(runtime),
        pending,
    };
    match w.groups.join(&signature, context, member, MAX_BATCH) {
        Joined::Waiting => {
            req.phase = Phase::Grouped;
            Action::Pause
        }
        Joined::Full(mut member) => {
            member.pending.restore_signature(signature);
            call_limiter(w, host, context, req, runtime, member.pending, None)
        }
        Joined::Call(mut member) => {
            let group = Some(signature.clone());
            member.pending.restore_signature(signature);
            call_limiter(w, host, context, req, runtime, member.pending, group)
        }
    }
}

/// Sends the check calls (the call of coalescing `group` whose next call
/// waits for it, if any); the request waits until all are answered.
fn call_limiter<H: Host>(
    w: &mut Worker<H>,
    host: &mut H,
    context: u32,
    req: &mut Request<H>,
    runtime: &Shared<H>,
    mut pending: Box<PendingCheck>,
    group: Option<Vec<u8>>,
) -> Action {
    let tokens = send_check(w, host, runtime, &mut pending);
    if tokens.is_empty() {
        // Answered already (no call could be made): the group's next call
        // is due.
        if let Some(signature) = group {
            coalesced::finished(w, host, &signature);
        }
        let verdict = renewal::finish(w, host, runtime, *pending);
        return apply(w, host, context, req, runtime, verdict);
    }
    req.phase = Phase::Checking {
        pending,
        tokens,
        group,
    };
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
    let runtime = Rc::clone(&req.runtime);
    let since = match &req.phase {
        Phase::Checking {
            tokens, pending, ..
        } if tokens.iter().any(|(t, _)| *t == token) => pending.decided_at(),
        Phase::Carrying { call, .. } if call.token == token => 0,
        Phase::Quota(asking) if asking.token == token => {
            let Phase::Quota(asking) = std::mem::replace(&mut req.phase, Phase::Decided) else {
                return;
            };
            let body_size = match answer {
                Answer::Http { body_size } => Some(body_size),
                Answer::Grpc { .. } => None,
            };
            return quota::answered(w, host, &runtime, asking, body_size);
        }
        _ => return,
    };
    let body = match answer {
        Answer::Http { body_size } => http_answer(w, host, Some(&runtime), body_size),
        Answer::Grpc { status, size } => {
            // gRPC status 0 is OK; any other is a failed call (the clock is
            // read only then, to tell a timeout from a refused connection).
            if status != 0 {
                let timeout = runtime.plan.limiter.as_ref().map_or(0, |l| l.timeout);
                let timed_out = failure::timed_out(host.now().saturating_sub(since), timeout);
                if let Some(failure) = CallFailure::of_grpc(status, timed_out) {
                    call_failed(w, host, &runtime, failure);
                }
            }
            grpc_answer(host, status, size)
        }
    };
    match std::mem::replace(&mut req.phase, Phase::Decided) {
        Phase::Checking {
            pending,
            tokens,
            group,
        } => {
            let checking = (pending, tokens, group);
            own_answered(w, host, context, req, token, checking, body.as_deref());
        }
        Phase::Carrying { call, verdict } => {
            coalesced::carried(w, host, call, body.as_deref());
            // Handing out the answers moved the focus.
            host.focus(context);
            if apply(w, host, context, req, &runtime, *verdict) == Action::Continue {
                host.resume();
            }
        }
        other => req.phase = other,
    }
}

/// The check this request's own call `token` is part of, its calls out and
/// its group.
type Checking = (Box<PendingCheck>, Vec<(u32, usize)>, Option<Vec<u8>>);

/// The answer to this request's own call `token` (`None`: failed).
fn own_answered<H: Host>(
    w: &mut Worker<H>,
    host: &mut H,
    context: u32,
    req: &mut Request<H>,
    token: u32,
    (mut pending, mut tokens, group): Checking,
    body: Option<&[u8]>,
) {
    let runtime = &Rc::clone(&req.runtime);
    if !record_answer(w, host, runtime, (&mut pending, &mut tokens), token, body) {
        req.phase = Phase::Checking {
            pending,
            tokens,
            group,
        };
        return;
    }
    req.reply = pending.take_reply();
    let verdict = renewal::finish(w, host, runtime, *pending);
    if let Some(signature) = group {
        if let Some(call) = coalesced::carry(w, host, signature) {
            req.phase = Phase::Carrying {
                call,
                verdict: Box::new(verdict),
            };
            return;
        }
        // A next call not made gave its requests the failure mode, which
        // moved the focus.
        host.focus(context);
    }
    if apply(w, host, context, req, runtime, verdict) == Action::Continue {
        host.resume();
    }
}

/// The response's headers are in: the costs read, the rate-limit headers
/// added.
pub(super) fn response_headers<H: Host>(host: &mut H, req: &mut Request<H>) {
    let runtime = Rc::clone(&req.runtime);
    if let Some(reader) = req.cost.as_mut() {
        cost::read_headers(&*host, &runtime, reader);
    }
    if let Some(admitted) = req.admitted.take() {
        add_response_headers(host, &runtime.plan, &admitted);
    }
    if let Some(reply) = req.reply.as_ref() {
        add_service_response_headers(host, &runtime.plan, reply);
    }
    if let Phase::Held(held) = &req.phase {
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
    if let Some(reader) = req.cost.as_mut() {
        cost::read_trailers(host, &req.runtime, reader);
    }
}

/// The stream ended, whichever way: what the request asked for is let go
/// (by its phase), what it holds given back, what it owes settled.
pub(super) fn leave<H: Host>(w: &mut Worker<H>, host: &mut H, context: u32, req: Request<H>) {
    let Request {
        runtime,
        phase,
        holding,
        mut cost,
        ..
    } = req;
    match phase {
        // A quota poll's call is dropped with it; it took nothing.
        Phase::New | Phase::AwaitingBody { .. } | Phase::Decided | Phase::Quota(_) => {}
        Phase::Checking { pending, group, .. } => {
            // Its call is dropped with it: the group calls again, and what
            // it took locally goes back.
            if let Some(signature) = group {
                coalesced::finished(w, host, &signature);
            }
            renewal::abandon(w, host, &runtime, *pending);
        }
        Phase::Carrying { call, verdict } => {
            // So is the call it carried: its requests get the failure mode.
            coalesced::carried(w, host, call, None);
            unapplied(w, host, &runtime, *verdict);
        }
        Phase::Grouped => {
            if let Some(member) = w.groups.leave(context) {
                renewal::abandon(w, host, &member.runtime, *member.pending);
            }
        }
        Phase::Rooted => rooted::leave(w, host, context),
        Phase::Waiting => waiting::leave(w, context),
        Phase::Held(held) => {
            if w.queue.remove(context) {
                let resume_at = held.resume_at();
                let now = host.now();
                let taken = held.give_back(&runtime.plan, &*host, &runtime.metrics, now);
                cost::refund(w, host, &runtime, taken, resume_at);
                // Never sent upstream: what it consumed is back, nothing to
                // settle.
                cost = None;
            }
        }
    }
    // Settled before its permits are free: a request a freed permit
    // admits finds this one's cost counted (locally; a global settlement
    // and release are sent by the root together).
    if let Some(reader) = cost {
        cost::settle(w, host, &runtime, reader);
    }
    permits::release(w, host, &runtime, holding);
}
