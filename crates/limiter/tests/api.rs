//! In-process tests of the HTTP surface (no socket): request validation,
//! rounding, health, metrics, and what a failing store gives. The memory store
//! with a manual clock stands in for any store; what every store does is
//! tested in `conformance.rs`.
#![cfg(test)]

mod support;

use support::one;

use axum::http::StatusCode;
use serde_json::{json, Value};
use sluice_core::{Decision, MILLISECOND, SECOND};
use sluice_limiter::api::AppState;
use sluice_limiter::clock::ManualClock;
use sluice_limiter::store::memory::{MemoryConfig, MemoryStore};
use sluice_limiter::store::{AdjustItem, PermitsOutcome, Store, StoreError, StoreItem, Verdict};
use std::sync::Arc;

const T0: u64 = 1_700_000_000 * SECOND;

struct Harness {
    state: AppState<Arc<MemoryStore>>,
    mem: Arc<MemoryStore>,
}

impl Harness {
    fn new() -> Self {
        let clock = Arc::new(ManualClock::new(T0));
        let mem = Arc::new(MemoryStore::new(MemoryConfig::default(), clock));
        Harness {
            state: AppState::new(mem.clone()),
            mem,
        }
    }

    async fn raw(&self, method: &str, uri: &str, body: Vec<u8>) -> (StatusCode, Vec<u8>) {
        support::send(&self.state, method, uri, body).await
    }

    async fn check(&self, body: Value) -> (StatusCode, Value) {
        let (status, bytes) = self
            .raw("POST", "/v1/check", serde_json::to_vec(&body).unwrap())
            .await;
        (status, serde_json::from_slice(&bytes).unwrap())
    }

    async fn permits(&self, body: Value) -> (StatusCode, Value) {
        let (status, bytes) = self
            .raw("POST", "/v1/permits", serde_json::to_vec(&body).unwrap())
            .await;
        (status, serde_json::from_slice(&bytes).unwrap())
    }

    async fn charge(&self, body: Value) -> (StatusCode, Value) {
        let (status, bytes) = self
            .raw("POST", "/v1/charge", serde_json::to_vec(&body).unwrap())
            .await;
        (status, serde_json::from_slice(&bytes).unwrap())
    }

    async fn allowed(&self, body: &Value) -> bool {
        support::allowed(&self.state, body).await
    }
}

#[tokio::test]
async fn times_are_rounded_up_to_milliseconds() {
    let h = Harness::new();
    // One request per 333.33... ms.
    let body = json!({"domain":"demo","limits":[{"key":"k","algorithm":"gcra","requests":3,"window_ms":1000,"burst":1}]});
    assert!(h.allowed(&body).await);
    let (_, v) = h.check(body).await;
    assert_eq!(v["limits"][0]["retry_after_ms"], json!(334));
}

/// A delayed admission: allowed, its wait rounded up to milliseconds in
/// `delay_ms`, counted in the delay metrics.
#[tokio::test]
async fn delayed_answers_carry_the_wait() {
    let h = Harness::new();
    // One request per 333.33... ms, waits up to a second.
    let body = json!({"domain":"demo","limits":[{"key":"k","algorithm":"gcra","requests":3,"window_ms":1000,"burst":1,"max_delay_ms":1000}]});
    let (_, v) = h.check(body.clone()).await;
    assert_eq!(v["allowed"], json!(true));
    assert!(v["limits"][0].get("delay_ms").is_none(), "{v}");
    for expected in [334, 667, 1000] {
        let (_, v) = h.check(body.clone()).await;
        assert_eq!(v["allowed"], json!(true), "{v}");
        assert_eq!(v["limits"][0]["delay_ms"], json!(expected), "{v}");
    }
    let (_, v) = h.check(body).await;
    assert_eq!(v["allowed"], json!(false), "{v}");
    assert_eq!(v["limits"][0]["retry_after_ms"], json!(1334), "{v}");
    let text = support::metrics(&h.state).await;
    assert!(text.contains("sluice_limiter_delayed_total 3"), "{text}");
    // 333.333334 ms + 666.666667 ms + 1 s.
    assert!(
        text.contains("sluice_limiter_delay_seconds_total 2.000000001"),
        "{text}"
    );
}

/// A batch: `docs/reference/limiter-api.md`'s example answer, word for word, with the waits
/// rounded up, and the batch metrics.
#[tokio::test]
async fn batches_answer_the_count_and_each_wait() {
    let h = Harness::new();
    let body = json!({"domain":"demo","batch":15,"limits":[{"key":"k","algorithm":"gcra","requests":10,"window_ms":1000,"burst":1,"max_delay_ms":1000}]});
    let (status, v) = h.check(body).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(
        v,
        json!({"allowed": false, "admitted": 11, "delays_ms": [0, 100, 200, 300, 400, 500, 600, 700, 800, 900, 1000],
            "limits": [{"allowed": false, "limit": 10, "remaining": 0, "reset_ms": 1100, "retry_after_ms": 1100}]})
    );
    // Waits of a third of a second, rounded up.
    let body = json!({"domain":"demo","batch":3,"limits":[{"key":"j","algorithm":"gcra","requests":3,"window_ms":1000,"burst":1,"max_delay_ms":1000}]});
    let (_, v) = h.check(body).await;
    assert_eq!(
        (&v["admitted"], &v["allowed"]),
        (&json!(3), &json!(true)),
        "{v}"
    );
    assert_eq!(v["delays_ms"], json!([0, 334, 667]), "{v}");
    let text = support::metrics(&h.state).await;
    assert!(text.contains("sluice_limiter_batches_total 2"), "{text}");
    assert!(
        text.contains(r#"sluice_limiter_batched_requests_total{result="admitted"} 14"#),
        "{text}"
    );
    assert!(
        text.contains(r#"sluice_limiter_batched_requests_total{result="refused"} 4"#),
        "{text}"
    );
    // Each admitted request that waits: 10 + 2.
    assert!(text.contains("sluice_limiter_delayed_total 12"), "{text}");
}

/// Leases: `docs/reference/limiter-api.md`'s example answer, word for word, a return, the
/// fields refused where they do not apply, and the lease metrics.
#[tokio::test]
async fn leases_answer_what_was_granted() {
    let h = Harness::new();
    let body = json!({"domain":"demo","limits":[{"key":"k","algorithm":"gcra","requests":100,"window_ms":60000,"burst":20,"lease":10}]});
    let (status, v) = h.check(body).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(
        v,
        json!({"allowed": true, "limits": [{"allowed": true, "limit": 100, "remaining": 9,
            "reset_ms": 6600, "retry_after_ms": 0, "leased": 10}]})
    );
    // 6 of the 10 come back unspent, as consumed 0 ms ago: 15 left after this one.
    let body = json!({"domain":"demo","limits":[{"key":"k","algorithm":"gcra","requests":100,"window_ms":60000,"burst":20,"returned":6,"returned_age_ms":0}]});
    let (_, v) = h.check(body).await;
    assert_eq!(v["limits"][0]["remaining"], json!(14), "{v}");
    assert!(v["limits"][0].get("leased").is_none(), "{v}");
    let text = support::metrics(&h.state).await;
    assert!(
        text.contains("sluice_limiter_leased_units_total 10"),
        "{text}"
    );
    assert!(
        text.contains("sluice_limiter_returned_units_total 6"),
        "{text}"
    );
    // Refused, naming the field, touching nothing.
    let bad = StatusCode::BAD_REQUEST;
    let delayed = json!({"domain":"demo","limits":[{"key":"d","algorithm":"gcra","requests":1,"window_ms":1000,"max_delay_ms":10,"lease":2}]});
    assert_bad(
        &h,
        serde_json::to_vec(&delayed).unwrap(),
        bad,
        "limits[0].lease",
    )
    .await;
    let batched = json!({"domain":"demo","batch":2,"limits":[{"key":"d","algorithm":"gcra","requests":1,"window_ms":1000,"lease":2}]});
    assert_bad(
        &h,
        serde_json::to_vec(&batched).unwrap(),
        bad,
        "limits[0].lease",
    )
    .await;
    let half = json!({"domain":"demo","limits":[{"key":"d","algorithm":"gcra","requests":1,"window_ms":1000,"returned":2}]});
    assert_bad(
        &h,
        serde_json::to_vec(&half).unwrap(),
        bad,
        "limits[0].returned_age_ms",
    )
    .await;
    assert_eq!(h.mem.len(), 1);
}

async fn assert_bad(h: &Harness, body: Vec<u8>, status: StatusCode, field: &str) {
    let (got, bytes) = h.raw("POST", "/v1/check", body).await;
    assert_eq!(got, status, "{}", String::from_utf8_lossy(&bytes));
    let v: Value = serde_json::from_slice(&bytes).unwrap();
    let msg = v["error"].as_str().unwrap();
    assert!(msg.contains(field), "{msg:?} should name {field:?}");
}

#[tokio::test]
async fn bad_input_gets_a_4xx_naming_the_field_and_touches_no_state() {
    let h = Harness::new();
    let bad = StatusCode::BAD_REQUEST;
    let limit = |extra: Value| {
        let mut l = json!({"key":"k","algorithm":"gcra","requests":1,"window_ms":60000});
        for (k, v) in extra.as_object().unwrap() {
            l[k] = v.clone();
        }
        serde_json::to_vec(&json!({"domain":"demo","limits":[l]})).unwrap()
    };
    assert_bad(&h, b"{not json".to_vec(), bad, "").await;
    assert_bad(&h, b"[]".to_vec(), bad, "").await;
    assert_bad(
        &h,
        br#"{"domain":"demo","limits":[],"extra":1}"#.to_vec(),
        bad,
        "extra",
    )
    .await;
    assert_bad(&h, br#"{"limits":[]}"#.to_vec(), bad, "domain").await;
    assert_bad(
        &h,
        br#"{"domain":"demo","limits":[]}"#.to_vec(),
        bad,
        "limits",
    )
    .await;
    assert_bad(&h, br#"{"domain":"","limits":[]}"#.to_vec(), bad, "domain").await;
    assert_bad(
        &h,
        br#"{"domain":"a b","limits":[]}"#.to_vec(),
        bad,
        "domain",
    )
    .await;
    assert_bad(
        &h,
        br#"{"domain":"demo","hits":1000000000001,"limits":[]}"#.to_vec(),
        bad,
        "hits",
    )
    .await;
    assert_bad(
        &h,
        br#"{"domain":"demo","hits":-1,"limits":[]}"#.to_vec(),
        bad,
        "hits",
    )
    .await;
    assert_bad(
        &h,
        limit(json!({"algorithm":"magic"})),
        bad,
        "limits[0].algorithm",
    )
    .await;
    assert_bad(&h, limit(json!({"requests":0})), bad, "limits[0].requests").await;
    assert_bad(
        &h,
        limit(json!({"requests":"10"})),
        bad,
        "limits[0].requests",
    )
    .await;
    assert_bad(
        &h,
        limit(json!({"requests":u64::MAX})),
        bad,
        "limits[0].requests",
    )
    .await;
    assert_bad(
        &h,
        limit(json!({"window_ms":0})),
        bad,
        "limits[0].window_ms",
    )
    .await;
    assert_bad(
        &h,
        limit(json!({"window_ms":u64::MAX})),
        bad,
        "limits[0].window_ms",
    )
    .await;
    assert_bad(&h, limit(json!({"burst":0})), bad, "limits[0].burst").await;
    assert_bad(
        &h,
        limit(json!({"precision":5})),
        bad,
        "limits[0].precision",
    )
    .await;
    assert_bad(
        &h,
        limit(json!({"soft_percent":100000})),
        bad,
        "limits[0].soft_percent",
    )
    .await;
    assert_bad(&h, limit(json!({"colour":"red"})), bad, "limits[0]").await;
    assert_bad(&h, limit(json!({"key":""})), bad, "limits[0].key").await;
    assert_bad(
        &h,
        limit(json!({"key":"x".repeat(513)})),
        bad,
        "limits[0].key",
    )
    .await;
    let many: Vec<Value> = (0..65)
        .map(|i| json!({"key":format!("k{i}"),"algorithm":"gcra","requests":1,"window_ms":1000}))
        .collect();
    let body = serde_json::to_vec(&json!({"domain":"demo","limits":many})).unwrap();
    assert_bad(&h, body, bad, "limits").await;
    let dup = json!({"domain":"demo","limits":[
        {"key":"k","algorithm":"gcra","requests":1,"window_ms":1000},
        {"key":"k","algorithm":"gcra","requests":5,"window_ms":1000}]});
    assert_bad(&h, serde_json::to_vec(&dup).unwrap(), bad, "limits[1].key").await;
    let huge = format!(
        r#"{{"domain":"demo","limits":[],"pad":"{}"}}"#,
        "x".repeat(70 * 1024)
    );
    assert_bad(&h, huge.into_bytes(), StatusCode::PAYLOAD_TOO_LARGE, "64").await;

    // A key at the length limit is fine, and nothing above touched state.
    let ok = limit(json!({"key":"x".repeat(512)}));
    let (status, _) = h.raw("POST", "/v1/check", ok).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(h.mem.len(), 1);
    assert!(h.allowed(&one("k", "gcra", 1, 60000)).await);
}

#[tokio::test]
async fn healthz_and_metrics() {
    let h = Harness::new();
    let (status, body) = h.raw("GET", "/healthz", Vec::new()).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(String::from_utf8(body).unwrap().trim(), "ok");

    let body = one("k", "gcra", 1, 60000);
    assert!(h.allowed(&body).await);
    assert!(!h.allowed(&body).await);
    let _ = h.raw("POST", "/v1/check", b"nope".to_vec()).await;
    let (status, text) = h.raw("GET", "/metrics", Vec::new()).await;
    assert_eq!(status, StatusCode::OK);
    let text = String::from_utf8(text).unwrap();
    assert!(text.contains("sluice_limiter_checks_total 3"), "{text}");
    assert!(text.contains(r#"sluice_limiter_decisions_total{domain="demo",result="allowed"} 1"#));
    assert!(text.contains(r#"sluice_limiter_decisions_total{domain="demo",result="denied"} 1"#));
    assert!(text.contains("sluice_limiter_store_errors_total 0"));
    assert!(text.contains("sluice_limiter_check_duration_seconds_count 3"));
    assert!(text.contains(r#"sluice_limiter_check_duration_seconds_bucket{le="+Inf"} 3"#));
}

/// A store that cannot decide.
#[derive(Debug, Clone)]
struct Down;

impl Store for Down {
    async fn check_batch(&self, _: &[StoreItem], _: u32) -> Result<Verdict, StoreError> {
        Err(StoreError::Timeout)
    }

    async fn permits(
        &self,
        _: u64,
        _: u64,
        _: &[(String, u64)],
        _: &[String],
    ) -> Result<PermitsOutcome, StoreError> {
        Err(StoreError::Timeout)
    }

    async fn adjust(&self, _: &[AdjustItem]) -> Result<Vec<Decision>, StoreError> {
        Err(StoreError::Timeout)
    }

    async fn healthy(&self) -> bool {
        false
    }
}

#[tokio::test]
async fn a_store_that_cannot_decide_gets_a_503_and_is_counted() {
    let state = AppState::new(Down);
    let (status, v) =
        support::send_json(&state, "POST", "/v1/check", &one("k", "gcra", 1, 1000)).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{v}");
    assert_eq!(v["error"], json!("store timed out"));
    let (status, _) = support::send(&state, "GET", "/healthz", Vec::new()).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    let text = support::metrics(&state).await;
    assert!(
        text.contains("sluice_limiter_store_errors_total 1"),
        "{text}"
    );
    assert!(text.contains("sluice_limiter_checks_total 1"), "{text}");
    let body = json!({"domain": "d", "holder": 1, "ttl_ms": 1000, "renew": ["k"]});
    let (status, v) = support::send_json(&state, "POST", "/v1/permits", &body).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{v}");
    assert!(support::metrics(&state)
        .await
        .contains("sluice_limiter_store_errors_total 2"));
}

fn concurrency(extra: Value) -> Value {
    let mut limit =
        json!({"key": "c", "algorithm": "concurrency", "requests": 2, "window_ms": 1000});
    if let (Some(l), Some(e)) = (limit.as_object_mut(), extra.as_object()) {
        l.extend(e.clone());
    }
    limit
}

#[tokio::test]
async fn concurrency_limits_refuse_what_they_do_not_take_naming_the_field() {
    let h = Harness::new();
    let bad = StatusCode::BAD_REQUEST;
    let gcra = json!({"key": "g", "algorithm": "gcra", "requests": 5, "window_ms": 1000});
    let body = |check: Value| serde_json::to_vec(&check).unwrap();
    let no_holder = json!({"domain": "demo", "limits": [gcra, concurrency(json!({}))]});
    assert_bad(&h, body(no_holder), bad, "holder").await;
    let batched =
        json!({"domain": "demo", "holder": 1, "batch": 2, "limits": [concurrency(json!({}))]});
    assert_bad(&h, body(batched), bad, "batch").await;
    for (field, extra) in [
        ("burst", json!({"burst": 2})),
        ("precision", json!({"precision": 2})),
        ("soft_percent", json!({"soft_percent": 5})),
        ("max_delay_ms", json!({"max_delay_ms": 10})),
        ("lease", json!({"lease": 1})),
        ("returned", json!({"returned": 1, "returned_age_ms": 0})),
        ("returned_age_ms", json!({"returned_age_ms": 0})),
        ("requests", json!({"requests": 0})),
        ("window_ms", json!({"window_ms": 999})),
    ] {
        let check = json!({"domain": "demo", "holder": 1, "limits": [concurrency(extra)]});
        assert_bad(&h, body(check), bad, &format!("limits[0].{field}")).await;
    }
    let twice = json!({"domain": "demo", "holder": 1,
        "limits": [concurrency(json!({})), concurrency(json!({"requests": 9}))]});
    assert_bad(&h, body(twice), bad, "limits[1].key").await;
    assert_eq!(h.mem.len(), 0);
}

#[tokio::test]
async fn permits_are_taken_by_a_check_and_given_back_by_the_permits_endpoint() {
    let h = Harness::new();
    let check = |holder: u64| json!({"domain": "demo", "holder": holder, "limits": [concurrency(json!({}))]});
    let (status, v) = h.check(check(1)).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(
        v,
        json!({"allowed": true, "limits": [{"allowed": true, "limit": 2, "remaining": 1, "reset_ms": 0, "retry_after_ms": 0}]})
    );
    assert!(h.allowed(&check(2)).await);
    let (_, v) = h.check(check(3)).await;
    assert_eq!(v["allowed"], json!(false));
    assert_eq!(v["limits"][0]["retry_after_ms"], json!(1000));
    let (status, v) = h
        .permits(json!({"domain": "demo", "holder": 1, "ttl_ms": 1000,
        "release": [{"key": "c", "hits": 1}, {"key": "other", "hits": 1}], "renew": ["c"]}))
        .await;
    assert_eq!(status, StatusCode::OK, "{v}");
    // Holder 1 gave its permit back: nothing of its left to renew.
    assert_eq!(v, json!({"released": ["c"], "renewed": []}));
    let (_, v) = h
        .permits(json!({"domain": "demo", "holder": 2, "ttl_ms": 1000, "renew": ["c", "x"]}))
        .await;
    assert_eq!(v, json!({"released": [], "renewed": ["c"]}));
    assert!(h.allowed(&check(3)).await);
    for (body, field) in [
        (json!({"domain": "demo", "ttl_ms": 1000}), "holder"),
        (
            json!({"domain": "demo", "holder": 1, "ttl_ms": 10}),
            "ttl_ms",
        ),
        (
            json!({"domain": "a b", "holder": 1, "ttl_ms": 1000}),
            "domain",
        ),
        (
            json!({"domain": "demo", "holder": 1, "ttl_ms": 1000, "release": [{"key": "c", "hits": 0}]}),
            "release[0].hits",
        ),
        (
            json!({"domain": "demo", "holder": 1, "ttl_ms": 1000, "renew": ["c", "c"]}),
            "renew[1]",
        ),
        (
            json!({"domain": "demo", "holder": 1, "ttl_ms": 1000, "more": 1}),
            "more",
        ),
    ] {
        let (status, v) = h.permits(body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{v}");
        assert!(v["error"].as_str().unwrap().contains(field), "{field}: {v}");
    }
    let text = support::metrics(&h.state).await;
    assert!(
        text.contains("sluice_limiter_permits_calls_total 8"),
        "{text}"
    );
    assert!(
        text.contains("sluice_limiter_permits_released_total 1"),
        "{text}"
    );
    assert!(
        text.contains("sluice_limiter_permits_renewed_total 1"),
        "{text}"
    );
}

async fn assert_bad_charge(h: &Harness, body: Vec<u8>, status: StatusCode, field: &str) {
    let (got, bytes) = h.raw("POST", "/v1/charge", body).await;
    assert_eq!(got, status, "{}", String::from_utf8_lossy(&bytes));
    let v: Value = serde_json::from_slice(&bytes).unwrap();
    let msg = v["error"].as_str().unwrap();
    assert!(msg.starts_with(field), "{msg:?} should name {field:?}");
    assert!(h.mem.is_empty(), "a refused charge touches no state");
}

fn charged(extra: Value) -> Value {
    let mut limit =
        json!({"key": "t", "algorithm": "token_bucket", "requests": 10, "window_ms": 1000});
    if let (Some(l), Some(e)) = (limit.as_object_mut(), extra.as_object()) {
        l.extend(e.clone());
    }
    limit
}

#[tokio::test]
async fn the_charge_endpoint_refuses_what_it_does_not_take_naming_the_field() {
    let h = Harness::new();
    let bad = StatusCode::BAD_REQUEST;
    let body = |b: Value| serde_json::to_vec(&b).unwrap();
    let one = |extra: Value| body(json!({"domain": "demo", "limits": [charged(extra)]}));
    for (field, extra) in [
        ("limits[0].charge", json!({})),
        ("limits[0].charge", json!({"charge": 0})),
        (
            "limits[0].refund",
            json!({"charge": 1, "refund": 1, "refund_age_ms": 0}),
        ),
        ("limits[0].refund_age_ms", json!({"refund": 1})),
        ("limits[0].refund", json!({"refund_age_ms": 1})),
        ("limits[0].hits", json!({"charge": 1, "hits": 2})),
        ("limits[0].lease", json!({"charge": 1, "lease": 2})),
        ("limits[0].returned", json!({"charge": 1, "returned": 2})),
        (
            "limits[0].returned_age_ms",
            json!({"charge": 1, "returned_age_ms": 2}),
        ),
        ("limits[0].requests", json!({"charge": 1, "requests": 0})),
        (
            "limits[0].algorithm",
            json!({"charge": 1, "algorithm": "sliding_log"}),
        ),
        (
            "limits[0].algorithm",
            json!({"charge": 1, "algorithm": "concurrency"}),
        ),
    ] {
        assert_bad_charge(&h, one(extra), bad, field).await;
    }
    let item = charged(json!({"charge": 1}));
    assert_bad_charge(
        &h,
        body(json!({"domain": "demo", "limits": [item.clone()], "batch": 2})),
        bad,
        "batch",
    )
    .await;
    assert_bad_charge(
        &h,
        body(json!({"domain": "demo", "limits": [item.clone()], "hits": 2})),
        bad,
        "hits",
    )
    .await;
    assert_bad_charge(
        &h,
        body(json!({"domain": "demo", "limits": [item.clone(), item]})),
        bad,
        "limits[1].key",
    )
    .await;
    assert_bad_charge(
        &h,
        body(json!({"domain": "demo", "limits": []})),
        bad,
        "limits",
    )
    .await;
    assert_bad_charge(&h, b"nope".to_vec(), bad, "").await;
    // A sliding log is refunded, not charged.
    let log = json!({"domain": "demo", "limits": [charged(json!({"algorithm": "sliding_log", "refund": 1, "refund_age_ms": 0}))]});
    assert_eq!(h.charge(log).await.0, StatusCode::OK);
}

#[tokio::test]
async fn a_charge_round_trip() {
    let h = Harness::new();
    let check = json!({"domain": "demo", "hits": 2, "limits": [charged(json!({}))]});
    assert!(h.allowed(&check).await);
    // The filter writes the body with sluice-wire's hand writer.
    let spec = sluice_wire::LimitSpec::new(
        "t".into(),
        &sluice_core::Limit::new(sluice_core::Algorithm::TokenBucket, 10, SECOND).unwrap(),
    );
    let written = sluice_wire::charge_json("demo", &[(&spec, sluice_wire::Adjust::Charge(15))]);
    let (status, bytes) = h.raw("POST", "/v1/charge", written).await;
    assert_eq!(status, StatusCode::OK);
    let answer: sluice_wire::ChargeResponse = serde_json::from_slice(&bytes).unwrap();
    // 17 units of 10 per second: one more fits after 800 ms, all after 1.7 s.
    assert_eq!(
        serde_json::to_value(&answer).unwrap(),
        json!({"limits": [{"allowed": false, "limit": 10, "remaining": 0, "reset_ms": 1700, "retry_after_ms": 800}]})
    );
    let (_, v) = h.check(check.clone()).await;
    assert_eq!(v["limits"][0]["retry_after_ms"], json!(900), "{v}");
    // A refund of 5 consumed 200 ms ago: 3 of them are still in the bucket.
    let refund =
        json!({"domain": "demo", "limits": [charged(json!({"refund": 5, "refund_age_ms": 200}))]});
    let (status, v) = h.charge(refund).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(v["limits"][0]["retry_after_ms"], json!(500), "{v}");
    let text = support::metrics(&h.state).await;
    assert!(
        text.contains("sluice_limiter_charge_calls_total 2"),
        "{text}"
    );
    assert!(
        text.contains("sluice_limiter_charged_units_total 15"),
        "{text}"
    );
    assert!(
        text.contains("sluice_limiter_refunded_units_total 5"),
        "{text}"
    );
    let _ = MILLISECOND;
}

#[tokio::test]
async fn a_store_that_cannot_charge_gets_a_503() {
    let state = AppState::new(Down);
    let body = json!({"domain": "d", "limits": [charged(json!({"charge": 3}))]});
    let (status, v) = support::send_json(&state, "POST", "/v1/charge", &body).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{v}");
    assert!(support::metrics(&state)
        .await
        .contains("sluice_limiter_store_errors_total 1"));
}
