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
//! denied, as [`super::stream`] would); for one gone, what the verdict took
//! goes back. A root that closes first cannot be answered: its checks end
//! as failed calls, and what the limiter took for them comes back at the
//! permits' ttl.

use super::carry::{self, Final};
use super::host::Host;
use super::limiter::{record_answer, send_check};
use super::outcome::unapplied;
use super::parts::{RootedCheck, Shared};
use super::renewal;
use super::wake;
use super::worker::{take_where, Worker};
use crate::engine::PendingCheck;
use std::rc::Rc;

/// Leaves `pending`, the check of the request of `context`, for the root to
/// make once the charges owed on its keys up to id `owed` are answered,
/// and wakes it.
pub(super) fn queue<H: Host>(
    w: &mut Worker<H>,
    host: &mut H,
    context: u32,
    runtime: &Shared<H>,
    pending: PendingCheck,
    owed: u64,
) {
    w.rooted.push(RootedCheck {
        context,
        runtime: Rc::clone(runtime),
        pending,
        root: 0,
        tokens: Vec::new(),
        owed,
    });
    wake::root(w, host);
}

/// Makes, from the running root `root`, the checks left for it, but those
/// of keys whose charges the worker still owes (made once they are
/// answered).
pub(super) fn send_queued<H: Host>(w: &mut Worker<H>, host: &mut H, root: u32) {
    let owing = &w.owing;
    let ready = |c: &RootedCheck<H>| {
        c.tokens.is_empty() && (c.owed == 0 || !owing.owes(c.pending.limiter_keys(), c.owed))
    };
    let (ready, kept): (Vec<_>, Vec<_>) =
        std::mem::take(&mut w.rooted).into_iter().partition(ready);
    w.rooted = kept;
    for check in ready {
        send(w, host, root, check);
    }
}

/// Makes `pending`, the check of the request of `context` (waiting for a
/// permit), from the running root `root`.
pub(super) fn make<H: Host>(
    w: &mut Worker<H>,
    host: &mut H,
    root: u32,
    context: u32,
    runtime: &Shared<H>,
    pending: PendingCheck,
) {
    let check = RootedCheck {
        context,
        runtime: Rc::clone(runtime),
        pending,
        root,
        tokens: Vec::new(),
        owed: 0,
    };
    send(w, host, root, check);
}

/// Makes the calls of `check` from root `root`; decides it at once when
/// none could be made.
fn send<H: Host>(w: &mut Worker<H>, host: &mut H, root: u32, mut check: RootedCheck<H>) {
    check.root = root;
    if w.roots.iter().any(|r| r.id == root) {
        // The calls must be the root's, not the request's.
        host.focus(root);
        check.tokens = send_check(w, host, &check.runtime, &mut check.pending);
    } else {
        // A root closing (an elastic limit's second call, asked as it
        // ends its checks) could not read the answer: failed at once.
        for call in 0..check.pending.call_count() {
            check.pending.record(call, None);
        }
    }
    if check.tokens.is_empty() {
        return decide(w, host, root, check);
    }
    w.rooted.push(check);
}

/// The answer (`None`: failed) to call `token` of root `root`, if it is a
/// rooted check's; returns whether it was.
pub(super) fn answered<H: Host>(
    w: &mut Worker<H>,
    host: &mut H,
    root: u32,
    token: u32,
    body: Option<&[u8]>,
) -> bool {
    let mine = |c: &RootedCheck<H>| c.tokens.iter().any(|(t, _)| *t == token);
    let Some(mut check) = take_where(&mut w.rooted, mine).pop() else {
        return false;
    };
    let runtime = Rc::clone(&check.runtime);
    let out = (&mut check.pending, &mut check.tokens);
    if !record_answer(w, host, &runtime, out, token, body) {
        w.rooted.push(check);
        return true;
    }
    decide(w, host, root, check);
    true
}

/// The request of `context` is gone: a check still queued is dropped (what
/// it took locally goes back); one in flight gives back what its answer
/// takes (the request is no longer alive when it comes).
pub(super) fn leave<H: Host>(w: &mut Worker<H>, host: &mut H, context: u32) {
    let queued = |c: &RootedCheck<H>| c.context == context && c.tokens.is_empty();
    for check in take_where(&mut w.rooted, queued) {
        renewal::abandon(w, host, &check.runtime, check.pending);
    }
}

/// Root `root` is closing: its calls will not be answered, so their checks
/// end as failed calls; when it is the worker's last root, so do the
/// checks still queued.
pub(super) fn root_closing<H: Host>(w: &mut Worker<H>, host: &mut H, root: u32, last: bool) {
    let ended = take_where(&mut w.rooted, |c| {
        (c.root == root && !c.tokens.is_empty()) || last
    });
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
        decide(w, host, root, check);
    }
}

/// Decides `check`, every call answered, and carries the verdict out; a
/// verdict that asks again (an elastic limit's second call) is sent again.
fn decide<H: Host>(w: &mut Worker<H>, host: &mut H, root: u32, check: RootedCheck<H>) {
    let RootedCheck {
        context,
        runtime,
        pending,
        ..
    } = check;
    let verdict = renewal::finish(w, host, &runtime, pending);
    if !w.alive(context) {
        return unapplied(w, host, &runtime, verdict);
    }
    match Final::of(verdict) {
        Ok(outcome) => carry::from_root(w, host, context, &runtime, outcome),
        Err(pending) => make(w, host, root, context, &runtime, *pending),
    }
}
