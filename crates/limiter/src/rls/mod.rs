//! Envoy's rate limit service protocol (RLS): `sluice-limiter` answers
//! `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit` from a
//! descriptor configuration in envoyproxy/ratelimit's format, deciding
//! through the same [`Store`](crate::store::Store) as the HTTP API.
//!
//! [`config`] reads and matches the descriptors, `plan` turns a call's
//! descriptors into store items, [`service`] asks the store, `status`
//! answers each descriptor, [`reload`] keeps the configuration current.

pub mod config;
mod plan;
pub(crate) use plan::rls_scope;
pub mod reload;
pub mod service;
mod status;
pub mod xds;

#[cfg(test)]
mod fuzz;
#[doc(hidden)]
pub mod fuzzing;
