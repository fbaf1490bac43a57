//! Carrying out the engine's outcomes on the request: holding it in delay
//! mode, sending the denial, adding the admitted response's headers, and
//! telling the access log; or giving back what an outcome took when its
//! request is gone.

use super::clock::{now, HOLD_TICK};
use super::cost;
use super::permits;
use super::renewal;
use super::request::{grpc_deadline, headers_sent, is_grpc_request};
use super::runtime::Runtime;
use super::shared_data::HostStore;
use super::state::{self, Handoff};
use proxy_wasm::hostcalls;
use proxy_wasm::types::{GrpcStatusCode, MapType};
use sluice_filter::config::{Plan, ServiceHeaders};
use sluice_filter::engine::concurrency::Held;
use sluice_filter::engine::{Admitted, Delayed, Denied, Verdict};
use sluice_filter::grpc;
use sluice_filter::response;
use sluice_filter::rls::Reply;
use std::rc::Rc;

/// Gives back what `verdict`, never carried out, took: its request is gone
/// (permits, and what a held request consumed as of when it would have
/// resumed; a check still to make takes back what it took locally).
pub(super) fn unapplied(runtime: &Rc<Runtime>, verdict: Verdict) {
    match verdict {
        Verdict::Allow(mut admitted) => {
            permits::give_back(runtime, std::mem::take(&mut admitted.held));
        }
        Verdict::Delay(mut delayed) => {
            permits::give_back(runtime, delayed.take_held());
            let resume_at = delayed.resume_at();
            let taken = delayed.give_back(&runtime.plan, &HostStore, &runtime.metrics, now());
            cost::refund(runtime, taken, resume_at);
        }
        Verdict::Deny(mut denied) => permits::give_back(runtime, std::mem::take(&mut denied.held)),
        Verdict::Check(pending) => renewal::abandon(runtime, pending),
    }
}

/// Queues a delayed request of `context` until it conforms, counting it as
/// held; when its rule's queue is full, denies it instead (`Err`, with the
/// global permits the request took, for the caller to give back).
pub(super) fn hold(context: u32, runtime: &Runtime, delayed: Delayed) -> Result<Delayed, Held> {
    let (rule, max_queued) = runtime
        .plan
        .rules
        .get(delayed.rule)
        .map_or(("", 0), |r| (r.name.as_str(), r.max_queued));
    let resume_at = delayed.resume_at();
    if grpc::outlives(delayed.delay, grpc_deadline()) {
        // The client would give up first: deny now, as a full queue does.
        let mut denied = delayed.refuse(&runtime.plan, &HostStore, &runtime.metrics);
        deny(&runtime.plan, &denied);
        return Err(std::mem::take(&mut denied.held));
    }
    let queued = state::queue(|q| {
        let was_empty = q.is_empty();
        q.push(context, rule, resume_at, max_queued)
            .map(|()| was_empty)
    });
    match queued {
        Ok(first) => {
            if first {
                // The root ticks finely until the queue is empty again.
                let _ = hostcalls::set_tick_period(HOLD_TICK);
            }
            delayed.accept(&runtime.metrics);
            for_access_log("delayed", rule);
            Ok(delayed)
        }
        Err(_) => {
            let mut denied = delayed.refuse(&runtime.plan, &HostStore, &runtime.metrics);
            deny(&runtime.plan, &denied);
            Err(std::mem::take(&mut denied.held))
        }
    }
}

/// Resumes the admitted request of `context`, the effective context, from
/// the root: its permits are kept (counted and renewed) from now, and the
/// rest is handed to it for its response.
pub(super) fn resume_admitted(context: u32, runtime: &Runtime, mut admitted: Admitted) {
    let kept = std::mem::take(&mut admitted.held);
    permits::keep(runtime, &kept);
    let _ = hostcalls::resume_http_request();
    let handoff = Handoff {
        admitted: Some(admitted),
        held: None,
        kept,
    };
    state::hand_off(context, handoff);
}

/// Holds the delayed request of `context`, the effective context, from the
/// root ([`hold`]), its permits kept as [`resume_admitted`] keeps them; a
/// request denied instead gives them back.
pub(super) fn hold_from_root(context: u32, runtime: &Rc<Runtime>, delayed: Delayed) {
    match hold(context, runtime, delayed) {
        Ok(mut held) => {
            let kept = held.take_held();
            permits::keep(runtime, &kept);
            let handoff = Handoff {
                admitted: Some(held.admitted()),
                held: Some(held),
                kept,
            };
            state::hand_off(context, handoff);
        }
        Err(taken) => permits::give_back(runtime, taken),
    }
}

pub(super) fn deny(plan: &Plan, denied: &Denied) {
    send_denial(plan, denied, None);
}

/// Sends the denial, with what a rate limit service asked for in `reply`
/// (its headers in place of Sluice's of the same name, its body).
pub(super) fn send_denial(plan: &Plan, denied: &Denied, reply: Option<&Reply>) {
    let wait = reply.and_then(|r| r.retry_after);
    let extra = response::denial_headers(
        plan,
        &denied.report,
        &denied.applied,
        &denied.shadow_denied,
        wait,
    );
    let rule = response::rule_name(plan, denied.report.rule);
    for_access_log("denied", rule);
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
    let sent = if is_grpc_request() {
        // Envoy writes the gRPC content type, status and message.
        let metadata: Vec<(&str, &[u8])> = headers
            .into_iter()
            .filter(|(k, _)| *k != "content-type")
            .map(|(k, v)| (k, v.as_bytes()))
            .collect();
        let message = grpc::denial_message(rule);
        hostcalls::send_grpc_response(GrpcStatusCode::ResourceExhausted, Some(&message), metadata)
    } else {
        let body = reply
            .and_then(|r| r.body.as_deref())
            .unwrap_or(plan.response.body.as_bytes());
        hostcalls::send_http_response(plan.response.status, headers, Some(body))
    };
    if let Err(status) = sent {
        log::warn!("sluice: cannot send the denial: {status:?}");
    }
}

/// Tells Envoy's access log what Sluice did with the request: filter state
/// `wasm.sluice_outcome` (`denied` or `delayed`) and `wasm.sluice_rule`.
fn for_access_log(outcome: &str, rule: &str) {
    let _ = hostcalls::set_property(vec!["sluice_outcome"], Some(outcome.as_bytes()));
    let _ = hostcalls::set_property(vec!["sluice_rule"], Some(rule.as_bytes()));
}

pub(super) fn add_response_headers(plan: &Plan, admitted: &Admitted) {
    let headers = response::admitted_headers(
        plan,
        admitted.report.as_ref(),
        &admitted.applied,
        &admitted.shadow_denied,
    );
    for (name, value) in headers {
        let _ = hostcalls::add_map_value(MapType::HttpResponseHeaders, name, &value);
    }
}

/// Which responses get a rate limit service's headers.
fn service_headers(plan: &Plan) -> ServiceHeaders {
    plan.limiter
        .as_ref()
        .map_or(ServiceHeaders::Never, |l| l.service_headers)
}

/// Adds the request headers a rate limit service asked for to the admitted
/// request.
pub(super) fn add_request_headers(reply: &Reply) {
    if headers_sent() {
        // Decided after its body: the headers went on before.
        return;
    }
    for (name, value) in &reply.request_headers {
        let _ = hostcalls::add_map_value(MapType::HttpRequestHeaders, name, value);
    }
}

/// Adds the response headers a rate limit service asked for to the admitted
/// request's response, in place of Sluice's of the same name.
pub(super) fn add_service_response_headers(plan: &Plan, reply: &Reply) {
    if service_headers(plan) != ServiceHeaders::Always {
        return;
    }
    for (i, (name, value)) in reply.response_headers.iter().enumerate() {
        let repeated = reply.response_headers[..i].iter().any(|(n, _)| n == name);
        let _ = if repeated {
            hostcalls::add_map_value(MapType::HttpResponseHeaders, name, value)
        } else {
            hostcalls::set_map_value(MapType::HttpResponseHeaders, name, Some(value))
        };
    }
}
