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

/// One request of the worker, from its headers to the end of its stream
/// (only requests that came under a configuration are kept).
pub(super) struct Request<H: Host> {
    /// The configuration in force when it came.
    pub(super) runtime: Shared<H>,
    /// Where it is in its decision.
    pub(super) phase: Phase<H>,
    /// Its headers, taken when they went on before its body (it is decided
    /// once the body is in, when Envoy no longer shows them).
    pub(super) shown: Option<Headers>,
    /// What the rate limit service asked for in its answer.
    pub(super) reply: Option<Reply>,
    /// What its response reports, once admitted.
    pub(super) admitted: Option<Admitted>,
    /// The permits of concurrency limits it holds until its stream ends.
    pub(super) holding: Held,
    /// What the response says it cost, for the rules it owes.
    pub(super) cost: Option<CostReader>,
    /// It waited (or waits) for a permit.
    pub(super) waiting: Option<Wait>,
}

/// Where a request is in its decision: each phase says who holds what it
/// asked for, and so what its end gives back.
pub(super) enum Phase<H: Host> {
    /// Its headers are not in yet.
    New,
    /// It is decided once its body is in (its last chunk, or its trailers
    /// after it); `seen`: the bytes of it held so far.
    AwaitingBody { seen: usize },
    /// Its own check is out; `group`: the coalescing group whose next call
    /// waits for it.
    Checking {
        /// Boxed as the engine's verdict hands it over (a verdict moves at
        /// the size of an `Allow`).
        pending: Box<PendingCheck>,
        tokens: Vec<(u32, usize)>,
        group: Option<Vec<u8>>,
    },
    /// Its own call answered, it carries its group's next call; its own
    /// outcome is carried out once that is answered.
    Carrying {
        call: SharedCall<H>,
        verdict: Box<Verdict>,
    },
    /// It waits for its coalescing group's next call (the group holds its
    /// check).
    Grouped,
    /// Its check is the root's to make (queued, or out).
    Rooted,
    /// It waits for a permit: the root decides it again at its ticks.
    Waiting,
    /// Held in delay mode: given back if it leaves while queued; its
    /// response reports the delay.
    Held(Box<Delayed>),
    /// A poll of the quota endpoint waiting for the limiter's answer.
    Quota(super::parts::Asking),
    /// Decided: it goes on, or it was answered.
    Decided,
}

impl<H: Host> Request<H> {
    pub(super) fn new(runtime: Shared<H>) -> Request<H> {
        Request {
            runtime,
            phase: Phase::New,
            shown: None,
            reply: None,
            admitted: None,
            holding: Held::default(),
            cost: None,
            waiting: None,
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
