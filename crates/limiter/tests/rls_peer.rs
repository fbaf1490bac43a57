//! envoyproxy/ratelimit's documented behaviour, example by example (the
//! configurations of its README's "Examples"), with the values it answers:
//! codes, `limit_remaining`, `duration_until_reset` in whole seconds. Where
//! Sluice answers otherwise on purpose the test says so; the list is in
//! docs/guides/envoy-ratelimit-filter.md.
#![cfg(test)]

mod support;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus};
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use envoy_types::pb::google::protobuf::UInt64Value;
use sluice_core::SECOND;
use sluice_limiter::clock::{Clock, ManualClock};
use sluice_limiter::metrics::Metrics;
use sluice_limiter::rls::service::{Mode, RlsService};
use sluice_limiter::store::memory::{MemoryConfig, MemoryStore};
use sluice_limiter::store::redis::Target;
use sluice_limiter::store::Store;
use std::sync::Arc;
use std::time::Duration;
use support::rls::{ask, descriptor, memory, observed, over, request, service, T0};

type Svc = RlsService<Arc<MemoryStore>>;

/// A service over `config` at `T0` (30 s into a minute), and its clock.
fn peer(config: &str) -> (Svc, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(T0));
    (service(memory(&clock), config, &clock), clock)
}

/// One call of one descriptor; its answer.
async fn one(svc: &Svc, domain: &str, entries: &[(&str, &str)]) -> RateLimitResponse {
    ask(svc, &request(domain, vec![descriptor(entries)])).await
}

/// (code, requests_per_unit, limit_remaining, seconds until reset), the
/// limit and reset as -1 when absent.
fn seen(s: &DescriptorStatus) -> (Code, i64, u32, i64) {
    let code = Code::try_from(s.code).unwrap();
    let limit = s
        .current_limit
        .as_ref()
        .map_or(-1, |l| i64::from(l.requests_per_unit));
    let reset = s.duration_until_reset.map_or(-1, |d| {
        assert_eq!(d.nanos, 0, "whole seconds");
        d.seconds
    });
    (code, limit, s.limit_remaining, reset)
}

/// What envoyproxy/ratelimit sends as `duration_until_reset` at `now`
/// (`unit - now % unit`, in whole seconds of the clock).
fn peer_reset(now: u64, unit_seconds: u64) -> i64 {
    i64::try_from(unit_seconds - (now / SECOND) % unit_seconds).unwrap()
}

const EXAMPLE_1: &str = "
domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit: {unit: second, requests_per_unit: 500}
  - key: database
    value: default
    rate_limit: {unit: second, requests_per_unit: 500}
";

#[tokio::test]
async fn example_1_values_have_their_own_limits() {
    let (svc, _) = peer(EXAMPLE_1);
    let mut spend = request("mongo_cps", vec![descriptor(&[("database", "users")])]);
    spend.hits_addend = 499;
    assert_eq!(
        seen(&ask(&svc, &spend).await.statuses[0]),
        (Code::Ok, 500, 1, 1)
    );
    let users = one(&svc, "mongo_cps", &[("database", "users")]).await;
    assert_eq!(seen(&users.statuses[0]), (Code::Ok, 500, 0, 1));
    let users = one(&svc, "mongo_cps", &[("database", "users")]).await;
    assert!(over(&users));
    assert_eq!(seen(&users.statuses[0]), (Code::OverLimit, 500, 0, 1));
    let default = one(&svc, "mongo_cps", &[("database", "default")]).await;
    assert_eq!(seen(&default.statuses[0]), (Code::Ok, 500, 499, 1));
    // A value not listed, under a key that has no value-less entry.
    let other = one(&svc, "mongo_cps", &[("database", "other")]).await;
    assert_eq!(seen(&other.statuses[0]), (Code::Ok, -1, 0, -1));
}

const EXAMPLE_2: &str = "
domain: messaging
descriptors:
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit: {unit: day, requests_per_unit: 5}
  - key: to_number
    rate_limit: {unit: day, requests_per_unit: 100}
";

#[tokio::test]
async fn example_2_nested_and_aggregate_descriptors() {
    let (svc, _) = peer(EXAMPLE_2);
    let day = peer_reset(T0, 86_400);
    let marketing = descriptor(&[("message_type", "marketing"), ("to_number", "2061111111")]);
    let number = descriptor(&[("to_number", "2061111111")]);
    let both = request("messaging", vec![marketing, number]);
    for left in (0..5).rev() {
        let r = ask(&svc, &both).await;
        assert!(!over(&r));
        assert_eq!(seen(&r.statuses[0]), (Code::Ok, 5, left, day));
        assert_eq!(seen(&r.statuses[1]), (Code::Ok, 100, 95 + left, day));
    }
    let r = ask(&svc, &both).await;
    assert!(over(&r), "a logical OR of the decisions");
    assert_eq!(seen(&r.statuses[0]), (Code::OverLimit, 5, 0, day));
    // Deliberate: the denied call consumes nothing (the peer reports 94).
    assert_eq!(seen(&r.statuses[1]), (Code::Ok, 100, 95, day));
    // Another number has its own marketing counter.
    let other = one(
        &svc,
        "messaging",
        &[("message_type", "marketing"), ("to_number", "2")],
    )
    .await;
    assert_eq!(seen(&other.statuses[0]), (Code::Ok, 5, 4, day));
}

const EXAMPLE_3: &str = "
domain: edge_proxy_per_ip
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: remote_address
    value: 50.0.0.5
    rate_limit: {unit: second, requests_per_unit: 0}
";

#[tokio::test]
async fn example_3_the_most_specific_match_wins() {
    let (svc, _) = peer(EXAMPLE_3);
    let ip = one(&svc, "edge_proxy_per_ip", &[("remote_address", "50.0.0.1")]).await;
    assert_eq!(seen(&ip.statuses[0]), (Code::Ok, 10, 9, 1));
    let listed = one(&svc, "edge_proxy_per_ip", &[("remote_address", "50.0.0.5")]).await;
    assert!(over(&listed));
    assert_eq!(seen(&listed.statuses[0]), (Code::OverLimit, 0, 0, 1));
}

const EXAMPLE_4_FLAT: &str = "
domain: example4
descriptors:
  - key: key
    value: value
    rate_limit: {requests_per_unit: 300, unit: second}
";

const EXAMPLE_4_NESTED: &str = "
domain: example4
descriptors:
  - key: key
    value: value
    descriptors:
      - key: subkey
        rate_limit: {requests_per_unit: 300, unit: second}
";

#[tokio::test]
async fn example_4_a_descriptor_matches_at_its_own_depth() {
    let two = [("key", "value"), ("subkey", "subvalue")];
    let (flat, _) = peer(EXAMPLE_4_FLAT);
    assert_eq!(
        seen(&one(&flat, "example4", &two).await.statuses[0]),
        (Code::Ok, -1, 0, -1)
    );
    let (nested, _) = peer(EXAMPLE_4_NESTED);
    let r = one(&nested, "example4", &two).await;
    assert_eq!(seen(&r.statuses[0]), (Code::Ok, 300, 299, 1));
    let r = one(&nested, "example4", &[("key", "value")]).await;
    assert_eq!(seen(&r.statuses[0]), (Code::Ok, -1, 0, -1), "a placeholder");
}

const EXAMPLE_5: &str = "
domain: internal
descriptors:
  - key: ldap
    rate_limit: {unlimited: true, name: ldap}
  - key: azure
    rate_limit: {unit: minute, requests_per_unit: 100, replaces: [{name: ldap}]}
";

#[tokio::test]
async fn example_5_unlimited_answers_max_remaining_even_when_replaced() {
    let (svc, _) = peer(EXAMPLE_5);
    let ldap = one(&svc, "internal", &[("ldap", "x")]).await;
    assert_eq!(seen(&ldap.statuses[0]), (Code::Ok, -1, u32::MAX, -1));
    // envoyproxy/ratelimit drops the limit of an unlimited descriptor
    // before it applies `replaces`, so a replaced one stays unlimited.
    let both = request(
        "internal",
        vec![descriptor(&[("ldap", "x")]), descriptor(&[("azure", "y")])],
    );
    let r = ask(&svc, &both).await;
    assert_eq!(seen(&r.statuses[0]), (Code::Ok, -1, u32::MAX, -1));
    assert_eq!(
        seen(&r.statuses[1]),
        (Code::Ok, 100, 99, peer_reset(T0, 60))
    );
}

const EXAMPLE_6: &str = "
domain: example6
descriptors:
  - key: service
    descriptors:
      - key: user
        value: user-a
        rate_limit: {requests_per_unit: 10, unit: second}
        shadow_mode: true
      - key: user
        value: user-b
        rate_limit: {requests_per_unit: 20, unit: second}
";

#[tokio::test]
async fn example_6_shadow_mode_answers_ok_with_nothing_left() {
    let (svc, _) = peer(EXAMPLE_6);
    let a = [("service", "auth-service"), ("user", "user-a")];
    for left in (0..10).rev() {
        assert_eq!(
            seen(&one(&svc, "example6", &a).await.statuses[0]),
            (Code::Ok, 10, left, 1)
        );
    }
    for _ in 0..3 {
        let r = one(&svc, "example6", &a).await;
        assert!(!over(&r));
        assert_eq!(seen(&r.statuses[0]), (Code::Ok, 10, 0, 1));
    }
    let b = [("service", "auth-service"), ("user", "user-b")];
    for _ in 0..20 {
        assert!(!over(&one(&svc, "example6", &b).await));
    }
    let r = one(&svc, "example6", &b).await;
    assert_eq!(seen(&r.statuses[0]), (Code::OverLimit, 20, 0, 1));
}

const EXAMPLE_7: &str = "
domain: example7
descriptors:
  - key: key_1
    value: value_1
    descriptors:
      - key: user
        value: bkthomps
        rate_limit: {name: specific_limit, requests_per_unit: 5, unit: second}
  - key: key_2
    value: value_2
    descriptors:
      - key: user
        value: bkthomps
        rate_limit: {replaces: [{name: specific_limit}], requests_per_unit: 10, unit: second}
";

#[tokio::test]
async fn example_7_replaces_leaves_the_replaced_limit_alone() {
    let (svc, _) = peer(EXAMPLE_7);
    let first = descriptor(&[("key_1", "value_1"), ("user", "bkthomps")]);
    let second = descriptor(&[("key_2", "value_2"), ("user", "bkthomps")]);
    let both = request("example7", vec![first.clone(), second]);
    for left in (0..10).rev() {
        let r = ask(&svc, &both).await;
        assert_eq!(seen(&r.statuses[0]), (Code::Ok, -1, 0, -1), "replaced");
        assert_eq!(seen(&r.statuses[1]), (Code::Ok, 10, left, 1));
    }
    assert!(over(&ask(&svc, &both).await));
    let alone = ask(&svc, &request("example7", vec![first])).await;
    assert_eq!(seen(&alone.statuses[0]), (Code::Ok, 5, 4, 1));
}

const EXAMPLE_8: &str = "
domain: example8
descriptors:
  - key: key1
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: key1
    value: value1
    rate_limit: {unit: minute, requests_per_unit: 20}
";

#[tokio::test]
async fn example_8_detailed_metric_names_the_value() {
    let clock = Arc::new(ManualClock::new(T0));
    let metrics = Arc::new(Metrics::default());
    let svc = observed(memory(&clock), EXAMPLE_8, &clock, Arc::clone(&metrics));
    let minute = peer_reset(T0, 60);
    for (value, limit) in [
        ("unspecified_value", 10),
        ("unspecified_value2", 10),
        ("value1", 20),
    ] {
        let r = one(&svc, "example8", &[("key1", value)]).await;
        assert_eq!(
            seen(&r.statuses[0]),
            (Code::Ok, limit, limit as u32 - 1, minute)
        );
    }
    for name in [
        "key1_unspecified_value",
        "key1_unspecified_value2",
        "key1_value1",
    ] {
        assert_eq!(
            metrics.rls_descriptor_count("example8", name, "ok"),
            1,
            "{name}"
        );
    }
}

const EXAMPLE_9: &str = "
domain: example9
descriptors:
  - key: key1
    value: value*
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: path
    value: /api/*/action
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: route
    value: /api/*/resource/*/action
    rate_limit: {unit: minute, requests_per_unit: 20}
";

#[tokio::test]
async fn example_9_wildcards_trailing_middle_and_several() {
    let (svc, _) = peer(EXAMPLE_9);
    let limited = [
        ("key1", "value1"),
        ("key1", "valueXYZ"),
        ("key1", "value"),
        ("path", "/api/123/action"),
        ("path", "/api/user-id/action"),
        ("route", "/api/v1/resource/123/action"),
        ("route", "/api/v2/resource/456/action"),
    ];
    for entry in limited {
        let r = one(&svc, "example9", &[entry]).await;
        // Each value matched keeps its own counter.
        assert_eq!(seen(&r.statuses[0]).2, 19, "{entry:?}");
    }
    for entry in [
        ("key1", "valu"),
        ("path", "/api/123/other"),
        ("route", "/api/v1/action"),
    ] {
        let r = one(&svc, "example9", &[entry]).await;
        assert_eq!(seen(&r.statuses[0]), (Code::Ok, -1, 0, -1), "{entry:?}");
    }
}

const EXAMPLE_10: &str = "
domain: example10
descriptors:
  - key: route
    value_to_metric: true
    descriptors:
      - key: http_method
        value_to_metric: true
        descriptors:
          - key: subject_id
            rate_limit: {unit: minute, requests_per_unit: 60}
";

#[tokio::test]
async fn example_10_value_to_metric_names_the_values_of_its_levels() {
    let clock = Arc::new(ManualClock::new(T0));
    let metrics = Arc::new(Metrics::default());
    let svc = observed(memory(&clock), EXAMPLE_10, &clock, Arc::clone(&metrics));
    let req = [
        ("route", "api"),
        ("http_method", "GET"),
        ("subject_id", "123"),
    ];
    let r = one(&svc, "example10", &req).await;
    assert_eq!(seen(&r.statuses[0]), (Code::Ok, 60, 59, peer_reset(T0, 60)));
    // The peer's stat: example10.route_api.http_method_GET.subject_id.
    let name = "route_api.http_method_GET.subject_id";
    assert_eq!(metrics.rls_descriptor_count("example10", name, "ok"), 1);
}

/// The configurations and stat names of envoyproxy/ratelimit's
/// `TestValueToMetric_*` (test/config/config_test.go): the descriptor's
/// name is the peer's stat key after `<domain>.`.
const VALUE_TO_METRIC: &str = "
domain: d
descriptors:
  - key: route
    value_to_metric: true
    descriptors:
      - key: http_method
        value_to_metric: true
        descriptors:
          - key: subject_id
            rate_limit: {unit: minute, requests_per_unit: 60}
      - key: method
        value_to_metric: true
        descriptors:
          - key: subject_id
            detailed_metric: true
            rate_limit: {unit: minute, requests_per_unit: 60}
  - key: k1
    descriptors:
      - key: k2
        value_to_metric: true
        descriptors:
          - key: k3
            rate_limit: {unit: second, requests_per_unit: 1}
      - key: k4
        rate_limit: {unit: second, requests_per_unit: 1}
  - key: api
    value_to_metric: true
    descriptors:
      - key: http_method
        value: GET
        value_to_metric: true
        descriptors:
          - key: subject_id
            rate_limit: {unit: minute, requests_per_unit: 60}
  - key: user
    value_to_metric: true
    descriptors:
      - key: action
        value: read*
        value_to_metric: true
        descriptors:
          - key: resource
            rate_limit: {unit: minute, requests_per_unit: 100}
      - key: plain
        value: read*
        descriptors:
          - key: resource
            rate_limit: {unit: minute, requests_per_unit: 100}
";

/// Each of the peer's requests once on `store`: admitted, and counted under
/// the peer's name.
async fn value_to_metric_case<S: Store>(store: S, clock: &Arc<ManualClock>) {
    let metrics = Arc::new(Metrics::default());
    let svc = observed(store, VALUE_TO_METRIC, clock, Arc::clone(&metrics));
    let cases: [(&[(&str, &str)], &str); 9] = [
        (
            &[
                ("route", "draw"),
                ("http_method", "GET"),
                ("subject_id", "123"),
            ],
            "route_draw.http_method_GET.subject_id",
        ),
        (
            &[("route", ""), ("http_method", "GET"), ("subject_id", "1")],
            "route.http_method_GET.subject_id",
        ),
        (
            &[("route", "draw"), ("http_method", ""), ("subject_id", "1")],
            "route_draw.http_method.subject_id",
        ),
        // detailed_metric at the leaf wins over value_to_metric.
        (
            &[("route", "draw"), ("method", "GET"), ("subject_id", "123")],
            "route_draw.method_GET.subject_id_123",
        ),
        (&[("k1", "X"), ("k2", "Y"), ("k3", "Z")], "k1.k2_Y.k3"),
        (&[("k1", "X"), ("k4", "Y")], "k1.k4"),
        (
            &[("api", "v1"), ("http_method", "GET"), ("subject_id", "1")],
            "api_v1.http_method_GET.subject_id",
        ),
        (
            &[("user", "alice"), ("action", "readfile"), ("resource", "r")],
            "user_alice.action_readfile.resource",
        ),
        // Without value_to_metric a wildcard keeps its pattern.
        (
            &[("user", "bob"), ("plain", "readdata"), ("resource", "r")],
            "user_bob.plain_read*.resource",
        ),
    ];
    for (entries, name) in cases {
        let r = ask(&svc, &request("d", vec![descriptor(entries)])).await;
        assert!(!over(&r), "{name}");
        assert_eq!(metrics.rls_descriptor_count("d", name, "ok"), 1, "{name}");
    }
}

#[tokio::test]
async fn value_to_metric_names_stats_as_the_peer_on_memory() {
    let clock = Arc::new(ManualClock::new(T0));
    value_to_metric_case(memory(&clock), &clock).await;
}

#[tokio::test]
async fn value_to_metric_names_stats_as_the_peer_on_redis() {
    let Some(server) = support::RedisServer::start(&[]) else {
        return;
    };
    let target = Target::Single(server.url());
    let store = support::connected(target, Duration::from_millis(500)).await;
    let clock = Arc::new(ManualClock::new(T0));
    value_to_metric_case(store, &clock).await;
}

/// The series of a metric family in `text`.
fn series(text: &str, family: &str) -> usize {
    text.lines().filter(|l| l.starts_with(family)).count()
}

#[tokio::test]
async fn a_flood_of_values_adds_at_most_the_capped_series() {
    let clock = Arc::new(ManualClock::new(T0));
    let metrics = Arc::new(Metrics::default());
    // Room for every value's counter: the flood is admitted.
    let config = MemoryConfig {
        shards: 4,
        max_keys: 20_000,
    };
    let store = Arc::new(MemoryStore::new(
        config,
        Arc::clone(&clock) as Arc<dyn Clock>,
    ));
    let svc = observed(store, VALUE_TO_METRIC, &clock, Arc::clone(&metrics));
    let family = "sluice_limiter_rls_descriptors_total{";
    let before = series(&metrics.render(), family);
    assert_eq!(before, 0);
    for i in 0..12_000 {
        let user = format!("u{i}");
        let entries = [
            ("user", user.as_str()),
            ("action", "readfile"),
            ("resource", "r"),
        ];
        assert!(!over(&one(&svc, "d", &entries).await));
    }
    let text = metrics.render();
    // 10,000 named series, then one `_other` for the rest.
    assert_eq!(series(&text, family), 10_001);
    let other = metrics.rls_descriptor_count("_other", "_other", "ok");
    assert_eq!(other, 2_000);
}

const EXAMPLE_11: &str = "
domain: example11
descriptors:
  - key: files
    value: files/*
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: files_no_share
    value: files_no_share/*
    share_threshold: false
    rate_limit: {unit: hour, requests_per_unit: 10}
";

#[tokio::test]
async fn example_11_share_threshold_shares_one_counter() {
    let (svc, _) = peer(EXAMPLE_11);
    let hour = peer_reset(T0, 3600);
    for file in ["files/a.pdf", "files/b.csv"] {
        for _ in 0..5 {
            assert!(!over(&one(&svc, "example11", &[("files", file)]).await));
        }
    }
    let r = one(&svc, "example11", &[("files", "files/c.txt")]).await;
    assert_eq!(seen(&r.statuses[0]), (Code::OverLimit, 10, 0, hour));
    for _ in 0..10 {
        assert!(!over(
            &one(
                &svc,
                "example11",
                &[("files_no_share", "files_no_share/a.pdf")]
            )
            .await
        ));
    }
    let r = one(
        &svc,
        "example11",
        &[("files_no_share", "files_no_share/b.csv")],
    )
    .await;
    assert_eq!(seen(&r.statuses[0]), (Code::Ok, 10, 9, hour));
}

const PER_USER: &str = "
domain: d
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 5}
";

#[tokio::test]
async fn the_reset_is_the_peers_whole_seconds_through_the_window() {
    let (svc, clock) = peer(PER_USER);
    // T0 is 30 s into its minute; the peer counts in whole seconds of the
    // clock, which rounding the true time up gives exactly.
    for (step, peer_says) in [
        (0, 30),
        (SECOND / 2, 30),
        (SECOND / 2, 29),
        (28 * SECOND + 1, 1),
    ] {
        clock.advance(step);
        let now = clock.now();
        assert_eq!(peer_reset(now, 60), peer_says);
        let r = one(&svc, "d", &[("user", "u")]).await;
        assert_eq!(seen(&r.statuses[0]).3, peer_says, "at {now}");
    }
}

#[tokio::test]
async fn over_the_limit_reports_nothing_left() {
    let (svc, _) = peer(PER_USER);
    let mut req = request("d", vec![descriptor(&[("user", "u")])]);
    req.hits_addend = 3;
    assert_eq!(
        seen(&ask(&svc, &req).await.statuses[0]),
        (Code::Ok, 5, 2, 30)
    );
    // 3 more do not fit in the 2 left: over, and 0 reported.
    let r = ask(&svc, &req).await;
    assert_eq!(seen(&r.statuses[0]), (Code::OverLimit, 5, 0, 30));
}

#[tokio::test]
async fn descriptors_sharing_a_counter_see_it_one_after_the_other() {
    let (svc, _) = peer(PER_USER);
    let user = descriptor(&[("user", "u")]);
    let mut two = request("d", vec![user.clone(), user.clone()]);
    let r = ask(&svc, &two).await;
    let left: Vec<_> = r.statuses.iter().map(|s| seen(s).2).collect();
    assert_eq!(
        left,
        [4, 3],
        "as the peer adds them, one descriptor at a time"
    );
    // Per-descriptor weights: 1 then 2 of the 3 left.
    two.descriptors[1].hits_addend = Some(UInt64Value { value: 2 });
    let r = ask(&svc, &two).await;
    let left: Vec<_> = r.statuses.iter().map(|s| seen(s).2).collect();
    assert_eq!(left, [2, 0]);
    // 0 left: the first does not fit either; nothing consumed.
    let r = ask(&svc, &two).await;
    assert!(over(&r));
    assert!(r
        .statuses
        .iter()
        .all(|s| seen(s) == (Code::OverLimit, 5, 0, 30)));
}

#[tokio::test]
async fn a_denied_shared_counter_passes_the_descriptors_that_fit() {
    let (svc, _) = peer(PER_USER);
    let mut spend = request("d", vec![descriptor(&[("user", "u")])]);
    spend.hits_addend = 4;
    ask(&svc, &spend).await;
    let user = descriptor(&[("user", "u")]);
    let r = ask(&svc, &request("d", vec![user.clone(), user])).await;
    assert!(over(&r));
    // The first fits in the 1 left (the peer: OK, 0); nothing is consumed.
    assert_eq!(seen(&r.statuses[0]), (Code::Ok, 5, 1, 30));
    assert_eq!(seen(&r.statuses[1]), (Code::OverLimit, 5, 0, 30));
}

const EMPTY_VALUES: &str = "
domain: d
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: plan
    value: ''
    rate_limit: {unit: minute, requests_per_unit: 3}
";

#[tokio::test]
async fn an_empty_value_is_a_value_of_its_key() {
    let (svc, _) = peer(EMPTY_VALUES);
    let r = one(&svc, "d", &[("tenant", "")]).await;
    assert_eq!(seen(&r.statuses[0]), (Code::Ok, 2, 1, 30));
    let r = one(&svc, "d", &[("tenant", "a")]).await;
    assert_eq!(
        seen(&r.statuses[0]),
        (Code::Ok, 2, 1, 30),
        "its own counter"
    );
    // The peer reads `value: ''` as no value: any plan matches.
    let r = one(&svc, "d", &[("plan", "gold")]).await;
    assert_eq!(seen(&r.statuses[0]), (Code::Ok, 3, 2, 30));
}

/// envoyproxy/ratelimit's `TestServiceGlobalShadowMode`: a call over the
/// limit is answered `OK` with each descriptor's status unchanged, and
/// counted once.
const GLOBAL_SHADOW: &str = "
domain: different-domain
descriptors:
  - key: foo
    value: bar
    rate_limit: {unit: minute, requests_per_unit: 10}
";

/// The peer's global shadow mode case on `store`: ten calls pass, the
/// eleventh is over the limit on `foo` and answered `OK`.
async fn global_shadow_mode_case<S: Store>(store: S, clock: &Arc<ManualClock>) {
    let metrics = Arc::new(Metrics::default());
    let svc = observed(store, GLOBAL_SHADOW, clock, Arc::clone(&metrics)).with_mode(Mode::Shadow);
    let req = request(
        "different-domain",
        vec![
            descriptor(&[("foo", "bar")]),
            descriptor(&[("hello", "world")]),
        ],
    );
    for _ in 0..10 {
        assert!(!over(&ask(&svc, &req).await));
    }
    assert_eq!(metrics.rls_global_shadow_count("different-domain"), 0);
    let r = ask(&svc, &req).await;
    assert_eq!(r.overall_code, Code::Ok as i32);
    let (code, limit, left, _) = seen(&r.statuses[0]);
    assert_eq!((code, limit, left), (Code::OverLimit, 10, 0));
    assert_eq!(seen(&r.statuses[1]), (Code::Ok, -1, 0, -1));
    assert_eq!(metrics.rls_global_shadow_count("different-domain"), 1);
    assert_eq!(
        metrics.rls_descriptor_count("different-domain", "foo_bar", "over_limit"),
        1
    );
}

#[tokio::test]
async fn global_shadow_mode_answers_ok_and_counts_on_memory() {
    let clock = Arc::new(ManualClock::new(T0));
    global_shadow_mode_case(memory(&clock), &clock).await;
}

#[tokio::test]
async fn global_shadow_mode_answers_ok_and_counts_on_redis() {
    let Some(server) = support::RedisServer::start(&[]) else {
        return;
    };
    let target = Target::Single(server.url());
    let store = support::connected(target, Duration::from_millis(500)).await;
    // Redis reads its own clock: start clear of a minute's last seconds so
    // the eleven calls share one window.
    let second_of_minute = || {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
        now.map_or(0, |d| d.as_secs() % 60)
    };
    while second_of_minute() >= 58 {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let clock = Arc::new(ManualClock::new(T0));
    global_shadow_mode_case(store, &clock).await;
}

#[tokio::test]
async fn without_shadow_mode_the_same_call_is_over_the_limit() {
    let clock = Arc::new(ManualClock::new(T0));
    let metrics = Arc::new(Metrics::default());
    let svc = observed(memory(&clock), GLOBAL_SHADOW, &clock, Arc::clone(&metrics));
    let req = request("different-domain", vec![descriptor(&[("foo", "bar")])]);
    for _ in 0..10 {
        assert!(!over(&ask(&svc, &req).await));
    }
    assert!(over(&ask(&svc, &req).await));
    assert_eq!(metrics.rls_global_shadow_count("different-domain"), 0);
}

/// envoyproxy/ratelimit's `TestDetailedMetric` table: `detailed_metric` on
/// the descriptor reached names every level's value, else the path.
#[tokio::test]
async fn detailed_metric_names_stats_as_the_peer() {
    let config = |top: bool, leaf: bool| {
        format!(
            "
domain: nested
descriptors:
  - key: key-1
    detailed_metric: {top}
    rate_limit: {{unit: minute, requests_per_unit: 100}}
    descriptors:
      - key: key-2
        detailed_metric: {leaf}
        rate_limit: {{unit: minute, requests_per_unit: 5}}
"
        )
    };
    let one_level: &[(&str, &str)] = &[("key-1", "value-1")];
    let two_levels: &[(&str, &str)] = &[("key-1", "value-1"), ("key-2", "value-2")];
    for (top, leaf, entries, name) in [
        (true, false, one_level, "key-1_value-1"),
        (false, false, one_level, "key-1"),
        (true, true, two_levels, "key-1_value-1.key-2_value-2"),
        (false, false, two_levels, "key-1.key-2"),
    ] {
        let clock = Arc::new(ManualClock::new(T0));
        let metrics = Arc::new(Metrics::default());
        let svc = observed(
            memory(&clock),
            &config(top, leaf),
            &clock,
            Arc::clone(&metrics),
        );
        let r = ask(&svc, &request("nested", vec![descriptor(entries)])).await;
        assert!(!over(&r), "{name}");
        assert_eq!(
            metrics.rls_descriptor_count("nested", name, "ok"),
            1,
            "{name}"
        );
    }
}

/// envoyproxy/ratelimit's `TestWildcardConfig` and `TestShareThreshold`
/// stat names: a wildcard is named by its pattern, a key alone by the key.
#[tokio::test]
async fn wildcards_name_stats_by_their_pattern_as_the_peer() {
    const WILDCARDS: &str = "
domain: test-domain
descriptors:
  - key: noVal
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: wild
    value: foo*
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: nestedWild
    value: val1
    descriptors:
      - key: wild
        value: goo*
        rate_limit: {unit: minute, requests_per_unit: 20}
  - key: midWild
    value: bar*b
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: multiWild
    value: foo*bar*baz
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: files
    value: files/*
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 100}
";
    let clock = Arc::new(ManualClock::new(T0));
    let metrics = Arc::new(Metrics::default());
    let svc = observed(memory(&clock), WILDCARDS, &clock, Arc::clone(&metrics));
    let cases: [(&[(&str, &str)], &str); 9] = [
        (&[("noVal", "foo1")], "noVal"),
        (&[("noVal", "foo2")], "noVal"),
        (&[("wild", "foo1")], "wild_foo*"),
        (&[("wild", "foo2")], "wild_foo*"),
        (
            &[("nestedWild", "val1"), ("wild", "goo1")],
            "nestedWild_val1.wild_goo*",
        ),
        (&[("midWild", "barab")], "midWild_bar*b"),
        (&[("multiWild", "foo1bar2baz")], "multiWild_foo*bar*baz"),
        (&[("files", "files/a.pdf")], "files_files/*"),
        (&[("files", "files/b.csv")], "files_files/*"),
    ];
    for (entries, _) in cases {
        assert!(!over(
            &ask(&svc, &request("test-domain", vec![descriptor(entries)])).await
        ));
    }
    for (name, n) in [
        ("noVal", 2),
        ("wild_foo*", 2),
        ("nestedWild_val1.wild_goo*", 1),
        ("midWild_bar*b", 1),
        ("multiWild_foo*bar*baz", 1),
        ("files_files/*", 2),
    ] {
        assert_eq!(
            metrics.rls_descriptor_count("test-domain", name, "ok"),
            n,
            "{name}"
        );
    }
}
