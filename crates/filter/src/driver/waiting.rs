//! Requests waiting for a permit of a concurrency limit in delay mode: a
//! request that such a limit denies is held (up to its rule's
//! `max_queued` per worker, [`super::carry`]) and decided again, whole, at
//! each fine tick of the root context, until it is admitted or its
//! `max_delay` passes. What the root decides is carried out in the
//! request's name ([`super::carry`]); a check is made from the root
//! ([`super::rooted`]).

use super::carry::{self, Final};
use super::host::Host;
use super::renewal;
use super::rooted;
use super::worker::Worker;
use std::rc::Rc;

/// Decides every waiting request again (from the root context's tick);
/// returns whether some still wait.
pub(super) fn retry<H: Host>(w: &mut Worker<H>, host: &mut H, root: u32) -> bool {
    for (context, _) in std::mem::take(&mut w.waiters) {
        decide(w, host, root, context);
    }
    !w.waiters.is_empty()
}

/// Decides every waiting request one last time, as out of time: the
/// worker's last root context is closing and no tick will come.
pub(super) fn end_all<H: Host>(w: &mut Worker<H>, host: &mut H, root: u32) {
    for (context, _) in std::mem::take(&mut w.waiters) {
        if let Some(wait) = w
            .requests
            .get_mut(&context)
            .and_then(|r| r.waiting.as_mut())
        {
            wait.deadline = 0;
        }
        decide(w, host, root, context);
    }
}

/// The request of `context` is gone: it no longer waits (a check in flight
/// for it gives back what its answer takes, as it is no longer alive).
pub(super) fn leave<H: Host>(w: &mut Worker<H>, context: u32) {
    w.waiters.retain(|(c, _)| *c != context);
}

/// Decides the waiting request of `context` again and carries it out.
fn decide<H: Host>(w: &mut Worker<H>, host: &mut H, root: u32, context: u32) {
    let Some(runtime) = w.requests.get(&context).map(|r| Rc::clone(&r.runtime)) else {
        return;
    };
    host.focus(context);
    let verdict = renewal::evaluate(w, host, &runtime, None, 0);
    match Final::of(verdict) {
        Ok(outcome) => carry::from_root(w, host, context, &runtime, outcome),
        Err(pending) => rooted::make(w, host, root, context, &runtime, *pending),
    }
}
