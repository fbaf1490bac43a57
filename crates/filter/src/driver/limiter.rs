//! Calls to the limiter cluster (`POST /v1/check`, `/v1/permits`,
//! `/v1/charge`, or the rate limit service's gRPC method) and their
//! answers.

use super::host::{Buffer, Host, Map, Outgoing};
use super::parts::Runtime;
use super::worker::Worker;
use crate::config::Protocol;
use crate::engine::PendingCheck;
use crate::failure::CallFailure;
use crate::metrics::MetricSink;
use crate::rls;

/// How a call's answer came back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// An HTTP answer whose body has `body_size` bytes.
    Http { body_size: usize },
    /// A gRPC answer with `status` (0: OK) and a message of `size` bytes.
    Grpc { status: u32, size: usize },
}

/// The body of the HTTP answer being reported, when its status is 200;
/// else `None`, the failure counted (and logged) for `runtime`.
pub(super) fn http_answer<H: Host>(
    w: &mut Worker<H>,
    host: &H,
    runtime: Option<&Runtime<H::Metrics>>,
    body_size: usize,
) -> Option<Vec<u8>> {
    let answer = read_answer(host, body_size);
    if let (Err(failure), Some(runtime)) = (&answer, runtime) {
        log_failure(w, host, runtime, *failure, || {
            answer_detail(host, body_size)
        });
    }
    answer.ok()
}

/// The longest part of an error answer's body a warning quotes.
const DETAIL_BYTES: usize = 256;

/// What a failed answer said, for its warning: its status and the start of
/// its body (the limiter's JSON error names the field it refused).
fn answer_detail<H: Host>(host: &H, body_size: usize) -> String {
    let status = host.header(Map::CallAnswerHeaders, ":status");
    let body = host
        .buffer(Buffer::CallAnswerBody, body_size.min(DETAIL_BYTES))
        .unwrap_or_default();
    format!(
        " (status {}: {})",
        status.as_deref().unwrap_or("none"),
        String::from_utf8_lossy(&body).trim_end()
    )
}

fn read_answer<H: Host>(host: &H, body_size: usize) -> Result<Vec<u8>, CallFailure> {
    let status = host.header(Map::CallAnswerHeaders, ":status");
    if status.as_deref() != Some("200") {
        // Only a failure's reason needs the content type: the limiter's
        // own answers are JSON, Envoy's local replies are not.
        let from_limiter = host
            .header(Map::CallAnswerHeaders, "content-type")
            .is_some_and(|c| c.starts_with("application/json"));
        if let Some(failure) = CallFailure::of_http(status.as_deref(), from_limiter) {
            return Err(failure);
        }
    }
    host.buffer(Buffer::CallAnswerBody, body_size)
        .ok_or(CallFailure::Unreadable)
}

/// The message of a gRPC answer with `status`, if OK.
pub(super) fn grpc_answer<H: Host>(host: &H, status: u32, size: usize) -> Option<Vec<u8>> {
    (status == 0)
        .then(|| host.buffer(Buffer::GrpcAnswer, size))
        .flatten()
}

/// Counts a failed limiter call under its reason and, at most every
/// [`crate::failure::WARN_PERIOD`] per worker, logs it.
pub(super) fn call_failed<H: Host>(
    w: &mut Worker<H>,
    host: &H,
    runtime: &Runtime<H::Metrics>,
    failure: CallFailure,
) {
    log_failure(w, host, runtime, failure, String::new);
}

/// [`call_failed`], with `detail` added to the warning when one is logged
/// (read only then: most failures are counted, not logged).
fn log_failure<H: Host>(
    w: &mut Worker<H>,
    host: &H,
    runtime: &Runtime<H::Metrics>,
    failure: CallFailure,
    detail: impl FnOnce() -> String,
) {
    runtime.metrics.global(failure.event());
    let Some(limiter) = runtime.plan.limiter.as_ref() else {
        return;
    };
    let Some(quiet) = w.failure_log.admit(host.now()) else {
        return;
    };
    log::warn!(
        "sluice: limiter cluster {:?} failed: {}{} ({quiet} more failed call(s) not logged since the last warning); a check follows failure_mode {:?}, a give-back or charge is not retried; counted in sluice.limiter_failed_*",
        limiter.cluster,
        failure.reason(),
        detail(),
        limiter.failure_mode,
    );
}

/// Sends a `POST /v1/permits` (permits given back or renewed); `None` when
/// the call could not be made. Its answer comes to the focused context.
pub(super) fn dispatch_permits<H: Host, M>(
    host: &mut H,
    runtime: &Runtime<M>,
    body: &[u8],
) -> Option<u32> {
    dispatch_to(host, runtime, "/v1/permits", body)
}

/// Sends a `POST /v1/charge` (costs settled after responses).
pub(super) fn dispatch_charge<H: Host, M>(
    host: &mut H,
    runtime: &Runtime<M>,
    body: &[u8],
) -> Option<u32> {
    dispatch_to(host, runtime, "/v1/charge", body)
}

fn dispatch_to<H: Host, M>(
    host: &mut H,
    runtime: &Runtime<M>,
    path: &str,
    body: &[u8],
) -> Option<u32> {
    let limiter = runtime.plan.limiter.as_ref()?;
    host.dispatch(Outgoing::Http {
        cluster: &limiter.cluster,
        authority: &limiter.authority,
        path,
        body,
        timeout: limiter.timeout,
    })
}

/// Makes the calls of `pending` from the focused context: their tokens and
/// call indexes; a call that could not be made is recorded as failed. None
/// made: every call is answered, `pending` can be finished at once.
pub(super) fn send_check<H: Host>(
    w: &mut Worker<H>,
    host: &mut H,
    runtime: &Runtime<H::Metrics>,
    pending: &mut PendingCheck,
) -> Vec<(u32, usize)> {
    let mut tokens = Vec::with_capacity(pending.call_count());
    for call in 0..pending.call_count() {
        match dispatch(host, runtime, pending.body(call)) {
            Some(token) => tokens.push((token, call)),
            None => {
                call_failed(w, host, runtime, CallFailure::Unreachable);
                pending.record(call, None);
            }
        }
    }
    tokens
}

/// Records `body`, the answer to call `token` of `pending` (whose calls
/// still out are `tokens`); an answer that could not be read counts as a
/// failed call. Returns whether every call of `pending` is answered.
pub(super) fn record_answer<H: Host>(
    w: &mut Worker<H>,
    host: &H,
    runtime: &Runtime<H::Metrics>,
    (pending, tokens): (&mut PendingCheck, &mut Vec<(u32, usize)>),
    token: u32,
    body: Option<&[u8]>,
) -> bool {
    let Some(at) = tokens.iter().position(|(t, _)| *t == token) else {
        return false;
    };
    let (_, call) = tokens.swap_remove(at);
    let complete = pending.record(call, body);
    if pending.unreadable(call) {
        call_failed(w, host, runtime, CallFailure::Unreadable);
    }
    complete
}

/// Calls the limiter (a check, or a rate limit service's method); `None`
/// when the call could not be made.
pub(super) fn dispatch<H: Host, M>(host: &mut H, runtime: &Runtime<M>, body: &[u8]) -> Option<u32> {
    let limiter = runtime.plan.limiter.as_ref()?;
    match limiter.protocol {
        Protocol::Sluice => dispatch_to(host, runtime, "/v1/check", body),
        Protocol::Rls => host.dispatch(Outgoing::Grpc {
            cluster: &limiter.cluster,
            service: rls::SERVICE,
            method: rls::METHOD,
            body,
            timeout: limiter.timeout,
        }),
    }
}
