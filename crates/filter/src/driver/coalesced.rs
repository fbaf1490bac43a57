//! The shared calls of coalescing groups (see [`crate::coalesce`]): the
//! requests of a call wait for the answer, and each gets its outcome from
//! the context that made the call.
//!
//! A call belongs to the context that makes it, and ends with it. So the
//! request whose own call ends while others wait *carries* their call: it
//! makes it at once and holds its own outcome until the answer (its wait is
//! then its call plus theirs, the bound every waiting request has). Calls
//! for requests that arrive while a carried call is in flight are made by
//! the root context, woken at once ([`super::wake`]), and then one after
//! another as each answer arrives, while requests keep coming.

use super::carry::{self, Final};
use super::host::Host;
use super::limiter::dispatch;
use super::parts::{Member, Shared, SharedCall};
use super::renewal;
use super::wake;
use super::worker::{take_where, Worker};
use crate::engine::Verdict;
use crate::metrics::{GlobalEvent, MetricSink};

/// The most requests one shared call carries, and one group holds waiting
/// (beyond it, requests call alone).
pub(super) const MAX_BATCH: usize = sluice_wire::MAX_BATCH as usize;

/// The own call of a request in `signature`'s group ended: makes the group's
/// next call for the requests that wait (the caller carries it, see the
/// module doc). `None` when none wait or the call could not be made (its
/// requests then got the failure mode, and those that joined meanwhile are
/// called for by the root).
pub(super) fn carry<H: Host>(
    w: &mut Worker<H>,
    host: &mut H,
    signature: Vec<u8>,
) -> Option<SharedCall<H>> {
    if !w.groups.finished(&signature) {
        return None;
    }
    let members = w.groups.take(&signature, MAX_BATCH);
    match send(host, &members) {
        Some(token) => Some(SharedCall {
            root: 0,
            token,
            signature,
            members,
        }),
        None => {
            decide(w, host, members, None);
            finished(w, host, &signature);
            None
        }
    }
}

/// The answer (`None`: failed) to a carried call: decides its requests, and
/// has the root call for those that joined meanwhile.
pub(super) fn carried<H: Host>(
    w: &mut Worker<H>,
    host: &mut H,
    shared: SharedCall<H>,
    body: Option<&[u8]>,
) {
    decide(w, host, shared.members, body);
    finished(w, host, &shared.signature);
}

/// Makes the call of `members` (one check, `members.len()` requests) from
/// the focused context; its token.
fn send<H: Host>(host: &mut H, members: &[(u32, Member<H>)]) -> Option<u32> {
    let (_, first) = members.first()?;
    let n = u32::try_from(members.len()).unwrap_or(u32::MAX);
    let body = first.pending.batch_body(&first.runtime.plan.domain, n);
    dispatch(host, &first.runtime, &body)
}

/// A group's call in flight ended: if requests wait, the root calls for
/// them.
pub(super) fn finished<H: Host>(w: &mut Worker<H>, host: &mut H, signature: &[u8]) {
    if w.groups.finished(signature) {
        wake::root(w, host);
    }
}

/// Makes the next call of every group whose requests wait with no call in
/// flight (from the root context `root`).
pub(super) fn call_ready<H: Host>(w: &mut Worker<H>, host: &mut H, root: u32) {
    for signature in w.groups.ready() {
        call(w, host, root, signature);
    }
}

/// Makes the next call of the group of `signature`, carrying the requests
/// that wait in it.
fn call<H: Host>(w: &mut Worker<H>, host: &mut H, root: u32, signature: Vec<u8>) {
    // The call belongs to the focused context, which handing out answers
    // moved to requests: a request's calls end with it, the root's do not.
    host.focus(root);
    loop {
        let members = w.groups.take(&signature, MAX_BATCH);
        if members.is_empty() {
            return;
        }
        if let Some(token) = send(host, &members) {
            w.calls.push(SharedCall {
                root,
                token,
                signature,
                members,
            });
            return;
        }
        // Not made: each request gets the failure mode, and the requests
        // that joined meanwhile try a call of their own.
        decide(w, host, members, None);
        host.focus(root);
        if !w.groups.finished(&signature) {
            return;
        }
    }
}

/// The answer (`None`: failed) to the shared call `token` of root `root`;
/// returns whether it was one.
pub(super) fn answered<H: Host>(
    w: &mut Worker<H>,
    host: &mut H,
    root: u32,
    token: u32,
    body: Option<&[u8]>,
) -> bool {
    let Some(shared) = take_where(&mut w.calls, |c| c.token == token).pop() else {
        return false;
    };
    decide(w, host, shared.members, body);
    if w.groups.finished(&shared.signature) {
        call(w, host, root, shared.signature);
    }
    true
}

/// Root `root` is closing: its calls will not be answered, so their
/// requests get the failure mode now; when it is the worker's last root,
/// so do the requests still waiting in groups.
pub(super) fn root_closing<H: Host>(w: &mut Worker<H>, host: &mut H, root: u32, last: bool) {
    for shared in take_where(&mut w.calls, |call| call.root == root || last) {
        decide(w, host, shared.members, None);
        finished(w, host, &shared.signature);
    }
    if last {
        let waiting = w.groups.drain();
        decide(w, host, waiting, None);
    }
}

/// Decides each request of a shared call from its answer (`None`: the call
/// failed), in arrival order, and carries out the outcome.
pub(super) fn decide<H: Host>(
    w: &mut Worker<H>,
    host: &mut H,
    members: Vec<(u32, Member<H>)>,
    body: Option<&[u8]>,
) {
    let n = u32::try_from(members.len()).unwrap_or(u32::MAX);
    // One check for all: the answer is read once.
    let answer = members
        .first()
        .zip(body)
        .and_then(|((_, m), b)| m.pending.parse_batch(b, n));
    for (position, (context, member)) in (0u32..).zip(members) {
        let Member {
            runtime,
            mut pending,
        } = member;
        pending.record_batch(answer.as_ref(), position);
        runtime.metrics.global(GlobalEvent::Coalesced);
        let verdict = renewal::finish(w, host, &runtime, *pending);
        deliver(w, host, context, &runtime, verdict);
    }
}

/// Carries out `verdict` for the request of `context`.
fn deliver<H: Host>(
    w: &mut Worker<H>,
    host: &mut H,
    context: u32,
    runtime: &Shared<H>,
    mut verdict: Verdict,
) {
    // A coalesced check makes no second call; should one be asked for, it
    // is answered as a failed call rather than left waiting.
    loop {
        match Final::of(verdict) {
            Ok(outcome) => return carry::from_root(w, host, context, runtime, outcome),
            Err(mut pending) => {
                for call in 0..pending.call_count() {
                    pending.record(call, None);
                }
                verdict = renewal::finish(w, host, runtime, *pending);
            }
        }
    }
}
