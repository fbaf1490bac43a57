//! Sluice's rate-limiting algorithms as pure functions.
//!
//! Every algorithm is a decision `(stored state or none, now, limit, cost) ->
//! (Decision, new state)`. Nothing here reads a clock or does I/O, so the same
//! code runs in the Envoy filter (inside a compare-and-swap loop over shared
//! data), in the limiter's memory store, and in tests with a fake clock.
//!
//! Time is [`Nanos`]: nanoseconds since the Unix epoch for instants, plain
//! nanoseconds for durations.
//!
//! # Cost
//! A request weighs `cost` units. A cost above what the limit can ever admit
//! at once (the soft burst, see [`Limit::soft_burst`]) is denied with
//! [`Denial::CostExceedsCapacity`] and `retry_after` 0. A cost of 0 is a pure
//! query: it is decided as a request of cost 1 ("would one more request
//! pass now?") and consumes nothing.
//!
//! # Debt
//! A request's real cost may be known only after its response (an LLM's
//! tokens): it is admitted for an estimate, and the difference is charged
//! ([`charge`]) or refunded ([`refund_at`]) afterwards ([`adjust`] does
//! either). A charge is unconditional and may take a key beyond its quota,
//! into debt: while in debt the key denies, and its decisions'
//! `retry_after` and `reset` say when it recovers. What debt means per
//! algorithm is documented on [`charge`].
//!
//! # Clock steps
//! When `now` is earlier than the stored state's time (the wall clock stepped
//! back), the state is taken as if `now` were its time and rebased on `now`:
//! no more than the limit is admitted, and the key recovers within a window
//! (`burst / requests` windows for the rate-based algorithms). Rebasing
//! writes a state even on a denial or a query; see [`Outcome::new_state`].
//!
//! # State sizes
//! Every state is version byte, the algorithm's code ([`Algorithm::code`]),
//! then little-endian integers (the layouts are documented in each
//! algorithm's module). The bytes per key of each algorithm are compared in
//! `docs/reference/algorithms.md`.
//!
//! ```
//! use sluice_core::{decide, Algorithm, Limit, SECOND};
//! let limit = Limit::new(Algorithm::TokenBucket, 2, SECOND).unwrap();
//! let a = decide(&limit, None, 0, 1);
//! let b = decide(&limit, a.new_state.as_ref().map(|s| s.as_bytes()), 0, 1);
//! let c = decide(&limit, b.new_state.as_ref().map(|s| s.as_bytes()), 0, 1);
//! assert!(a.decision.allowed && b.decision.allowed && !c.decision.allowed);
//! assert_eq!(c.decision.retry_after, SECOND / 2);
//! ```

mod algo;
mod algorithm;
mod batch;
mod decision;
mod duration;
mod error;
mod lease;
mod limit;
mod math;
mod multi;
pub mod permits;
mod state;

use algo::gcra::Gcra;
use algo::leaky_bucket::LeakyBucket;
use algo::token_bucket::TokenBucket;
use algo::{fixed_window, meter, sliding_log, sliding_window, Mode};
use limit::Params;

pub use algorithm::{Algorithm, UnknownAlgorithm};
pub use batch::{decide_batch, BatchOutcome};
pub use decision::{Decision, Denial};
pub use duration::parse_duration;
pub use error::FieldError;
pub use lease::{decide_all_leased, Lease, LeasedOutcome};
pub use limit::{
    Limit, MAX_BLOCK, MAX_DRAIN, MAX_LOG_ENTRIES, MAX_PRECISION, MAX_REQUESTS, MAX_SOFT_PERCENT,
    MAX_WINDOW, MIN_BLOCK, MIN_WINDOW,
};
pub use multi::{decide_all, most_restrictive, Check, MultiOutcome};
pub use permits::{Holder, Permits};
pub use state::{Encoded, VERSION};

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
    ///
    /// An admitted request always yields a state. A denial or a query
    /// yields one only when the stored state was ahead of the clock and had
    /// to be rebased (this consumes nothing, but should be stored so that the
    /// key recovers).
    pub new_state: Option<Encoded>,
}

/// Decides whether a request of weight `cost` passes `limit` at `now`, given
/// the key's stored state (`None`, or bytes that do not decode, mean a fresh key).
///
/// Never panics, whatever the inputs; a limit that fails
/// [`Limit::validate`] is decided with its fields clamped into range.
pub fn decide(limit: &Limit, state: Option<&[u8]>, now: Nanos, cost: u64) -> Outcome {
    let mode = if cost == 0 { Mode::Peek } else { Mode::Commit };
    decide_in(limit, state, now, cost, mode)
}

/// Decides a request of weight `cost` that may use `limit` only while
/// `reserve` more units would still fit: admitted when `cost + reserve`
/// would pass at `now`, it then consumes `cost` alone. A priority class
/// allowed a share of a limit below 100% is shed this way first: its
/// reserve (`capacity × (100 − share) / 100`) stays for the classes above
/// it. A denial reports the wait until `cost + reserve` passes; a reserve
/// of 0 is [`decide`].
///
/// ```
/// use sluice_core::{decide, decide_reserving, Algorithm, Limit, SECOND};
/// let limit = Limit::new(Algorithm::FixedWindow, 10, SECOND).unwrap();
/// let mut state = None;
/// // A class with half of the limit: 5 pass, then 5 stay for the others.
/// for _ in 0..5 {
///     let out = decide_reserving(&limit, state.as_ref().map(|s: &sluice_core::Encoded| s.as_bytes()), 0, 1, 5);
///     assert!(out.decision.allowed);
///     state = out.new_state;
/// }
/// let bytes = state.as_ref().map(|s| s.as_bytes());
/// assert!(!decide_reserving(&limit, bytes, 0, 1, 5).decision.allowed);
/// assert!(decide(&limit, bytes, 0, 1).decision.allowed);
/// ```
pub fn decide_reserving(
    limit: &Limit,
    state: Option<&[u8]>,
    now: Nanos,
    cost: u64,
    reserve: u64,
) -> Outcome {
    if reserve == 0 || cost == 0 {
        return decide(limit, state, now, cost);
    }
    let room = decide_in(limit, state, now, cost.saturating_add(reserve), Mode::Peek);
    if !room.decision.allowed || room.decision.delay > 0 {
        let mut out = room;
        out.decision.allowed = false;
        out.decision.delay = 0;
        out.decision.denial.get_or_insert(Denial::OverLimit);
        return out;
    }
    decide(limit, state, now, cost)
}

/// [`decide`] with an explicit mode; `Peek` decides without consuming.
#[inline]
pub(crate) fn decide_in(
    limit: &Limit,
    state: Option<&[u8]>,
    now: Nanos,
    cost: u64,
    mode: Mode,
) -> Outcome {
    decide_times(limit, state, now, cost, 1, mode)
}

/// [`decide_in`] for `times` requests of weight `cost` at one instant, as
/// one request of weight `times * cost`. Only the single request's weight is
/// held against the capacity: in delay mode the level may pass it by what
/// waits, so several requests can pass where their sum alone could not.
#[inline]
pub(crate) fn decide_times(
    limit: &Limit,
    state: Option<&[u8]>,
    now: Nanos,
    cost: u64,
    times: u64,
    mode: Mode,
) -> Outcome {
    let p = Params::of(limit);
    let probe = cost.max(1);
    if probe > p.cap {
        return too_costly(limit.algorithm, &p, state, now);
    }
    // A query weighs one request, however many ask.
    let total = if cost == 0 {
        1
    } else {
        cost.saturating_mul(times.max(1))
    };
    run(limit.algorithm, &p, state, now, total, mode)
}

/// A cost above the capacity: denied for good, reporting the key as it is.
#[cold]
#[inline(never)]
fn too_costly(algorithm: Algorithm, p: &Params, state: Option<&[u8]>, now: Nanos) -> Outcome {
    let mut out = run(algorithm, p, state, now, 1, Mode::Peek);
    out.decision.allowed = false;
    out.decision.retry_after = 0;
    out.decision.delay = 0;
    out.decision.denial = Some(Denial::CostExceedsCapacity);
    out
}

#[inline(always)]
fn run(
    algorithm: Algorithm,
    p: &Params,
    state: Option<&[u8]>,
    now: Nanos,
    cost: u64,
    mode: Mode,
) -> Outcome {
    match algorithm {
        Algorithm::TokenBucket => meter::decide::<TokenBucket>(p, state, now, cost, mode),
        Algorithm::LeakyBucket => meter::decide::<LeakyBucket>(p, state, now, cost, mode),
        Algorithm::Gcra => meter::decide::<Gcra>(p, state, now, cost, mode),
        Algorithm::FixedWindow => fixed_window::decide(p, state, now, cost, mode),
        Algorithm::SlidingLog => sliding_log::decide(p, state, now, cost, mode),
        Algorithm::SlidingWindow => sliding_window::decide(p, state, now, cost, mode),
    }
}

/// Consumes `cost` units at `now` whatever the state holds, possibly beyond
/// the quota (debt). Returns the new state and the decision describing the
/// key after the charge as a query would ([`decide`] with cost 0):
/// `allowed` says whether one more unit would pass now, `remaining`,
/// `reset` (when the quota is entirely back, debt included) and
/// `retry_after` (when a unit of cost 1 passes again). `None` for an
/// algorithm that cannot carry debt ([`Algorithm::carries_debt`]). A `cost`
/// of 0 changes nothing: the query's decision (and a rebased state, if the
/// clock stepped back).
///
/// Debt per algorithm:
/// - token bucket, leaky bucket, GCRA: the level goes beyond the capacity
///   (for the token bucket: below zero tokens) and drains at the limit's
///   rate as always; a request of cost `c` passes again when `level + c *
///   window <= capacity` (in the meter's scaled units), so `retry_after` is
///   exact. A level their own layouts cannot hold is written in a debt
///   layout (27 bytes, documented in `crates/core/src/algo/debt.rs`);
///   states written before decode as they did.
/// - fixed window: the count goes beyond the capacity; the key denies
///   until the window ends, and the debt ends with it (it is not carried
///   into the next window).
/// - sliding window: the current sub-window's counter goes beyond; the
///   estimate decays as the window slides, and `retry_after` is when it
///   leaves room again.
/// - sliding log: `None` (one entry per unit).
///
/// [`decide`] on a state in debt denies with `remaining` 0 and the exact
/// `retry_after` of its cost; [`refund_at`] gives back from it as from any
/// state (never more permissive than if the refunded units had never been
/// consumed).
///
/// ```
/// use sluice_core::{charge, decide, Algorithm, Limit, SECOND};
/// let limit = Limit::new(Algorithm::Gcra, 10, SECOND).unwrap();
/// // Admitted for an estimate of 2, the response cost 15: 13 more.
/// let admitted = decide(&limit, None, 0, 2);
/// let state = admitted.new_state.as_ref().map(|s| s.as_bytes());
/// let charged = charge(&limit, state, 0, 13).unwrap();
/// // 15 units of 10 per second: 5 beyond, 0.6 s until one unit fits.
/// assert!(!charged.decision.allowed);
/// assert_eq!(charged.decision.retry_after, 600_000_000);
/// assert_eq!(charged.decision.reset, 1_500_000_000);
/// ```
pub fn charge(limit: &Limit, state: Option<&[u8]>, now: Nanos, cost: u64) -> Option<Outcome> {
    if !limit.algorithm.carries_debt() {
        return None;
    }
    if cost == 0 {
        return Some(decide(limit, state, now, 0));
    }
    let p = Params::of(limit);
    let new = match limit.algorithm {
        Algorithm::TokenBucket => meter::charge::<TokenBucket>(&p, state, now, cost),
        Algorithm::LeakyBucket => meter::charge::<LeakyBucket>(&p, state, now, cost),
        Algorithm::Gcra => meter::charge::<Gcra>(&p, state, now, cost),
        Algorithm::FixedWindow => fixed_window::charge(&p, state, now, cost),
        Algorithm::SlidingWindow => sliding_window::charge(&p, state, now, cost),
        Algorithm::SlidingLog => return None,
    };
    let decision = decide(limit, Some(new.as_bytes()), now, 0).decision;
    Some(Outcome {
        decision,
        new_state: Some(new),
    })
}

/// What is known of a request's cost once it is over: more than it was
/// admitted for, or less.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Adjust {
    /// Consume this many more units, unconditionally ([`charge`]).
    Charge(u64),
    /// Give back `cost` units consumed `age` ago ([`refund_at`]).
    Refund {
        /// Units to give back.
        cost: u64,
        /// How long before now they were consumed.
        age: Nanos,
    },
}

/// Applies `adjust` to a key at `now`: a charge as [`charge`], a refund as
/// [`refund_at`] of units consumed at `now - age`. Returns the new state
/// (`None` when unchanged) and the decision of a query on the key after
/// it; `None` for a charge on an algorithm that cannot carry debt.
pub fn adjust(limit: &Limit, state: Option<&[u8]>, now: Nanos, adjust: Adjust) -> Option<Outcome> {
    match adjust {
        Adjust::Charge(cost) => charge(limit, state, now, cost),
        Adjust::Refund { cost, age } => {
            let back = state.and_then(|s| refund_at(limit, s, now.saturating_sub(age), now, cost));
            let after = back.as_ref().map(Encoded::as_bytes).or(state);
            let query = decide(limit, after, now, 0);
            Some(Outcome {
                decision: query.decision,
                new_state: back.or(query.new_state),
            })
        }
    }
}

/// Gives back `cost` that a request admitted at `admitted_at` consumed from
/// `state`, used when another limit of the same check denied. Returns the state
/// to store, or `None` when there is nothing to give back.
///
/// This is [`refund_at`] with `now = admitted_at`: exact for a refund issued
/// with the same clock reading as the decision, before anything else touched
/// the key. Prefer [`refund_at`] with the current time.
pub fn refund(limit: &Limit, state: &[u8], admitted_at: Nanos, cost: u64) -> Option<Encoded> {
    refund_at(limit, state, admitted_at, admitted_at, cost)
}

/// Gives back `cost` consumed at `admitted_at` from `state`, at `now`.
///
/// A refund never leaves the state more permissive than if the request had
/// never been admitted, even when other requests were decided in between:
/// - fixed window, sliding window: the cost is taken off the counter the
///   request was added to, if that counter is still kept;
/// - sliding log: the request's entries are removed, if still present;
/// - token bucket, leaky bucket, GCRA: what of the request can still be in
///   the bucket is given back, `cost * window / requests` minus what drained
///   since `admitted_at` (the stored update time bounds `now` from below for
///   the buckets; for GCRA a `now` earlier than the last decision on the key
///   may give back up to `now - admitted_at` worth of drain too much).
pub fn refund_at(
    limit: &Limit,
    state: &[u8],
    admitted_at: Nanos,
    now: Nanos,
    cost: u64,
) -> Option<Encoded> {
    if cost == 0 {
        return None;
    }
    let p = Params::of(limit);
    match limit.algorithm {
        Algorithm::TokenBucket => meter::refund::<TokenBucket>(&p, state, admitted_at, now, cost),
        Algorithm::LeakyBucket => meter::refund::<LeakyBucket>(&p, state, admitted_at, now, cost),
        Algorithm::Gcra => meter::refund::<Gcra>(&p, state, admitted_at, now, cost),
        Algorithm::FixedWindow => fixed_window::refund(&p, state, admitted_at, cost),
        Algorithm::SlidingLog => sliding_log::refund(&p, state, admitted_at, cost),
        Algorithm::SlidingWindow => sliding_window::refund(&p, state, admitted_at, cost),
    }
}
