//! In-process tests of the HTTP surface over the memory store (no socket).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::{json, Value};
use sluice_core::{Algorithm, MILLISECOND, SECOND};
use sluice_limiter::api::{app, AppState};
use sluice_limiter::clock::ManualClock;
use sluice_limiter::overrides::Overrides;
use sluice_limiter::store::memory::{MemoryConfig, MemoryStore};
use sluice_limiter::store::Store;
use std::sync::Arc;
use tower::ServiceExt;

const T0: u64 = 1_700_000_000 * SECOND;

struct Harness {
    state: AppState,
    clock: Arc<ManualClock>,
    mem: Arc<MemoryStore>,
}

impl Harness {
    fn new() -> Self {
        Harness::with_config(MemoryConfig::default())
    }

    fn with_config(config: MemoryConfig) -> Self {
        let clock = Arc::new(ManualClock::new(T0));
        let mem = Arc::new(MemoryStore::new(config, clock.clone()));
        Harness {
            state: AppState::new(Store::Memory(mem.clone())),
            clock,
            mem,
        }
    }

    async fn raw(&self, method: &str, uri: &str, body: Vec<u8>) -> (StatusCode, Vec<u8>) {
        let req = Request::builder()
            .method(method)
            .uri(uri)
            .header("content-type", "application/json")
            .body(Body::from(body))
            .unwrap();
        let resp = app(self.state.clone()).oneshot(req).await.unwrap();
        let status = resp.status();
        let bytes = resp
            .into_body()
            .collect()
            .await
            .unwrap()
            .to_bytes()
            .to_vec();
        (status, bytes)
    }

    async fn check(&self, body: Value) -> (StatusCode, Value) {
        let (status, bytes) = self
            .raw("POST", "/v1/check", serde_json::to_vec(&body).unwrap())
            .await;
        (status, serde_json::from_slice(&bytes).unwrap())
    }

    async fn allowed(&self, body: &Value) -> bool {
        let (status, v) = self.check(body.clone()).await;
        assert_eq!(status, StatusCode::OK, "{v}");
        v["allowed"].as_bool().unwrap()
    }
}

fn one(key: &str, algorithm: &str, requests: u64, window_ms: u64) -> Value {
    json!({"domain": "demo", "limits": [
        {"key": key, "algorithm": algorithm, "requests": requests, "window_ms": window_ms}
    ]})
}

#[tokio::test]
async fn example_from_the_contract() {
    let h = Harness::new();
    let body = json!({"domain":"demo","hits":1,"limits":[{"key":"per-ip/203.0.113.7","algorithm":"gcra","requests":100,"window_ms":60000,"burst":20}]});
    for _ in 0..20 {
        assert!(h.allowed(&body).await);
    }
    let (status, v) = h.check(body).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(v["allowed"], json!(false));
    let l = &v["limits"][0];
    assert_eq!(l["allowed"], json!(false));
    assert_eq!(l["limit"], json!(100));
    assert_eq!(l["remaining"], json!(0));
    // One request every 600 ms.
    assert_eq!(l["retry_after_ms"], json!(600));
    assert!(l["reset_ms"].as_u64().unwrap() > 0);
}

#[tokio::test]
async fn every_algorithm_admits_exactly_its_quota() {
    for alg in Algorithm::ALL {
        let h = Harness::new();
        let body = one("k", alg.name(), 5, 1000);
        for i in 0..5 {
            assert!(h.allowed(&body).await, "{alg}: request {i}");
        }
        let (_, v) = h.check(body.clone()).await;
        assert_eq!(v["allowed"], json!(false), "{alg}");
        let retry = v["limits"][0]["retry_after_ms"].as_u64().unwrap();
        // The sliding window estimate can wait into the next window.
        assert!(retry > 0 && retry <= 2000, "{alg}: retry {retry}");
        // Waiting the advertised time admits again.
        h.clock.advance(retry * MILLISECOND);
        assert!(h.allowed(&body).await, "{alg} after retry_after");
    }
}

#[tokio::test]
async fn hits_weigh_requests_and_oversized_costs_are_denied() {
    let h = Harness::new();
    let mut body = one("k", "token_bucket", 10, 1000);
    body["hits"] = json!(4);
    assert!(h.allowed(&body).await);
    assert!(h.allowed(&body).await);
    let (_, v) = h.check(body.clone()).await;
    assert_eq!(v["allowed"], json!(false));
    assert_eq!(v["limits"][0]["remaining"], json!(2));
    body["hits"] = json!(11);
    let (_, v) = h.check(body).await;
    assert_eq!(v["allowed"], json!(false));
    assert_eq!(v["limits"][0]["retry_after_ms"], json!(0));
}

#[tokio::test]
async fn a_denied_check_consumes_nothing_from_other_limits() {
    let h = Harness::new();
    let both = json!({"domain":"demo","limits":[
        {"key":"wide","algorithm":"fixed_window","requests":10,"window_ms":60000},
        {"key":"narrow","algorithm":"sliding_log","requests":2,"window_ms":60000}
    ]});
    assert!(h.allowed(&both).await);
    assert!(h.allowed(&both).await);
    for _ in 0..5 {
        let (_, v) = h.check(both.clone()).await;
        assert_eq!(v["allowed"], json!(false));
        assert_eq!(v["limits"][0]["allowed"], json!(true));
        assert_eq!(v["limits"][0]["remaining"], json!(8));
        assert_eq!(v["limits"][1]["allowed"], json!(false));
    }
    // The wide limit still has exactly 8 left.
    let wide = one("wide", "fixed_window", 10, 60000);
    for _ in 0..8 {
        assert!(h.allowed(&wide).await);
    }
    assert!(!h.allowed(&wide).await);
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

#[tokio::test]
async fn domains_namespace_keys_and_limits_keep_separate_state() {
    let h = Harness::new();
    let a = one("k", "fixed_window", 1, 60000);
    let mut b = a.clone();
    b["domain"] = json!("other");
    assert!(h.allowed(&a).await);
    assert!(!h.allowed(&a).await);
    assert!(h.allowed(&b).await);
    // Same key, other window: its own state.
    let c = one("k", "fixed_window", 1, 30000);
    assert!(h.allowed(&c).await);
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
        br#"{"domain":"demo","hits":0,"limits":[]}"#.to_vec(),
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

#[tokio::test]
async fn entries_are_dropped_once_full_again() {
    let h = Harness::new();
    assert!(h.allowed(&one("a", "token_bucket", 10, 1000)).await);
    assert!(h.allowed(&one("b", "sliding_window", 10, 1000)).await);
    assert_eq!(h.mem.len(), 2);
    assert_eq!(h.mem.sweep(), 0);
    h.clock.advance(2 * SECOND);
    assert_eq!(h.mem.sweep(), 2);
    assert!(h.mem.is_empty());
}

#[tokio::test]
async fn a_full_store_denies_new_keys_and_keeps_serving_known_ones() {
    let h = Harness::with_config(MemoryConfig {
        shards: 1,
        max_keys: 3,
    });
    for k in ["a", "b", "c"] {
        assert!(h.allowed(&one(k, "fixed_window", 5, 1000)).await);
    }
    let (_, v) = h.check(one("d", "fixed_window", 5, 1000)).await;
    assert_eq!(v["allowed"], json!(false));
    assert_eq!(v["limits"][0]["retry_after_ms"], json!(1000));
    assert!(h.allowed(&one("a", "fixed_window", 5, 1000)).await);
    // Once the known keys are back to full, there is room again.
    h.clock.advance(1100 * MILLISECOND);
    assert!(h.allowed(&one("d", "fixed_window", 5, 1000)).await);
    let (_, text) = h.raw("GET", "/metrics", Vec::new()).await;
    assert!(String::from_utf8(text)
        .unwrap()
        .contains("sluice_limiter_capacity_denials_total 1"));
}

#[tokio::test]
async fn file_overrides_replace_the_requested_limit() {
    let mut h = Harness::new();
    let overrides =
        Overrides::from_json(r#"{"demo/per-ip/203.0.113.7": {"requests": 3, "window_ms": 60000}}"#)
            .unwrap();
    h.state.overrides = Arc::new(overrides);
    let vip = one("per-ip/203.0.113.7", "gcra", 1, 60000);
    for _ in 0..3 {
        assert!(h.allowed(&vip).await);
    }
    let (_, v) = h.check(vip).await;
    assert_eq!(v["allowed"], json!(false));
    assert_eq!(v["limits"][0]["limit"], json!(3));
    let other = one("per-ip/198.51.100.1", "gcra", 1, 60000);
    assert!(h.allowed(&other).await);
    assert!(!h.allowed(&other).await);
}

#[test]
fn bad_override_files_are_refused() {
    assert!(Overrides::from_json("{").is_err());
    assert!(Overrides::from_json(r#"{"nodomain": {"requests":1,"window_ms":1000}}"#).is_err());
    assert!(Overrides::from_json(r#"{"demo/k": {"requests":0,"window_ms":1000}}"#).is_err());
    assert!(Overrides::from_json(r#"{"demo/k": {"requests":1,"window_ms":1000,"x":1}}"#).is_err());
    assert_eq!(
        Overrides::from_json(r#"{"demo/k": {"requests":1,"window_ms":1000,"burst":4}}"#)
            .unwrap()
            .len(),
        1
    );
}
