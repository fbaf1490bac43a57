//! Sluice's global rate-limit service.
//!
//! Envoy filters call `POST /v1/check` with the limits a request falls under;
//! the service decides them together (all pass or the request is denied and
//! consumes nothing) against shared state kept in memory or in Redis.
//!
//! The HTTP surface is built by [`api::app`]; the stores live in [`store`];
//! [`rls`] serves Envoy's rate limit service protocol over the same store,
//! [`rlqs`] its rate limit quota service.

pub mod api;
pub mod cli;
pub mod clock;
pub mod events;
pub mod introspect;
pub mod metrics;
pub mod overrides;
pub mod ratelimit_env;
pub mod rlqs;
pub mod rls;
pub mod server;
pub mod spread;
pub mod store;
pub mod tls;
pub mod top;
pub mod watch;
