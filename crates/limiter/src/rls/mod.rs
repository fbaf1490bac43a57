//! Envoy's rate limit service protocol (RLS): `sluice-limiter` answers
//! `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit` from a
//! descriptor configuration in envoyproxy/ratelimit's format, deciding
//! through the same [`Store`](crate::store::Store) as the HTTP API.
//!
//! [`config`] reads and matches the descriptors, [`service`] answers the
//! calls, [`reload`] keeps the configuration current.

pub mod config;
pub mod reload;
pub mod service;

#[cfg(test)]
mod fuzz;
#[doc(hidden)]
pub mod fuzzing;
