//! The limiter's incoming RLS requests: protobuf bytes → `RateLimitRequest`
//! → descriptor matching → one decision in a memory store, with a fixed
//! descriptor configuration.

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use prost::Message;
use sluice_core::SECOND;
use sluice_limiter::clock::{Clock, ManualClock};
use sluice_limiter::metrics::Metrics;
use sluice_limiter::rls::config::Descriptors;
use sluice_limiter::rls::reload::ConfigCell;
use sluice_limiter::rls::service::RlsService;
use sluice_limiter::store::memory::{MemoryConfig, MemoryStore};
use std::sync::{Arc, OnceLock};
use tonic::Code as Status;

/// Every kind of descriptor the service knows: limits, a block, a limit
/// replacing another, unlimited, shadow mode, another algorithm, nesting,
/// wildcards, and a key without a limit.
pub const CONFIG: &str = r#"
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: remote_address
    value: 50.0.0.5
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 5, name: per_user}
  - key: vip
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 100, replaces: [{name: per_user}]}
  - key: internal
    rate_limit: {unlimited: true}
  - key: canary
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: bucket
    rate_limit: {window: 10s, requests_per_unit: 2, algorithm: token_bucket}
  - key: path
    value: /api/*
    descriptors:
      - key: method
        rate_limit: {unit: hour, requests_per_unit: 7, algorithm: sliding_window}
  - key: placeholder
"#;

/// Midway through a minute.
const T0: u64 = 1_700_000_010 * SECOND;

fn config() -> Option<Arc<Descriptors>> {
    static CONFIG_CELL: OnceLock<Option<Arc<Descriptors>>> = OnceLock::new();
    CONFIG_CELL
        .get_or_init(|| Descriptors::parse(CONFIG).ok().map(Arc::new))
        .clone()
}

/// A fresh service (empty store, clock at `T0`) over the fixed configuration.
pub fn service() -> RlsService<Arc<MemoryStore>> {
    let Some(descriptors) = config() else {
        panic!("the fixed descriptor configuration does not load");
    };
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(T0));
    let store = Arc::new(MemoryStore::new(
        MemoryConfig {
            shards: 2,
            max_keys: 64,
        },
        Arc::clone(&clock),
    ));
    let cell = ConfigCell::fixed((*descriptors).clone());
    RlsService::new(store, Arc::new(cell), Arc::new(Metrics::default()), clock)
}

fn is_over(r: &RateLimitResponse) -> bool {
    r.overall_code == Code::OverLimit as i32
}

/// The whole path on `data`: a malformed message or request is an invalid
/// argument; an answer has one status per descriptor, each OK or
/// OVER_LIMIT, and is over the limit exactly when one status is; it is the
/// answer the decoded request gets without the bytes; and a call over the
/// limit consumes nothing (asked again, the same answer).
pub fn rls_request(data: &[u8]) {
    crate::runtime().block_on(async {
        let svc = service();
        let decoded = RateLimitRequest::decode(data);
        let answer = svc.decide_encoded(data).await;
        let req = match decoded {
            Ok(req) => req,
            Err(_) => {
                let Err(status) = answer else {
                    panic!("malformed bytes answered");
                };
                assert_eq!(status.code(), Status::InvalidArgument);
                return;
            }
        };
        let twin = service().decide(&req).await;
        match (&answer, &twin) {
            (Ok(a), Ok(b)) => assert_eq!(a, b, "bytes and message answered differently"),
            (Err(a), Err(b)) => assert_eq!(a.code(), b.code()),
            _ => panic!("bytes and message answered differently: {answer:?} {twin:?}"),
        }
        let r = match answer {
            Ok(r) => r,
            Err(status) => {
                assert_eq!(status.code(), Status::InvalidArgument, "{status:?}");
                return;
            }
        };
        assert_eq!(r.statuses.len(), req.descriptors.len());
        let mut any_over = false;
        for s in &r.statuses {
            assert!(s.code == Code::Ok as i32 || s.code == Code::OverLimit as i32);
            any_over |= s.code == Code::OverLimit as i32;
        }
        assert_eq!(is_over(&r), any_over);
        if is_over(&r) {
            let again = svc.decide(&req).await;
            assert!(
                again.as_ref().is_ok_and(|a| *a == r),
                "a denied call consumed something: {r:?} then {again:?}"
            );
        }
    });
}
