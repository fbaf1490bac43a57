//! The driver's [`Host`] through proxy-wasm host calls: each method is one
//! host call, translated.

use super::clock::now;
use super::metrics::{MetricIds, Metrics};
use proxy_wasm::hostcalls;
use proxy_wasm::types::{BufferType, GrpcStatusCode, MapType, Status};
use sluice_core::{Nanos, MILLISECOND};
use sluice_filter::config::Rule;
use sluice_filter::driver::{Buffer, Host, LocalReply, Map, Outgoing};
use sluice_filter::local::{SetError, SharedStore};
use std::time::Duration;

/// The host calls' own state: the id of every metric this VM defined, by
/// name (each configuration reuses them: defining a name again grew
/// Envoy's memory at each configuration push).
#[derive(Default)]
pub(super) struct Proxy {
    metric_ids: MetricIds,
}

fn map_type(map: Map) -> MapType {
    match map {
        Map::RequestHeaders => MapType::HttpRequestHeaders,
        Map::ResponseHeaders => MapType::HttpResponseHeaders,
        Map::ResponseTrailers => MapType::HttpResponseTrailers,
        Map::CallAnswerHeaders => MapType::HttpCallResponseHeaders,
    }
}

/// `bytes` as text: Envoy lets header values carry bytes that are not
/// UTF-8 (obs-text); each invalid sequence reads as U+FFFD instead of
/// failing the read (the SDK's text reads would panic and stop the VM).
fn text(bytes: Vec<u8>) -> String {
    String::from_utf8(bytes).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

fn millis(timeout: Nanos) -> Duration {
    Duration::from_millis(timeout / MILLISECOND)
}

impl SharedStore for Proxy {
    fn get(&self, key: &str) -> (Option<Vec<u8>>, Option<u32>) {
        hostcalls::get_shared_data(key).unwrap_or((None, None))
    }

    fn set(&self, key: &str, value: &[u8], cas: Option<u32>) -> Result<(), SetError> {
        match hostcalls::set_shared_data(key, Some(value), cas) {
            Ok(()) => Ok(()),
            Err(Status::CasMismatch) => Err(SetError::CasMismatch),
            Err(_) => Err(SetError::Failed),
        }
    }

    fn clock(&self) -> Option<Nanos> {
        Some(now()).filter(|&t| t > 0)
    }
}

impl Host for Proxy {
    type Metrics = Metrics;

    fn now(&self) -> Nanos {
        now()
    }

    fn define_metrics(&mut self, rules: &[Rule]) -> Metrics {
        Metrics::define(&mut self.metric_ids, rules)
    }

    fn config_error(&mut self) {
        // Dropping the metrics flushes them.
        sluice_filter::metrics::MetricSink::global(
            &Metrics::define(&mut self.metric_ids, &[]),
            sluice_filter::metrics::GlobalEvent::ConfigErrors,
        );
    }

    fn focus(&mut self, context: u32) -> bool {
        hostcalls::set_effective_context(context).is_ok()
    }

    fn header(&self, map: Map, name: &str) -> Option<String> {
        hostcalls::get_map_value_bytes(map_type(map), name)
            .ok()
            .flatten()
            .map(text)
    }

    fn request_headers(&self) -> Vec<(String, String)> {
        hostcalls::get_map_bytes(MapType::HttpRequestHeaders)
            .unwrap_or_default()
            .into_iter()
            .map(|(name, value)| (name, text(value)))
            .collect()
    }

    fn property(&self, path: &[&str]) -> Option<Vec<u8>> {
        hostcalls::get_property(path.to_vec()).ok().flatten()
    }

    fn buffer(&self, buffer: Buffer, size: usize) -> Option<Vec<u8>> {
        let kind = match buffer {
            Buffer::RequestBody => BufferType::HttpRequestBody,
            Buffer::ResponseBody => BufferType::HttpResponseBody,
            Buffer::CallAnswerBody => BufferType::HttpCallResponseBody,
            Buffer::GrpcAnswer => BufferType::GrpcReceiveBuffer,
        };
        hostcalls::get_buffer(kind, 0, size).ok().flatten()
    }

    fn resume(&mut self) {
        let _ = hostcalls::resume_http_request();
    }

    fn reply(&mut self, reply: LocalReply<'_>) -> bool {
        let sent = match reply {
            LocalReply::Http {
                status,
                headers,
                body,
            } => hostcalls::send_http_response(status, headers, Some(body)),
            LocalReply::Grpc { message, metadata } => hostcalls::send_grpc_response(
                GrpcStatusCode::ResourceExhausted,
                Some(message),
                metadata,
            ),
        };
        sent.is_ok()
    }

    fn add_header(&mut self, map: Map, name: &str, value: &str, replace: bool) {
        let _ = if replace {
            hostcalls::set_map_value(map_type(map), name, Some(value))
        } else {
            hostcalls::add_map_value(map_type(map), name, value)
        };
    }

    fn set_state(&mut self, name: &str, value: &str) {
        let _ = hostcalls::set_property(vec![name], Some(value.as_bytes()));
    }

    fn dispatch(&mut self, call: Outgoing<'_>) -> Option<u32> {
        let sent = match call {
            Outgoing::Http {
                cluster,
                authority,
                path,
                body,
                timeout,
            } => {
                let headers = vec![
                    (":method", "POST"),
                    (":path", path),
                    (":authority", authority),
                    ("content-type", "application/json"),
                ];
                hostcalls::dispatch_http_call(cluster, headers, Some(body), vec![], millis(timeout))
            }
            // Envoy takes a name that is not a GrpcService message as the
            // cluster's name.
            Outgoing::Grpc {
                cluster,
                service,
                method,
                body,
                timeout,
            } => hostcalls::dispatch_grpc_call(
                cluster,
                service,
                method,
                vec![],
                Some(body),
                millis(timeout),
            ),
        };
        sent.ok()
    }

    fn set_tick_period(&mut self, period: Nanos) {
        let _ = hostcalls::set_tick_period(Duration::from_nanos(period));
    }

    fn register_queue(&mut self, name: &str) -> Option<u32> {
        hostcalls::register_shared_queue(name).ok()
    }

    fn enqueue(&mut self, queue: u32) -> bool {
        // What a wake-up carries does not matter: the work waits in the
        // worker.
        hostcalls::enqueue_shared_queue(queue, Some(b"w")).is_ok()
    }

    fn dequeue(&mut self, queue: u32) -> bool {
        matches!(hostcalls::dequeue_shared_queue(queue), Ok(Some(_)))
    }
}
