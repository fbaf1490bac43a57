//! What the driver needs from the proxy: the calls it makes on Envoy, each
//! the translation of one proxy-wasm host call. The proxy-wasm adapter
//! (`src/host/`) implements it with host calls; the driver's tests with a
//! fake that records what was done and serves a manual clock.
//!
//! Calls that act on a request (resume it, answer it, add its headers, read
//! them) act on the *focused* context: the one whose callback runs, or the
//! one [`Host::focus`] last chose (proxy-wasm's effective context).

use crate::local::SharedStore;
use crate::metrics::MetricSink;
use sluice_core::Nanos;

/// The header maps the driver reads or writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Map {
    RequestHeaders,
    ResponseHeaders,
    ResponseTrailers,
    /// The headers of the answer to the call being reported.
    CallAnswerHeaders,
}

/// The buffers the driver reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Buffer {
    RequestBody,
    ResponseBody,
    /// The body of the HTTP call's answer being reported.
    CallAnswerBody,
    /// The message of the gRPC call's answer being reported.
    GrpcAnswer,
}

/// What a request callback tells the proxy to do with the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Continue,
    Pause,
}

/// An outgoing call to the limiter cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outgoing<'a> {
    /// `POST path` over HTTP, JSON body.
    Http {
        cluster: &'a str,
        authority: &'a str,
        path: &'a str,
        body: &'a [u8],
        timeout: Nanos,
    },
    /// A unary gRPC call.
    Grpc {
        cluster: &'a str,
        service: &'a str,
        method: &'a str,
        body: &'a [u8],
        timeout: Nanos,
    },
}

/// A local reply in place of the upstream's response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LocalReply<'a> {
    Http {
        status: u32,
        headers: Vec<(&'a str, &'a str)>,
        body: &'a [u8],
    },
    /// `RESOURCE_EXHAUSTED` with `message`, the headers as metadata.
    Grpc {
        message: &'a str,
        metadata: Vec<(&'a str, &'a [u8])>,
    },
}

/// The metrics of one configuration on one worker: counted in batches,
/// with the permits gauges moved at once.
pub trait WorkerMetrics: MetricSink {
    /// Moves rule `rule`'s permits gauge by `weight`, up when `taken`.
    fn permits(&self, rule: usize, weight: u64, taken: bool);
    /// Hands the batched counts to the proxy.
    fn flush(&self);
}

/// The proxy, as the driver uses it.
pub trait Host: SharedStore {
    /// The metrics a configuration counts in.
    type Metrics: WorkerMetrics;

    /// The proxy's clock (0 if it cannot be read).
    fn now(&self) -> Nanos;
    /// Defines the metrics of a configuration of `rules` (each name once
    /// per worker).
    fn define_metrics(&mut self, rules: &[crate::config::Rule]) -> Self::Metrics;
    /// Counts a configuration refused, at once.
    fn config_error(&mut self);

    /// Makes `context` the focused one; false if the proxy no longer knows
    /// it.
    fn focus(&mut self, context: u32) -> bool;
    /// A header of `map` of the focused context, by lowercase name.
    fn header(&self, map: Map, name: &str) -> Option<String>;
    /// Every request header of the focused context.
    fn request_headers(&self) -> Vec<(String, String)>;
    /// A property of the focused context (`source.address`, metadata).
    fn property(&self, path: &[&str]) -> Option<Vec<u8>>;
    /// The first `size` bytes of `buffer`.
    fn buffer(&self, buffer: Buffer, size: usize) -> Option<Vec<u8>>;

    /// Lets the focused request go on.
    fn resume(&mut self);
    /// Answers the focused request with `reply`; false if it could not.
    fn reply(&mut self, reply: LocalReply<'_>) -> bool;
    /// Adds (or, `replace`, sets) a header of `map` of the focused request.
    fn add_header(&mut self, map: Map, name: &str, value: &str, replace: bool);
    /// Sets filter state `name` of the focused request (for access logs).
    fn set_state(&mut self, name: &str, value: &str);

    /// Makes `call` from the focused context; its token, or `None` when it
    /// could not be made.
    fn dispatch(&mut self, call: Outgoing<'_>) -> Option<u32>;
    /// Sets the focused root's tick period.
    fn set_tick_period(&mut self, period: Nanos);
    /// Registers the shared queue `name` for the focused root.
    fn register_queue(&mut self, name: &str) -> Option<u32>;
    /// Puts a wake-up on `queue`; false if it could not.
    fn enqueue(&mut self, queue: u32) -> bool;
    /// Takes an item off `queue`; false when it is empty.
    fn dequeue(&mut self, queue: u32) -> bool;
}
