//! Sluice: rate limiting for Envoy, as a proxy-wasm HTTP filter
//! (`sluice.wasm`).
//!
//! This package is the thin adapter between Envoy and the filter's logic,
//! which lives in `sluice-filter` (`crates/filter`) and is tested natively:
//! `host` (built for wasm32 only) hands each proxy-wasm callback to that
//! crate's `driver::Worker` and implements its `Host` with host calls. What the filter does, and what it
//! costs per request, is documented there.

#[cfg(target_arch = "wasm32")]
mod host;
