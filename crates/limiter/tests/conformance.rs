//! One suite, every store: the same scenarios against the memory store, one
//! Redis server and a Redis Cluster, through the HTTP router.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::{json, Value};
use sluice_core::Algorithm;
use sluice_limiter::api::{app, AppState};
use sluice_limiter::clock::SystemClock;
use sluice_limiter::store::memory::{MemoryConfig, MemoryStore};
use sluice_limiter::store::redis::{RedisStore, Target};
use sluice_limiter::store::Store;
use std::sync::Arc;
use std::time::Duration;
use tower::ServiceExt;

struct Client {
    state: AppState,
    domain: String,
}

impl Client {
    async fn post(&self, limits: Value, hits: u64) -> (StatusCode, Value) {
        let body = json!({"domain": self.domain, "hits": hits, "limits": limits});
        let req = Request::builder()
            .method("POST")
            .uri("/v1/check")
            .body(Body::from(serde_json::to_vec(&body).unwrap()))
            .unwrap();
        let resp = app(self.state.clone()).oneshot(req).await.unwrap();
        let status = resp.status();
        let bytes = resp.into_body().collect().await.unwrap().to_bytes();
        (status, serde_json::from_slice(&bytes).unwrap())
    }

    async fn check(&self, limits: Value, hits: u64) -> Value {
        let (status, v) = self.post(limits, hits).await;
        assert_eq!(status, StatusCode::OK, "{v}");
        v
    }
}

/// Every scenario, each in a domain of its own (so one store serves all).
async fn suite(state: AppState, store: &str) {
    let client = |name: &str| Client {
        state: state.clone(),
        domain: format!("{store}-{name}"),
    };

    // Exact admits for every algorithm; the next one waits.
    for alg in Algorithm::ALL {
        let c = client(alg.name());
        let limit = json!([{"key":"k","algorithm":alg.name(),"requests":5,"window_ms":60000}]);
        for i in 0..5 {
            let v = c.check(limit.clone(), 1).await;
            assert_eq!(v["allowed"], json!(true), "{store} {alg} #{i}: {v}");
            assert_eq!(
                v["limits"][0]["remaining"],
                json!(4 - i),
                "{store} {alg}: {v}"
            );
        }
        let v = c.check(limit, 1).await;
        assert_eq!(v["allowed"], json!(false), "{store} {alg}: {v}");
        assert_eq!(v["limits"][0]["remaining"], json!(0));
        assert!(v["limits"][0]["retry_after_ms"].as_u64().unwrap() > 0);
        assert!(v["limits"][0]["reset_ms"].as_u64().unwrap() > 0);
    }

    // A denied check consumes nothing from its other limits.
    let c = client("multi");
    let both = json!([
        {"key":"wide","algorithm":"sliding_window","requests":10,"window_ms":60000,"precision":6},
        {"key":"narrow","algorithm":"sliding_log","requests":2,"window_ms":60000}
    ]);
    for _ in 0..2 {
        assert_eq!(c.check(both.clone(), 1).await["allowed"], json!(true));
    }
    for _ in 0..3 {
        let v = c.check(both.clone(), 1).await;
        assert_eq!(v["allowed"], json!(false), "{store}: {v}");
        assert_eq!(v["limits"][0]["allowed"], json!(true));
        assert_eq!(v["limits"][0]["remaining"], json!(8), "{store}: {v}");
        assert_eq!(v["limits"][1]["allowed"], json!(false));
    }
    let wide = json!([both[0].clone()]);
    for _ in 0..8 {
        assert_eq!(c.check(wide.clone(), 1).await["allowed"], json!(true));
    }
    assert_eq!(c.check(wide, 1).await["allowed"], json!(false));

    // Weights: hits count against the quota; too heavy never fits.
    let c = client("hits");
    let bucket = json!([{"key":"k","algorithm":"token_bucket","requests":10,"window_ms":60000}]);
    assert_eq!(c.check(bucket.clone(), 4).await["allowed"], json!(true));
    assert_eq!(c.check(bucket.clone(), 4).await["allowed"], json!(true));
    let v = c.check(bucket.clone(), 4).await;
    assert_eq!(v["allowed"], json!(false));
    assert_eq!(v["limits"][0]["remaining"], json!(2));
    let v = c.check(bucket, 11).await;
    assert_eq!(v["allowed"], json!(false));
    assert_eq!(v["limits"][0]["retry_after_ms"], json!(0));

    // Soft throttling admits above the quota; remaining counts the hard part.
    let c = client("soft");
    let soft = json!([{"key":"k","algorithm":"fixed_window","requests":10,"window_ms":60000,"soft_percent":50}]);
    for i in 0..15 {
        let v = c.check(soft.clone(), 1).await;
        assert_eq!(v["allowed"], json!(true), "{store} soft #{i}: {v}");
    }
    let v = c.check(soft, 1).await;
    assert_eq!(v["allowed"], json!(false));
    assert_eq!(v["limits"][0]["limit"], json!(10));

    // GCRA's burst and spacing, the contract's example.
    let c = client("gcra");
    let gcra = json!([{"key":"per-ip/203.0.113.7","algorithm":"gcra","requests":100,"window_ms":60000,"burst":20}]);
    for _ in 0..20 {
        assert_eq!(c.check(gcra.clone(), 1).await["allowed"], json!(true));
    }
    let v = c.check(gcra, 1).await;
    assert_eq!(v["allowed"], json!(false));
    let retry = v["limits"][0]["retry_after_ms"].as_u64().unwrap();
    assert!(retry > 500 && retry <= 600, "{store}: retry {retry}");

    // Bad input touches nothing.
    let c = client("bad");
    let limit = json!([{"key":"k","algorithm":"fixed_window","requests":1,"window_ms":60000}]);
    let bad = json!([limit[0].clone(), {"key":"k2","algorithm":"fixed_window","requests":0,"window_ms":60000}]);
    let (status, v) = c.post(bad, 1).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(v["error"]
        .as_str()
        .unwrap()
        .starts_with("limits[1].requests"));
    assert_eq!(c.check(limit.clone(), 1).await["allowed"], json!(true));
    assert_eq!(c.check(limit, 1).await["allowed"], json!(false));
}

async fn connected(target: Target) -> Arc<RedisStore> {
    support::connected(target, Duration::from_millis(500)).await
}

#[tokio::test]
async fn memory_store() {
    let mem = MemoryStore::new(MemoryConfig::default(), Arc::new(SystemClock));
    suite(AppState::new(Store::Memory(Arc::new(mem))), "memory").await;
}

#[tokio::test]
async fn redis_store() {
    let Some(server) = support::RedisServer::start(&[]) else {
        return;
    };
    let store = connected(Target::Single(server.url())).await;
    suite(AppState::new(Store::Redis(store)), "redis").await;
}

#[tokio::test]
async fn redis_cluster_store() {
    let Some(nodes) = support::start_cluster() else {
        return;
    };
    let store = connected(Target::Cluster(support::cluster_seeds(&nodes))).await;
    suite(AppState::new(Store::Redis(store)), "cluster").await;
}
