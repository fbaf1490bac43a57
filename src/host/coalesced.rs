//! The shared calls of coalescing groups (see [`sluice_filter::coalesce`]): the
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

use super::clock::now;
use super::limiter::dispatch;
use super::outcome::{deny, hold_from_root, resume_admitted};
use super::renewal;
use super::runtime::Runtime;
use super::shared_data::HostStore;
use super::state::{self, Member, SharedCall};
use super::wake;
use proxy_wasm::hostcalls;
use sluice_filter::engine::{self, Verdict};
use sluice_filter::metrics::{GlobalEvent, MetricSink};
use std::rc::Rc;

/// The most requests one shared call carries, and one group holds waiting
/// (beyond it, requests call alone).
pub(super) const MAX_BATCH: usize = sluice_wire::MAX_BATCH as usize;

/// The own call of a request in `signature`'s group ended: makes the group's
/// next call for the requests that wait (the caller carries it, see the
/// module doc). `None` when none wait or the call could not be made (its
/// requests then got the failure mode, and those that joined meanwhile are
/// called for by the root).
pub(super) fn carry(signature: Vec<u8>) -> Option<SharedCall> {
    if !state::groups(|g| g.finished(&signature)) {
        return None;
    }
    let members = state::groups(|g| g.take(&signature, MAX_BATCH));
    match send(&members) {
        Some(token) => Some(SharedCall {
            root: 0,
            token,
            signature,
            members,
        }),
        None => {
            decide(members, None);
            finished(&signature);
            None
        }
    }
}

/// The answer (`None`: failed) to a carried call: decides its requests, and
/// has the root call for those that joined meanwhile.
pub(super) fn carried(shared: SharedCall, body: Option<&[u8]>) {
    decide(shared.members, body);
    finished(&shared.signature);
}

/// Makes the call of `members` (one check, `members.len()` requests) from
/// the effective context; its token.
fn send(members: &[(u32, Member)]) -> Option<u32> {
    let (_, first) = members.first()?;
    let n = u32::try_from(members.len()).unwrap_or(u32::MAX);
    let body = first.pending.batch_body(&first.runtime.plan.domain, n);
    dispatch(&first.runtime, &body)
}

/// A group's call in flight ended: if requests wait, the root calls for
/// them.
pub(super) fn finished(signature: &[u8]) {
    if state::groups(|g| g.finished(signature)) {
        wake::root();
    }
}

/// Makes the next call of every group whose requests wait with no call in
/// flight (from the root context `root`).
pub(super) fn call_ready(root: u32) {
    let ready = state::groups(|g| g.ready());
    for signature in ready {
        call(root, signature);
    }
}

/// Makes the next call of the group of `signature`, carrying the requests
/// that wait in it.
fn call(root: u32, signature: Vec<u8>) {
    // The call belongs to the effective context, which handing out answers
    // moved to requests: a request's calls end with it, the root's do not.
    let _ = hostcalls::set_effective_context(root);
    loop {
        let members = state::groups(|g| g.take(&signature, MAX_BATCH));
        if members.is_empty() {
            return;
        }
        if let Some(token) = send(&members) {
            state::add_call(SharedCall {
                root,
                token,
                signature,
                members,
            });
            return;
        }
        // Not made: each request gets the failure mode, and the requests
        // that joined meanwhile try a call of their own.
        decide(members, None);
        if !state::groups(|g| g.finished(&signature)) {
            return;
        }
    }
}

/// The answer (`None`: failed) to the shared call `token` of root `root`.
pub(super) fn answered(root: u32, token: u32, body: Option<&[u8]>) {
    let Some(shared) = state::take_call(token) else {
        return;
    };
    decide(shared.members, body);
    if state::groups(|g| g.finished(&shared.signature)) {
        call(root, shared.signature);
    }
}

/// Root `root` is closing: its calls will not be answered, so their
/// requests get the failure mode now; when it is the VM's last root, so do
/// the requests still waiting in groups.
pub(super) fn root_closing(root: u32, last: bool) {
    let orphaned = state::take_calls(|call| call.root == root || last);
    for shared in orphaned {
        decide(shared.members, None);
        finished(&shared.signature);
    }
    if last {
        let waiting = state::groups(|g| g.drain());
        decide(waiting, None);
    }
}

/// Decides each request of a shared call from its answer (`None`: the call
/// failed), in arrival order, and carries out the outcome.
pub(super) fn decide(members: Vec<(u32, Member)>, body: Option<&[u8]>) {
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
        let mut verdict = engine::finish(&runtime.plan, pending, &HostStore, &runtime.metrics);
        renewal::queue_from(&runtime, &mut verdict);
        deliver(context, &runtime, verdict);
    }
}

/// Carries out `verdict` for the request of `context`.
fn deliver(context: u32, runtime: &Rc<Runtime>, mut verdict: Verdict) {
    // A coalesced check makes no second call; should one be asked for, it
    // is answered as a failed call rather than left waiting.
    while let Verdict::Check(mut pending) = verdict {
        for call in 0..pending.call_count() {
            pending.record(call, None);
        }
        verdict = engine::finish(&runtime.plan, pending, &HostStore, &runtime.metrics);
        renewal::queue_from(runtime, &mut verdict);
    }
    if hostcalls::set_effective_context(context).is_err() {
        // Its client left after the call was made.
        if let Verdict::Delay(delayed) = verdict {
            // Shared calls' units are not its own to refund: none are taken.
            let _ = delayed.give_back(&runtime.plan, &HostStore, &runtime.metrics, now());
        }
        return;
    }
    // A coalesced check takes no permits: none to keep or give back.
    match verdict {
        Verdict::Allow(admitted) => resume_admitted(context, runtime, admitted),
        Verdict::Delay(delayed) => hold_from_root(context, runtime, delayed),
        Verdict::Deny(denied) => deny(&runtime.plan, &denied),
        Verdict::Check(_) => {}
    }
}
