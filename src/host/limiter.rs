//! Calls to the limiter cluster (`POST /v1/check`, or the rate limit
//! service's gRPC method) and the answers' bodies.

use super::runtime::Runtime;
use proxy_wasm::hostcalls;
use proxy_wasm::types::{BufferType, MapType};
use sluice_core::MILLISECOND;
use sluice_filter::config::Protocol;
use sluice_filter::rls;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// The body of the answer to the call being reported, when its status is
/// 200.
pub(super) fn call_answer(body_size: usize) -> Option<Vec<u8>> {
    let status_ok = hostcalls::get_map_value(MapType::HttpCallResponseHeaders, ":status")
        .ok()
        .flatten()
        .is_some_and(|s| s == "200");
    if !status_ok {
        return None;
    }
    hostcalls::get_buffer(BufferType::HttpCallResponseBody, 0, body_size)
        .ok()
        .flatten()
}

/// Whether a failed call-out was logged.
static DISPATCH_WARNED: AtomicBool = AtomicBool::new(false);

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
    match sent {
        Ok(token) => Some(token),
        Err(status) => {
            // Once per VM: during an outage every request would log it.
            if !DISPATCH_WARNED.swap(true, Ordering::Relaxed) {
                log::warn!(
                    "sluice: cannot call the limiter cluster {:?}: {status:?} (counted in sluice.failure_mode_allowed or sluice.limiter_errors)",
                    limiter.cluster
                );
            }
            None
        }
    }
}
