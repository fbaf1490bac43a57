//! In-process tests of the introspection API (no socket): off by default,
//! `/v1/keys` reading a key's state without consuming, `/v1/top` fed by
//! refused checks, `/v1/limits` from the descriptors, bad parameters named,
//! and the bounded metric.
#![cfg(test)]

mod support;

use axum::http::StatusCode;
use serde_json::{json, Value};
use sluice_core::SECOND;
use sluice_limiter::api::AppState;
use sluice_limiter::clock::ManualClock;
use sluice_limiter::introspect::Inspector;
use sluice_limiter::rls::config::Descriptors;
use sluice_limiter::rls::reload::ConfigCell;
use sluice_limiter::store::memory::{MemoryConfig, MemoryStore};
use sluice_limiter::top::{KeyDisplay, TopKeys};
use std::sync::Arc;

const T0: u64 = 1_700_000_000 * SECOND;

const YAML: &str = "domain: shop\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: second, requests_per_unit: 10, name: per-ip}\n";

fn state(display: KeyDisplay) -> AppState<Arc<MemoryStore>> {
    state_with(display, Arc::new(ManualClock::new(T0)))
}

fn state_with(display: KeyDisplay, clock: Arc<ManualClock>) -> AppState<Arc<MemoryStore>> {
    let mem = Arc::new(MemoryStore::new(MemoryConfig::default(), clock.clone()));
    let cell = ConfigCell::fixed(Descriptors::parse(YAML).unwrap());
    let inspector = Inspector {
        top: Arc::new(TopKeys::new(300 * SECOND, 16, display)),
        descriptors: Some(Arc::new(cell)),
        metric_keys: 2,
        clock,
    };
    AppState::new(mem).with_introspection(Arc::new(inspector))
}

async fn get(st: &AppState<Arc<MemoryStore>>, uri: &str) -> (StatusCode, Value) {
    let (status, bytes) = support::send(st, "GET", uri, Vec::new()).await;
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

async fn check(st: &AppState<Arc<MemoryStore>>, key: &str) -> Value {
    let body = json!({"domain": "d", "limits": [
        {"key": key, "algorithm": "fixed_window", "requests": 3, "window_ms": 60000}]});
    let bytes = serde_json::to_vec(&body).unwrap();
    let (status, out) = support::send(st, "POST", "/v1/check", bytes).await;
    assert_eq!(status, StatusCode::OK);
    serde_json::from_slice(&out).unwrap()
}

const KEY_QUERY: &str =
    "/v1/keys?domain=d&key=alice&algorithm=fixed_window&requests=3&window_ms=60000";

#[tokio::test]
async fn without_the_flag_every_endpoint_answers_404() {
    let clock = Arc::new(ManualClock::new(T0));
    let st = AppState::new(Arc::new(MemoryStore::new(MemoryConfig::default(), clock)));
    for uri in ["/v1/limits", KEY_QUERY, "/v1/top?domain=d"] {
        let (status, body) = get(&st, uri).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{uri}");
        assert_eq!(
            body["error"],
            "introspection is off (start sluice-limiter with --introspection)"
        );
    }
}

#[tokio::test]
async fn a_key_reads_as_the_checks_left_it_and_reading_consumes_nothing() {
    let st = state(KeyDisplay::Clear);
    let (_, fresh) = get(&st, KEY_QUERY).await;
    assert_eq!(fresh["limits"][0]["remaining"], 3);
    let last = check(&st, "alice").await;
    check(&st, "alice").await;
    let last2 = check(&st, "alice").await;
    assert_eq!(last["limits"][0]["remaining"], 2);
    assert_eq!(last2["limits"][0]["remaining"], 0);
    for _ in 0..3 {
        let (status, body) = get(&st, KEY_QUERY).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(
            body,
            json!({"domain": "d", "key": "alice", "limits": [{
                "algorithm": "fixed_window", "window_ms": 60000, "limit": 3,
                "remaining": 0, "reset_ms": last2["limits"][0]["reset_ms"],
                "retry_after_ms": last2["limits"][0]["reset_ms"]}]})
        );
    }
}

#[tokio::test]
async fn refused_keys_are_listed_most_refused_first() {
    let st = state(KeyDisplay::Clear);
    for _ in 0..10 {
        check(&st, "flood").await;
    }
    for _ in 0..5 {
        check(&st, "steady").await;
    }
    check(&st, "calm").await;
    let (status, body) = get(&st, "/v1/top?domain=d").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        body,
        json!({"domain": "d", "keys": [
            {"key": "flood", "limit": "fixed_window|60000", "refusals": 7, "error": 0},
            {"key": "steady", "limit": "fixed_window|60000", "refusals": 2, "error": 0}]})
    );
    let (_, one) = get(&st, "/v1/top?domain=d&n=1").await;
    assert_eq!(one["keys"].as_array().unwrap().len(), 1);
    let (_, none) = get(&st, "/v1/top?domain=other").await;
    assert_eq!(none, json!({"domain": "other", "keys": []}));
}

#[tokio::test]
async fn hashed_keys_are_shown_hashed_everywhere() {
    let st = state(KeyDisplay::Hashed);
    for _ in 0..4 {
        check(&st, "alice").await;
    }
    let (_, top) = get(&st, "/v1/top?domain=d").await;
    assert_eq!(top["keys"][0]["key"], "2bd806c97f0e00af");
    let (_, key) = get(&st, KEY_QUERY).await;
    assert_eq!(key["key"], "2bd806c97f0e00af");
    let (_, bytes) = support::send(&st, "GET", "/metrics", Vec::new()).await;
    let text = String::from_utf8(bytes).unwrap();
    assert!(text.contains(
        "sluice_limiter_top_limited_key_refusals{domain=\"d\",key=\"2bd806c97f0e00af\"} 1\n"
    ));
    assert!(!text.contains("alice"));
    assert!(text.ends_with("# EOF\n"));
}

#[tokio::test]
async fn the_metric_shows_only_the_top_keys_of_each_domain() {
    let st = state(KeyDisplay::Clear);
    for i in 0..50 {
        for _ in 0..5 {
            check(&st, &format!("k{i}")).await;
        }
    }
    let (_, bytes) = support::send(&st, "GET", "/metrics", Vec::new()).await;
    let text = String::from_utf8(bytes).unwrap();
    let series = text
        .lines()
        .filter(|l| l.starts_with("sluice_limiter_top_limited_key_refusals{"))
        .count();
    assert_eq!(series, 2);
}

#[tokio::test]
async fn the_limits_are_listed_from_the_descriptors() {
    let st = state(KeyDisplay::Clear);
    let (status, body) = get(&st, "/v1/limits").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        body,
        json!({"domains": [{"domain": "shop", "limits": [{
            "descriptors": [{"key": "remote_address"}], "name": "per-ip",
            "requests_per_unit": 10, "unit": "second", "unlimited": false,
            "shadow_mode": false}]}], "next_page_token": null})
    );
}

#[tokio::test]
async fn bad_parameters_are_named() {
    let st = state(KeyDisplay::Clear);
    let cases = [
        ("/v1/top", "domain: required"),
        (
            "/v1/top?domain=d&n=0",
            "n: expected a whole number from 1 to 256, got \"0\"",
        ),
        (
            "/v1/top?domain=d&x=1",
            "x: unknown parameter (expected one of domain, n)",
        ),
        (
            "/v1/limits?page_size=5000",
            "page_size: expected a whole number from 1 to 1000, got \"5000\"",
        ),
        (
            "/v1/limits?page_token=abc",
            "page_token: expected a whole number from 0 to 18446744073709551615, got \"abc\"",
        ),
        ("/v1/keys?domain=d&key=a", "algorithm: required"),
        (
            "/v1/keys?domain=d&key=a&algorithm=gcra&requests=x&window_ms=1000",
            "requests: expected a whole number, got \"x\"",
        ),
        ("/v1/keys?domain=d&domain=e", "domain: given more than once"),
    ];
    for (uri, message) in cases {
        let (status, body) = get(&st, uri).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{uri}");
        assert_eq!(body["error"], message, "{uri}");
    }
    let (status, body) = get(
        &st,
        "/v1/keys?domain=d&key=a&algorithm=nope&requests=1&window_ms=1000",
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        body["error"].as_str().unwrap().starts_with("algorithm"),
        "{body}"
    );
}

#[tokio::test]
async fn an_rls_key_reads_as_the_rls_service_decided_it() {
    let clock = Arc::new(ManualClock::new(T0));
    let st = state_with(KeyDisplay::Clear, clock.clone());
    let inspector = st.introspection.clone().unwrap();
    let svc = support::rls::service(st.store.clone(), YAML, &clock).with_top(inspector.top.clone());
    let req = support::rls::request(
        "shop",
        vec![support::rls::descriptor(&[("remote_address", "10.0.0.1")])],
    );
    for _ in 0..12 {
        support::rls::ask(&svc, &req).await;
    }
    let (status, top) = get(&st, "/v1/top?domain=shop").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        top,
        json!({"domain": "shop", "keys": [
            {"key": "remote_address=10.0.0.1", "limit": "remote_address", "refusals": 2, "error": 0}]})
    );
    let uri = "/v1/keys?service=rls&domain=shop&key=remote_address%3D10.0.0.1";
    let (status, body) = get(&st, uri).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        body,
        json!({"domain": "shop", "key": "remote_address=10.0.0.1", "limits": [{
            "algorithm": "fixed_window", "window_ms": 1000, "limit": 10, "remaining": 0,
            "reset_ms": 1000, "retry_after_ms": 1000}]})
    );
    let (status, body) = get(&st, "/v1/keys?service=rls&domain=shop&key=k%3Dv&requests=1").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        body["error"],
        "requests: not with service=rls (the descriptors give the limit)"
    );
}

/// A block is read, never started, by `/v1/keys`: a key in debt read with
/// its `block_ms` is not blocked by the read and shows its debt, and a
/// blocked key shows when its block ends at once, its quota spent or not.
#[tokio::test]
async fn reading_a_key_never_starts_its_penalty_box() {
    let clock = Arc::new(ManualClock::new(T0));
    let st = state_with(KeyDisplay::Clear, clock.clone());
    let send = |body: Value| {
        let st = st.clone();
        async move {
            let path = if body["limits"][0].get("charge").is_some() {
                "/v1/charge"
            } else {
                "/v1/check"
            };
            let (_, out) =
                support::send(&st, "POST", path, serde_json::to_vec(&body).unwrap()).await;
            serde_json::from_slice::<Value>(&out).unwrap()
        }
    };
    let limit = |key: &str| json!({"key": key, "algorithm": "gcra", "requests": 2, "window_ms": 1000, "block_ms": 60000});
    let mut charge = limit("eve");
    charge.as_object_mut().unwrap().remove("block_ms");
    charge["charge"] = json!(5);
    send(json!({"domain": "d", "limits": [charge]})).await;
    let uri = |key: &str| {
        format!(
            "/v1/keys?domain=d&key={key}&algorithm=gcra&requests=2&window_ms=1000&block_ms=60000"
        )
    };
    // 5 charged on a burst of 2: 3 owed, 2 of them still after 500 ms.
    for (wait, debt) in [(0, 3), (500, 2)] {
        clock.advance(wait * sluice_core::MILLISECOND);
        let (_, body) = get(&st, &uri("eve")).await;
        let l = &body["limits"][0];
        assert_eq!(
            (
                l["remaining"].as_u64(),
                l["debt"].as_u64(),
                l.get("blocked_until_ms")
            ),
            (Some(0), Some(debt), None),
            "{body}"
        );
    }
    clock.advance(10 * SECOND);
    let after = send(json!({"domain": "d", "limits": [limit("eve")]})).await;
    assert_eq!(
        after["allowed"], true,
        "the reads started no block: {after}"
    );
    let (_, body) = get(&st, &uri("eve")).await;
    assert_eq!(body["limits"][0]["debt"], 0, "{body}");

    for allowed in [true, true, false] {
        let out = send(json!({"domain": "d", "limits": [limit("mal")]})).await;
        assert_eq!(out["allowed"], allowed);
    }
    // spent and blocked: the block in force shows at once
    let block_end = (T0 + 10_500 * sluice_core::MILLISECOND) / sluice_core::MILLISECOND + 60_000;
    let (_, body) = get(&st, &uri("mal")).await;
    assert_eq!(body["limits"][0]["blocked_until_ms"], block_end, "{body}");
    assert_eq!(body["limits"][0]["retry_after_ms"], 60_000, "{body}");
    assert_eq!(body["limits"][0].get("debt"), None, "{body}");
    // and still once the quota would admit again
    clock.advance(SECOND);
    let (_, body) = get(&st, &uri("mal")).await;
    assert_eq!(body["limits"][0]["blocked_until_ms"], block_end, "{body}");
    assert_eq!(body["limits"][0]["retry_after_ms"], 59_000, "{body}");
}

#[tokio::test]
async fn a_concurrency_key_shows_the_units_held() {
    let st = state(KeyDisplay::Clear);
    let body = json!({"domain": "d", "holder": 7, "limits": [
        {"key": "c", "algorithm": "concurrency", "requests": 3, "window_ms": 60000, "hits": 2}]});
    let (status, out) =
        support::send(&st, "POST", "/v1/check", serde_json::to_vec(&body).unwrap()).await;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&out));
    let (status, body) = get(
        &st,
        "/v1/keys?domain=d&key=c&algorithm=concurrency&requests=3&window_ms=60000",
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        body["limits"][0],
        json!({"algorithm": "concurrency", "window_ms": 60000, "limit": 3, "remaining": 1,
               "reset_ms": body["limits"][0]["reset_ms"], "held": 2})
    );
}
