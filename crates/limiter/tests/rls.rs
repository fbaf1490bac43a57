//! The RLS server: descriptors matched, decided together in the store,
//! answered as Envoy reads them; a tonic client over a socket; reloads.
#![cfg(test)]

mod support;

use support::rls::{ask, descriptor, memory, observed, over, request, service, T0};

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::google::protobuf::UInt64Value;
use sluice_core::SECOND;
use sluice_limiter::clock::{Clock, ManualClock};
use sluice_limiter::metrics::Metrics;
use sluice_limiter::rls::reload::ConfigCell;
use sluice_limiter::rls::service::RlsService;
use sluice_limiter::store::redis::Target;
use std::sync::Arc;
use std::time::Duration;
use tonic::service::Routes;

/// Every kind of descriptor: the fuzzers' configuration.
const CONFIG: &str = sluice_limiter::rls::fuzzing::DESCRIPTORS;

#[tokio::test]
async fn a_matched_descriptor_is_limited_with_its_status() {
    let clock = Arc::new(ManualClock::new(T0));
    let svc = service(memory(&clock), CONFIG, &clock);
    let req = request("edge", vec![descriptor(&[("remote_address", "10.0.0.1")])]);
    for remaining in [2, 1, 0] {
        let r = ask(&svc, &req).await;
        assert!(!over(&r));
        let s = &r.statuses[0];
        assert_eq!(s.code, Code::Ok as i32);
        assert_eq!(s.limit_remaining, remaining);
        let limit = s.current_limit.as_ref().unwrap();
        assert_eq!((limit.requests_per_unit, limit.unit), (3, 2));
        // Fixed windows aligned to the epoch, as envoyproxy/ratelimit's.
        assert_eq!(s.duration_until_reset.unwrap().seconds, 30);
    }
    let r = ask(&svc, &req).await;
    assert!(over(&r));
    assert_eq!(r.statuses[0].code, Code::OverLimit as i32);
    // Another value of a value-less key has its own counter.
    let other = request("edge", vec![descriptor(&[("remote_address", "10.0.0.2")])]);
    assert!(!over(&ask(&svc, &other).await));
    clock.advance(30 * SECOND);
    assert!(!over(&ask(&svc, &req).await), "a new window");
}

#[tokio::test]
async fn a_denied_request_consumes_nothing() {
    let clock = Arc::new(ManualClock::new(T0));
    let svc = service(memory(&clock), CONFIG, &clock);
    let ip = descriptor(&[("remote_address", "10.0.0.9")]);
    let user = descriptor(&[("user", "u")]);
    for _ in 0..3 {
        assert!(!over(&ask(&svc, &request("edge", vec![ip.clone()])).await));
    }
    // The address is spent: the user's limit must not be charged.
    for _ in 0..10 {
        let r = ask(&svc, &request("edge", vec![user.clone(), ip.clone()])).await;
        assert!(over(&r));
        assert_eq!(r.statuses[0].code, Code::Ok as i32);
        assert_eq!(r.statuses[0].limit_remaining, 5, "nothing consumed");
        assert_eq!(r.statuses[1].code, Code::OverLimit as i32);
    }
    let r = ask(&svc, &request("edge", vec![user])).await;
    assert_eq!(r.statuses[0].limit_remaining, 4);
}

#[tokio::test]
async fn no_match_unlimited_block_and_unknown_domain() {
    let clock = Arc::new(ManualClock::new(T0));
    let svc = service(memory(&clock), CONFIG, &clock);
    let r = ask(
        &svc,
        &request(
            "edge",
            vec![
                descriptor(&[("nothing", "x")]),
                descriptor(&[("internal", "x")]),
                descriptor(&[("placeholder", "x")]),
                descriptor(&[("remote_address", "10.0.0.1"), ("extra", "y")]),
            ],
        ),
    )
    .await;
    assert!(!over(&r));
    assert!(r.statuses.iter().all(|s| s.code == Code::Ok as i32));
    assert_eq!(r.statuses[1].limit_remaining, u32::MAX, "unlimited");
    assert!(r.statuses[0].current_limit.is_none());
    let r = ask(
        &svc,
        &request("edge", vec![descriptor(&[("remote_address", "50.0.0.5")])]),
    )
    .await;
    assert!(over(&r), "requests_per_unit: 0 blocks");
    let r = ask(
        &svc,
        &request("nope", vec![descriptor(&[("remote_address", "1")])]),
    )
    .await;
    assert!(!over(&r) && r.statuses[0].current_limit.is_none());
    assert!(svc.decide(&request("edge", vec![])).await.is_err());
    assert!(svc
        .decide(&request("", vec![descriptor(&[("a", "b")])]))
        .await
        .is_err());
}

#[tokio::test]
async fn replaces_drops_the_named_limit() {
    let clock = Arc::new(ManualClock::new(T0));
    let svc = service(memory(&clock), CONFIG, &clock);
    let both = request(
        "edge",
        vec![
            descriptor(&[("user", "v")]),
            descriptor(&[("vip", "1"), ("user", "v")]),
        ],
    );
    for _ in 0..20 {
        let r = ask(&svc, &both).await;
        assert!(!over(&r));
        assert!(r.statuses[0].current_limit.is_none(), "replaced");
    }
    // The replaced limit was left alone.
    let alone = ask(&svc, &request("edge", vec![descriptor(&[("user", "v")])])).await;
    assert_eq!(alone.statuses[0].limit_remaining, 4);
}

#[tokio::test]
async fn shadow_mode_counts_but_never_denies() {
    let clock = Arc::new(ManualClock::new(T0));
    let svc = service(memory(&clock), CONFIG, &clock);
    let req = request("edge", vec![descriptor(&[("canary", "c")])]);
    let first = ask(&svc, &req).await;
    assert_eq!(first.statuses[0].limit_remaining, 0);
    for _ in 0..3 {
        let r = ask(&svc, &req).await;
        assert!(!over(&r));
        assert_eq!(r.statuses[0].code, Code::Ok as i32);
    }
}

#[tokio::test]
async fn hits_addend_request_and_descriptor_level() {
    let clock = Arc::new(ManualClock::new(T0));
    let svc = service(memory(&clock), CONFIG, &clock);
    let mut req = request("edge", vec![descriptor(&[("user", "h")])]);
    req.hits_addend = 3;
    assert_eq!(ask(&svc, &req).await.statuses[0].limit_remaining, 2);
    assert!(over(&ask(&svc, &req).await), "3 more do not fit in 2");
    // The descriptor's own hits_addend wins over the request's.
    req.descriptors[0].hits_addend = Some(UInt64Value { value: 2 });
    let r = ask(&svc, &req).await;
    assert!(!over(&r));
    assert_eq!(r.statuses[0].limit_remaining, 0);
    // Zero checks without consuming.
    req.descriptors[0].hits_addend = Some(UInt64Value { value: 0 });
    assert!(over(&ask(&svc, &req).await), "nothing left to peek at");
}

#[tokio::test]
async fn envoys_limit_override_replaces_the_configured_one() {
    let clock = Arc::new(ManualClock::new(T0));
    let svc = service(memory(&clock), CONFIG, &clock);
    let mut d = descriptor(&[("remote_address", "10.1.1.1")]);
    d.limit = Some(RateLimitOverride {
        requests_per_unit: 1,
        unit: 3, // hour
    });
    let req = request("edge", vec![d]);
    let r = ask(&svc, &req).await;
    let limit = r.statuses[0].current_limit.as_ref().unwrap();
    assert_eq!((limit.requests_per_unit, limit.unit), (1, 3));
    assert!(over(&ask(&svc, &req).await));
    // On any descriptor of a known domain, configured or not.
    let mut d = descriptor(&[("anything", "x")]);
    d.limit = Some(RateLimitOverride {
        requests_per_unit: 1,
        unit: 1,
    });
    let req = request("edge", vec![d.clone()]);
    assert!(!over(&ask(&svc, &req).await));
    assert!(over(&ask(&svc, &req).await));
    d.limit = Some(RateLimitOverride {
        requests_per_unit: 1,
        unit: 0,
    });
    assert!(svc.decide(&request("edge", vec![d])).await.is_err());
}

#[tokio::test]
async fn sluice_algorithms_apply() {
    let clock = Arc::new(ManualClock::new(T0));
    let svc = service(memory(&clock), CONFIG, &clock);
    let req = request("edge", vec![descriptor(&[("bucket", "b")])]);
    assert!(!over(&ask(&svc, &req).await));
    assert!(!over(&ask(&svc, &req).await));
    let r = ask(&svc, &req).await;
    assert!(over(&r));
    assert_eq!(
        r.statuses[0].current_limit.as_ref().unwrap().unit,
        0,
        "10s: no unit"
    );
    clock.advance(5 * SECOND);
    assert!(!over(&ask(&svc, &req).await), "one token back after 5s");
    assert!(over(&ask(&svc, &req).await));
}

#[tokio::test]
async fn reload_keeps_counters_and_refuses_a_bad_file() {
    let dir = std::env::temp_dir().join(format!("sluice-rls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("edge.yaml");
    std::fs::write(&file, CONFIG).unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let cell = Arc::new(ConfigCell::load(&dir).unwrap());
    let metrics = Arc::new(Metrics::default());
    let dyn_clock: Arc<dyn Clock> = Arc::clone(&clock) as Arc<dyn Clock>;
    let svc = RlsService::new(
        memory(&clock),
        Arc::clone(&cell),
        Arc::clone(&metrics),
        dyn_clock,
    );
    let req = request("edge", vec![descriptor(&[("remote_address", "10.0.0.1")])]);
    for _ in 0..2 {
        assert!(!over(&ask(&svc, &req).await));
    }
    // A bad file: refused, named, the previous configuration stays.
    std::fs::write(
        &file,
        "domain: edge\ndescriptors:\n  - key: a\n    rate_limit: {unit: sec}\n",
    )
    .unwrap();
    let e = cell.reload(&metrics).unwrap_err();
    assert!(e.to_string().contains("edge.yaml:4:"), "{e}");
    assert_eq!(metrics.rls_reload_count(false), 1);
    assert_eq!(ask(&svc, &req).await.statuses[0].limit_remaining, 0);
    assert!(over(&ask(&svc, &req).await));
    // A new count for the same unit: the window's counter carries over.
    std::fs::write(
        &file,
        CONFIG.replace("requests_per_unit: 3}", "requests_per_unit: 5}"),
    )
    .unwrap();
    assert!(cell.reload_if_changed(&metrics).is_some_and(|r| r.is_ok()));
    assert!(cell.reload_if_changed(&metrics).is_none(), "unchanged");
    let r = ask(&svc, &req).await;
    assert!(!over(&r));
    assert_eq!(
        r.statuses[0].limit_remaining, 1,
        "3 counted + this one, of 5"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn metrics_count_descriptors_by_result() {
    let clock = Arc::new(ManualClock::new(T0));
    let metrics = Arc::new(Metrics::default());
    let svc = observed(memory(&clock), CONFIG, &clock, Arc::clone(&metrics));
    let req = request("edge", vec![descriptor(&[("canary", "c")])]);
    for _ in 0..3 {
        ask(&svc, &req).await;
    }
    assert_eq!(metrics.rls_descriptor_count("edge", "canary", "ok"), 1);
    assert_eq!(
        metrics.rls_descriptor_count("edge", "canary", "shadow_over_limit"),
        2
    );
    let text = metrics.render();
    assert!(text.contains(
        "sluice_limiter_rls_descriptors_total{domain=\"edge\",descriptor=\"canary\",result=\"shadow_over_limit\"} 2"
    ), "{text}");
    assert!(
        text.contains("sluice_limiter_rls_calls_total{domain=\"edge\",result=\"ok\"} 3"),
        "{text}"
    );
}

/// Over a socket with tonic's client, as Envoy calls it.
#[tokio::test]
async fn a_grpc_client_is_answered() {
    let clock = Arc::new(ManualClock::new(T0));
    let svc = service(memory(&clock), CONFIG, &clock);
    let addr = support::serve_grpc(Routes::new(svc.into_server())).await;
    let mut client = RateLimitServiceClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    let req = request("edge", vec![descriptor(&[("remote_address", "1.2.3.4")])]);
    let mut codes = Vec::new();
    for _ in 0..4 {
        let r = client
            .should_rate_limit(req.clone())
            .await
            .unwrap()
            .into_inner();
        codes.push(r.overall_code);
    }
    assert_eq!(codes, [1, 1, 1, 2]);
    let err = client
        .should_rate_limit(request("edge", vec![]))
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
}

/// The same decisions through Redis, shared by two services.
#[tokio::test]
async fn two_services_share_a_redis() {
    let Some(server) = support::RedisServer::start(&[]) else {
        return;
    };
    let store = support::connected(Target::Single(server.url()), Duration::from_millis(500)).await;
    let clock = Arc::new(ManualClock::new(T0));
    let a = service(Arc::clone(&store), CONFIG, &clock);
    let b = service(store, CONFIG, &clock);
    let key = format!("10.9.{}.1", std::process::id() % 250);
    let ip = descriptor(&[("remote_address", &key)]);
    let user = descriptor(&[("user", &key)]);
    let mut admitted = 0;
    for i in 0..6 {
        let svc = if i % 2 == 0 { &a } else { &b };
        if !over(&ask(svc, &request("edge", vec![ip.clone(), user.clone()])).await) {
            admitted += 1;
        }
    }
    assert_eq!(admitted, 3);
    let r = ask(&a, &request("edge", vec![user])).await;
    assert_eq!(
        r.statuses[0].limit_remaining, 1,
        "denied requests consumed nothing"
    );
}

/// `unit_multiplier`: 3 requests per 5 minutes.
const MULTIPLIED: &str = "
domain: m
descriptors:
  - key: user
    rate_limit: {unit: minute, unit_multiplier: 5, requests_per_unit: 3}
";

/// Three calls in one window of five minutes, then one over the limit: each
/// status with its `limit_remaining` and `duration_until_reset` (seconds).
async fn five_minutes<S: sluice_limiter::store::Store>(
    svc: &RlsService<S>,
    user: &str,
) -> Vec<(bool, u32, i64)> {
    let req = request("m", vec![descriptor(&[("user", user)])]);
    let mut seen = Vec::new();
    for _ in 0..4 {
        let r = ask(svc, &req).await;
        let s = &r.statuses[0];
        let limit = s.current_limit.as_ref().unwrap();
        // Five minutes are no protocol unit: UNKNOWN.
        assert_eq!((limit.requests_per_unit, limit.unit), (3, 0));
        seen.push((
            over(&r),
            s.limit_remaining,
            s.duration_until_reset.unwrap().seconds,
        ));
    }
    seen
}

#[tokio::test]
async fn unit_multiplier_counts_in_windows_of_n_units_aligned_to_the_epoch() {
    let clock = Arc::new(ManualClock::new(T0));
    let svc = service(memory(&clock), MULTIPLIED, &clock);
    // T0 is 210 s into its five minutes (1_700_000_010 % 300).
    let seen = five_minutes(&svc, "a").await;
    assert_eq!(
        seen,
        [
            (false, 2, 90),
            (false, 1, 90),
            (false, 0, 90),
            (true, 0, 90)
        ]
    );
    clock.advance(89 * SECOND);
    let again = five_minutes(&svc, "a").await;
    assert_eq!(again[0], (true, 0, 1));
    clock.advance(SECOND);
    let next = five_minutes(&svc, "a").await;
    assert_eq!(
        next,
        [
            (false, 2, 300),
            (false, 1, 300),
            (false, 0, 300),
            (true, 0, 300)
        ]
    );
}

#[tokio::test]
async fn unit_multiplier_counts_in_windows_of_n_units_on_redis() {
    let Some(server) = support::RedisServer::start(&[]) else {
        return;
    };
    let store = support::connected(Target::Single(server.url()), Duration::from_millis(500)).await;
    let clock = Arc::new(ManualClock::new(T0));
    let svc = service(store, MULTIPLIED, &clock);
    let now_s = || {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
        now.map_or(0, |d| d.as_secs())
    };
    // Redis reads its own clock: the four calls in one window.
    while now_s() % 300 >= 298 {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let before = now_s();
    let seen = five_minutes(&svc, "r").await;
    let after = now_s();
    let counts: Vec<(bool, u32)> = seen.iter().map(|s| (s.0, s.1)).collect();
    assert_eq!(counts, [(false, 2), (false, 1), (false, 0), (true, 0)]);
    let resets: Vec<i64> = (before..=after)
        .map(|s| 300 - i64::try_from(s % 300).unwrap())
        .collect();
    for s in &seen {
        assert!(resets.contains(&s.2), "{} not in {resets:?}", s.2);
    }
}
