//! Checks that take permits of a global concurrency limit, or of keys whose
//! charges the worker still owes, made by the root context for their
//! request.
//!
//! A check of a key owed on waits in the queue until the charges are
//! answered ([`super::cost`]): no request is admitted ahead of what the
//! requests that ended before it on its worker still owe.
//!
//! A call belongs to the context that makes it, and Envoy cancels it when
//! that context ends: a request's own check would take its permits at the
//! limiter while the answer that says so is lost with a client that left.
//! The root's call is answered whatever the request does: to a request
//! still there the root carries out its verdict (resumed, held, waiting or
//! denied, as [`super::filter`] would); for one gone, what the verdict took
//! goes back. A root that closes first cannot be answered: its checks end
//! as failed calls, and what the limiter took for them comes back at the
//! permits' ttl.

use super::limiter::{call_failed, dispatch};
use super::outcome::{deny, hold_from_root, resume_admitted, unapplied};
use super::permits;
use super::renewal;
use super::request::Shown;
use super::runtime::Runtime;
use super::shared_data::HostStore;
use super::state::{self, Headers, RootedCheck};
use super::waiting;
use super::wake;
use proxy_wasm::hostcalls;
use sluice_filter::engine::{self, PendingCheck, Verdict};
use sluice_filter::failure::CallFailure;
use sluice_filter::metrics::{MetricSink, RuleEvent};
use std::rc::Rc;

/// Leaves `pending`, the check of the request of `context`, for the root to
/// make once the charges owed on its keys up to id `owed` are answered,
/// and wakes it.
pub(super) fn queue(
    context: u32,
    runtime: &Rc<Runtime>,
    pending: PendingCheck,
    shown: Option<Headers>,
    owed: u64,
) {
    state::add_rooted(RootedCheck {
        context,
        runtime: Rc::clone(runtime),
        pending,
        shown,
        root: 0,
        tokens: Vec::new(),
        gone: false,
        owed,
    });
    wake::root();
}

/// Makes, from the running root `root`, the checks left for it, but those
/// of keys whose charges the worker still owes (made once they are
/// answered).
pub(super) fn send_queued(root: u32) {
    let ready = |c: &RootedCheck| {
        c.tokens.is_empty()
            && (c.owed == 0 || !state::owing(|o| o.owes(c.pending.limiter_keys(), c.owed)))
    };
    for check in state::take_rooted(ready) {
        send(root, check);
    }
}

/// Makes the calls of `check` from root `root`; decides it at once when
/// none could be made.
fn send(root: u32, mut check: RootedCheck) {
    // The calls must be the root's, not the request's.
    let _ = hostcalls::set_effective_context(root);
    check.root = root;
    let mut complete = false;
    for call in 0..check.pending.call_count() {
        match dispatch(&check.runtime, check.pending.body(call)) {
            Some(token) => check.tokens.push((token, call)),
            None => {
                call_failed(&check.runtime, CallFailure::Unreachable);
                complete = check.pending.record(call, None);
            }
        }
    }
    if check.tokens.is_empty() || complete {
        return decide(root, check);
    }
    state::add_rooted(check);
}

/// The answer (`None`: failed) to call `token` of root `root`, if it is a
/// rooted check's; returns whether it was.
pub(super) fn answered(root: u32, token: u32, body: Option<&[u8]>) -> bool {
    let Some(mut check) = state::take_rooted(|c| c.tokens.iter().any(|(t, _)| *t == token)).pop()
    else {
        return false;
    };
    let at = check.tokens.iter().position(|(t, _)| *t == token);
    if let Some((_, call)) = at.map(|at| check.tokens.swap_remove(at)) {
        let complete = check.pending.record(call, body);
        if check.pending.unreadable(call) {
            call_failed(&check.runtime, CallFailure::Unreadable);
        }
        if !complete {
            state::add_rooted(check);
            return true;
        }
    }
    decide(root, check);
    true
}

/// The request of `context` is gone: a check still queued is dropped (what
/// it took locally goes back); one in flight gives back what its answer
/// takes.
pub(super) fn leave(context: u32) {
    for check in state::take_rooted(|c| c.context == context) {
        if check.tokens.is_empty() {
            renewal::abandon(&check.runtime, check.pending);
        } else {
            state::add_rooted(RootedCheck {
                gone: true,
                ..check
            });
        }
    }
}

/// Root `root` is closing: its calls will not be answered, so their checks
/// end as failed calls; when it is the VM's last root, so do the checks
/// still queued.
pub(super) fn root_closing(root: u32, last: bool) {
    let ended = state::take_rooted(|c| (c.root == root && !c.tokens.is_empty()) || last);
    for mut check in ended {
        // The calls still out (all of them, for a check not yet made).
        let out: Vec<usize> = if check.tokens.is_empty() {
            (0..check.pending.call_count()).collect()
        } else {
            check.tokens.drain(..).map(|(_, call)| call).collect()
        };
        for call in out {
            check.pending.record(call, None);
        }
        decide(root, check);
    }
}

/// Decides `check`, every call answered, and carries the verdict out; a
/// verdict that asks again (an elastic limit's second call) is sent again.
fn decide(root: u32, check: RootedCheck) {
    let RootedCheck {
        context,
        runtime,
        pending,
        shown,
        gone,
        ..
    } = check;
    let mut verdict = engine::finish(&runtime.plan, pending, &HostStore, &runtime.metrics);
    renewal::queue_from(&runtime, &mut verdict);
    if gone || hostcalls::set_effective_context(context).is_err() {
        return unapplied(&runtime, verdict);
    }
    let _shown = Shown::new(shown.clone());
    match verdict {
        Verdict::Check(pending) => send(
            root,
            RootedCheck {
                context,
                runtime,
                pending,
                shown,
                root,
                tokens: Vec::new(),
                gone: false,
                owed: 0,
            },
        ),
        verdict => carry_out(context, &runtime, verdict),
    }
}

/// Carries out a final verdict for the request of `context`, the effective
/// context.
fn carry_out(context: u32, runtime: &Rc<Runtime>, verdict: Verdict) {
    match verdict {
        Verdict::Allow(admitted) => resume_admitted(context, runtime, admitted),
        Verdict::Delay(delayed) => hold_from_root(context, runtime, delayed),
        Verdict::Deny(mut denied) => {
            permits::give_back(runtime, std::mem::take(&mut denied.held));
            if denied.wait.is_some() {
                if !request_headers_shown() && waiting::wait(context, runtime, &denied, &mut None) {
                    return;
                }
                runtime.metrics.rule(denied.report.rule, RuleEvent::Denied);
            }
            deny(&runtime.plan, &denied);
        }
        // Sent again before it gets here.
        Verdict::Check(_) => {}
    }
}

/// Whether the request's headers are a snapshot (it was decided after its
/// body): the root decides waiting requests again from Envoy's headers.
fn request_headers_shown() -> bool {
    state::request_headers().is_some()
}
