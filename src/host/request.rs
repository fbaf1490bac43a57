//! The request being decided, as the host shows it.

use super::state::{self, Headers};
use proxy_wasm::hostcalls;
use proxy_wasm::types::{BufferType, MapType};
use sluice_core::Nanos;
use sluice_filter::grpc;
use sluice_filter::key::RequestView;

/// The request as the host shows it: its headers, its peer, and, once the
/// filter waited for it, its body of `body_size` bytes (0: none).
pub(super) struct HostRequest {
    pub(super) body_size: usize,
}

/// A request header by lowercase name: from the snapshot of a request
/// decided after its body (Envoy no longer shows its headers, and asking
/// would fail), else from Envoy.
fn header(name: &str) -> Option<String> {
    if let Some(headers) = state::request_headers() {
        return headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone());
    }
    map_value(MapType::HttpRequestHeaders, name)
}

/// A header of `map` by lowercase name, as text. Envoy lets header values
/// carry bytes that are not UTF-8 (obs-text); each invalid sequence reads as
/// U+FFFD instead of failing the read (the SDK's text reads would panic and
/// stop the VM), so such values can share a key.
pub(super) fn map_value(map: MapType, name: &str) -> Option<String> {
    hostcalls::get_map_value_bytes(map, name)
        .ok()
        .flatten()
        .map(text)
}

/// `bytes` as text, invalid UTF-8 replaced (no copy when valid).
fn text(bytes: Vec<u8>) -> String {
    String::from_utf8(bytes).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// The request's headers, taken while Envoy still shows them.
pub(super) fn snapshot() -> Headers {
    hostcalls::get_map_bytes(MapType::HttpRequestHeaders)
        .unwrap_or_default()
        .into_iter()
        .map(|(name, value)| (name, text(value)))
        .collect::<Vec<_>>()
        .into()
}

/// While alive, the request's headers are read from `headers` (a request
/// decided after its body) instead of Envoy; the previous ones come back
/// when it is dropped.
pub(super) struct Shown {
    before: Option<Headers>,
}

impl Shown {
    pub(super) fn new(headers: Option<Headers>) -> Shown {
        Shown {
            before: state::set_request_headers(headers),
        }
    }
}

impl Drop for Shown {
    fn drop(&mut self) {
        state::set_request_headers(self.before.take());
    }
}

/// Whether the request's headers went on before its decision (they can no
/// longer be changed).
pub(super) fn headers_sent() -> bool {
    state::request_headers().is_some()
}

impl RequestView for HostRequest {
    fn header(&self, name: &str) -> Option<String> {
        header(name)
    }

    fn source_address(&self) -> Option<String> {
        let bytes = hostcalls::get_property(vec!["source", "address"])
            .ok()
            .flatten()?;
        String::from_utf8(bytes).ok()
    }

    fn property(&self, path: &[&str]) -> Option<Vec<u8>> {
        hostcalls::get_property(path.to_vec()).ok().flatten()
    }

    fn body(&self) -> Option<Vec<u8>> {
        if self.body_size == 0 {
            return None;
        }
        hostcalls::get_buffer(BufferType::HttpRequestBody, 0, self.body_size)
            .ok()
            .flatten()
    }
}

/// Whether the request being decided is a gRPC call.
pub(super) fn is_grpc_request() -> bool {
    header("content-type").is_some_and(|c| grpc::is_grpc(&c))
}

/// The request's `grpc-timeout`, if it is a gRPC call that has one.
pub(super) fn grpc_deadline() -> Option<Nanos> {
    if !is_grpc_request() {
        return None;
    }
    header("grpc-timeout").and_then(|t| grpc::parse_timeout(&t))
}
