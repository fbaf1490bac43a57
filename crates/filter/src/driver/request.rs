//! A request as the driver keeps it between its callbacks, and as the
//! engine reads it through the host.

use super::host::{Buffer, Host, Map};
use super::parts::{Headers, Shared, SharedCall};
use crate::engine::concurrency::Held;
use crate::engine::cost_reader::CostReader;
use crate::engine::settle::Owed;
use crate::engine::{Admitted, Delayed, PendingCheck, Verdict};
use crate::grpc;
use crate::key::RequestView;
use crate::rls::Reply;
use sluice_core::Nanos;

/// One request of the worker, from its headers to the end of its stream.
pub(super) struct Request<H: Host> {
    /// The configuration in force when it came (`None`: none yet).
    pub(super) runtime: Option<Shared<H>>,
    pub(super) pending: Option<PendingCheck>,
    /// Outstanding limiter calls: (token, call index).
    pub(super) tokens: Vec<(u32, usize)>,
    pub(super) admitted: Option<Admitted>,
    /// A request held in delay mode: what to give back if its client leaves
    /// while it waits; kept for the `x-sluice-delayed-ms` header after.
    pub(super) held: Option<Delayed>,
    /// The check of the coalescing group whose call in flight is this
    /// request's own: the group's next call waits for it.
    pub(super) group: Option<Vec<u8>>,
    /// The group's call this request carries, and its own outcome, applied
    /// once that call is answered.
    pub(super) carrying: Option<(SharedCall<H>, Verdict)>,
    /// What the rate limit service asked for in its answer.
    pub(super) reply: Option<Reply>,
    /// The permits of concurrency limits it holds until its stream ends.
    pub(super) holding: Held,
    /// What the response says the request cost, for the rules it owes.
    pub(super) cost: Option<CostReader>,
    /// It waits for its body (a rule estimates from it).
    pub(super) awaiting_body: bool,
    /// Its headers, taken when they went on before its body (it is decided
    /// once the body is in, when Envoy no longer shows them).
    pub(super) shown: Option<Headers>,
    /// Waiting for a permit (or waited for one).
    pub(super) waiting: Option<Wait>,
    /// Its check is the root's to make.
    pub(super) rooted: bool,
}

impl<H: Host> Request<H> {
    pub(super) fn new(runtime: Option<Shared<H>>) -> Request<H> {
        Request {
            runtime,
            pending: None,
            tokens: Vec::new(),
            admitted: None,
            held: None,
            group: None,
            carrying: None,
            reply: None,
            holding: Held::default(),
            cost: None,
            awaiting_body: false,
            shown: None,
            waiting: None,
            rooted: false,
        }
    }

    /// Reads what the response says the request cost, for the rules of
    /// `owed`, and settles when the stream ends.
    pub(super) fn owe(&mut self, owed: Vec<Owed>) {
        if !owed.is_empty() {
            self.cost = CostReader::new(owed);
        }
    }
}

/// A request waiting for a permit of rule `rule`'s concurrency limit:
/// since when, and until when it may.
#[derive(Debug, Clone, Copy)]
pub(super) struct Wait {
    pub(super) since: Nanos,
    pub(super) deadline: Nanos,
    pub(super) rule: usize,
}

/// The request as the host shows it: its headers (or the snapshot of a
/// request decided after its body, when Envoy no longer shows them), its
/// peer, and its body of `body_size` bytes (0: none).
pub(super) struct View<'a, H> {
    pub(super) host: &'a H,
    pub(super) shown: Option<&'a Headers>,
    pub(super) body_size: usize,
}

impl<H: Host> View<'_, H> {
    fn header(&self, name: &str) -> Option<String> {
        match self.shown {
            Some(headers) => headers
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.clone()),
            None => self.host.header(Map::RequestHeaders, name),
        }
    }

    /// Whether the request is a gRPC call.
    pub(super) fn is_grpc(&self) -> bool {
        self.header("content-type")
            .is_some_and(|c| grpc::is_grpc(&c))
    }

    /// The request's `grpc-timeout`, if it is a gRPC call that has one.
    pub(super) fn grpc_deadline(&self) -> Option<Nanos> {
        if !self.is_grpc() {
            return None;
        }
        self.header("grpc-timeout")
            .and_then(|t| grpc::parse_timeout(&t))
    }
}

impl<H: Host> RequestView for View<'_, H> {
    fn header(&self, name: &str) -> Option<String> {
        View::header(self, name)
    }

    fn source_address(&self) -> Option<String> {
        let bytes = self.host.property(&["source", "address"])?;
        String::from_utf8(bytes).ok()
    }

    fn property(&self, path: &[&str]) -> Option<Vec<u8>> {
        self.host.property(path)
    }

    fn body(&self) -> Option<Vec<u8>> {
        if self.body_size == 0 {
            return None;
        }
        self.host.buffer(Buffer::RequestBody, self.body_size)
    }
}

/// The focused request's headers, taken while Envoy still shows them.
pub(super) fn snapshot<H: Host>(host: &H) -> Headers {
    host.request_headers().into()
}
