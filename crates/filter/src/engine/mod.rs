//! The request path without the host: match rules, build keys, decide local
//! limits, prepare the global check, and merge its answer.
//!
//! Limits are decided in configuration order, each in its own
//! compare-and-swap loop. When an enforcing limit denies, every limit already
//! consumed for this request is refunded, so a denied request consumes
//! nothing. A shadow rule that would deny gives back its own consumption,
//! is reported, and never blocks the request.
//!
//! Two layers, imported one way. The core ([`core`]: the environment, the
//! request's tally and undo log, the calls, the walk over rules, the
//! answer's handling, the verdict) knows no kind of limit; it drives them
//! through two traits. The kinds ([`kinds`]: one module per kind of
//! [`LimitKind`](crate::config::LimitKind), each with its compile step, its
//! step, and what it does with the limiter's answer) import the core, and
//! their registry (`kinds/mod.rs`) holds every `match` over them.
//!
//! A limit in delay mode admits a request over its quota with a delay (the
//! core counts it as admitted at the time it conforms). An admitted request
//! with some delay from an enforcing rule is [`Verdict::Delay`]: the host
//! holds it for the longest of its delays, or, when it cannot hold it,
//! refuses it with [`Delayed::refuse`]. Shadow rules never hold a request.
//!
//! A request weighs its rule's [`Cost`](crate::config::Cost) in each limit of the rule: that many
//! units are consumed (and refunded), and a global limit is checked with that
//! many hits. A weight above what a limit can ever admit is denied with
//! [`Denial::CostExceedsCapacity`](sluice_core::Denial::CostExceedsCapacity).
//!
//! Pool rules of elastic limits are never applied on their own.

pub(crate) mod core;
pub(crate) mod kinds;

pub use self::core::cost_reader;
pub use self::core::renewal::Renewal;
pub use self::core::settle;
pub use self::core::verdict::{Admitted, Delayed, Denied};
pub use self::kinds::concurrency;
pub use self::kinds::quota;
use crate::config::Plan;
use crate::key::RequestView;
use crate::local::SharedStore;
use crate::metrics::MetricSink;
use crate::slots::SlotHasher;
use sluice_core::{Holder, Nanos};

/// What to do with a request: let it through, hold it, deny it, or ask the
/// limiter first (see [`core::verdict::Verdict`]).
pub type Verdict = self::core::verdict::Verdict<kinds::Follow>;

/// A request waiting for the limiter: its calls, and their answers as they
/// arrive (see [`core::pending::PendingCheck`]).
pub type PendingCheck = self::core::pending::PendingCheck<kinds::Follow>;

/// Decides a request's local limits and prepares its global check. `clock`
/// is read once, and only when some rule applies; `holder` holds the
/// permits of concurrency limits (see [`concurrency`]).
pub fn evaluate<V, S, M, C>(
    plan: &Plan,
    hasher: &SlotHasher,
    holder: Holder,
    view: &V,
    store: &S,
    metrics: &M,
    clock: C,
) -> Verdict
where
    V: RequestView,
    S: SharedStore + ?Sized,
    M: MetricSink + ?Sized,
    C: Fn() -> Nanos,
{
    self::core::walk::evaluate::<kinds::Follow, _, _, _, _>(
        plan, hasher, holder, view, store, metrics, clock,
    )
}

/// Completes a request once every call of `pending` has an answer (see
/// [`PendingCheck::record`]). A failed call of enforcing limits applies the
/// limiter's `failure_mode`; a failed call of shadow limits is ignored. When
/// only elastic limits that can borrow denied, the answer is the second
/// call, [`Verdict::Check`] again.
pub fn finish<S, M>(plan: &Plan, pending: PendingCheck, store: &S, metrics: &M) -> Verdict
where
    S: SharedStore + ?Sized,
    M: MetricSink + ?Sized,
{
    self::core::finish::finish(plan, pending, store, metrics)
}

#[cfg(test)]
mod tests;
