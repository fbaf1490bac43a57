//! Lease renewals (see [`crate::engine::Renewal`]): queued by the request
//! that started one and sent by the root context, woken at once
//! ([`super::wake`]), so that the answer comes to the root whether or not
//! that request is still there; settled when it comes (or when its root
//! closes first).

use super::host::Host;
use super::limiter::dispatch;
use super::parts::Runtime;
use super::parts::{RenewalCall, Shared};
use super::request::View;
use super::wake;
use super::worker::{take_where, Worker};
use crate::engine::{self, PendingCheck, Renewal, Verdict};
use crate::metrics::{GlobalEvent, MetricSink};
use sluice_wire::MAX_LIMITS;
use std::rc::Rc;

/// Decides the request `view` shows; the lease renewal the verdict
/// carries, if any, is queued for the root whatever becomes of the request.
pub(super) fn evaluate<H: Host>(
    w: &mut Worker<H>,
    host: &mut H,
    runtime: &Shared<H>,
    shown: Option<&super::parts::Headers>,
    body_size: usize,
) -> Verdict {
    let view = View {
        host: &*host,
        shown,
        body_size,
    };
    let Runtime {
        plan,
        hasher,
        metrics,
        holder,
        ..
    } = &**runtime;
    let mut verdict =
        engine::evaluate(plan, hasher, *holder, &view, &*host, metrics, || host.now());
    queue_from(w, host, runtime, &mut verdict);
    verdict
}

/// Completes `pending`, every call answered, as [`evaluate`] decides.
pub(super) fn finish<H: Host>(
    w: &mut Worker<H>,
    host: &mut H,
    runtime: &Shared<H>,
    pending: PendingCheck,
) -> Verdict {
    let mut verdict = engine::finish(&runtime.plan, pending, &*host, &runtime.metrics);
    queue_from(w, host, runtime, &mut verdict);
    verdict
}

/// Queues the renewal `verdict` carries, if any.
fn queue_from<H: Host>(
    w: &mut Worker<H>,
    host: &mut H,
    runtime: &Shared<H>,
    verdict: &mut Verdict,
) {
    if let Some(renewal) = verdict.take_renewal() {
        queue(w, host, runtime, renewal);
    }
}

/// Queues `renewal` and wakes the root to send it.
pub(super) fn queue<H: Host>(
    w: &mut Worker<H>,
    host: &mut H,
    runtime: &Shared<H>,
    renewal: Renewal,
) {
    w.renewals_queued.push((Rc::clone(runtime), renewal));
    wake::root(w, host);
}

/// Abandons `pending`, a check whose request is gone (what it took locally
/// goes back), and queues the renewal it carried, if any.
pub(super) fn abandon<H: Host>(
    w: &mut Worker<H>,
    host: &mut H,
    runtime: &Shared<H>,
    pending: PendingCheck,
) {
    if let Some(renewal) = pending.abandon(&runtime.plan, host, &runtime.metrics) {
        queue(w, host, runtime, renewal);
    }
}

/// Sends the queued renewals from root context `root`, which is running:
/// one call per configuration for all the leases they ask for (up to the
/// limits a check carries).
pub(super) fn send_queued<H: Host>(w: &mut Worker<H>, host: &mut H, root: u32) {
    for (runtime, renewal) in batched::<H>(std::mem::take(&mut w.renewals_queued)) {
        let body = renewal.body(&runtime.plan.domain);
        match dispatch(host, &runtime, &body) {
            Some(token) => {
                // One per call sent, however many keys it renews: the
                // limiter counts the same calls.
                runtime.metrics.global(GlobalEvent::LeaseRenewals);
                w.renewals.push(RenewalCall {
                    token,
                    root,
                    runtime,
                    renewal,
                });
            }
            None => {
                runtime.metrics.global(GlobalEvent::LimiterUnreachable);
                renewal.settle(&runtime.plan, host, &runtime.metrics, None);
            }
        }
    }
}

/// `queued` merged into one renewal per configuration, each asking for at
/// most [`MAX_LIMITS`] leases.
fn batched<H: Host>(queued: Vec<(Shared<H>, Renewal)>) -> Vec<(Shared<H>, Renewal)> {
    let mut calls: Vec<(Shared<H>, Renewal)> = Vec::new();
    for (runtime, renewal) in queued {
        let joins = calls.iter_mut().rev().find(|(r, batch)| {
            Rc::ptr_eq(r, &runtime) && batch.len() + renewal.len() <= MAX_LIMITS
        });
        match joins {
            Some((_, batch)) => batch.absorb(renewal),
            None => calls.push((runtime, renewal)),
        }
    }
    calls
}

/// The answer (`None`: failed) to call `token`, if it is a renewal's:
/// settles it. Returns whether it was.
pub(super) fn answered<H: Host>(
    w: &mut Worker<H>,
    host: &mut H,
    token: u32,
    body: Option<&[u8]>,
) -> bool {
    let Some(call) = take_where(&mut w.renewals, |c| c.token == token).pop() else {
        return false;
    };
    let runtime = &call.runtime;
    call.renewal
        .settle(&runtime.plan, host, &runtime.metrics, body);
    true
}

/// Root `root` is closing: its renewals will not be answered, so they end
/// with nothing granted (the leases stop waiting for them); when it is the
/// worker's last root, so do the renewals still queued.
pub(super) fn root_closing<H: Host>(w: &mut Worker<H>, host: &mut H, root: u32, last: bool) {
    for call in take_where(&mut w.renewals, |c| c.root == root) {
        let runtime = &call.runtime;
        call.renewal
            .settle(&runtime.plan, host, &runtime.metrics, None);
    }
    if last {
        for (runtime, renewal) in std::mem::take(&mut w.renewals_queued) {
            renewal.settle(&runtime.plan, host, &runtime.metrics, None);
        }
    }
}
