//! Sluice's rate-limiting algorithms as pure functions.
//!
//! Every algorithm is a decision `(stored state or none, now, limit, cost) ->
//! (Decision, new state)`. Nothing here reads a clock or does I/O, so the same
//! code runs in the Envoy filter (inside a compare-and-swap loop over shared
//! data), in the limiter's memory store, and in tests with a fake clock.
//!
//! Time is [`Nanos`]: nanoseconds since the Unix epoch for instants, plain
//! nanoseconds for durations.

mod algorithm;
mod decision;
mod limit;
mod multi;
mod state;

pub use algorithm::Algorithm;
pub use decision::{Decision, Denial};
pub use limit::{Limit, LimitError};
pub use multi::{decide_all, most_restrictive, Check, MultiOutcome};
pub use state::Encoded;

/// Nanoseconds: since the Unix epoch for instants, elapsed for durations.
pub type Nanos = u64;

/// One millisecond in [`Nanos`].
pub const MILLISECOND: Nanos = 1_000_000;
/// One second in [`Nanos`].
pub const SECOND: Nanos = 1_000_000_000;

/// The result of one decision: what to tell the client and what to store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// What was decided, with the values the rate-limit headers need.
    pub decision: Decision,
    /// The state to store for this key, or `None` when it is unchanged.
    pub new_state: Option<Encoded>,
}

/// Decides whether a request of weight `cost` passes `limit` at `now`, given
/// the key's stored state (`None`, or bytes that do not decode, mean a fresh key).
pub fn decide(limit: &Limit, state: Option<&[u8]>, now: Nanos, cost: u64) -> Outcome {
    todo!("{limit:?} {state:?} {now} {cost}")
}

/// Gives back `cost` that a request admitted at `admitted_at` consumed from
/// `state`, used when another limit of the same check denied. Returns the state
/// to store, or `None` when there is nothing to give back.
pub fn refund(limit: &Limit, state: &[u8], admitted_at: Nanos, cost: u64) -> Option<Encoded> {
    todo!("{limit:?} {state:?} {admitted_at} {cost}")
}
