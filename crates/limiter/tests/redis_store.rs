//! What only the Redis store does: keys expiring in Redis, 503 when Redis is
//! down and reconnection, refunds across cluster slots. The contract every
//! store keeps is tested in `conformance.rs`.
#![cfg(test)]

mod support;

use axum::http::StatusCode;
use serde_json::{json, Value};
use sluice_limiter::api::AppState;
use sluice_limiter::store::redis::{hash_slot, redis_key, RedisStore, Target};
use std::sync::Arc;
use std::time::{Duration, Instant};

type State = AppState<Arc<RedisStore>>;

async fn call(state: &State, method: &str, uri: &str, body: Value) -> (StatusCode, Value) {
    support::send_json(state, method, uri, &body).await
}

fn check(limits: Value) -> Value {
    json!({"domain": "demo", "limits": limits})
}

async fn connected(target: Target) -> Arc<RedisStore> {
    support::connected(target, Duration::from_millis(200)).await
}

#[tokio::test]
async fn keys_expire_when_back_to_full() {
    let Some(server) = support::RedisServer::start(&[]) else {
        return;
    };
    let store = connected(Target::Single(server.url())).await;
    let state = AppState::new(store);
    let body =
        check(json!([{"key":"ttl","algorithm":"token_bucket","requests":10,"window_ms":1000}]));
    let (_, v) = call(&state, "POST", "/v1/check", body).await;
    assert_eq!(v["allowed"], json!(true));
    let client = redis::Client::open(server.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let key = redis_key("demo/ttl|token_bucket|1000");
    let ttl: i64 = redis::cmd("PTTL")
        .arg(&key)
        .query_async(&mut conn)
        .await
        .unwrap();
    // One token refills in 100 ms.
    assert!(ttl > 0 && ttl <= 100, "ttl {ttl}");
}

#[tokio::test]
async fn unreachable_redis_answers_503_quickly_and_reconnects() {
    let Some(bin) = support::binary() else {
        eprintln!("SKIPPED: no redis-server binary found");
        return;
    };
    let port = support::free_port();
    let target = Target::Single(format!("redis://127.0.0.1:{port}"));
    // Nothing listens yet.
    let state = AppState::new(RedisStore::start(target, Duration::from_millis(100)));
    let body = check(json!([{"key":"k","algorithm":"gcra","requests":100,"window_ms":1000}]));
    let started = Instant::now();
    let (status, v) = call(&state, "POST", "/v1/check", body.clone()).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{v}");
    assert!(v["error"].as_str().unwrap().contains("store"));
    assert!(started.elapsed() < Duration::from_millis(500));
    let (status, _) = call(&state, "GET", "/healthz", Value::Null).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);

    // Redis comes up: the service connects by itself.
    let server = support::RedisServer::start_on(&bin, port, &[]);
    let ok = wait_for_ok(&state, &body).await;
    assert!(ok, "no recovery after redis started");

    // Redis goes away: 503 within the timeout, then recovery once it is back.
    drop(server);
    let started = Instant::now();
    let (status, _) = call(&state, "POST", "/v1/check", body.clone()).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        started.elapsed() < Duration::from_millis(1500),
        "{:?}",
        started.elapsed()
    );
    let _server = support::RedisServer::start_on(&bin, port, &[]);
    assert!(wait_for_ok(&state, &body).await, "no reconnection");
    let text = support::metrics(&state).await;
    assert!(!text.contains("sluice_limiter_store_errors_total 0"));
}

#[tokio::test]
async fn a_restarted_redis_is_used_again_at_once_and_calls_meanwhile_do_not_wait() {
    let Some(server) = support::RedisServer::start(&[]) else {
        return;
    };
    let bin = support::binary().unwrap();
    let port = server.port;
    // A long store timeout: a call waiting on a reconnection would show it.
    let store = support::connected(Target::Single(server.url()), Duration::from_secs(2)).await;
    let state = AppState::new(store);
    let body = check(json!([{"key":"k","algorithm":"gcra","requests":100,"window_ms":1000}]));
    let (status, _) = call(&state, "POST", "/v1/check", body.clone()).await;
    assert_eq!(status, StatusCode::OK);

    drop(server);
    // The first call finds the connection gone; the ones after it fail at
    // once while the store reconnects, none waiting for the timeout.
    let (status, _) = call(&state, "POST", "/v1/check", body.clone()).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    let mut slowest = Duration::ZERO;
    for _ in 0..20 {
        let started = Instant::now();
        let (status, v) = call(&state, "POST", "/v1/check", body.clone()).await;
        slowest = slowest.max(started.elapsed());
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{v}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        slowest < Duration::from_secs(1),
        "a call waited {slowest:?}"
    );

    // Redis back (empty: no library, no keys): decided again, the library
    // loaded by the first call that misses it.
    let _server = support::RedisServer::start_on(&bin, port, &[]);
    let back = Instant::now();
    assert!(wait_for_ok(&state, &body).await, "no reconnection");
    let recovery = back.elapsed();
    eprintln!(
        "slowest call while down {slowest:?}; decided again {recovery:?} after redis answered"
    );
    // The reconnection backoff is 50 ms doubling to 250 ms, each give or take half.
    assert!(
        recovery < Duration::from_secs(2),
        "recovery took {recovery:?}"
    );
}

async fn wait_for_ok(state: &State, body: &Value) -> bool {
    let deadline = Instant::now() + Duration::from_secs(15);
    while Instant::now() < deadline {
        let (status, _) = call(state, "POST", "/v1/check", body.clone()).await;
        if status == StatusCode::OK {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

#[tokio::test]
async fn cluster_refunds_slots_that_admitted_when_another_denies() {
    let Some(nodes) = support::start_cluster() else {
        return;
    };
    let seeds = support::cluster_seeds(&nodes);
    let store = connected(Target::Cluster(seeds)).await;
    let state = AppState::new(store);

    let wide = json!({"key":"wide","algorithm":"token_bucket","requests":10,"window_ms":60000});
    let narrow = json!({"key":"narrow","algorithm":"fixed_window","requests":1,"window_ms":60000});
    let slot = |id: &str| hash_slot(redis_key(id).as_bytes());
    assert_ne!(
        slot("demo/wide|token_bucket|60000"),
        slot("demo/narrow|fixed_window|60000")
    );
    let both = check(json!([wide, narrow]));
    let (status, v) = call(&state, "POST", "/v1/check", both.clone()).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(v["allowed"], json!(true));
    for _ in 0..4 {
        let (_, v) = call(&state, "POST", "/v1/check", both.clone()).await;
        assert_eq!(v["allowed"], json!(false), "{v}");
        assert_eq!(v["limits"][0]["allowed"], json!(true));
        // Reported as the other stores do: decided without consuming.
        assert_eq!(v["limits"][0]["remaining"], json!(9), "{v}");
    }
    // The wide limit lost one token in all: the denied checks were refunded.
    let (_, v) = call(&state, "POST", "/v1/check", check(json!([wide]))).await;
    assert_eq!(v["allowed"], json!(true));
    assert_eq!(v["limits"][0]["remaining"], json!(8), "{v}");
}
