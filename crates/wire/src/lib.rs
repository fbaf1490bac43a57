//! The limiter API's JSON, written once for both sides of the wire: the
//! filter builds [`CheckRequest`]s and reads [`CheckResponse`]s; the
//! limiter reads requests with [`parse_check`] (strict: unknown fields are
//! errors, every error names its field) and answers with the same
//! [`CheckResponse`].
//!
//! ```text
//! POST /v1/check
//! {"domain":"demo","hits":1,"limits":[{"key":"per-ip/0/203.0.113.7","algorithm":"gcra",
//!   "requests":100,"window_ms":60000,"burst":20}]}
//! 200 {"allowed":false,"limits":[{"allowed":false,"limit":100,"remaining":0,
//!   "reset_ms":540,"retry_after_ms":600}]}
//! ```
//!
//! All limits of one check are decided together: a check denied by one
//! limit consumes nothing from the others. A limit may be a concurrency
//! limit (`"algorithm": "concurrency"`): its permits are taken by the
//! check's `holder` and given back or renewed with `POST /v1/permits`
//! ([`PermitsRequest`]). A malformed check is answered
//! with a 4xx and an [`ErrorBody`] naming the field (`limits[2].burst: ...`).
//!
//! What a request really cost, known after its response, is charged (into
//! debt if need be) or refunded with `POST /v1/charge` ([`ChargeRequest`],
//! written by the filter with [`charge_json`]).

mod answer;
mod charge;
mod key;
mod loose;
mod permits;
mod read_answer;
mod request;
mod unit;
mod validate;

#[cfg(test)]
mod fuzz;
#[doc(hidden)]
pub mod fuzzing;
#[cfg(test)]
mod json_mutation;
#[cfg(test)]
mod round_trip_tests;
#[cfg(test)]
mod test_rng;

pub use answer::{CheckResponse, ErrorBody, LimitResult};
pub use charge::{
    charge_json, parse_charge, ChargeLimit, ChargeRequest, ChargeResponse, KeyedAdjust, ValidCharge,
};
pub use sluice_core::Adjust;

pub use key::{limiter_key, push_key_hash, MAX_KEY_BYTES};
pub use permits::{
    parse_permits, permits_json, PermitRelease, PermitsRequest, PermitsResponse, ValidPermits,
    MAX_PERMIT_KEYS,
};
pub use request::{check_json, CheckRequest, LimitSpec, CONCURRENCY};
pub use unit::Unit;
pub use validate::{
    build_limit, parse_check, valid_domain, validate_domain, KeyedLimit, RateRule, Rule,
    ValidCheck, MAX_BATCH, MAX_BLOCK_MS, MAX_BODY_BYTES, MAX_COUNT, MAX_DOMAIN_BYTES, MAX_LIMITS,
    MAX_WINDOW_MS, MIN_BLOCK_MS, MIN_PERMITS_TTL_MS,
};
