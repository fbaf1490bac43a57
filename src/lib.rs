//! Sluice: rate limiting for Envoy.
