//! The request being decided, as the host shows it.

use proxy_wasm::hostcalls;
use proxy_wasm::types::MapType;
use sluice_core::Nanos;
use sluice_filter::grpc;
use sluice_filter::key::RequestView;

/// The request as the host shows it.
pub(super) struct HostRequest;

impl RequestView for HostRequest {
    fn header(&self, name: &str) -> Option<String> {
        hostcalls::get_map_value(MapType::HttpRequestHeaders, name)
            .ok()
            .flatten()
    }

    fn source_address(&self) -> Option<String> {
        let bytes = hostcalls::get_property(vec!["source", "address"])
            .ok()
            .flatten()?;
        String::from_utf8(bytes).ok()
    }
}

/// Whether the request being decided is a gRPC call.
pub(super) fn is_grpc_request() -> bool {
    hostcalls::get_map_value(MapType::HttpRequestHeaders, "content-type")
        .ok()
        .flatten()
        .is_some_and(|c| grpc::is_grpc(&c))
}

/// The request's `grpc-timeout`, if it is a gRPC call that has one.
pub(super) fn grpc_deadline() -> Option<Nanos> {
    if !is_grpc_request() {
        return None;
    }
    hostcalls::get_map_value(MapType::HttpRequestHeaders, "grpc-timeout")
        .ok()
        .flatten()
        .and_then(|t| grpc::parse_timeout(&t))
}
