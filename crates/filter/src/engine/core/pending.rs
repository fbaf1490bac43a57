//! A request waiting for the limiter: its calls, and their answers as they
//! arrive.

use super::call::Call;
use super::env::Env;
use super::follow::FollowUp;
use super::renewal::Renewal;
use super::tally::Tally;
use crate::config::Plan;
use crate::local::SharedStore;
use crate::metrics::MetricSink;
use crate::rls;
use sluice_core::Nanos;
use sluice_wire::CheckResponse;

/// A request waiting for the limiter.
///
/// Enforcing and shadow limits go in separate calls: the limiter decides the
/// limits of one call together (a denial consumes nothing), and a shadow
/// denial must not stop the enforcing limits from being counted.
#[derive(Debug)]
pub struct PendingCheck<F> {
    /// The enforcing call first, if any.
    pub(crate) calls: Vec<Call<F>>,
    pub(crate) tally: Tally,
    /// This is the second call, where elastic limits borrow.
    pub(crate) borrowing: bool,
    /// What the rate limit service asked for besides its decision.
    pub(crate) reply: Option<rls::Reply>,
}

// The bound is the crate's own: the only follow-up is the registry's.
#[allow(private_bounds)]
impl<F: FollowUp> PendingCheck<F> {
    /// Number of calls to make (one or two).
    pub fn call_count(&self) -> usize {
        self.calls.len()
    }

    /// The JSON body of call `call`.
    pub fn body(&self, call: usize) -> &[u8] {
        self.calls.get(call).map_or(&[], |c| c.body.as_slice())
    }

    /// Records the answer body of call `call` (`None`: error, timeout or
    /// non-200 status). Returns true once every call has an answer.
    pub fn record(&mut self, call: usize, body: Option<&[u8]>) -> bool {
        if let Some(c) = self.calls.get_mut(call) {
            let limits = c.batch.len();
            let answer = match body {
                Some(b) if c.rls => rls::decode_response(b, limits).map(|read| {
                    c.windows = read.windows;
                    if !c.shadow {
                        self.reply = Some(read.reply);
                    }
                    read.check
                }),
                Some(b) => CheckResponse::parse(b, limits),
                None => None,
            };
            c.unreadable = body.is_some() && answer.is_none();
            c.answer = Some(answer);
        }
        self.calls.iter().all(|c| c.answer.is_some())
    }

    /// Whether a call takes permits of a global concurrency limit: its
    /// answer must be read even if the request is gone, to give them back.
    pub fn takes_permits(&self) -> bool {
        self.calls
            .iter()
            .any(|c| c.batch.items.iter().any(|i| i.follow.takes_permits()))
    }

    /// The limiter keys of its calls' limits (none with `protocol: rls`).
    pub fn limiter_keys(&self) -> impl Iterator<Item = &str> {
        self.calls.iter().flat_map(|c| {
            c.batch
                .items
                .iter()
                .filter_map(|i| i.spec().map(|l| l.key.as_ref()))
        })
    }

    /// When the request was decided, just before its calls were made (the
    /// filter's clock): how long a call took is measured from it.
    pub fn decided_at(&self) -> Nanos {
        self.tally.now
    }

    /// Whether call `call` was answered with a body that could not be read.
    pub fn unreadable(&self, call: usize) -> bool {
        self.calls.get(call).is_some_and(|c| c.unreadable)
    }

    /// What the rate limit service asked for in its answer to the enforcing
    /// call, if it asked (`protocol: rls`); taken once.
    pub fn take_reply(&mut self) -> Option<rls::Reply> {
        self.reply.take()
    }

    /// Gives back what the request consumed locally: its client left before
    /// the limiter answered. Returns the lease renewal it carried, which the
    /// host still sends.
    pub fn abandon<S, M>(mut self, plan: &Plan, store: &S, metrics: &M) -> Option<Renewal>
    where
        S: SharedStore + ?Sized,
        M: MetricSink + ?Sized,
    {
        let env = Env::new(plan, store, metrics);
        self.tally.refund_since(0, &env);
        self.tally.renewal.take()
    }
}
