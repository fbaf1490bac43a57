//! Fuzzing incoming RLS requests: arbitrary bytes, valid encodings with
//! bytes changed, and valid requests of every descriptor kind, through
//! [`RlsService::decide_encoded`] (protobuf decoding, descriptor matching,
//! one decision in a memory store). Never a panic; bytes that are no request
//! are an invalid argument; an answer has one status per descriptor and is
//! the answer the decoded message gets; a call over the limit consumes
//! nothing. The libFuzzer target `rls_request` (fuzz/) checks the same.
//!
//! More cases: `PROPTEST_CASES=100000 cargo test -p sluice-limiter fuzz_rls_request`.

use super::fuzzing::{check_answer, check_encoded, is_over, service};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    Entry, RateLimitOverride,
};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::google::protobuf::UInt64Value;
use proptest::prelude::*;
use proptest::sample::Index;
use prost::Message;

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(f)
}

/// The libFuzzer target's checks, on one fresh service per input.
fn check_bytes(bytes: &[u8]) -> Result<(), TestCaseError> {
    block_on(check_encoded(bytes)).map_err(TestCaseError::fail)
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
    "credits",
    "trial",
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
            let (bytes_side, message_side) = (service().unwrap(), service().unwrap());
            for req in &reqs {
                let answer = bytes_side.decide_encoded(&req.encode_to_vec()).await;
                let twin = message_side.decide(req).await;
                let valid = !req.domain.is_empty()
                    && !req.descriptors.is_empty()
                    && req.descriptors.iter().all(|d| {
                        req.domain != "edge"
                            || d.limit.is_none_or(|l| (1..=7).contains(&l.unit))
                    });
                if valid {
                    prop_assert!(answer.is_ok(), "{req:?}: {answer:?}");
                }
                // The repeat after a denial runs on the bytes side only;
                // keep the message side in step.
                let repeated = !req.descriptors.iter().any(|d| d.is_negative_hits);
                if repeated && answer.as_ref().is_ok_and(is_over) {
                    let _ = message_side.decide(req).await;
                }
                check_answer(&bytes_side, req, answer, twin).await.map_err(TestCaseError::fail)?;
            }
            Ok(())
        })?;
    }
}
