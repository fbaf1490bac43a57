//! envoyproxy/ratelimit's `quota_mode` (the inputs of its service tests,
//! `TestService*QuotaMode*`, as counters in those states) and Envoy's
//! `is_negative_hits`, with the codes and `limit_remaining` it answers, on
//! the memory store and on Redis (skipped without a `redis-server`). Where
//! Sluice answers otherwise on purpose the test says so; the list is in
//! docs/guides/envoy-ratelimit-filter.md.
#![cfg(test)]

mod support;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus};
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use envoy_types::pb::google::protobuf::UInt64Value;
use sluice_limiter::clock::ManualClock;
use sluice_limiter::rls::service::RlsService;
use sluice_limiter::store::redis::Target;
use sluice_limiter::store::Store;
use std::sync::Arc;
use std::time::Duration;
use support::rls::{ask, descriptor, memory, over, request, service, T0};

/// (code, requests_per_unit, limit_remaining); the limit -1 when absent.
fn seen(s: &DescriptorStatus) -> (Code, i64, u32) {
    let code = Code::try_from(s.code).unwrap();
    let limit = s
        .current_limit
        .as_ref()
        .map_or(-1, |l| i64::from(l.requests_per_unit));
    (code, limit, s.limit_remaining)
}

fn all_seen(r: &RateLimitResponse) -> Vec<(Code, i64, u32)> {
    r.statuses.iter().map(seen).collect()
}

/// A descriptor of one entry weighing `hits`.
fn weighing(key: &str, value: &str, hits: u64) -> RateLimitDescriptor {
    RateLimitDescriptor {
        hits_addend: Some(UInt64Value { value: hits }),
        ..descriptor(&[(key, value)])
    }
}

/// A descriptor of one entry giving `hits` back.
fn giving_back(key: &str, value: &str, hits: u64) -> RateLimitDescriptor {
    RateLimitDescriptor {
        is_negative_hits: true,
        ..weighing(key, value, hits)
    }
}

async fn call<S: Store>(svc: &RlsService<S>, ds: Vec<RateLimitDescriptor>) -> RateLimitResponse {
    ask(svc, &request("quota-domain", ds)).await
}

/// Spends `hits` of `key=value`'s counter; the call must be admitted.
async fn spend<S: Store>(svc: &RlsService<S>, key: &str, value: &str, hits: u64) {
    let r = call(svc, vec![weighing(key, value, hits)]).await;
    assert!(!over(&r), "spending {key}={value}: {r:?}");
}

/// The limits of the peer's service tests (`regular`, `quota`, `quota1`,
/// `quota2`, per minute), a counter per value so that each case has its
/// own; and the combinations it has with `shadow_mode` and
/// `requests_per_unit: 0`.
const QUOTA: &str = "
domain: quota-domain
descriptors:
  - key: regular
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: quota
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: quota1
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: quota2
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: shadow_quota
    quota_mode: true
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: blocked_quota
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: parent
    quota_mode: true
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 1}
  - key: free
    rate_limit: {unlimited: true}
  - key: bucket
    rate_limit: {unit: hour, requests_per_unit: 2, algorithm: token_bucket}
  - key: log
    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: sliding_log}
";

use Code::{Ok as OK, OverLimit as OVER};

/// The peer's cases, then what Sluice consumes.
async fn quota_cases<S: Store>(svc: &RlsService<S>) {
    // TestServicePerDescriptorQuotaMode: a rate limit over refuses the
    // call although the quota descriptor has room.
    spend(svc, "regular", "a", 5).await;
    let r = call(
        svc,
        vec![
            descriptor(&[("regular", "a")]),
            descriptor(&[("quota", "a")]),
        ],
    )
    .await;
    assert!(over(&r));
    assert_eq!(all_seen(&r), [(OVER, 5, 0), (OK, 3, 3)]);

    // TestServiceMixedPerDescriptorModes: the only quota descriptor spent
    // is every quota descriptor spent.
    spend(svc, "quota", "b", 3).await;
    let r = call(
        svc,
        vec![
            descriptor(&[("regular", "b")]),
            descriptor(&[("quota", "b")]),
        ],
    )
    .await;
    assert!(over(&r));
    assert_eq!(all_seen(&r), [(OK, 5, 5), (OVER, 3, 0)]);

    // TestServiceMixedPerDescriptorModesUnderLimit.
    let r = call(
        svc,
        vec![
            descriptor(&[("regular", "c")]),
            descriptor(&[("quota", "c")]),
        ],
    )
    .await;
    assert!(!over(&r));
    assert_eq!(all_seen(&r), [(OK, 5, 4), (OK, 3, 2)]);

    // TestServiceQuotaModeOnlyAllOverTheLimit.
    spend(svc, "quota1", "d", 5).await;
    spend(svc, "quota2", "d", 3).await;
    let r = call(
        svc,
        vec![
            descriptor(&[("quota1", "d")]),
            descriptor(&[("quota2", "d")]),
        ],
    )
    .await;
    assert!(over(&r));
    assert_eq!(all_seen(&r), [(OVER, 5, 0), (OVER, 3, 0)]);

    // TestServiceQuotaModeOnlySomeOverTheLimit: admitted, the spent one
    // reported over its limit.
    spend(svc, "quota1", "e", 5).await;
    let r = call(
        svc,
        vec![
            descriptor(&[("quota1", "e")]),
            descriptor(&[("quota2", "e")]),
        ],
    )
    .await;
    assert!(!over(&r));
    assert_eq!(all_seen(&r), [(OVER, 5, 0), (OK, 3, 2)]);

    // Admitted with a quota descriptor spent: the rate limits and the
    // quota descriptors with room consume, the spent one nothing.
    spend(svc, "quota1", "f", 5).await;
    let three = vec![
        descriptor(&[("regular", "f")]),
        descriptor(&[("quota1", "f")]),
        descriptor(&[("quota2", "f")]),
    ];
    let r = call(svc, three.clone()).await;
    assert!(!over(&r));
    assert_eq!(all_seen(&r), [(OK, 5, 4), (OVER, 5, 0), (OK, 3, 2)]);
    let r = call(svc, three.clone()).await;
    assert_eq!(all_seen(&r), [(OK, 5, 3), (OVER, 5, 0), (OK, 3, 1)]);
    let r = call(svc, three.clone()).await;
    assert_eq!(all_seen(&r), [(OK, 5, 2), (OVER, 5, 0), (OK, 3, 0)]);
    // Every quota descriptor spent: refused, and (deliberately) nothing
    // consumed: the peer counts the call on every counter.
    let r = call(svc, three.clone()).await;
    assert!(over(&r));
    assert_eq!(all_seen(&r), [(OK, 5, 2), (OVER, 5, 0), (OVER, 3, 0)]);
    let r = call(svc, vec![descriptor(&[("regular", "f")])]).await;
    assert_eq!(all_seen(&r), [(OK, 5, 1)]);
}

/// `requests_per_unit: 0` and `shadow_mode` in quota mode, as the peer
/// counts them: a blocking one is spent, a shadow one never is.
async fn quota_with_block_and_shadow<S: Store>(svc: &RlsService<S>) {
    let r = call(
        svc,
        vec![
            descriptor(&[("blocked_quota", "g")]),
            descriptor(&[("quota2", "g")]),
        ],
    )
    .await;
    assert!(!over(&r));
    assert_eq!(all_seen(&r), [(OVER, 0, 0), (OK, 3, 2)]);
    let r = call(svc, vec![descriptor(&[("blocked_quota", "g")])]).await;
    assert!(over(&r));
    assert_eq!(all_seen(&r), [(OVER, 0, 0)]);

    spend(svc, "quota1", "h", 5).await;
    spend(svc, "shadow_quota", "h", 1).await;
    let r = call(
        svc,
        vec![
            descriptor(&[("quota1", "h")]),
            descriptor(&[("shadow_quota", "h")]),
        ],
    )
    .await;
    assert!(!over(&r), "a shadow quota descriptor never refuses");
    assert_eq!(all_seen(&r), [(OVER, 5, 0), (OK, 1, 0)]);

    // Two quota-mode descriptors on one counter whose total does not fit:
    // both over, the call refused (deliberate: the peer answers the first
    // `OK` and counts both).
    spend(svc, "quota", "j", 2).await;
    let twice = vec![descriptor(&[("quota", "j")]), descriptor(&[("quota", "j")])];
    let r = call(svc, twice).await;
    assert!(over(&r));
    assert_eq!(all_seen(&r), [(OVER, 3, 0), (OVER, 3, 0)]);
    let r = call(svc, vec![descriptor(&[("quota", "j")])]).await;
    assert_eq!(all_seen(&r), [(OK, 3, 0)]);

    // `quota_mode` is the descriptor's with the limit, not inherited.
    let nested = descriptor(&[("parent", "i"), ("user", "i")]);
    let r = call(svc, vec![nested.clone()]).await;
    assert!(!over(&r));
    let r = call(svc, vec![nested, descriptor(&[("quota2", "i")])]).await;
    assert!(over(&r));
    assert_eq!(all_seen(&r), [(OVER, 1, 0), (OK, 3, 3)]);
}

/// Envoy's `is_negative_hits`: the descriptor's weight is given back to
/// its counter (the peer reads no such field and counts the hits).
async fn negative_hits_cases<S: Store>(svc: &RlsService<S>) {
    spend(svc, "regular", "n", 5).await;
    let r = call(svc, vec![descriptor(&[("regular", "n")])]).await;
    assert!(over(&r));
    let r = call(svc, vec![giving_back("regular", "n", 2)]).await;
    assert!(!over(&r));
    assert_eq!(all_seen(&r), [(OK, 5, 2)]);
    let r = call(svc, vec![descriptor(&[("regular", "n")])]).await;
    assert_eq!(all_seen(&r), [(OK, 5, 1)]);
    // Never beyond the whole quota.
    let r = call(svc, vec![giving_back("regular", "n", 100)]).await;
    assert_eq!(all_seen(&r), [(OK, 5, 5)]);
    // Given back before the call's other limits are decided.
    spend(svc, "regular", "m", 5).await;
    let r = call(
        svc,
        vec![
            giving_back("regular", "m", 1),
            descriptor(&[("regular", "m")]),
        ],
    )
    .await;
    assert!(!over(&r));
    assert_eq!(all_seen(&r), [(OK, 5, 1), (OK, 5, 0)]);
    // The request's weight when the descriptor has none; 0 gives nothing.
    let mut req = request("quota-domain", vec![giving_back("regular", "m", 0)]);
    req.descriptors[0].hits_addend = None;
    req.hits_addend = 3;
    assert_eq!(all_seen(&ask(svc, &req).await), [(OK, 5, 3)]);
    let r = call(svc, vec![giving_back("regular", "m", 0)]).await;
    assert_eq!(all_seen(&r), [(OK, 5, 3)]);
    // No limit: nothing to give back.
    let r = call(svc, vec![giving_back("other", "m", 1)]).await;
    assert_eq!(all_seen(&r), [(OK, -1, 0)]);
    // Nothing to give back to a blocking limit; unlimited stays unlimited.
    let r = call(svc, vec![giving_back("blocked_quota", "m", 1)]).await;
    assert!(!over(&r));
    assert_eq!(all_seen(&r), [(OK, 0, 0)]);
    let r = call(svc, vec![giving_back("free", "m", 1)]).await;
    assert_eq!(all_seen(&r), [(OK, -1, u32::MAX)]);
    // A bucket's level, never beyond a full bucket.
    spend(svc, "bucket", "b", 2).await;
    let r = call(svc, vec![giving_back("bucket", "b", 1)]).await;
    assert_eq!(all_seen(&r), [(OK, 2, 1)]);
    let r = call(svc, vec![giving_back("bucket", "b", 5)]).await;
    assert_eq!(all_seen(&r), [(OK, 2, 2)]);
    // A sliding log cannot tell which hits to give back.
    let req = request("quota-domain", vec![giving_back("log", "l", 1)]);
    let e = svc.decide(&req).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    assert_eq!(
        e.message(),
        "descriptors[0].is_negative_hits: a sliding_log limit cannot be given hits back"
    );
}

/// envoyproxy/ratelimit's global quota mode (`QUOTA_MODE=true`,
/// `TestServiceGlobalQuotaMode`: limits of 10 and 5 per minute).
const GLOBAL: &str = "
domain: quota-domain
descriptors:
  - key: foo
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: hello
    rate_limit: {unit: minute, requests_per_unit: 5}
";

async fn global_quota_cases<S: Store>(svc: &RlsService<S>) {
    // Every descriptor over: over the limit.
    spend(svc, "foo", "a", 10).await;
    spend(svc, "hello", "a", 5).await;
    let r = call(
        svc,
        vec![descriptor(&[("foo", "a")]), descriptor(&[("hello", "a")])],
    )
    .await;
    assert!(over(&r));
    assert_eq!(all_seen(&r), [(OVER, 10, 0), (OVER, 5, 0)]);
    // One with room: admitted, and it alone consumes.
    spend(svc, "foo", "b", 10).await;
    let r = call(
        svc,
        vec![descriptor(&[("foo", "b")]), descriptor(&[("hello", "b")])],
    )
    .await;
    assert!(!over(&r));
    assert_eq!(all_seen(&r), [(OVER, 10, 0), (OK, 5, 4)]);
    // A descriptor without a limit counts as one with room, as the peer
    // counts it.
    let r = call(
        svc,
        vec![descriptor(&[("foo", "b")]), descriptor(&[("other", "b")])],
    )
    .await;
    assert!(!over(&r));
    assert_eq!(all_seen(&r), [(OVER, 10, 0), (OK, -1, 0)]);
    // One descriptor alone: a limit.
    let r = call(svc, vec![descriptor(&[("foo", "b")])]).await;
    assert!(over(&r));
}

fn on_memory() -> RlsService<Arc<sluice_limiter::store::memory::MemoryStore>> {
    let clock = Arc::new(ManualClock::new(T0));
    service(memory(&clock), QUOTA, &clock)
}

#[tokio::test]
async fn quota_mode_on_memory() {
    quota_cases(&on_memory()).await;
    quota_with_block_and_shadow(&on_memory()).await;
}

#[tokio::test]
async fn global_quota_mode_on_memory() {
    let clock = Arc::new(ManualClock::new(T0));
    global_quota_cases(&service(memory(&clock), GLOBAL, &clock).with_quota_mode()).await;
}

#[tokio::test]
async fn negative_hits_on_memory() {
    negative_hits_cases(&on_memory()).await;
}

/// A service over a fresh redis-server, once its clock is not within the
/// last 10 seconds of a minute (a case's counters stay in one window).
async fn on_redis(
    config: &str,
) -> Option<(
    RlsService<Arc<sluice_limiter::store::redis::RedisStore>>,
    support::RedisServer,
)> {
    let server = support::RedisServer::start(&[])?;
    let store = support::connected(Target::Single(server.url()), Duration::from_secs(2)).await;
    let client = redis::Client::open(server.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    loop {
        let (secs, _): (u64, u64) = redis::cmd("TIME").query_async(&mut conn).await.unwrap();
        if secs % 60 < 50 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let clock = Arc::new(ManualClock::new(T0));
    Some((service(store, config, &clock), server))
}

#[tokio::test]
async fn quota_mode_on_redis() {
    let Some((svc, _server)) = on_redis(QUOTA).await else {
        return;
    };
    quota_cases(&svc).await;
    quota_with_block_and_shadow(&svc).await;
}

#[tokio::test]
async fn negative_hits_on_redis() {
    let Some((svc, _server)) = on_redis(QUOTA).await else {
        return;
    };
    negative_hits_cases(&svc).await;
}

#[tokio::test]
async fn global_quota_mode_on_redis() {
    let Some((svc, _server)) = on_redis(GLOBAL).await else {
        return;
    };
    global_quota_cases(&svc.with_quota_mode()).await;
}
