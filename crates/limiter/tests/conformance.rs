//! The store contract ([`Store`]), one suite for every store: the same
//! clauses against the memory store, one Redis server and a Redis Cluster,
//! through the HTTP router and through the trait, for single requests and
//! for batches of identical ones (`batch`), for leases (`lease`,
//! `returned`), and for charges after the response (`POST /v1/charge`,
//! debt).
//!
//! What only one store does is tested with it: the memory bound and sweeping
//! in `memory_store.rs`; key expiry, reconnection and cluster refunds in
//! `redis_store.rs`.
#![cfg(test)]

mod support;

use axum::http::StatusCode;
use serde_json::{json, Value};
use sluice_core::{Algorithm, Limit, Permits, MILLISECOND, SECOND};
use sluice_limiter::api::AppState;
use sluice_limiter::clock::ManualClock;
use sluice_limiter::store::memory::{MemoryConfig, MemoryStore};
use sluice_limiter::store::redis::{RedisStore, Target};
use sluice_limiter::store::{permits_id, PermitItem, RateItem, Store, StoreItem};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A store under test.
struct Subject<S> {
    name: &'static str,
    store: S,
    /// The store's clock, when the suite moves it (memory); Redis reads the
    /// server's clock, so clauses that wait run only where this is set.
    clock: Option<Arc<ManualClock>>,
}

/// Checks in one domain of their own, so one store serves every clause.
struct Client<S> {
    state: AppState<S>,
    domain: String,
}

impl<S: Store + Clone> Client<S> {
    async fn post(&self, limits: Value, hits: u64) -> (StatusCode, Value) {
        let body = json!({"domain": self.domain, "hits": hits, "limits": limits});
        support::send_json(&self.state, "POST", "/v1/check", &body).await
    }

    async fn check(&self, limits: Value, hits: u64) -> Value {
        let (status, v) = self.post(limits, hits).await;
        assert_eq!(status, StatusCode::OK, "{v}");
        v
    }

    /// A check carrying `batch` identical requests.
    async fn batch(&self, limits: Value, hits: u64, batch: u32) -> Value {
        let body = json!({"domain": self.domain, "hits": hits, "limits": limits, "batch": batch});
        let (status, v) = support::send_json(&self.state, "POST", "/v1/check", &body).await;
        assert_eq!(status, StatusCode::OK, "{v}");
        v
    }
}

impl<S: Store + Clone> Client<S> {
    /// A check of `limits` for `holder`.
    async fn take(&self, holder: u64, limits: Value) -> Value {
        let body = json!({"domain": self.domain, "holder": holder, "limits": limits});
        let (status, v) = support::send_json(&self.state, "POST", "/v1/check", &body).await;
        assert_eq!(status, StatusCode::OK, "{v}");
        v
    }

    /// `POST /v1/permits` for `holder`.
    async fn permits(&self, holder: u64, ttl_ms: u64, release: Value, renew: Value) -> Value {
        let body = json!({"domain": self.domain, "holder": holder, "ttl_ms": ttl_ms,
            "release": release, "renew": renew});
        let (status, v) = support::send_json(&self.state, "POST", "/v1/permits", &body).await;
        assert_eq!(status, StatusCode::OK, "{v}");
        v
    }
}

/// A concurrency limit of `n` permits on `key`.
impl<S: Store + Clone> Client<S> {
    /// `POST /v1/charge` of `limits` (each with its charge or refund).
    async fn charge(&self, limits: Value) -> Value {
        let body = json!({"domain": self.domain, "limits": limits});
        let (status, v) = support::send_json(&self.state, "POST", "/v1/charge", &body).await;
        assert_eq!(status, StatusCode::OK, "{v}");
        v
    }
}

fn permits(key: &str, n: u64, ttl_ms: u64) -> Value {
    json!({"key": key, "algorithm": "concurrency", "requests": n, "window_ms": ttl_ms})
}

impl<S: Store + Clone> Subject<S> {
    /// Lets `ms` pass: the suite's clock, or real time where the store
    /// reads its own.
    async fn pass(&self, ms: u64) {
        match &self.clock {
            Some(clock) => clock.advance(ms * MILLISECOND),
            None => tokio::time::sleep(Duration::from_millis(ms)).await,
        }
    }

    fn client(&self, name: &str) -> Client<S> {
        Client {
            state: AppState::new(self.store.clone()),
            domain: format!("{}-{name}", self.name),
        }
    }
}

async fn suite<S: Store + Clone>(s: Subject<S>) {
    every_algorithm_admits_exactly_its_quota(&s).await;
    a_denied_check_consumes_nothing(&s).await;
    hits_weigh_requests(&s).await;
    a_weight_of_zero_asks_and_takes_nothing(&s).await;
    per_limit_weights_are_decided_together(&s).await;
    delay_mode_admits_with_the_wait_until_max_delay(&s).await;
    delay_mode_is_refused_where_it_does_not_apply(&s).await;
    soft_throttling_admits_above_the_quota(&s).await;
    gcra_burst_and_spacing(&s).await;
    state_is_kept_per_domain_key_algorithm_and_window(&s).await;
    bad_input_touches_nothing(&s).await;
    concurrent_checks_never_admit_more_than_the_limit(&s).await;
    a_working_store_is_healthy(&s).await;
    a_batch_admits_exactly_what_its_requests_one_by_one_would(&s).await;
    a_batch_is_bounded_by_its_strictest_limit_and_refused_requests_consume_nothing(&s).await;
    a_batch_in_delay_mode_gives_each_request_its_wait(&s).await;
    a_check_without_batch_is_answered_as_before(&s).await;
    concurrent_batches_never_admit_more_than_the_limit(&s).await;
    a_lease_is_the_largest_slice_that_fits(&s).await;
    a_denied_check_grants_no_lease(&s).await;
    a_renewal_weighing_nothing_takes_only_its_lease(&s).await;
    a_renewal_of_several_keys_grants_each_its_own(&s).await;
    returns_give_back_as_the_core_does(&s).await;
    returns_apply_on_a_denied_check(&s).await;
    concurrent_leases_never_debit_more_than_the_limit(&s).await;
    racing_holders_get_exactly_the_permits(&s).await;
    a_release_makes_room_and_another_holders_takes_nothing(&s).await;
    renewed_permits_outlive_the_ttl_and_unrenewed_ones_come_back(&s).await;
    permits_and_rate_limits_are_all_or_nothing(&s).await;
    the_permits_operation_says_what_it_released_and_renewed(&s).await;
    a_charge_takes_the_key_into_debt_until_it_drained(&s).await;
    a_refund_gives_room_back(&s).await;
    a_charge_is_never_refused_and_each_limit_is_answered(&s).await;
    a_reserve_keeps_room_for_checks_without_one(&s).await;
    a_batch_with_a_reserve_stops_where_the_reserve_begins(&s).await;
    racing_checks_with_a_reserve_never_take_it(&s).await;
    a_block_refuses_the_key_until_it_ends(&s).await;
    a_check_of_weight_zero_reads_a_block_and_starts_none(&s).await;
}

/// Penalty box: a token bucket of 2 per 400 ms with `block_ms` 1000. The
/// third check is refused over the limit and starts the block
/// (`retry_after_ms` 1000); until it ends every check of the key is
/// refused, whatever the window allows, consuming nothing of the other
/// limits it carries; another key is untouched; once it ended the key is
/// decided by its limit again (2 admitted, the third blocked again).
async fn a_block_refuses_the_key_until_it_ends<S: Store + Clone>(s: &Subject<S>) {
    let store = s.name;
    let c = s.client("block");
    let boxed = |key: &str| {
        json!({"key": key, "algorithm": "token_bucket", "requests": 2, "window_ms": 400,
            "block_ms": 1000})
    };
    let daily = json!({"key": "other", "algorithm": "fixed_window", "requests": 5,
        "window_ms": 86_400_000});
    for round in 0..2 {
        for _ in 0..2 {
            let v = c.check(json!([boxed("k")]), 1).await;
            assert_eq!(v["allowed"], json!(true), "{store} round {round}: {v}");
        }
        let v = c.check(json!([boxed("k")]), 1).await;
        assert_eq!(v["allowed"], json!(false), "{store}: {v}");
        assert_eq!(
            v["limits"][0]["retry_after_ms"],
            json!(1000),
            "{store}: {v}"
        );
        assert_eq!(v["limits"][0]["reset_ms"], json!(1000), "{store}: {v}");
        // The bucket has refilled; the block holds.
        s.pass(500).await;
        let v = c.check(json!([boxed("k"), daily]), 1).await;
        assert_eq!(v["allowed"], json!(false), "{store}: {v}");
        let retry = v["limits"][0]["retry_after_ms"].as_u64().unwrap();
        if s.clock.is_some() {
            assert_eq!(retry, 500, "{store}: {v}");
            assert_eq!(v["limits"][0]["reset_ms"], json!(500), "{store}: {v}");
        } else {
            assert!(retry > 0 && retry <= 500, "{store}: {v}");
        }
        assert_eq!(
            v["limits"][1]["remaining"],
            json!(5 - round),
            "{store}: {v}"
        );
        let v = c.check(json!([boxed("another")]), 1).await;
        assert_eq!(v["allowed"], json!(true), "{store}: {v}");
        s.pass(retry).await;
        // Let in as the limit allows, the other limit counted once.
        let v = c.check(json!([daily]), 1).await;
        assert_eq!(
            v["limits"][0]["remaining"],
            json!(4 - round),
            "{store}: {v}"
        );
    }
}

/// A check of weight 0 reads: over a spent limit with `block_ms` it is
/// refused and starts no block (a check of weight 1 is then refused over
/// the limit, not blocked, and starts it); a block in force is reported to
/// it (`blocked`, `retry_after_ms` its end). Only refusals that start or
/// report a block carry `blocked`.
async fn a_check_of_weight_zero_reads_a_block_and_starts_none<S: Store + Clone>(s: &Subject<S>) {
    let store = s.name;
    let c = s.client("read-block");
    let boxed = json!([{"key": "k", "algorithm": "fixed_window", "requests": 1,
        "window_ms": 60_000, "block_ms": 30_000}]);
    let v = c.check(boxed.clone(), 1).await;
    assert_eq!(v["allowed"], json!(true), "{store}: {v}");
    assert_eq!(v["limits"][0].get("blocked"), None, "{store}: {v}");
    for _ in 0..3 {
        let v = c.check(boxed.clone(), 0).await;
        assert_eq!(v["allowed"], json!(false), "{store}: {v}");
        assert_eq!(v["limits"][0].get("blocked"), None, "{store}: {v}");
    }
    let v = c.check(boxed.clone(), 1).await;
    assert_eq!(
        (
            &v["allowed"],
            &v["limits"][0]["blocked"],
            &v["limits"][0]["retry_after_ms"]
        ),
        (&json!(false), &json!(true), &json!(30_000)),
        "{store}: the refusal of weight 1 starts the block: {v}"
    );
    s.pass(1000).await;
    let v = c.check(boxed, 0).await;
    assert_eq!(v["limits"][0]["blocked"], json!(true), "{store}: {v}");
    let retry = v["limits"][0]["retry_after_ms"].as_u64().unwrap_or(0);
    if s.clock.is_some() {
        assert_eq!(retry, 29_000, "{store}: {v}");
    } else {
        assert!(retry > 0 && retry <= 30_000, "{store}: {v}");
    }
}

/// Exact admits for every algorithm; the next one waits, and (where the
/// suite moves the clock) waiting the advertised time admits again.
async fn every_algorithm_admits_exactly_its_quota<S: Store + Clone>(s: &Subject<S>) {
    let windows: &[u64] = if s.clock.is_some() {
        &[1000, 60000]
    } else {
        &[60000]
    };
    for &window_ms in windows {
        for alg in Algorithm::ALL {
            let store = s.name;
            let c = s.client(&format!("quota-{window_ms}-{}", alg.name()));
            let limit =
                json!([{"key":"k","algorithm":alg.name(),"requests":5,"window_ms":window_ms}]);
            for i in 0..5 {
                let v = c.check(limit.clone(), 1).await;
                assert_eq!(v["allowed"], json!(true), "{store} {alg} #{i}: {v}");
                assert_eq!(
                    v["limits"][0]["remaining"],
                    json!(4 - i),
                    "{store} {alg}: {v}"
                );
            }
            let v = c.check(limit.clone(), 1).await;
            assert_eq!(v["allowed"], json!(false), "{store} {alg}: {v}");
            assert_eq!(v["limits"][0]["remaining"], json!(0));
            let retry = v["limits"][0]["retry_after_ms"].as_u64().unwrap();
            assert!(retry > 0, "{store} {alg}: {v}");
            assert!(v["limits"][0]["reset_ms"].as_u64().unwrap() > 0);
            // The sliding window estimate can wait into the next window.
            assert!(retry <= 2 * window_ms, "{store} {alg}: retry {retry}");
            if let Some(clock) = &s.clock {
                clock.advance(retry * MILLISECOND);
                let v = c.check(limit, 1).await;
                assert_eq!(v["allowed"], json!(true), "{store} {alg} after retry_after");
            }
        }
    }
}

/// A denied check consumes nothing from its other limits, which report what
/// remains without it.
async fn a_denied_check_consumes_nothing<S: Store + Clone>(s: &Subject<S>) {
    let store = s.name;
    let wides = [
        json!({"key":"wide","algorithm":"sliding_window","requests":10,"window_ms":60000,"precision":6}),
        json!({"key":"wide","algorithm":"fixed_window","requests":10,"window_ms":60000}),
    ];
    for wide in wides {
        let c = s.client(&format!("multi-{}", wide["algorithm"].as_str().unwrap()));
        let both = json!([
            wide,
            {"key":"narrow","algorithm":"sliding_log","requests":2,"window_ms":60000}
        ]);
        for _ in 0..2 {
            assert_eq!(c.check(both.clone(), 1).await["allowed"], json!(true));
        }
        for _ in 0..5 {
            let v = c.check(both.clone(), 1).await;
            assert_eq!(v["allowed"], json!(false), "{store}: {v}");
            assert_eq!(v["limits"][0]["allowed"], json!(true));
            assert_eq!(v["limits"][0]["remaining"], json!(8), "{store}: {v}");
            assert_eq!(v["limits"][1]["allowed"], json!(false));
        }
        // The wide limit still has exactly 8 left.
        let wide = json!([both[0].clone()]);
        for _ in 0..8 {
            assert_eq!(c.check(wide.clone(), 1).await["allowed"], json!(true));
        }
        assert_eq!(c.check(wide, 1).await["allowed"], json!(false));
    }
}

/// Hits count against the quota; a weight larger than the limit never fits,
/// so waiting does not help.
async fn hits_weigh_requests<S: Store + Clone>(s: &Subject<S>) {
    let c = s.client("hits");
    let bucket = json!([{"key":"k","algorithm":"token_bucket","requests":10,"window_ms":60000}]);
    assert_eq!(c.check(bucket.clone(), 4).await["allowed"], json!(true));
    assert_eq!(c.check(bucket.clone(), 4).await["allowed"], json!(true));
    let v = c.check(bucket.clone(), 4).await;
    assert_eq!(v["allowed"], json!(false));
    assert_eq!(v["limits"][0]["remaining"], json!(2));
    let v = c.check(bucket, 11).await;
    assert_eq!(v["allowed"], json!(false));
    assert_eq!(v["limits"][0]["retry_after_ms"], json!(0));
}

/// A check of weight 0 is a query: admitted while one unit would pass,
/// consuming nothing, for every algorithm.
async fn a_weight_of_zero_asks_and_takes_nothing<S: Store + Clone>(s: &Subject<S>) {
    for alg in Algorithm::ALL {
        let c = s.client(&format!("zero-{}", alg.name()));
        let limit = json!([{"key":"k","algorithm":alg.name(),"requests":2,"window_ms":60000}]);
        for _ in 0..3 {
            let v = c.check(limit.clone(), 0).await;
            assert_eq!(v["allowed"], json!(true), "{alg:?}");
            assert_eq!(v["limits"][0]["remaining"], json!(2), "{alg:?}");
        }
        assert_eq!(c.check(limit.clone(), 2).await["allowed"], json!(true));
        assert_eq!(c.check(limit, 0).await["allowed"], json!(false), "{alg:?}");
    }
}

/// Each limit weighs the request as its `hits` says (else the check's), all
/// decided together: a denial consumes nothing from either (on a cluster the
/// keys sit in different slots, so the admitting slot is refunded its own
/// weight).
async fn per_limit_weights_are_decided_together<S: Store + Clone>(s: &Subject<S>) {
    let store = s.name;
    let c = s.client("weights");
    let a = json!({"key":"a","algorithm":"fixed_window","requests":10,"window_ms":60000,"hits":3});
    let b = json!({"key":"b","algorithm":"sliding_log","requests":5,"window_ms":60000});
    // Weighs 3 under `a` and the check's 2 under `b`.
    let first = json!([a, b]);
    let v = c.check(first, 2).await;
    assert_eq!(v["allowed"], json!(true), "{store}: {v}");
    assert_eq!(v["limits"][0]["remaining"], json!(7), "{store}: {v}");
    assert_eq!(v["limits"][1]["remaining"], json!(3), "{store}: {v}");
    // 4 under `b` do not fit its 3: denied, and nothing taken from `a`.
    for _ in 0..3 {
        let mut heavy = b.clone();
        heavy["hits"] = json!(4);
        let v = c.check(json!([a, heavy]), 1).await;
        assert_eq!(v["allowed"], json!(false), "{store}: {v}");
        assert_eq!(v["limits"][0]["allowed"], json!(true), "{store}: {v}");
        assert_eq!(v["limits"][0]["remaining"], json!(7), "{store}: {v}");
        assert_eq!(v["limits"][1]["allowed"], json!(false), "{store}: {v}");
        assert_eq!(v["limits"][1]["remaining"], json!(3), "{store}: {v}");
    }
    // Exactly what is left: 7 under `a`, 3 under `b`.
    let a = json!([{"key":"a","algorithm":"fixed_window","requests":10,"window_ms":60000}]);
    let b = json!([{"key":"b","algorithm":"sliding_log","requests":5,"window_ms":60000}]);
    assert_eq!(
        c.check(a.clone(), 7).await["allowed"],
        json!(true),
        "{store}"
    );
    assert_eq!(c.check(a, 1).await["allowed"], json!(false), "{store}");
    assert_eq!(
        c.check(b.clone(), 3).await["allowed"],
        json!(true),
        "{store}"
    );
    assert_eq!(c.check(b, 1).await["allowed"], json!(false), "{store}");
}

/// Delay mode, the API's example: GCRA (and leaky bucket) 10 per second,
/// burst 1, `max_delay_ms` 1000. Checks at one instant are admitted with
/// `delay_ms` 0, 100, 200, ... 1000 (each counted at the time it conforms);
/// the next would wait 1100 ms and is denied with that `retry_after_ms`.
async fn delay_mode_admits_with_the_wait_until_max_delay<S: Store + Clone>(s: &Subject<S>) {
    let store = s.name;
    for alg in ["gcra", "leaky_bucket"] {
        let c = s.client(&format!("delay-{alg}"));
        let limit = json!([{"key":"k","algorithm":alg,"requests":10,"window_ms":1000,"burst":1,"max_delay_ms":1000}]);
        let start = Instant::now();
        let mut admitted = 0u64;
        let denied = loop {
            let v = c.check(limit.clone(), 1).await;
            if v["allowed"] == json!(false) {
                break v;
            }
            let l = &v["limits"][0];
            let delay = l["delay_ms"].as_u64().unwrap_or(0);
            // Redis reads its own clock: the checks so far took some time.
            let expected = admitted * 100;
            let slack = if s.clock.is_some() {
                0
            } else {
                start.elapsed().as_millis() as u64 + 1
            };
            assert!(
                delay <= expected && delay + slack >= expected,
                "{store} {alg} #{admitted}: delay {delay}, expected {expected}: {v}"
            );
            assert_eq!(l["allowed"], json!(true), "{store} {alg}: {v}");
            assert_eq!(l["remaining"], json!(0), "{store} {alg}: {v}");
            admitted += 1;
            assert!(admitted <= 20, "{store} {alg}: never denied");
        };
        let l = &denied["limits"][0];
        assert!(l.get("delay_ms").is_none(), "{store} {alg}: {denied}");
        let retry = l["retry_after_ms"].as_u64().unwrap();
        if let Some(clock) = &s.clock {
            assert_eq!(admitted, 11, "{store} {alg}");
            assert_eq!(retry, 1100, "{store} {alg}: {denied}");
            // The delayed requests were counted: half a second on, a request
            // waits for the last of them (at 1000 ms) and its own 100 ms.
            clock.advance(500 * MILLISECOND);
            let v = c.check(limit.clone(), 1).await;
            assert_eq!(v["allowed"], json!(true), "{store} {alg}: {v}");
            assert_eq!(v["limits"][0]["delay_ms"], json!(600), "{store} {alg}: {v}");
        } else {
            assert!(admitted >= 11, "{store} {alg}: {admitted} admitted");
            assert!(retry > 1000 && retry <= 1100, "{store} {alg}: {denied}");
        }
    }
}

/// `max_delay_ms` on an algorithm without delay mode, or beyond its range,
/// is refused naming the field, and the check touches nothing.
async fn delay_mode_is_refused_where_it_does_not_apply<S: Store + Clone>(s: &Subject<S>) {
    let c = s.client("bad-delay");
    let limit = json!({"key":"k","algorithm":"fixed_window","requests":1,"window_ms":60000});
    let bad = json!([limit, {"key":"k2","algorithm":"fixed_window","requests":1,"window_ms":60000,"max_delay_ms":500}]);
    let (status, v) = c.post(bad, 1).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{v}");
    assert_eq!(
        v["error"],
        json!("limits[1].max_delay_ms: delay mode is for gcra and leaky_bucket only, not fixed_window")
    );
    let long = json!([{"key":"k","algorithm":"gcra","requests":1,"window_ms":60000,"max_delay_ms":31_622_400_001u64}]);
    let (status, v) = c.post(long, 1).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{v}");
    assert!(v["error"]
        .as_str()
        .unwrap()
        .starts_with("limits[0].max_delay_ms: must be between 0 and 31622400000"));
    let (status, v) = c
        .post(
            json!([{"key":"k","algorithm":"gcra","requests":1,"window_ms":60000,"hits":1_000_000_000_001u64}]),
            1,
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{v}");
    assert!(v["error"].as_str().unwrap().starts_with("limits[0].hits: "));
    let one = json!([limit]);
    assert_eq!(c.check(one.clone(), 1).await["allowed"], json!(true));
    assert_eq!(c.check(one, 1).await["allowed"], json!(false));
}

/// Soft throttling admits above the quota; `limit` stays the quota.
async fn soft_throttling_admits_above_the_quota<S: Store + Clone>(s: &Subject<S>) {
    let store = s.name;
    let c = s.client("soft");
    let soft = json!([{"key":"k","algorithm":"fixed_window","requests":10,"window_ms":60000,"soft_percent":50}]);
    for i in 0..15 {
        let v = c.check(soft.clone(), 1).await;
        assert_eq!(v["allowed"], json!(true), "{store} soft #{i}: {v}");
    }
    let v = c.check(soft, 1).await;
    assert_eq!(v["allowed"], json!(false));
    assert_eq!(v["limits"][0]["limit"], json!(10));
}

/// GCRA's burst and spacing, the API's example: 20 at once, then one every
/// 600 ms.
async fn gcra_burst_and_spacing<S: Store + Clone>(s: &Subject<S>) {
    let store = s.name;
    let c = s.client("gcra");
    let gcra = json!([{"key":"per-ip/203.0.113.7","algorithm":"gcra","requests":100,"window_ms":60000,"burst":20}]);
    for _ in 0..20 {
        assert_eq!(c.check(gcra.clone(), 1).await["allowed"], json!(true));
    }
    let v = c.check(gcra, 1).await;
    assert_eq!(v["allowed"], json!(false));
    let l = &v["limits"][0];
    assert_eq!(l["allowed"], json!(false));
    assert_eq!(l["limit"], json!(100));
    assert_eq!(l["remaining"], json!(0));
    assert!(l["reset_ms"].as_u64().unwrap() > 0);
    let retry = l["retry_after_ms"].as_u64().unwrap();
    if s.clock.is_some() {
        // One request every 600 ms.
        assert_eq!(retry, 600, "{store}");
    } else {
        // Less the time the 20 admits took.
        assert!(retry > 500 && retry <= 600, "{store}: retry {retry}");
    }
}

/// Domains namespace keys, and two limits on one key with different windows
/// keep separate state.
async fn state_is_kept_per_domain_key_algorithm_and_window<S: Store + Clone>(s: &Subject<S>) {
    let a = s.client("state");
    let b = s.client("state-other");
    let minute = json!([{"key":"k","algorithm":"fixed_window","requests":1,"window_ms":60000}]);
    assert_eq!(a.check(minute.clone(), 1).await["allowed"], json!(true));
    assert_eq!(a.check(minute.clone(), 1).await["allowed"], json!(false));
    assert_eq!(b.check(minute, 1).await["allowed"], json!(true));
    // Same key, other window: its own state.
    let half = json!([{"key":"k","algorithm":"fixed_window","requests":1,"window_ms":30000}]);
    assert_eq!(a.check(half, 1).await["allowed"], json!(true));
}

/// A rejected check decides and stores nothing, not even for its valid limits.
async fn bad_input_touches_nothing<S: Store + Clone>(s: &Subject<S>) {
    let c = s.client("bad");
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

/// How many of `each` checks of `items` from each of 8 racing tasks pass.
async fn admitted_by_racers<S: Store + Clone>(
    s: &Subject<S>,
    items: Arc<[StoreItem; 1]>,
    each: usize,
) -> u64 {
    let admitted = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let store = s.store.clone();
            let items = items.clone();
            let admitted = admitted.clone();
            tokio::spawn(async move {
                for _ in 0..each {
                    if store.check(&items[..]).await.unwrap().allowed {
                        admitted.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    admitted.load(Ordering::Relaxed)
}

/// Many callers on one key never admit more than its limit.
async fn concurrent_checks_never_admit_more_than_the_limit<S: Store + Clone>(s: &Subject<S>) {
    for alg in Algorithm::ALL {
        // A day's window: real clocks refill nothing while this runs.
        let items = Arc::new([StoreItem::new(
            format!("{}-hot/k|{}|86400000", s.name, alg.name()),
            Limit::new(alg, 500, 86_400 * SECOND).unwrap(),
            1,
        )]);
        assert_eq!(
            admitted_by_racers(s, items, 200).await,
            500,
            "{} {alg}",
            s.name
        );
    }
}

/// A store that answers says so.
async fn a_working_store_is_healthy<S: Store + Clone>(s: &Subject<S>) {
    assert!(s.store.healthy().await, "{}", s.name);
    let (status, _) = support::send(
        &AppState::new(s.store.clone()),
        "GET",
        "/healthz",
        Vec::new(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{}", s.name);
}

/// A batch of `n` identical requests admits the first `k`, exactly as `n`
/// checks in a row would, for every algorithm: quota 5, weight 2, batches of
/// 2 and 4 admit 2 and then 0 (only 1 unit is left; a refused request
/// consumes nothing), and a single unit still passes afterwards.
async fn a_batch_admits_exactly_what_its_requests_one_by_one_would<S: Store + Clone>(
    s: &Subject<S>,
) {
    let store = s.name;
    for alg in Algorithm::ALL {
        let c = s.client(&format!("batch-{}", alg.name()));
        let limit = json!([{"key":"k","algorithm":alg.name(),"requests":5,"window_ms":60000}]);
        let v = c.batch(limit.clone(), 2, 2).await;
        assert_eq!(v["admitted"], json!(2), "{store} {alg}: {v}");
        assert_eq!(v["allowed"], json!(true), "{store} {alg}: {v}");
        // The last request's result: 1 unit left.
        assert_eq!(v["limits"][0]["allowed"], json!(true), "{store} {alg}: {v}");
        assert_eq!(v["limits"][0]["remaining"], json!(1), "{store} {alg}: {v}");
        let v = c.batch(limit.clone(), 2, 4).await;
        assert_eq!(v["admitted"], json!(0), "{store} {alg}: {v}");
        assert_eq!(v["allowed"], json!(false), "{store} {alg}: {v}");
        // The first refused request's result: its wait, what is left.
        let l = &v["limits"][0];
        assert_eq!(l["allowed"], json!(false), "{store} {alg}: {v}");
        assert_eq!(l["remaining"], json!(1), "{store} {alg}: {v}");
        assert!(
            l["retry_after_ms"].as_u64().unwrap() > 0,
            "{store} {alg}: {v}"
        );
        assert!(v.get("delays_ms").is_none(), "{store} {alg}: {v}");
        // Weight 1: one of three fits.
        let v = c.batch(limit.clone(), 1, 3).await;
        assert_eq!(v["admitted"], json!(1), "{store} {alg}: {v}");
        assert_eq!(v["limits"][0]["remaining"], json!(0), "{store} {alg}: {v}");
        assert_eq!(
            c.check(limit, 1).await["allowed"],
            json!(false),
            "{store} {alg}"
        );
    }
}

/// Requests are all-or-nothing across the limits, in arrival order: the
/// strictest limit bounds the batch, and the other limits keep what the
/// refused requests would have taken (on a cluster the keys sit in
/// different slots, so the slot that admitted more is refunded the rest).
async fn a_batch_is_bounded_by_its_strictest_limit_and_refused_requests_consume_nothing<
    S: Store + Clone,
>(
    s: &Subject<S>,
) {
    let store = s.name;
    let c = s.client("batch-multi");
    let wide = json!({"key":"wide","algorithm":"token_bucket","requests":10,"window_ms":60000});
    let narrow = json!({"key":"narrow","algorithm":"sliding_log","requests":3,"window_ms":60000});
    let v = c.batch(json!([wide, narrow]), 1, 5).await;
    assert_eq!(v["admitted"], json!(3), "{store}: {v}");
    assert_eq!(v["allowed"], json!(false), "{store}: {v}");
    // The fourth request: the wide limit would admit it, with 7 left.
    assert_eq!(v["limits"][0]["allowed"], json!(true), "{store}: {v}");
    assert_eq!(v["limits"][0]["remaining"], json!(7), "{store}: {v}");
    assert_eq!(v["limits"][1]["allowed"], json!(false), "{store}: {v}");
    assert_eq!(v["limits"][1]["remaining"], json!(0), "{store}: {v}");
    // Exactly 7 left under the wide limit: the refused two took nothing.
    let v = c.batch(json!([wide]), 1, 9).await;
    assert_eq!(v["admitted"], json!(7), "{store}: {v}");
    // Per-limit weights: 2 under `a` (quota 10), 1 under `b` (quota 4).
    let a = json!({"key":"a","algorithm":"fixed_window","requests":10,"window_ms":60000,"hits":2});
    let b = json!({"key":"b","algorithm":"gcra","requests":4,"window_ms":60000});
    let v = c.batch(json!([a, b]), 1, 6).await;
    assert_eq!(v["admitted"], json!(4), "{store}: {v}");
    assert_eq!(v["limits"][0]["remaining"], json!(2), "{store}: {v}");
    let v = c.batch(json!([a]), 1, 3).await;
    assert_eq!(v["admitted"], json!(1), "{store}: {v}");
}

/// Delay mode: each admitted request of a batch has its own wait, the later
/// ones longer. GCRA 10 per second, burst 1, `max_delay_ms` 1000: a batch
/// of 15 admits 11, waiting 0, 100, ... 1000 ms; the twelfth is refused
/// with `retry_after_ms` 1100.
async fn a_batch_in_delay_mode_gives_each_request_its_wait<S: Store + Clone>(s: &Subject<S>) {
    let store = s.name;
    for alg in ["gcra", "leaky_bucket"] {
        let c = s.client(&format!("batch-delay-{alg}"));
        let limit = json!([{"key":"k","algorithm":alg,"requests":10,"window_ms":1000,"burst":1,"max_delay_ms":1000}]);
        let v = c.batch(limit.clone(), 1, 15).await;
        assert_eq!(v["admitted"], json!(11), "{store} {alg}: {v}");
        let delays: Vec<u64> = serde_json::from_value(v["delays_ms"].clone()).unwrap();
        let want: Vec<u64> = (0..11).map(|i| i * 100).collect();
        assert_eq!(delays, want, "{store} {alg}: {v}");
        let l = &v["limits"][0];
        assert_eq!(l["allowed"], json!(false), "{store} {alg}: {v}");
        let retry = l["retry_after_ms"].as_u64().unwrap();
        if s.clock.is_some() {
            assert_eq!(retry, 1100, "{store} {alg}: {v}");
        } else {
            assert!(retry > 1000 && retry <= 1100, "{store} {alg}: {v}");
        }
        // The admitted ones were counted: the next request is refused.
        assert_eq!(
            c.check(limit, 1).await["allowed"],
            json!(false),
            "{store} {alg}"
        );
    }
}

/// Without `batch` the answer is the single request's, with neither
/// `admitted` nor `delays_ms`; `batch` 1 is that answer with `admitted`.
/// A batch out of range is refused naming the field, touching nothing.
async fn a_check_without_batch_is_answered_as_before<S: Store + Clone>(s: &Subject<S>) {
    let store = s.name;
    let c = s.client("batch-absent");
    let limit = json!([{"key":"k","algorithm":"fixed_window","requests":2,"window_ms":60000}]);
    let v = c.check(limit.clone(), 1).await;
    assert!(v.get("admitted").is_none(), "{store}: {v}");
    assert!(v.get("delays_ms").is_none(), "{store}: {v}");
    let body = json!({"domain": c.domain, "limits": limit, "batch": 0});
    let (status, e) = support::send_json(&c.state, "POST", "/v1/check", &body).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{store}: {e}");
    assert_eq!(e["error"], json!("batch: must be between 1 and 10000"));
    let v = c.batch(limit.clone(), 1, 1).await;
    assert_eq!(
        (&v["admitted"], &v["allowed"]),
        (&json!(1), &json!(true)),
        "{store}: {v}"
    );
    assert_eq!(c.check(limit, 1).await["allowed"], json!(false), "{store}");
}

/// Many callers sending batches on one key never admit more than its limit
/// in total.
async fn concurrent_batches_never_admit_more_than_the_limit<S: Store + Clone>(s: &Subject<S>) {
    for alg in Algorithm::ALL {
        let items = Arc::new([StoreItem::new(
            format!("{}-hot-batch/k|{}|86400000", s.name, alg.name()),
            Limit::new(alg, 500, 86_400 * SECOND).unwrap(),
            1,
        )]);
        let admitted = Arc::new(AtomicU64::new(0));
        let tasks: Vec<_> = (0..8u32)
            .map(|t| {
                let store = s.store.clone();
                let items = items.clone();
                let admitted = admitted.clone();
                tokio::spawn(async move {
                    for i in 0..40u32 {
                        let n = 1 + (t + i) % 7;
                        let v = store.check_batch(&items[..], n).await.unwrap();
                        assert!(v.admitted <= n);
                        admitted.fetch_add(u64::from(v.admitted), Ordering::Relaxed);
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        // 8 callers send 40 batches of 1 to 7: 1275 requests for 500.
        assert_eq!(admitted.load(Ordering::Relaxed), 500, "{} {alg}", s.name);
    }
}

/// A limit of `alg`, quota 10 a day (real clocks refill nothing while the
/// suite runs), with `extra` fields.
fn daily(alg: Algorithm, extra: Value) -> Value {
    let mut l = json!({"key":"k","algorithm":alg.name(),"requests":10,"window_ms":86_400_000});
    for (k, v) in extra.as_object().unwrap() {
        l[k] = v.clone();
    }
    json!([l])
}

/// The first limit's `leased` and `remaining` in the answer `v`.
fn lease_of(v: &Value) -> (&Value, &Value) {
    let l = &v["limits"][0];
    (&l["leased"], &l["remaining"])
}

/// Leases: an admitted check also takes the most units of its `lease` that
/// fit with the request, at once, for every algorithm: quota 10, weight 2
/// and lease 5 grant 5 (3 left), then weight 1 and lease 5 grant the 2
/// that fit, then nothing fits: denied, nothing granted or consumed.
async fn a_lease_is_the_largest_slice_that_fits<S: Store + Clone>(s: &Subject<S>) {
    let store = s.name;
    for alg in Algorithm::ALL {
        let c = s.client(&format!("lease-{}", alg.name()));
        let leasing = daily(alg, json!({"lease": 5}));
        let v = c.check(leasing.clone(), 2).await;
        assert_eq!(v["allowed"], json!(true), "{store} {alg}: {v}");
        assert_eq!(lease_of(&v), (&json!(5), &json!(3)), "{store} {alg}: {v}");
        let v = c.check(leasing.clone(), 1).await;
        assert_eq!(lease_of(&v), (&json!(2), &json!(0)), "{store} {alg}: {v}");
        let v = c.check(leasing, 1).await;
        assert_eq!(v["allowed"], json!(false), "{store} {alg}: {v}");
        assert!(v["limits"][0].get("leased").is_none(), "{store} {alg}: {v}");
        // A lease larger than the quota takes what the request leaves.
        let c = s.client(&format!("lease-all-{}", alg.name()));
        let v = c.check(daily(alg, json!({"lease": 1000})), 1).await;
        assert_eq!(lease_of(&v), (&json!(9), &json!(0)), "{store} {alg}: {v}");
        // Without `lease` the answer has no `leased`.
        let c = s.client(&format!("lease-none-{}", alg.name()));
        let v = c.check(daily(alg, json!({})), 1).await;
        assert!(v["limits"][0].get("leased").is_none(), "{store} {alg}: {v}");
    }
}

/// A lease renewal (every limit weighing 0) admits no request and takes
/// only its lease, for every algorithm: quota 10, lease 4 grants 4 (6
/// left), lease 10 the 6 left, then nothing is left to grant.
async fn a_renewal_weighing_nothing_takes_only_its_lease<S: Store + Clone>(s: &Subject<S>) {
    let store = s.name;
    for alg in Algorithm::ALL {
        let c = s.client(&format!("renewal-{}", alg.name()));
        let v = c.check(daily(alg, json!({"lease": 4})), 0).await;
        assert_eq!(v["allowed"], json!(true), "{store} {alg}: {v}");
        assert_eq!(lease_of(&v), (&json!(4), &json!(6)), "{store} {alg}: {v}");
        let v = c.check(daily(alg, json!({"lease": 10})), 0).await;
        assert_eq!(lease_of(&v), (&json!(6), &json!(0)), "{store} {alg}: {v}");
        let v = c.check(daily(alg, json!({"lease": 1})), 0).await;
        let leased = v["limits"][0].get("leased").cloned().unwrap_or(json!(0));
        assert_eq!(leased, json!(0), "{store} {alg}: {v}");
        assert_eq!(v["limits"][0]["remaining"], json!(0), "{store} {alg}: {v}");
    }
}

/// One renewal for several keys (an Envoy's worker renews all its leases
/// running low in one call): each key is granted what fits of its own
/// quota, a key with nothing left is granted nothing without refusing the
/// others (the call says not every key allowed), for every algorithm: quotas of 10, keys a, b and c (b spent
/// whole first) asking 4, 4 and 12 are granted 4, 0 and 10.
async fn a_renewal_of_several_keys_grants_each_its_own<S: Store + Clone>(s: &Subject<S>) {
    let store = s.name;
    for alg in Algorithm::ALL {
        let c = s.client(&format!("renewal-keys-{}", alg.name()));
        let limit = |key: &str, lease: u64| {
            json!({"key": key, "algorithm": alg.name(), "requests": 10,
                "window_ms": 86_400_000, "lease": lease})
        };
        let v = c.check(json!([limit("b", 10)]), 0).await;
        assert_eq!(lease_of(&v), (&json!(10), &json!(0)), "{store} {alg}: {v}");
        let v = c
            .check(json!([limit("a", 4), limit("b", 4), limit("c", 12)]), 0)
            .await;
        // Not every key allowed (b has nothing left), yet a and c are granted.
        assert_eq!(v["allowed"], json!(false), "{store} {alg}: {v}");
        let granted: Vec<(Value, Value)> = (0..3)
            .map(|i| {
                let l = &v["limits"][i];
                (
                    l.get("leased").cloned().unwrap_or(json!(0)),
                    l["remaining"].clone(),
                )
            })
            .collect();
        assert_eq!(
            granted,
            [
                (json!(4), json!(6)),
                (json!(0), json!(0)),
                (json!(10), json!(0))
            ],
            "{store} {alg}: {v}"
        );
    }
}

/// A check denied by one limit grants no lease on the others and consumes
/// nothing from them (on a cluster the admitting slot gives the request and
/// its lease back).
async fn a_denied_check_grants_no_lease<S: Store + Clone>(s: &Subject<S>) {
    let store = s.name;
    for alg in ["fixed_window", "token_bucket", "gcra"] {
        let c = s.client(&format!("lease-denied-{alg}"));
        let wide =
            json!({"key":"wide","algorithm":alg,"requests":10,"window_ms":86_400_000,"lease":4});
        let narrow =
            json!({"key":"narrow","algorithm":"sliding_log","requests":1,"window_ms":86_400_000});
        let v = c.check(json!([wide, narrow]), 1).await;
        assert_eq!(v["allowed"], json!(true), "{store} {alg}: {v}");
        assert_eq!(v["limits"][0]["leased"], json!(4), "{store} {alg}: {v}");
        for _ in 0..3 {
            let v = c.check(json!([wide, narrow]), 1).await;
            assert_eq!(v["allowed"], json!(false), "{store} {alg}: {v}");
            let l = &v["limits"][0];
            assert!(l.get("leased").is_none(), "{store} {alg}: {v}");
            assert_eq!(l["remaining"], json!(5), "{store} {alg}: {v}");
        }
        // Exactly 5 left under the wide limit.
        let alone = json!([{"key":"wide","algorithm":alg,"requests":10,"window_ms":86_400_000}]);
        assert_eq!(c.check(alone.clone(), 5).await["allowed"], json!(true));
        assert_eq!(c.check(alone, 1).await["allowed"], json!(false));
    }
}

/// Returns give back what sluice-core's `refund_at` gives back: units
/// returned as consumed now (`returned_age_ms` 0) come back whole, except
/// for a sliding log, which gives back only entries logged at that very
/// instant (so only where the suite's clock stands still); units older
/// than the window give nothing back.
async fn returns_give_back_as_the_core_does<S: Store + Clone>(s: &Subject<S>) {
    let store = s.name;
    for alg in Algorithm::ALL {
        let c = s.client(&format!("return-{}", alg.name()));
        let v = c.check(daily(alg, json!({"lease": 5})), 1).await;
        assert_eq!(v["limits"][0]["remaining"], json!(4), "{store} {alg}: {v}");
        let back = daily(alg, json!({"returned": 5, "returned_age_ms": 0}));
        let v = c.check(back, 1).await;
        let exact = s.clock.is_some() || alg != Algorithm::SlidingLog;
        let want = if exact { 8 } else { 3 };
        assert_eq!(v["allowed"], json!(true), "{store} {alg}: {v}");
        assert_eq!(
            v["limits"][0]["remaining"],
            json!(want),
            "{store} {alg}: {v}"
        );
        // Units consumed before the window began: nothing comes back.
        let c = s.client(&format!("return-old-{}", alg.name()));
        let minute = |extra: Value| {
            let mut l = json!({"key":"k","algorithm":alg.name(),"requests":10,"window_ms":60000});
            for (k, v) in extra.as_object().unwrap() {
                l[k] = v.clone();
            }
            json!([l])
        };
        assert_eq!(c.check(minute(json!({})), 10).await["allowed"], json!(true));
        let old = minute(json!({"returned": 10, "returned_age_ms": 120_000}));
        let v = c.check(old, 1).await;
        assert_eq!(v["allowed"], json!(false), "{store} {alg}: {v}");
        assert_eq!(v["limits"][0]["remaining"], json!(0), "{store} {alg}: {v}");
    }
}

/// Returning is not consuming: units given back by a check that is then
/// denied stay given back.
async fn returns_apply_on_a_denied_check<S: Store + Clone>(s: &Subject<S>) {
    let store = s.name;
    for alg in Algorithm::ALL {
        if s.clock.is_none() && alg == Algorithm::SlidingLog {
            // Its entries come back only at the instant they were logged.
            continue;
        }
        let c = s.client(&format!("return-denied-{}", alg.name()));
        let v = c.check(daily(alg, json!({"lease": 9})), 1).await;
        assert_eq!(v["limits"][0]["leased"], json!(9), "{store} {alg}: {v}");
        // Weight 4 does not fit in the 2 given back: denied, 2 left.
        let back = daily(alg, json!({"returned": 2, "returned_age_ms": 0}));
        let v = c.check(back, 4).await;
        assert_eq!(v["allowed"], json!(false), "{store} {alg}: {v}");
        assert_eq!(v["limits"][0]["remaining"], json!(2), "{store} {alg}: {v}");
        assert_eq!(
            c.check(daily(alg, json!({})), 2).await["allowed"],
            json!(true),
            "{store} {alg}"
        );
        assert_eq!(
            c.check(daily(alg, json!({})), 1).await["allowed"],
            json!(false),
            "{store} {alg}"
        );
    }
}

/// Many callers taking leases on one key never get more than its limit:
/// requests and leased units together.
async fn concurrent_leases_never_debit_more_than_the_limit<S: Store + Clone>(s: &Subject<S>) {
    for alg in Algorithm::ALL {
        let items = Arc::new([StoreItem::from(RateItem {
            lease: 6,
            ..RateItem::new(
                format!("{}-hot-lease/k|{}|86400000", s.name, alg.name()),
                Limit::new(alg, 500, 86_400 * SECOND).unwrap(),
                1,
            )
        })]);
        let debited = Arc::new(AtomicU64::new(0));
        let tasks: Vec<_> = (0..8)
            .map(|_| {
                let store = s.store.clone();
                let items = items.clone();
                let debited = debited.clone();
                tokio::spawn(async move {
                    for _ in 0..40 {
                        let v = store.check(&items[..]).await.unwrap();
                        if v.allowed {
                            let k = v.leased.first().copied().unwrap_or(0);
                            debited.fetch_add(1 + k, Ordering::Relaxed);
                        }
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        // 320 requests of up to 7 units each for 500.
        assert_eq!(debited.load(Ordering::Relaxed), 500, "{} {alg}", s.name);
    }
}

/// Many holders racing for the permits of one key: exactly the permits are
/// taken.
async fn racing_holders_get_exactly_the_permits<S: Store + Clone>(s: &Subject<S>) {
    let item = |holder: u64| {
        StoreItem::from(PermitItem {
            id: permits_id(&format!("{}-race", s.name), "k"),
            permits: Permits {
                max: 5,
                ttl: 60 * SECOND,
            },
            holder,
            hits: 1,
        })
    };
    let tasks: Vec<_> = (0..64)
        .map(|holder| {
            let store = s.store.clone();
            let items = [item(holder)];
            tokio::spawn(async move { store.check(&items).await.unwrap().allowed })
        })
        .collect();
    let mut admitted = 0;
    for t in tasks {
        admitted += usize::from(t.await.unwrap());
    }
    assert_eq!(admitted, 5, "{}", s.name);
    let v = s.store.check(&[item(99)]).await.unwrap();
    assert!(!v.allowed, "{}", s.name);
    assert_eq!(v.decisions[0].retry_after, SECOND);
    assert_eq!((v.decisions[0].limit, v.decisions[0].remaining), (5, 0));
}

/// A release gives its units back to everyone; another holder's release
/// takes nothing.
async fn a_release_makes_room_and_another_holders_takes_nothing<S: Store + Clone>(s: &Subject<S>) {
    let store = s.name;
    let c = s.client("release");
    let limit = json!([permits("k", 2, 60_000)]);
    let v = c.take(1, limit.clone()).await;
    assert_eq!(v["limits"][0]["remaining"], json!(1), "{store}: {v}");
    assert_eq!(c.take(1, limit.clone()).await["allowed"], json!(true));
    assert_eq!(c.take(2, limit.clone()).await["allowed"], json!(false));
    let release = json!([{"key": "k", "hits": 1}]);
    let v = c.permits(3, 60_000, release.clone(), json!([])).await;
    assert_eq!(v["released"], json!([]), "{store}: {v}");
    assert_eq!(c.take(2, limit.clone()).await["allowed"], json!(false));
    let v = c.permits(1, 60_000, release, json!([])).await;
    assert_eq!(v["released"], json!(["k"]), "{store}: {v}");
    let v = c.take(2, limit.clone()).await;
    assert_eq!(v["allowed"], json!(true), "{store}: {v}");
    assert_eq!(c.take(4, limit).await["allowed"], json!(false), "{store}");
}

/// A holder that renews keeps its permits past the ttl; one that stops
/// renewing (a crashed Envoy) has its permits come back after the ttl.
async fn renewed_permits_outlive_the_ttl_and_unrenewed_ones_come_back<S: Store + Clone>(
    s: &Subject<S>,
) {
    let store = s.name;
    let c = s.client("ttl");
    let limit = json!([permits("k", 2, 1000)]);
    assert_eq!(c.take(1, limit.clone()).await["allowed"], json!(true));
    assert_eq!(c.take(2, limit.clone()).await["allowed"], json!(true));
    let started = Instant::now();
    let mut waited = 0;
    loop {
        s.pass(100).await;
        waited += 100;
        let v = c.permits(2, 1000, json!([]), json!(["k"])).await;
        assert_eq!(v["renewed"], json!(["k"]), "{store} after {waited} ms: {v}");
        if c.take(3, limit.clone()).await["allowed"] == json!(true) {
            break;
        }
        let elapsed = started.elapsed().as_millis() as u64;
        assert!(
            waited.max(elapsed) < 5000,
            "{store}: holder 1 never expired"
        );
    }
    // Holder 1's permit came back no earlier than its ttl.
    assert!(
        waited.max(started.elapsed().as_millis() as u64) >= 900,
        "{store}"
    );
    // Holder 2 renewed: its permit still counts.
    assert_eq!(
        c.take(4, limit.clone()).await["allowed"],
        json!(false),
        "{store}"
    );
    let v = c.permits(1, 1000, json!([]), json!(["k"])).await;
    assert_eq!(v["renewed"], json!([]), "{store}: {v}");
}

/// A concurrency limit that refuses takes nothing from the check's rate
/// limits, and a rate limit that refuses takes no permit.
async fn permits_and_rate_limits_are_all_or_nothing<S: Store + Clone>(s: &Subject<S>) {
    let store = s.name;
    let c = s.client("mixed");
    let rate = |key: &str, n: u64| json!({"key": key, "algorithm": "fixed_window", "requests": n, "window_ms": 86_400_000});
    // The permits refuse: the rate limit consumes nothing.
    assert_eq!(
        c.take(1, json!([permits("a", 1, 60_000)])).await["allowed"],
        json!(true)
    );
    let v = c
        .take(2, json!([rate("r", 3), permits("a", 1, 60_000)]))
        .await;
    assert_eq!(v["allowed"], json!(false), "{store}: {v}");
    assert_eq!(v["limits"][0]["allowed"], json!(true), "{store}: {v}");
    assert_eq!(v["limits"][0]["remaining"], json!(3), "{store}: {v}");
    assert_eq!(v["limits"][1]["allowed"], json!(false), "{store}: {v}");
    for i in 0..3 {
        let v = c.check(json!([rate("r", 3)]), 1).await;
        assert_eq!(v["allowed"], json!(true), "{store} #{i}: {v}");
    }
    // The rate limit refuses: no permit is taken.
    let v = c
        .take(3, json!([rate("r", 3), permits("b", 1, 60_000)]))
        .await;
    assert_eq!(v["allowed"], json!(false), "{store}: {v}");
    assert_eq!(v["limits"][1]["allowed"], json!(true), "{store}: {v}");
    assert_eq!(v["limits"][1]["remaining"], json!(1), "{store}: {v}");
    let v = c.take(4, json!([permits("b", 1, 60_000)])).await;
    assert_eq!(v["allowed"], json!(true), "{store}: {v}");
    // Both admit: both take.
    let v = c
        .take(5, json!([rate("s", 1), permits("c", 1, 60_000)]))
        .await;
    assert_eq!(v["allowed"], json!(true), "{store}: {v}");
    assert_eq!(
        c.take(6, json!([permits("c", 1, 60_000)])).await["allowed"],
        json!(false)
    );
    assert_eq!(
        c.check(json!([rate("s", 1)]), 1).await["allowed"],
        json!(false)
    );
}

/// The permits operation releases before it renews, and says where the
/// holder held permits.
async fn the_permits_operation_says_what_it_released_and_renewed<S: Store + Clone>(s: &Subject<S>) {
    let store = s.name;
    let c = s.client("op");
    for key in ["a", "b", "c"] {
        let mut limit = permits(key, 5, 60_000);
        limit["hits"] = json!(2);
        let v = c.take(7, json!([limit])).await;
        assert_eq!(v["limits"][0]["remaining"], json!(3), "{store} {key}: {v}");
    }
    let v = c
        .permits(
            7,
            60_000,
            json!([{"key": "a", "hits": 2}, {"key": "b", "hits": 1}, {"key": "none", "hits": 1}]),
            json!(["a", "b", "c", "none"]),
        )
        .await;
    assert_eq!(
        v,
        json!({"released": ["a", "b"], "renewed": ["b", "c"]}),
        "{store}"
    );
    let v = c.take(8, json!([permits("b", 5, 60_000)])).await;
    assert_eq!(v["limits"][0]["remaining"], json!(3), "{store}: {v}");
}

/// A rate limit of 10 per second for the charge clauses, with `extra`.
fn per_second(alg: Algorithm, extra: Value) -> Value {
    let mut l = json!({"key":"k","algorithm":alg.name(),"requests":10,"window_ms":1000});
    for (k, v) in extra.as_object().unwrap() {
        l[k] = v.clone();
    }
    l
}

/// A charge beyond the quota denies every check until the debt drained:
/// the charge's answer and the checks say when (`retry_after_ms`), and a
/// check then passes (at that very instant where the suite moves the
/// clock; polled for within a few hundred ms where the store reads real
/// time).
async fn a_charge_takes_the_key_into_debt_until_it_drained<S: Store + Clone>(s: &Subject<S>) {
    let store = s.name;
    for alg in Algorithm::ALL.into_iter().filter(|a| a.carries_debt()) {
        let c = s.client(&format!("debt-{}", alg.name()));
        let limit = json!([per_second(alg, json!({}))]);
        assert_eq!(c.check(limit.clone(), 2).await["allowed"], json!(true));
        let v = c
            .charge(json!([per_second(alg, json!({"charge": 15}))]))
            .await;
        let answer = &v["limits"][0];
        assert_eq!(answer["allowed"], json!(false), "{store} {alg}: {v}");
        assert_eq!(answer["remaining"], json!(0), "{store} {alg}: {v}");
        let retry = answer["retry_after_ms"].as_u64().unwrap();
        if matches!(
            alg,
            Algorithm::TokenBucket | Algorithm::LeakyBucket | Algorithm::Gcra
        ) {
            // 17 units of 10, 100 ms each: one fits once 8 drained.
            assert!(retry <= 800 && retry > 600, "{store} {alg}: {v}");
            assert!(
                answer["reset_ms"].as_u64().unwrap() > 1_500,
                "{store} {alg}: {v}"
            );
        }
        let denied = c.check(limit.clone(), 1).await;
        assert_eq!(denied["allowed"], json!(false), "{store} {alg}: {denied}");
        let wait = denied["limits"][0]["retry_after_ms"].as_u64().unwrap();
        assert!(wait > 0 && wait <= retry, "{store} {alg}: {denied}");
        if s.clock.is_some() {
            assert_eq!(wait, retry, "{store} {alg}");
            s.pass(retry - 1).await;
            assert_eq!(
                c.check(limit.clone(), 1).await["allowed"],
                json!(false),
                "{alg}"
            );
            s.pass(1).await;
            assert_eq!(c.check(limit, 1).await["allowed"], json!(true), "{alg}");
            continue;
        }
        s.pass(wait).await;
        let started = Instant::now();
        loop {
            if c.check(limit.clone(), 1).await["allowed"] == json!(true) {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_millis(400),
                "{store} {alg}: still denied after {wait} ms"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// A refund gives back what sluice-core's `refund_at` gives back: units
/// consumed now come back whole (a sliding log's only at that very
/// instant, so only where the suite's clock stands still), and a key in
/// debt gets out of it.
async fn a_refund_gives_room_back<S: Store + Clone>(s: &Subject<S>) {
    let store = s.name;
    for alg in Algorithm::ALL {
        let c = s.client(&format!("refund-{}", alg.name()));
        assert_eq!(
            c.check(daily(alg, json!({})), 8).await["allowed"],
            json!(true)
        );
        let back = daily(alg, json!({"refund": 5, "refund_age_ms": 0}));
        let v = c.charge(back).await;
        let exact = s.clock.is_some() || alg != Algorithm::SlidingLog;
        let want = if exact { 7 } else { 2 };
        assert_eq!(
            v["limits"][0]["remaining"],
            json!(want),
            "{store} {alg}: {v}"
        );
        assert_eq!(v["limits"][0]["allowed"], json!(true), "{store} {alg}: {v}");
        if !alg.carries_debt() {
            continue;
        }
        // 30 charged on a quota of 10: in debt until 21 are given back.
        let c = s.client(&format!("refund-debt-{}", alg.name()));
        let v = c.charge(daily(alg, json!({"charge": 30}))).await;
        assert_eq!(
            v["limits"][0]["allowed"],
            json!(false),
            "{store} {alg}: {v}"
        );
        let v = c
            .charge(daily(alg, json!({"refund": 20, "refund_age_ms": 0})))
            .await;
        assert_eq!(
            v["limits"][0]["allowed"],
            json!(false),
            "{store} {alg}: {v}"
        );
        let v = c
            .charge(daily(alg, json!({"refund": 3, "refund_age_ms": 0})))
            .await;
        assert_eq!(v["limits"][0]["remaining"], json!(3), "{store} {alg}: {v}");
        assert_eq!(
            c.check(daily(alg, json!({})), 3).await["allowed"],
            json!(true)
        );
        assert_eq!(
            c.check(daily(alg, json!({})), 1).await["allowed"],
            json!(false)
        );
    }
}

/// A charge is never refused, on a fresh key or one deep in debt, and a
/// body of several limits is answered per limit, in order, each as a
/// query of its key after its adjustment.
async fn a_charge_is_never_refused_and_each_limit_is_answered<S: Store + Clone>(s: &Subject<S>) {
    let store = s.name;
    let c = s.client("charge-many");
    let gcra = |extra: Value| {
        let mut l = json!({"key":"g","algorithm":"gcra","requests":10,"window_ms":86_400_000});
        l.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        l
    };
    let first = c.charge(json!([gcra(json!({"charge": 1000}))])).await;
    let deeper = c.charge(json!([gcra(json!({"charge": 1000}))])).await;
    let wait = |v: &Value| v["limits"][0]["retry_after_ms"].as_u64().unwrap();
    assert!(
        wait(&deeper) > wait(&first),
        "{store}: {first} then {deeper}"
    );
    assert_eq!(
        c.check(json!([gcra(json!({}))]), 1).await["allowed"],
        json!(false)
    );
    let v = c
        .charge(json!([
            daily(Algorithm::FixedWindow, json!({"charge": 4}))[0].clone(),
            gcra(json!({"refund": 5, "refund_age_ms": 0})),
            daily(Algorithm::SlidingWindow, json!({"charge": 12}))[0].clone(),
        ]))
        .await;
    let limits = v["limits"].as_array().unwrap();
    assert_eq!(limits.len(), 3, "{store}: {v}");
    assert_eq!(limits[0]["allowed"], json!(true), "{store}: {v}");
    assert_eq!(limits[0]["remaining"], json!(6), "{store}: {v}");
    assert_eq!(limits[1]["allowed"], json!(false), "{store}: {v}");
    assert!(wait(&v) > 0 || limits[1]["retry_after_ms"].as_u64().unwrap() > 0);
    assert_eq!(limits[2]["allowed"], json!(false), "{store}: {v}");
    assert_eq!(limits[2]["remaining"], json!(0), "{store}: {v}");
}

async fn connected(target: Target) -> Arc<RedisStore> {
    support::connected(target, Duration::from_millis(500)).await
}

// Several worker threads, so concurrent checks contend for real.
#[tokio::test(flavor = "multi_thread", worker_threads = 8)]
async fn memory_store() {
    let clock = Arc::new(ManualClock::new(1_700_000_000 * SECOND));
    let store = Arc::new(MemoryStore::new(MemoryConfig::default(), clock.clone()));
    suite(Subject {
        name: "memory",
        store,
        clock: Some(clock),
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 8)]
async fn redis_store() {
    let Some(server) = support::RedisServer::start(&[]) else {
        return;
    };
    let store = connected(Target::Single(server.url())).await;
    suite(Subject {
        name: "redis",
        store,
        clock: None,
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 8)]
async fn redis_cluster_store() {
    let Some(nodes) = support::start_cluster() else {
        return;
    };
    let store = connected(Target::Cluster(support::cluster_seeds(&nodes))).await;
    suite(Subject {
        name: "cluster",
        store,
        clock: None,
    })
    .await;
}

/// Priority: a check with a `reserve` passes while its weight and the
/// reserve fit together, and takes its weight alone; the reserved units
/// stay for checks without one. A refusal reports the wait until weight
/// and reserve fit, and what remains. Every algorithm.
async fn a_reserve_keeps_room_for_checks_without_one<S: Store + Clone>(s: &Subject<S>) {
    let store = s.name;
    for alg in Algorithm::ALL {
        let c = s.client(&format!("reserve-{}", alg.name()));
        let bulk = daily(alg, json!({"reserve": 4}));
        for i in 0..6 {
            let v = c.check(bulk.clone(), 1).await;
            assert_eq!(v["allowed"], json!(true), "{store} {alg} {i}: {v}");
        }
        let v = c.check(bulk.clone(), 1).await;
        let l = &v["limits"][0];
        assert_eq!(v["allowed"], json!(false), "{store} {alg}: {v}");
        assert_eq!(l["allowed"], json!(false), "{store} {alg}: {v}");
        assert_eq!(l["remaining"], json!(4), "{store} {alg}: {v}");
        assert!(
            l["retry_after_ms"].as_u64().unwrap() > 0,
            "{store} {alg}: {v}"
        );
        let plain = daily(alg, json!({}));
        for i in 0..4 {
            let v = c.check(plain.clone(), 1).await;
            assert_eq!(v["allowed"], json!(true), "{store} {alg} {i}: {v}");
        }
        assert_eq!(
            c.check(plain, 1).await["allowed"],
            json!(false),
            "{store} {alg}"
        );
    }
}

/// A batch of requests with a reserve admits those after which the
/// reserve still fits, in arrival order, and no more.
async fn a_batch_with_a_reserve_stops_where_the_reserve_begins<S: Store + Clone>(s: &Subject<S>) {
    let store = s.name;
    for alg in Algorithm::ALL {
        let c = s.client(&format!("reserve-batch-{}", alg.name()));
        let v = c.batch(daily(alg, json!({"reserve": 3})), 1, 10).await;
        assert_eq!(v["admitted"], json!(7), "{store} {alg}: {v}");
        assert_eq!(
            v["limits"][0]["allowed"],
            json!(false),
            "{store} {alg}: {v}"
        );
        assert_eq!(v["limits"][0]["remaining"], json!(3), "{store} {alg}: {v}");
        // 3 left: weight 2 and reserve 1 fit once.
        let v = c.batch(daily(alg, json!({"reserve": 1})), 2, 3).await;
        assert_eq!(v["admitted"], json!(1), "{store} {alg}: {v}");
        assert_eq!(v["limits"][0]["remaining"], json!(1), "{store} {alg}: {v}");
    }
}

/// Many callers with a reserve on one key take exactly the limit less
/// the reserve, never part of it.
async fn racing_checks_with_a_reserve_never_take_it<S: Store + Clone>(s: &Subject<S>) {
    for alg in Algorithm::ALL {
        let items = Arc::new([StoreItem::from(RateItem {
            reserve: 30,
            ..RateItem::new(
                format!("{}-hot-reserve/k|{}|86400000", s.name, alg.name()),
                Limit::new(alg, 100, 86_400 * SECOND).unwrap(),
                1,
            )
        })]);
        assert_eq!(
            admitted_by_racers(s, items, 15).await,
            70,
            "{} {alg}",
            s.name
        );
    }
}
