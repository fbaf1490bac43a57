//! Sluice's filter logic: rate limiting for Envoy without the host. The
//! proxy-wasm filter (the root package, `sluice.wasm`) adapts host calls to
//! this crate; everything here builds and is tested natively.
//!
//! Every request is checked before routing against the rules of the filter's
//! configuration. *Local* limits keep their state in Envoy shared data, shared
//! by all worker threads and updated with compare-and-swap, so that workers
//! together never admit more than the limit. *Global* limits are decided by a
//! `sluice-limiter` cluster through one HTTP call-out per request.
//!
//! The configuration, the responses and the metrics are documented once, for
//! operators, in the repository's `docs/reference/configuration.md`,
//! `docs/reference/responses.md` and `docs/operations/metrics.md`. In the code, [`config`] parses that JSON into
//! an immutable plan, [`engine`] decides a request against it without the
//! host, [`driver`] carries each request of a worker through its whole life
//! over a [`driver::Host`] trait, and the proxy-wasm glue (the root
//! package's `src/host/`, the only code that talks to Envoy) translates
//! callbacks into the driver's events and its calls into host calls.
//!
//! # Cost per request
//!
//! Host calls, not wasm code, dominate the filter's cost in Envoy, so the
//! request path makes as few as its decisions need. An admitted request on
//! the local path reads the clock once (only when some rule applies), each
//! request header (of up to eight names) and the `source.address` property
//! at most once and only when a matching rule's conditions or key use it,
//! reads and writes shared data once per local limit (compare-and-swap: more
//! only under contention), and adds one response header per rate-limit header
//! of the `headers` mode. Counting makes no call per request: each worker
//! hands its counts to Envoy in batches (see [`metrics`]). A denied or held
//! request also reads `content-type` (and, held, `grpc-timeout`: see [`grpc`])
//! and sets two filter-state properties for Envoy's access log (three with
//! `access_log_key`). `top_limited_keys` adds no call per refusal: see
//! [`topkeys`].

pub mod client_ip;
pub mod coalesce;
pub mod config;
pub mod cost;
pub mod decimal;
pub mod driver;
pub mod engine;
pub mod failure;
pub mod grpc;
pub mod headers;
pub mod holdings;
pub mod key;
pub mod layout;
pub mod lease;
pub mod local;
pub mod matcher;
pub mod metrics;
pub mod owing;
pub mod pattern;
pub mod queue;
pub mod response;
pub mod rls;
#[cfg(feature = "schema")]
pub use config::schema;
pub mod slots;
pub mod table;
pub mod topkeys;
