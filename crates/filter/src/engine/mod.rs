//! The request path without the host: match rules, build keys, decide local
//! limits, prepare the global check, and merge its answer.
//!
//! Limits are decided in configuration order, each in its own
//! compare-and-swap loop. When an enforcing limit denies, every limit already
//! consumed for this request is refunded, so a denied request consumes
//! nothing. A shadow rule that would deny gives back its own consumption,
//! is reported, and never blocks the request.
//!
//! Each limit of a rule that applies takes the step of its kind, one module
//! per kind of [`LimitKind`](crate::config::LimitKind), each with its compile
//! step: `local` (consumed in shared data), `global` (denied at once if the
//! over-limit cache holds its key, else joins the call of its rule's mode to
//! the limiter, which [`finish`] completes), `coalesced` (shares calls),
//! `leased` (spends units held here), `service_held` (a rate limit service's
//! descriptor), and `elastic` (borrows from a pool). The walk over rules
//! (`walk`) holds the one `match` over the kinds; what a request consumed,
//! and its refund, is kept once (`tally`); the calls, and what each limit in
//! them is there for (`Via`), are in `call`.
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

mod call;
pub(crate) mod coalesced;
pub mod concurrency;
pub mod cost_reader;
mod deny_cache;
pub(crate) mod elastic;
mod finish;
pub(crate) mod global;
pub(crate) mod global_elastic;
pub(crate) mod leased;
pub(crate) mod local;
pub(crate) mod local_elastic;
mod pending;
mod renewal;
pub(crate) mod service_held;
pub mod settle;
mod tally;
mod verdict;
mod walk;

pub use finish::finish;
pub use pending::PendingCheck;
pub use renewal::Renewal;
pub use verdict::{Admitted, Delayed, Denied, Verdict};
pub use walk::evaluate;

#[cfg(test)]
mod tests;
