//! Calls to the limiter cluster (`POST /v1/check`, or the rate limit
//! service's gRPC method) and the answers' bodies.

use super::clock::now;
use super::runtime::Runtime;
use super::state;
use proxy_wasm::hostcalls;
use proxy_wasm::types::{BufferType, MapType};
use sluice_core::MILLISECOND;
use sluice_filter::config::Protocol;
use sluice_filter::failure::CallFailure;
use sluice_filter::metrics::MetricSink;
use sluice_filter::rls;
use std::time::Duration;

/// The body of the answer to the HTTP call being reported, when its status
/// is 200; else `None`, the failure counted (and logged) for `runtime`.
pub(super) fn call_answer(runtime: Option<&Runtime>, body_size: usize) -> Option<Vec<u8>> {
    let answer = read_answer(body_size);
    if let (Err(failure), Some(runtime)) = (&answer, runtime) {
        call_failed(runtime, *failure);
    }
    answer.ok()
}

/// The body of the answer to the HTTP call being reported, or why the call
/// failed.
fn read_answer(body_size: usize) -> Result<Vec<u8>, CallFailure> {
    let header = |name| super::request::map_value(MapType::HttpCallResponseHeaders, name);
    let status = header(":status");
    // The limiter's own answers are JSON; Envoy's local replies are not.
    let from_limiter = header("content-type").is_some_and(|c| c.starts_with("application/json"));
    if let Some(failure) = CallFailure::of_http(status.as_deref(), from_limiter) {
        return Err(failure);
    }
    hostcalls::get_buffer(BufferType::HttpCallResponseBody, 0, body_size)
        .ok()
        .flatten()
        .ok_or(CallFailure::Unreadable)
}

/// Counts a failed limiter call under its reason and, at most every
/// [`sluice_filter::failure::WARN_PERIOD`] per VM, logs it.
pub(super) fn call_failed(runtime: &Runtime, failure: CallFailure) {
    runtime.metrics.global(failure.event());
    let Some(limiter) = runtime.plan.limiter.as_ref() else {
        return;
    };
    let Some(quiet) = state::log_failure(now()) else {
        return;
    };
    log::warn!(
        "sluice: limiter cluster {:?} failed: {} ({quiet} more failed call(s) not logged since the last warning); a check follows failure_mode {:?}, a give-back or charge is not retried; counted in sluice.limiter_failed_*",
        limiter.cluster,
        failure.reason(),
        limiter.failure_mode,
    );
}

/// Sends a `POST /v1/permits` (permits given back or renewed) to the
/// limiter of `runtime`; `None` when the call could not be made. Its answer
/// comes to the context current now (a root context's).
pub(super) fn dispatch_permits(runtime: &Runtime, body: &[u8]) -> Option<u32> {
    dispatch_to(runtime, "/v1/permits", body)
}

/// Sends a `POST /v1/charge` (costs settled after responses), as
/// [`dispatch_permits`].
pub(super) fn dispatch_charge(runtime: &Runtime, body: &[u8]) -> Option<u32> {
    dispatch_to(runtime, "/v1/charge", body)
}

fn dispatch_to(runtime: &Runtime, path: &str, body: &[u8]) -> Option<u32> {
    let limiter = runtime.plan.limiter.as_ref()?;
    let headers = vec![
        (":method", "POST"),
        (":path", path),
        (":authority", limiter.authority.as_str()),
        ("content-type", "application/json"),
    ];
    let timeout = Duration::from_millis(limiter.timeout / MILLISECOND);
    hostcalls::dispatch_http_call(&limiter.cluster, headers, Some(body), vec![], timeout).ok()
}

/// Calls the limiter; `None` when the call could not be made.
pub(super) fn dispatch(runtime: &Runtime, body: &[u8]) -> Option<u32> {
    let limiter = runtime.plan.limiter.as_ref()?;
    let headers = vec![
        (":method", "POST"),
        (":path", "/v1/check"),
        (":authority", limiter.authority.as_str()),
        ("content-type", "application/json"),
    ];
    let timeout = Duration::from_millis(limiter.timeout / MILLISECOND);
    let sent = match limiter.protocol {
        Protocol::Sluice => {
            hostcalls::dispatch_http_call(&limiter.cluster, headers, Some(body), vec![], timeout)
        }
        // Envoy takes a name that is not a GrpcService message as the
        // cluster's name.
        Protocol::Rls => hostcalls::dispatch_grpc_call(
            &limiter.cluster,
            rls::SERVICE,
            rls::METHOD,
            vec![],
            Some(body),
            timeout,
        ),
    };
    sent.ok()
}
