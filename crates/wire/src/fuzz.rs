//! Fuzzing both ends of the wire: the limiter's reading of checks
//! ([`parse_check`]) and the filter's reading of answers
//! ([`CheckResponse::parse`], [`CheckResponse::parse_batch`], and the
//! hand-written compact reader behind them), on arbitrary bytes, deeply
//! nested JSON and valid bodies with values swapped, fields dropped or
//! bytes changed. Never a panic: a check is valid or refused with a
//! message; an answer is read or `None`.
//!
//! More cases: `PROPTEST_CASES=100000 cargo test -p sluice-wire fuzz_`.

use crate::json_mutation::{edit_bytes, mutate};
use crate::{parse_check, CheckResponse};
use proptest::prelude::*;
use proptest::sample::Index;
use serde_json::{json, Value};

const CHECKS: &[&str] = &[
    r#"{"domain":"d","limits":[{"key":"k","algorithm":"gcra","requests":1,"window_ms":1}]}"#,
    r#"{"domain":"d","hits":2,"limits":[
        {"key":"a","algorithm":"gcra","requests":10,"window_ms":1000,"burst":1,"max_delay_ms":1000},
        {"key":"b","algorithm":"leaky_bucket","requests":10,"window_ms":1000,"hits":5,"max_delay_ms":0},
        {"key":"c","algorithm":"fixed_window","requests":10,"window_ms":1000}]}"#,
    r#"{"domain":"d","batch":7,"limits":[{"key":"k","algorithm":"sliding_window","requests":5,"window_ms":60000,"precision":4,"soft_percent":10}]}"#,
    r#"{"domain":"d","limits":[{"key":"k","algorithm":"gcra","requests":10,"window_ms":1000,"lease":5,"returned":2,"returned_age_ms":10}]}"#,
    r#"{"domain":"d.e-f_g","limits":[{"key":"k","algorithm":"token_bucket","requests":3,"window_ms":3600000,"burst":9},{"key":"l","algorithm":"sliding_log","requests":4,"window_ms":10}]}"#,
];

const ANSWERS: &[&str] = &[
    r#"{"allowed":true,"limits":[]}"#,
    r#"{"allowed":false,"limits":[{"allowed":false,"limit":100,"remaining":0,"reset_ms":540,"retry_after_ms":600}]}"#,
    r#"{"allowed":true,"limits":[{"allowed":true,"limit":10,"remaining":3,"reset_ms":1,"retry_after_ms":0,"delay_ms":5,"leased":2},{"allowed":true,"limit":1,"remaining":0,"reset_ms":0,"retry_after_ms":0}]}"#,
    r#"{"allowed":false,"limits":[{"allowed":true,"limit":10,"remaining":0,"reset_ms":9,"retry_after_ms":0}],"admitted":3,"delays_ms":[0,1,18446744073709551615]}"#,
    r#"{"allowed":true,"limits":[{"allowed":true,"limit":10,"remaining":0,"reset_ms":9,"retry_after_ms":0}],"admitted":4}"#,
    r#"{ "allowed": true, "limits": [ ] }"#,
];

fn hostile() -> Vec<Value> {
    vec![
        json!(null),
        json!(true),
        json!(0),
        json!(1),
        json!(-1),
        json!(u64::MAX),
        json!(i64::MIN),
        json!(u32::MAX),
        json!(u64::from(u32::MAX) + 1),
        json!(1_000_000_000_001u64),
        json!(1.5),
        json!(1e300),
        json!(""),
        json!("gcra"),
        json!("x".repeat(2000)),
        json!("日本😀\u{0}"),
        json!([]),
        json!([{}]),
        json!({}),
    ]
}

fn byte_edit(body: &mut Vec<u8>, (at, op, byte): (Index, u8, u8)) {
    const BYTES: &[u8] = b"0123456789,:{}[]\"\\ -.aeEtf\x00\xff";
    edit_bytes(body, (at, op, BYTES[usize::from(byte) % BYTES.len()]));
}

fn check_body(body: &[u8]) -> Result<(), TestCaseError> {
    crate::fuzzing::check_body(body).map_err(TestCaseError::fail)
}

fn answer_body(body: &[u8], expected: usize, requests: u32) -> Result<(), TestCaseError> {
    crate::fuzzing::answer_body(body, expected, requests).map_err(TestCaseError::fail)
}

fn nested(depth: usize, open: &str, close: &str) -> Vec<u8> {
    [open.repeat(depth), close.repeat(depth)]
        .concat()
        .into_bytes()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn fuzz_check_arbitrary_bytes(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        check_body(&bytes)?;
    }

    #[test]
    fn fuzz_check_mutated_values(
        seed in any::<Index>(),
        mutations in prop::collection::vec((any::<Index>(), any::<u8>(), any::<Index>()), 1..6),
    ) {
        let mut v: Value = serde_json::from_str(seed.get::<&str>(CHECKS)).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let hostile = hostile();
        for m in &mutations {
            mutate(&mut v, m, &hostile);
        }
        check_body(v.to_string().as_bytes())?;
    }

    #[test]
    fn fuzz_check_mutated_bytes(
        seed in any::<Index>(),
        edits in prop::collection::vec((any::<Index>(), any::<u8>(), any::<u8>()), 1..8),
    ) {
        let mut body = seed.get::<&str>(CHECKS).as_bytes().to_vec();
        for e in edits {
            byte_edit(&mut body, e);
        }
        check_body(&body)?;
    }

    #[test]
    fn fuzz_answer_arbitrary_bytes(
        bytes in prop::collection::vec(any::<u8>(), 0..256),
        expected in 0..4usize,
        requests in any::<u32>(),
    ) {
        answer_body(&bytes, expected, requests)?;
    }

    #[test]
    fn fuzz_answer_mutated_values(
        seed in any::<Index>(),
        mutations in prop::collection::vec((any::<Index>(), any::<u8>(), any::<Index>()), 1..5),
        expected in 0..4usize,
        requests in prop_oneof![1..8u32, any::<u32>()],
    ) {
        let mut v: Value = serde_json::from_str(seed.get::<&str>(ANSWERS)).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let hostile = hostile();
        for m in &mutations {
            mutate(&mut v, m, &hostile);
        }
        answer_body(v.to_string().as_bytes(), expected, requests)?;
    }

    #[test]
    fn fuzz_answer_mutated_bytes(
        seed in any::<Index>(),
        edits in prop::collection::vec((any::<Index>(), any::<u8>(), any::<u8>()), 1..8),
        expected in 0..4usize,
        requests in 1..8u32,
    ) {
        let mut body = seed.get::<&str>(ANSWERS).as_bytes().to_vec();
        for e in edits {
            byte_edit(&mut body, e);
        }
        answer_body(&body, expected, requests)?;
    }
}

/// Nesting far deeper than any parser should follow, and bodies at and past
/// the size cap, are refused without exhausting the stack.
#[test]
fn fuzz_deep_and_large_bodies() {
    for (open, close) in [("[", "]"), (r#"{"a":"#, "}"), (r#"{"limits":"#, "}")] {
        let body = nested(100_000, open, close);
        assert!(parse_check(&body).is_err());
        assert!(CheckResponse::parse(&body, 0).is_none());
        assert!(CheckResponse::parse_batch(&body, 0, 1).is_none());
    }
    let huge = vec![b' '; crate::MAX_BODY_BYTES + 1];
    assert!(parse_check(&huge).is_err());
    let many = format!(
        r#"{{"allowed":true,"limits":[{}]}}"#,
        vec![
            r#"{"allowed":true,"limit":1,"remaining":0,"reset_ms":0,"retry_after_ms":0}"#;
            100_000
        ]
        .join(",")
    );
    assert!(CheckResponse::parse(many.as_bytes(), 100_000).is_some());
}
