//! The invariants of incoming RLS requests, shared by the proptest fuzzers
//! (`rls/fuzz.rs`) and the libFuzzer target `rls_request` (fuzz/): one
//! descriptor configuration with every kind of descriptor, a fresh service
//! over it, and the checks one input must pass.

use super::config::Descriptors;
use super::reload::ConfigCell;
use super::service::RlsService;
use crate::clock::{Clock, ManualClock};
use crate::metrics::Metrics;
use crate::store::memory::{MemoryConfig, MemoryStore};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use prost::Message;
use sluice_core::SECOND;
use std::sync::{Arc, OnceLock};
use tonic::Status;

/// Every kind of descriptor the service knows: limits, a block, a limit
/// replacing another, unlimited, shadow mode, another algorithm, nesting,
/// wildcards, and a key without a limit.
pub const DESCRIPTORS: &str = include_str!("fuzzing-descriptors.yaml");

/// Midway through a minute.
pub const T0: u64 = 1_700_000_010 * SECOND;

/// A fresh service (empty store, clock at [`T0`]) over [`DESCRIPTORS`].
pub fn service() -> Result<RlsService<Arc<MemoryStore>>, String> {
    // Parsed once: a fuzzer makes two services per input.
    static PARSED: OnceLock<Result<Descriptors, String>> = OnceLock::new();
    let descriptors = PARSED
        .get_or_init(|| Descriptors::parse(DESCRIPTORS).map_err(|e| e.to_string()))
        .clone()?;
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(T0));
    let store = Arc::new(MemoryStore::new(
        MemoryConfig {
            shards: 2,
            max_keys: 64,
        },
        Arc::clone(&clock),
    ));
    let cell = ConfigCell::fixed(descriptors);
    Ok(RlsService::new(
        store,
        Arc::new(cell),
        Arc::new(Metrics::default()),
        clock,
    ))
}

/// True when the answer as a whole is over the limit.
pub fn is_over(r: &RateLimitResponse) -> bool {
    r.overall_code == Code::OverLimit as i32
}

/// The whole path on `bytes`, on a fresh service: bytes that are no request
/// are an invalid argument; otherwise see [`check_answer`], against the
/// answer the decoded message gets from another fresh service.
pub async fn check_encoded(bytes: &[u8]) -> Result<(), String> {
    let svc = service()?;
    let answer = svc.decide_encoded(bytes).await;
    let Ok(req) = RateLimitRequest::decode(bytes) else {
        return match answer {
            Err(s) if s.code() == tonic::Code::InvalidArgument => Ok(()),
            other => Err(format!("malformed bytes answered {other:?}")),
        };
    };
    let twin = service()?.decide(&req).await;
    check_answer(&svc, &req, answer, twin).await
}

/// `answer` (from `svc`, for `req`) is `twin` (the same request decided
/// elsewhere in the same state); an error is an invalid argument; an answer
/// has one status per descriptor, each OK or OVER_LIMIT, and is over the
/// limit exactly when one status is; and a call over the limit consumed
/// nothing (asked again, the same answer).
pub async fn check_answer(
    svc: &RlsService<Arc<MemoryStore>>,
    req: &RateLimitRequest,
    answer: Result<RateLimitResponse, Status>,
    twin: Result<RateLimitResponse, Status>,
) -> Result<(), String> {
    match (&answer, &twin) {
        (Ok(a), Ok(b)) if a == b => {}
        (Err(a), Err(b)) if a.code() == tonic::Code::InvalidArgument && a.code() == b.code() => {}
        _ => {
            return Err(format!(
                "bytes and message answered differently: {answer:?} {twin:?}"
            ))
        }
    }
    let Ok(r) = answer else { return Ok(()) };
    if r.statuses.len() != req.descriptors.len() {
        return Err(format!(
            "{} statuses for {} descriptors",
            r.statuses.len(),
            req.descriptors.len()
        ));
    }
    let mut any_over = false;
    for s in &r.statuses {
        if s.code != Code::Ok as i32 && s.code != Code::OverLimit as i32 {
            return Err(format!("status code {}", s.code));
        }
        any_over |= s.code == Code::OverLimit as i32;
    }
    // A spent quota-mode descriptor is over in a call that may pass.
    if is_over(&r) && !any_over {
        return Err(format!(
            "overall code {} with statuses {:?}",
            r.overall_code, r.statuses
        ));
    }
    // Hits given back (`is_negative_hits`) change the counters whatever
    // the call's outcome.
    if is_over(&r) && !req.descriptors.iter().any(|d| d.is_negative_hits) {
        let again = svc.decide(req).await;
        if !again.as_ref().is_ok_and(|a| *a == r) {
            return Err(format!(
                "a denied call consumed something: {r:?} then {again:?}"
            ));
        }
    }
    Ok(())
}

/// A descriptor file: loaded, or refused with a message naming what is
/// wrong; lookups in what loads never panic.
pub fn check_descriptor_yaml(text: &str) -> Result<(), String> {
    match Descriptors::parse(text) {
        Err(e) if e.message.is_empty() => Err(format!("no message at {:?}", e.field)),
        Err(e) => {
            let _ = e.to_string();
            Ok(())
        }
        Ok(d) => {
            for domain in d.domains.values() {
                for entries in [
                    &[("remote_address", "1.2.3.4")][..],
                    &[("a", "x"), ("b", "y"), ("c", "")],
                    &[("path", "/api/x/action"), ("files", "files/a")],
                    &[("key", "value"), ("user", "u1")],
                    &[("message_type", "marketing"), ("to_number", "1")],
                ] {
                    let _ = domain.lookup(entries.iter().copied());
                }
            }
            Ok(())
        }
    }
}
