//! Envoy's rate limit quota service (RLQS): `sluice-limiter` serves
//! `envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas`
//! to Envoy's `envoy.filters.http.rate_limit_quota` filter.
//!
//! Each Envoy reports, on one long-lived stream, what it admitted and denied
//! per bucket; the reports of every Envoy are charged into the bucket's limit
//! in the [`Store`](crate::store::Store), and each report is answered with
//! the bucket's assignment: the Envoy's share of what remains as a token
//! bucket, a blanket deny once nothing remains.
//!
//! [`config`] finds a bucket's limit in the descriptor configuration,
//! [`presence`] counts the Envoys reporting a bucket, [`assign`] turns the
//! bucket's standing into an assignment (pure), [`service`] runs the streams.

pub mod assign;
pub mod config;
pub mod presence;
pub mod service;
