//! Fuzzing incoming RLS requests: arbitrary bytes, valid encodings with
//! bytes changed, and valid requests of every descriptor kind, through
//! [`RlsService::decide_encoded`] (protobuf decoding, descriptor matching,
//! one decision in a memory store). Never a panic; bytes that are no request
//! are an invalid argument; an answer has one status per descriptor and is
//! the answer the decoded message gets; a call over the limit consumes
//! nothing. The libFuzzer target `rls_request` (fuzz/) checks the same.
//!
//! More cases: `PROPTEST_CASES=100000 cargo test -p sluice-limiter fuzz_rls_request`.

use super::config::Descriptors;
use super::reload::ConfigCell;
use super::service::RlsService;
use crate::clock::{Clock, ManualClock};
use crate::metrics::Metrics;
use crate::store::memory::{MemoryConfig, MemoryStore};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    Entry, RateLimitOverride,
};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::UInt64Value;
use proptest::prelude::*;
use proptest::sample::Index;
use prost::Message;
use sluice_core::SECOND;
use std::sync::Arc;

/// Every kind of descriptor the service knows (as in fuzz/src/rls_request.rs).
const CONFIG: &str = r#"
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

const T0: u64 = 1_700_000_010 * SECOND;

fn service() -> RlsService<Arc<MemoryStore>> {
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(T0));
    let store = Arc::new(MemoryStore::new(
        MemoryConfig {
            shards: 2,
            max_keys: 64,
        },
        Arc::clone(&clock),
    ));
    let cell = ConfigCell::fixed(Descriptors::parse(CONFIG).unwrap());
    RlsService::new(store, Arc::new(cell), Arc::new(Metrics::default()), clock)
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(f)
}

fn is_over(r: &RateLimitResponse) -> bool {
    r.overall_code == Code::OverLimit as i32
}

/// The libFuzzer target's checks, on one fresh service per input.
fn check_bytes(bytes: &[u8]) -> Result<(), TestCaseError> {
    block_on(async {
        let svc = service();
        let answer = svc.decide_encoded(bytes).await;
        let Ok(req) = RateLimitRequest::decode(bytes) else {
            prop_assert_eq!(
                answer.map_err(|s| s.code()).err(),
                Some(tonic::Code::InvalidArgument)
            );
            return Ok(());
        };
        let twin = service().decide(&req).await;
        check_answer(&svc, &req, answer, twin).await
    })
}

async fn check_answer(
    svc: &RlsService<Arc<MemoryStore>>,
    req: &RateLimitRequest,
    answer: Result<RateLimitResponse, tonic::Status>,
    twin: Result<RateLimitResponse, tonic::Status>,
) -> Result<(), TestCaseError> {
    match (&answer, &twin) {
        (Ok(a), Ok(b)) => prop_assert_eq!(a, b),
        (Err(a), Err(b)) => {
            prop_assert_eq!(a.code(), tonic::Code::InvalidArgument, "{:?}", a);
            prop_assert_eq!(a.code(), b.code());
        }
        _ => prop_assert!(false, "bytes and message differ: {answer:?} {twin:?}"),
    }
    let Ok(r) = answer else { return Ok(()) };
    prop_assert_eq!(r.statuses.len(), req.descriptors.len());
    let mut any_over = false;
    for s in &r.statuses {
        prop_assert!(s.code == Code::Ok as i32 || s.code == Code::OverLimit as i32);
        any_over |= s.code == Code::OverLimit as i32;
    }
    prop_assert_eq!(is_over(&r), any_over);
    if is_over(&r) {
        let again = svc.decide(req).await;
        prop_assert!(
            again.as_ref().is_ok_and(|a| *a == r),
            "a denied call consumed something: {r:?} then {again:?}"
        );
    }
    Ok(())
}

const KEYS: &[&str] = &[
    "remote_address",
    "user",
    "vip",
    "internal",
    "canary",
    "bucket",
    "path",
    "method",
    "placeholder",
    "",
    "other",
];
const VALUES: &[&str] = &[
    "10.0.0.1", "50.0.0.5", "u1", "/api/v1", "GET", "", "*", "日本",
];

fn entry() -> impl Strategy<Value = Entry> {
    (
        any::<Index>(),
        prop_oneof![3 => any::<Index>().prop_map(|i| i.get::<&str>(VALUES).to_string()), 1 => ".{0,12}"],
    )
        .prop_map(|(k, value)| Entry {
            key: k.get::<&str>(KEYS).to_string(),
            value,
        })
}

fn descriptor() -> impl Strategy<Value = RateLimitDescriptor> {
    (
        prop::collection::vec(entry(), 0..4),
        prop::option::weighted(0.2, (0..6u32, 0..9i32)),
        prop::option::weighted(
            0.3,
            prop_oneof![0..5u64, Just(u64::from(u32::MAX)), Just(u64::MAX)],
        ),
        prop::bool::weighted(0.1),
    )
        .prop_map(|(entries, limit, hits, negative)| RateLimitDescriptor {
            entries,
            limit: limit.map(|(requests_per_unit, unit)| RateLimitOverride {
                requests_per_unit,
                unit,
            }),
            hits_addend: hits.map(|value| UInt64Value { value }),
            is_negative_hits: negative,
        })
}

fn request() -> impl Strategy<Value = RateLimitRequest> {
    (
        prop_oneof![6 => Just("edge".to_string()), 1 => Just("other".to_string()), 1 => Just(String::new())],
        prop::collection::vec(descriptor(), 0..5),
        prop_oneof![0..4u32, Just(u32::MAX)],
    )
        .prop_map(|(domain, descriptors, hits_addend)| RateLimitRequest {
            domain,
            descriptors,
            hits_addend,
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn fuzz_rls_request_arbitrary_bytes(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        check_bytes(&bytes)?;
    }

    #[test]
    fn fuzz_rls_request_mutated_encodings(
        req in request(),
        edits in prop::collection::vec((any::<Index>(), any::<u8>(), any::<u8>()), 1..6),
    ) {
        let mut bytes = req.encode_to_vec();
        for (at, op, byte) in edits {
            let i = at.index(bytes.len() + 1);
            match op % 3 {
                0 if i < bytes.len() => bytes[i] = byte,
                1 if i < bytes.len() => {
                    bytes.remove(i);
                }
                _ => bytes.insert(i, byte),
            }
        }
        check_bytes(&bytes)?;
    }

    /// Valid requests, several in a row on one service: answered from
    /// their bytes exactly as from the message, every step.
    #[test]
    fn fuzz_rls_request_valid_answered_as_messages(reqs in prop::collection::vec(request(), 1..5)) {
        block_on(async {
            let (bytes_side, message_side) = (service(), service());
            for req in &reqs {
                let answer = bytes_side.decide_encoded(&req.encode_to_vec()).await;
                let twin = message_side.decide(req).await;
                let valid = !req.domain.is_empty()
                    && !req.descriptors.is_empty()
                    && req.descriptors.iter().all(|d| {
                        d.is_negative_hits
                            || req.domain != "edge"
                            || d.limit.is_none_or(|l| (1..=7).contains(&l.unit))
                    });
                if valid {
                    prop_assert!(answer.is_ok(), "{req:?}: {answer:?}");
                }
                // The repeat after a denial runs on the bytes side only;
                // keep the message side in step.
                if answer.as_ref().is_ok_and(is_over) {
                    let _ = message_side.decide(req).await;
                }
                check_answer(&bytes_side, req, answer, twin).await?;
            }
            Ok(())
        })?;
    }
}
