//! Lease renewals (see [`sluice_filter::engine::Renewal`]): queued by the
//! request that started one and sent by the root context, woken at once
//! ([`super::wake`]), so that the answer comes to the root whether or not
//! that request is still there; settled when it comes (or when its root
//! closes first).

use super::limiter::dispatch;
use super::runtime::Runtime;
use super::shared_data::HostStore;
use super::state::{self, RenewalCall};
use super::wake;
use sluice_filter::engine::{PendingCheck, Renewal, Verdict};
use sluice_filter::metrics::{GlobalEvent, MetricSink};
use std::rc::Rc;

/// Queues the renewal `verdict` carries, if any.
pub(super) fn queue_from(runtime: &Rc<Runtime>, verdict: &mut Verdict) {
    if let Some(renewal) = verdict.take_renewal() {
        queue(runtime, renewal);
    }
}

/// Queues `renewal` and wakes the root to send it.
pub(super) fn queue(runtime: &Rc<Runtime>, renewal: Renewal) {
    runtime.metrics.global(GlobalEvent::LeaseRenewals);
    state::queue_renewal(Rc::clone(runtime), renewal);
    wake::root();
}

/// Abandons `pending`, a check of `runtime` whose request is gone (what it
/// took locally goes back), and queues the renewal it carried, if any.
pub(super) fn abandon(runtime: &Rc<Runtime>, pending: PendingCheck) {
    if let Some(renewal) = pending.abandon(&runtime.plan, &HostStore, &runtime.metrics) {
        queue(runtime, renewal);
    }
}

/// Sends the queued renewals from root context `root`, which is running.
pub(super) fn send_queued(root: u32) {
    for (runtime, renewal) in state::take_queued_renewals() {
        let body = renewal.body(&runtime.plan.domain);
        match dispatch(&runtime, &body) {
            Some(token) => state::add_renewal(RenewalCall {
                token,
                root,
                runtime,
                renewal,
            }),
            None => {
                runtime.metrics.global(GlobalEvent::LimiterUnreachable);
                settle(&runtime, renewal, None);
            }
        }
    }
}

/// The answer (`None`: failed) to call `token`, if it is a renewal's:
/// settles it. Returns whether it was.
pub(super) fn answered(token: u32, body: Option<&[u8]>) -> bool {
    let Some(call) = state::take_renewals(|c| c.token == token).pop() else {
        return false;
    };
    settle(&call.runtime, call.renewal, body);
    true
}

/// Root `root` is closing: its renewals will not be answered, so they end
/// with nothing granted (the leases stop waiting for them); when it is the
/// VM's last root, so do the renewals still queued.
pub(super) fn root_closing(root: u32, last: bool) {
    for call in state::take_renewals(|c| c.root == root) {
        settle(&call.runtime, call.renewal, None);
    }
    if last {
        for (runtime, renewal) in state::take_queued_renewals() {
            settle(&runtime, renewal, None);
        }
    }
}

/// Ends `renewal`, of configuration `runtime`, with the answer `body`
/// (`None`: none came).
fn settle(runtime: &Runtime, renewal: Renewal, body: Option<&[u8]>) {
    renewal.settle(&runtime.plan, &HostStore, &runtime.metrics, body);
}
