//! The RLS service driven in-process: a service over a memory store and a
//! manual clock, and requests built from descriptor entries.

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use sluice_core::SECOND;
use sluice_limiter::clock::{Clock, ManualClock};
use sluice_limiter::metrics::Metrics;
use sluice_limiter::rls::config::Descriptors;
use sluice_limiter::rls::reload::ConfigCell;
use sluice_limiter::rls::service::RlsService;
use sluice_limiter::store::memory::{MemoryConfig, MemoryStore};
use sluice_limiter::store::Store;
use std::sync::Arc;

/// Midway through a minute, so windows do not roll over mid-test.
pub const T0: u64 = 1_700_000_010 * SECOND;

pub fn memory(clock: &Arc<ManualClock>) -> Arc<MemoryStore> {
    let clock: Arc<dyn Clock> = Arc::clone(clock) as Arc<dyn Clock>;
    Arc::new(MemoryStore::new(
        MemoryConfig {
            shards: 4,
            max_keys: 10_000,
        },
        clock,
    ))
}

pub fn service<S: Store>(store: S, config: &str, clock: &Arc<ManualClock>) -> RlsService<S> {
    observed(store, config, clock, Arc::new(Metrics::default()))
}

/// A service that records into `metrics`.
pub fn observed<S: Store>(
    store: S,
    config: &str,
    clock: &Arc<ManualClock>,
    metrics: Arc<Metrics>,
) -> RlsService<S> {
    let cell = ConfigCell::fixed(Descriptors::parse(config).unwrap());
    let clock: Arc<dyn Clock> = Arc::clone(clock) as Arc<dyn Clock>;
    RlsService::new(store, Arc::new(cell), metrics, clock)
}

pub fn descriptor(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(k, v)| Entry {
                key: k.to_string(),
                value: v.to_string(),
            })
            .collect(),
        ..RateLimitDescriptor::default()
    }
}

pub fn request(domain: &str, descriptors: Vec<RateLimitDescriptor>) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.into(),
        descriptors,
        hits_addend: 0,
    }
}

pub async fn ask<S: Store>(svc: &RlsService<S>, req: &RateLimitRequest) -> RateLimitResponse {
    svc.decide(req).await.unwrap()
}

pub fn over(r: &RateLimitResponse) -> bool {
    r.overall_code == Code::OverLimit as i32
}
