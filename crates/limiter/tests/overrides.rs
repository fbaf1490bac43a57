//! Per-key overrides: from a file and from Redis hashes, resolved the same
//! way whichever store decides.
#![cfg(test)]

mod support;

use support::{allowed, one};

use axum::http::StatusCode;
use serde_json::{json, Value};
use sluice_core::SECOND;
use sluice_limiter::api::AppState;
use sluice_limiter::clock::ManualClock;
use sluice_limiter::overrides::Overrides;
use sluice_limiter::store::memory::{MemoryConfig, MemoryStore};
use sluice_limiter::store::redis::{RedisStore, Target};
use sluice_limiter::store::Store;
use std::sync::Arc;
use std::time::Duration;

fn memory() -> Arc<MemoryStore> {
    Arc::new(MemoryStore::new(
        MemoryConfig::default(),
        Arc::new(ManualClock::new(1_700_000_000 * SECOND)),
    ))
}

async fn check<S: Store + Clone>(state: &AppState<S>, body: &Value) -> Value {
    let (status, v) = support::send_json(state, "POST", "/v1/check", body).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    v
}

async fn connected(target: Target) -> Arc<RedisStore> {
    support::connected(target, Duration::from_millis(200)).await
}

/// Sets the override of `key` in domain `demo`'s hash.
async fn hset(url: &str, key: &str, value: &str) {
    let client = redis::Client::open(url).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let _: () = redis::cmd("HSET")
        .arg("sluice:overrides:demo")
        .arg(key)
        .arg(value)
        .query_async(&mut conn)
        .await
        .unwrap();
}

#[tokio::test]
async fn file_overrides_replace_the_requested_limit() {
    let mut state = AppState::new(memory());
    let overrides =
        Overrides::from_json(r#"{"demo/per-ip/203.0.113.7": {"requests": 3, "window_ms": 60000}}"#)
            .unwrap();
    state.overrides = Arc::new(overrides);
    let vip = one("per-ip/203.0.113.7", "gcra", 1, 60000);
    for _ in 0..3 {
        assert!(allowed(&state, &vip).await);
    }
    let v = check(&state, &vip).await;
    assert_eq!(v["allowed"], json!(false));
    assert_eq!(v["limits"][0]["limit"], json!(3));
    let other = one("per-ip/198.51.100.1", "gcra", 1, 60000);
    assert!(allowed(&state, &other).await);
    assert!(!allowed(&state, &other).await);
}

/// An override replaces the quota (`requests`, `window`, `burst`) and keeps
/// what the check says about the request: its delay mode and its weight.
#[tokio::test]
async fn overrides_keep_the_delay_mode_and_the_weight() {
    let mut state = AppState::new(memory());
    let overrides =
        Overrides::from_json(r#"{"demo/vip": {"requests": 10, "window_ms": 1000, "burst": 2}}"#)
            .unwrap();
    state.overrides = Arc::new(overrides);
    // Without the override a weight of 2 would never fit a burst of 1.
    let body = json!({"domain": "demo", "hits": 1, "limits": [
        {"key": "vip", "algorithm": "gcra", "requests": 1, "window_ms": 60000,
         "hits": 2, "max_delay_ms": 1000}
    ]});
    // 10 per second, 2 at once, each request weighing 2: every one after
    // the first waits 200 ms more, up to the 1000 ms allowed.
    for expected in [0, 200, 400, 600, 800, 1000] {
        let v = check(&state, &body).await;
        assert_eq!(v["allowed"], json!(true), "{v}");
        assert_eq!(v["limits"][0]["limit"], json!(10), "{v}");
        assert_eq!(
            v["limits"][0]["delay_ms"].as_u64().unwrap_or(0),
            expected,
            "{v}"
        );
    }
    let v = check(&state, &body).await;
    assert_eq!(v["allowed"], json!(false), "{v}");
    assert_eq!(v["limits"][0]["retry_after_ms"], json!(1200), "{v}");
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

#[tokio::test]
async fn overrides_from_a_redis_hash() {
    let Some(server) = support::RedisServer::start(&[]) else {
        return;
    };
    let store = connected(Target::Single(server.url())).await;
    hset(
        &server.url(),
        "per-user/vip",
        r#"{"requests": 3, "window_ms": 60000}"#,
    )
    .await;
    let mut state = AppState::new(store.clone());
    state.overrides = Arc::new(Overrides::default().with_redis(store, Duration::from_secs(10)));
    let vip = one("per-user/vip", "fixed_window", 1, 60000);
    for _ in 0..3 {
        let v = check(&state, &vip).await;
        assert_eq!(v["allowed"], json!(true), "{v}");
    }
    let v = check(&state, &vip).await;
    assert_eq!(v["allowed"], json!(false));
    assert_eq!(v["limits"][0]["limit"], json!(3));
    let plain = one("per-user/joe", "fixed_window", 1, 60000);
    assert!(allowed(&state, &plain).await);
    assert!(!allowed(&state, &plain).await);
}

#[tokio::test]
async fn redis_hashes_serve_the_memory_store_and_the_file_wins() {
    let Some(server) = support::RedisServer::start(&[]) else {
        return;
    };
    let redis = connected(Target::Single(server.url())).await;
    hset(
        &server.url(),
        "per-user/vip",
        r#"{"requests": 3, "window_ms": 60000}"#,
    )
    .await;
    hset(
        &server.url(),
        "per-user/both",
        r#"{"requests": 5, "window_ms": 60000}"#,
    )
    .await;
    let mut state = AppState::new(memory());
    let file =
        Overrides::from_json(r#"{"demo/per-user/both": {"requests": 2, "window_ms": 60000}}"#)
            .unwrap();
    state.overrides = Arc::new(file.with_redis(redis, Duration::from_secs(10)));

    let vip = one("per-user/vip", "gcra", 1, 60000);
    for _ in 0..3 {
        assert!(allowed(&state, &vip).await);
    }
    let v = check(&state, &vip).await;
    assert_eq!(v["allowed"], json!(false));
    assert_eq!(v["limits"][0]["limit"], json!(3));

    let both = one("per-user/both", "gcra", 1, 60000);
    assert!(allowed(&state, &both).await);
    assert!(allowed(&state, &both).await);
    let v = check(&state, &both).await;
    assert_eq!(v["allowed"], json!(false));
    assert_eq!(v["limits"][0]["limit"], json!(2));
}

#[tokio::test]
async fn unreadable_override_hashes_decide_nothing() {
    // Nothing listens on this port.
    let target = Target::Single(format!("redis://127.0.0.1:{}", support::free_port()));
    let mem = memory();
    let mut state = AppState::new(mem.clone());
    state.overrides = Arc::new(Overrides::default().with_redis(
        RedisStore::start(target, Duration::from_millis(100)),
        Duration::from_secs(10),
    ));
    let (status, v) =
        support::send_json(&state, "POST", "/v1/check", &one("k", "gcra", 1, 60000)).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{v}");
    assert!(v["error"].as_str().unwrap().contains("store"), "{v}");
    assert!(mem.is_empty());
    assert!(support::metrics(&state)
        .await
        .contains("sluice_limiter_store_errors_total 1"));
}
