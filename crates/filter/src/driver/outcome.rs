//! Carrying out the engine's outcomes on the focused request: holding it in
//! delay mode, sending the denial, adding the admitted response's headers,
//! and telling the access log; or giving back what an outcome took when
//! its request is gone.

use super::cost;
use super::host::{Host, LocalReply, Map};
use super::parts::{Headers, Shared};
use super::permits;
use super::renewal;
use super::request::View;
use super::worker::Worker;
use super::HOLD_TICK;
use crate::config::{Plan, ServiceHeaders};
use crate::engine::concurrency::Held;
use crate::engine::{Admitted, Delayed, Denied, Verdict};
use crate::grpc;
use crate::response;
use crate::rls::Reply;

/// Gives back what `verdict`, never carried out, took: its request is gone
/// (permits, and what a held request consumed as of when it would have
/// resumed; a check still to make takes back what it took locally).
pub(super) fn unapplied<H: Host>(
    w: &mut Worker<H>,
    host: &mut H,
    runtime: &Shared<H>,
    verdict: Verdict,
) {
    match verdict {
        Verdict::Allow(mut admitted) => {
            permits::give_back(w, host, runtime, std::mem::take(&mut admitted.held));
        }
        Verdict::Delay(mut delayed) => {
            permits::give_back(w, host, runtime, delayed.take_held());
            let resume_at = delayed.resume_at();
            let now = host.now();
            let taken = delayed.give_back(&runtime.plan, &*host, &runtime.metrics, now);
            cost::refund(w, host, runtime, taken, resume_at);
        }
        Verdict::Deny(mut denied) => {
            permits::give_back(w, host, runtime, std::mem::take(&mut denied.held));
        }
        Verdict::Check(pending) => renewal::abandon(w, host, runtime, *pending),
    }
}

/// Queues the delayed request of `context`, the focused one, until it
/// conforms, counting it as held; when its rule's queue is full (or a gRPC
/// client would give up first), denies it instead (`Err`, with the global
/// permits the request took, for the caller to give back).
pub(super) fn hold<H: Host>(
    w: &mut Worker<H>,
    host: &mut H,
    context: u32,
    runtime: &Shared<H>,
    delayed: Box<Delayed>,
    shown: Option<&Headers>,
) -> Result<Box<Delayed>, Held> {
    let (rule, max_queued) = runtime
        .plan
        .rules
        .get(delayed.rule)
        .map_or(("", 0), |r| (r.name.as_str(), r.max_queued));
    let resume_at = delayed.resume_at();
    let view = View {
        host: &*host,
        shown,
        body_size: 0,
    };
    let queued = if grpc::outlives(delayed.delay, view.grpc_deadline()) {
        // The client would give up first: deny now, as a full queue does.
        Err(())
    } else {
        let was_empty = w.queue.is_empty();
        w.queue
            .push(context, rule, resume_at, max_queued)
            .map(|()| was_empty)
            .map_err(|_| ())
    };
    match queued {
        Ok(first) => {
            if first {
                // The root ticks finely until the queue is empty again.
                host.set_tick_period(HOLD_TICK);
            }
            delayed.accept(&runtime.metrics);
            for_access_log(host, "delayed", rule);
            Ok(delayed)
        }
        Err(()) => {
            let mut denied = delayed.refuse(&runtime.plan, &*host, &runtime.metrics);
            send_denial(host, &runtime.plan, &denied, None, shown);
            Err(std::mem::take(&mut denied.held))
        }
    }
}

/// Sends the denial to the focused request, with what a rate limit service
/// asked for in `reply` (its headers in place of Sluice's of the same name,
/// its body).
pub(super) fn send_denial<H: Host>(
    host: &mut H,
    plan: &Plan,
    denied: &Denied,
    reply: Option<&Reply>,
    shown: Option<&Headers>,
) {
    let wait = reply.and_then(|r| r.retry_after);
    let extra = response::denial_headers(
        plan,
        &denied.report,
        &denied.applied,
        &denied.shadow_denied,
        wait,
    );
    let rule = response::rule_name(plan, denied.report.rule);
    for_access_log(host, "denied", rule);
    super::topkeys::for_access_log(host, plan, denied);
    let configured = plan
        .response
        .headers
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()));
    let extra = extra.iter().map(|(k, v)| (*k, v.as_str()));
    let service = reply
        .filter(|_| service_headers(plan) != ServiceHeaders::Never)
        .map_or(&[][..], |r| r.response_headers.as_slice());
    let headers = response::with_service_headers(configured.chain(extra), service);
    let grpc = View {
        host: &*host,
        shown,
        body_size: 0,
    }
    .is_grpc();
    let message;
    let answer = if grpc {
        // Envoy writes the gRPC content type, status and message.
        message = grpc::denial_message(rule);
        LocalReply::Grpc {
            message: &message,
            metadata: headers
                .into_iter()
                .filter(|(k, _)| *k != "content-type")
                .map(|(k, v)| (k, v.as_bytes()))
                .collect(),
        }
    } else {
        LocalReply::Http {
            status: plan.response.status,
            headers,
            body: reply
                .and_then(|r| r.body.as_deref())
                .unwrap_or(plan.response.body.as_bytes()),
        }
    };
    if !host.reply(answer) {
        log::warn!("sluice: cannot send the denial");
    }
}

/// Tells Envoy's access log what Sluice did with the request: filter state
/// `wasm.sluice_outcome` (`denied` or `delayed`) and `wasm.sluice_rule`.
fn for_access_log<H: Host>(host: &mut H, outcome: &str, rule: &str) {
    host.set_state("sluice_outcome", outcome);
    host.set_state("sluice_rule", rule);
}

/// Adds the rate-limit headers of an admitted request to its response.
pub(super) fn add_response_headers<H: Host>(host: &mut H, plan: &Plan, admitted: &Admitted) {
    let headers = response::admitted_headers(
        plan,
        admitted.report.as_ref(),
        &admitted.applied,
        &admitted.shadow_denied,
    );
    for (name, value) in headers {
        host.add_header(Map::ResponseHeaders, name, &value, false);
    }
}

/// Which responses get a rate limit service's headers.
fn service_headers(plan: &Plan) -> ServiceHeaders {
    plan.limiter
        .as_ref()
        .map_or(ServiceHeaders::Never, |l| l.service_headers)
}

/// Adds the request headers a rate limit service asked for to the admitted
/// request, unless they went on before its decision (`went_on`).
pub(super) fn add_request_headers<H: Host>(host: &mut H, reply: &Reply, went_on: bool) {
    if went_on {
        return;
    }
    for (name, value) in &reply.request_headers {
        host.add_header(Map::RequestHeaders, name, value, false);
    }
}

/// Adds the response headers a rate limit service asked for to the admitted
/// request's response, in place of Sluice's of the same name.
pub(super) fn add_service_response_headers<H: Host>(host: &mut H, plan: &Plan, reply: &Reply) {
    if service_headers(plan) != ServiceHeaders::Always {
        return;
    }
    for (i, (name, value)) in reply.response_headers.iter().enumerate() {
        let repeated = reply.response_headers[..i].iter().any(|(n, _)| n == name);
        host.add_header(Map::ResponseHeaders, name, value, !repeated);
    }
}
