//! A worker's whole request lifecycle, without I/O: the driver owns every
//! request of one worker (an Envoy worker thread, one wasm VM) from its
//! headers to its end, and the work they leave the worker's root context:
//! decide, call the limiter or a rate limit service, hold or delay, resume,
//! read costs from the response, settle, give back permits, renew leases.
//!
//! The proxy's callbacks are the driver's events ([`Worker`]'s methods:
//! request headers and body, call answered, tick, response headers, body
//! and trailers, stream end, a configuration accepted, a root context
//! going away); what the driver does, it does through [`Host`], one method
//! per proxy-wasm host call. The proxy-wasm adapter (`src/host/`) only
//! translates; the tests drive a worker with a fake host and a manual
//! clock through every way a request can end.
//!
//! A call belongs to the context that makes it, and Envoy cancels a
//! request's calls when its stream ends. So the calls whose answer must be
//! read whether or not their request is still there (lease renewals,
//! settlements, permits given back, checks that take global permits or wait
//! for charges owed) and the next calls of coalescing groups are made by
//! the worker's root, woken at once through a shared queue ([`wake`]).
//!
//! Modules import one way: `events` (the entry points) → `stream` (a
//! request's own path) → `coalesced`, `rooted`, `waiting` (what the root
//! carries out for requests) → `outcome` (hold, deny, headers) → `permits`,
//! `cost`, `renewal`, `limiter` → `wake` → `worker` (the state).

mod carry;
mod coalesced;
mod cost;
mod events;
pub mod host;
mod limiter;
mod outcome;
mod parts;
mod permits;
mod quota;
mod renewal;
mod request;
mod rooted;
mod stream;
mod topkeys;
mod waiting;
mod wake;
mod worker;

pub use host::{Action, Buffer, Host, LocalReply, Map, Outgoing, WorkerMetrics};
pub use limiter::Answer;
pub use parts::Runtime;
pub use topkeys::{listing as top_limited_listing, DECAY as TOP_KEYS_DECAY};
pub use worker::Worker;

/// The root's tick period while requests wait: their resume times are kept
/// to within about this.
pub const HOLD_TICK: sluice_core::Nanos = sluice_core::MILLISECOND;

#[cfg(test)]
mod tests;
