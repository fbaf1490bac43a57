//! The rate limit quota service: reports charged, shares assigned, buckets
//! abandoned, and a stream over a socket as Envoy opens it.
#![cfg(test)]

mod support;

use envoy_types::pb::envoy::r#type::v3::rate_limit_strategy::{BlanketRule, Strategy};
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::bucket_action::BucketAction as Action;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::BucketAction;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_client::RateLimitQuotaServiceClient;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_usage_reports::BucketQuotaUsage;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::{
    BucketId, RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use sluice_core::SECOND;
use sluice_limiter::clock::{Clock, ManualClock};
use sluice_limiter::metrics::Metrics;
use sluice_limiter::rlqs::service::{RlqsService, Settings, StreamState};
use sluice_limiter::rls::config::{Descriptors, SameDomain};
use sluice_limiter::rls::reload::{ConfigCell, Origin};
use sluice_limiter::store::memory::{MemoryConfig, MemoryStore};
use std::sync::Arc;
use tonic::service::Routes;
use std::time::Duration;

const CONFIG: &str = "\
domain: quota
descriptors:
  - key: name
    value: api
    descriptors:
      - key: tenant
        rate_limit: {unit: minute, requests_per_unit: 10}
  - key: name
    value: open
    rate_limit: {unlimited: true}
";

/// Ten seconds into a minute: the window has 50 s left.
const T0: u64 = 1_700_000_010 * SECOND;

fn service(clock: &Arc<ManualClock>, metrics: &Arc<Metrics>) -> RlqsService<Arc<MemoryStore>> {
    let cell = ConfigCell::fixed(Descriptors::parse(CONFIG).unwrap());
    service_of(clock, metrics, Arc::new(cell))
}

fn service_of(
    clock: &Arc<ManualClock>,
    metrics: &Arc<Metrics>,
    cell: Arc<ConfigCell>,
) -> RlqsService<Arc<MemoryStore>> {
    let dyn_clock: Arc<dyn Clock> = Arc::clone(clock) as Arc<dyn Clock>;
    let store = Arc::new(MemoryStore::new(
        MemoryConfig {
            shards: 4,
            max_keys: 10_000,
        },
        Arc::clone(&dyn_clock),
    ));
    let settings = Settings {
        ttl: Duration::from_secs(5),
        abandon_after: Duration::from_secs(30),
    };
    RlqsService::new(store, cell, Arc::clone(metrics), dyn_clock, settings)
}

fn bucket(name: &str, tenant: &str) -> BucketId {
    BucketId {
        bucket: [("name", name), ("tenant", tenant)]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    }
}

fn reports(domain: &str, usages: &[(&BucketId, u64, u64)]) -> RateLimitQuotaUsageReports {
    RateLimitQuotaUsageReports {
        domain: domain.into(),
        bucket_quota_usages: usages
            .iter()
            .map(|(id, allowed, denied)| BucketQuotaUsage {
                bucket_id: Some((*id).clone()),
                time_elapsed: None,
                num_requests_allowed: *allowed,
                num_requests_denied: *denied,
            })
            .collect(),
    }
}

/// The one bucket's assignment in a response, as `(kind, max_tokens)`,
/// with its TTL. A token bucket comes after a `DENY_ALL` for the same
/// bucket, so that Envoy starts it full.
fn action(r: &RateLimitQuotaResponse) -> (&'static str, u32) {
    let last = match r.bucket_action.len() {
        1 => &r.bucket_action[0],
        2 => {
            assert_eq!(r.bucket_action[0].bucket_id, r.bucket_action[1].bucket_id);
            let first = RateLimitQuotaResponse {
                bucket_action: vec![r.bucket_action[0].clone()],
            };
            assert_eq!(action(&first), ("deny_all", 0), "{r:?}");
            &r.bucket_action[1]
        }
        _ => panic!("{r:?}"),
    };
    let kind = action_kind(last);
    assert!(
        r.bucket_action.len() == 2 || kind.0 != "token_bucket",
        "{r:?}"
    );
    kind
}

fn action_kind(a: &BucketAction) -> (&'static str, u32) {
    match a.bucket_action.as_ref().unwrap() {
        Action::AbandonAction(_) => ("abandon", 0),
        Action::QuotaAssignmentAction(a) => {
            assert_eq!(a.assignment_time_to_live.unwrap().seconds, 5);
            match a.rate_limit_strategy.unwrap().strategy.unwrap() {
                Strategy::BlanketRule(b) if b == BlanketRule::AllowAll as i32 => ("allow_all", 0),
                Strategy::BlanketRule(_) => ("deny_all", 0),
                Strategy::TokenBucket(tb) => {
                    assert_eq!(tb.tokens_per_fill.unwrap().value, tb.max_tokens);
                    ("token_bucket", tb.max_tokens)
                }
                Strategy::RequestsPerTimeUnit(_) => panic!("not sent"),
            }
        }
    }
}

#[tokio::test]
async fn envoys_share_what_remains_until_a_blanket_deny() {
    let clock = Arc::new(ManualClock::new(T0));
    let metrics = Arc::new(Metrics::default());
    let svc = service(&clock, &metrics);
    let (mut a, mut b) = (StreamState::default(), StreamState::default());
    let id = bucket("api", "t1");
    // Envoy A's first report: its first request, admitted before any
    // assignment. Envoys not counted yet may come: half of the 9 left.
    let r = svc
        .answer(&mut a, &reports("quota", &[(&id, 1, 0)]))
        .await
        .unwrap();
    assert_eq!(action(&r), ("token_bucket", 4));
    // Envoy B's first report, the second Envoy counted: a quarter of 9.
    let r = svc
        .answer(&mut b, &reports("quota", &[(&id, 0, 0)]))
        .await
        .unwrap();
    assert_eq!(action(&r), ("token_bucket", 2));
    // A's next report: 5 left, a third (B may still spend its share).
    let r = svc
        .answer(&mut a, &reports("", &[(&id, 4, 0)]))
        .await
        .unwrap();
    assert_eq!(action(&r), ("token_bucket", 1));
    // B spent its share and more: only what the limit still held is charged.
    let r = svc
        .answer(&mut b, &reports("", &[(&id, 7, 0)]))
        .await
        .unwrap();
    assert_eq!(action(&r), ("deny_all", 0));
    let r = svc
        .answer(&mut a, &reports("", &[(&id, 0, 3)]))
        .await
        .unwrap();
    assert_eq!(action(&r), ("deny_all", 0));
    // The next window: the whole limit again; B has not reported in it,
    // and A, counted once, cannot tell yet: half of the 9 left.
    clock.advance(50 * SECOND);
    let r = svc
        .answer(&mut a, &reports("", &[(&id, 1, 0)]))
        .await
        .unwrap();
    assert_eq!(action(&r), ("token_bucket", 4));
    // Its next report in the window has the count settled: all that remains.
    let r = svc
        .answer(&mut a, &reports("", &[(&id, 4, 0)]))
        .await
        .unwrap();
    assert_eq!(action(&r), ("token_bucket", 5));
    assert_eq!(metrics.rlqs_assignments("deny_all"), 2);
    assert_eq!(metrics.rlqs_assignments("token_bucket"), 5);
}

#[tokio::test]
async fn unknown_and_unlimited_buckets_are_allowed_and_idle_ones_abandoned() {
    let clock = Arc::new(ManualClock::new(T0));
    let metrics = Arc::new(Metrics::default());
    let svc = service(&clock, &metrics);
    let mut s = StreamState::default();
    let open = bucket("open", "x");
    let unknown = bucket("nope", "x");
    for id in [&open, &unknown] {
        let r = svc
            .answer(&mut s, &reports("quota", &[(id, 3, 0)]))
            .await
            .unwrap();
        assert_eq!(action(&r), ("allow_all", 0));
    }
    // Another domain knows no bucket.
    let mut other = StreamState::default();
    let api = bucket("api", "t1");
    let r = svc
        .answer(&mut other, &reports("elsewhere", &[(&api, 1, 0)]))
        .await
        .unwrap();
    assert_eq!(action(&r), ("allow_all", 0));
    assert_eq!(s.buckets(), 2);
    // 30 s without a request: abandoned and forgotten.
    clock.advance(29 * SECOND);
    let r = svc
        .answer(&mut s, &reports("", &[(&open, 0, 0)]))
        .await
        .unwrap();
    assert_eq!(action(&r), ("allow_all", 0));
    clock.advance(SECOND);
    let r = svc
        .answer(&mut s, &reports("", &[(&open, 0, 0)]))
        .await
        .unwrap();
    assert_eq!(action(&r), ("abandon", 0));
    assert_eq!(s.buckets(), 1);
    assert_eq!(metrics.rlqs_assignments("abandon"), 1);
}

#[tokio::test]
async fn no_bucket_is_assigned_before_the_first_configuration_comes() {
    let clock = Arc::new(ManualClock::new(T0));
    let metrics = Arc::new(Metrics::default());
    let cell = Arc::new(ConfigCell::awaiting(SameDomain::Refuse));
    let svc = service_of(&clock, &metrics, Arc::clone(&cell));
    let mut s = StreamState::default();
    let api = bucket("api", "t1");
    let open = bucket("open", "x");
    // Envoy keeps each bucket's `no_assignment_behavior`: nothing is sent,
    // nothing charged.
    for _ in 0..2 {
        let r = svc
            .answer(&mut s, &reports("quota", &[(&api, 4, 1), (&open, 2, 0)]))
            .await
            .unwrap();
        assert_eq!(r, RateLimitQuotaResponse::default());
    }
    for kind in ["allow_all", "deny_all", "token_bucket", "abandon"] {
        assert_eq!(metrics.rlqs_assignments(kind), 0, "{kind}");
    }
    // The configuration comes: the same stream's next report is assigned,
    // from a limit nothing was charged to (10 a minute: half of it).
    let from = Origin::Xds {
        server: "xds",
        version: "1",
    };
    let config = Descriptors::parse(CONFIG).unwrap();
    cell.install(config, &[0; 32], from, &metrics);
    let r = svc
        .answer(&mut s, &reports("", &[(&api, 0, 0)]))
        .await
        .unwrap();
    assert_eq!(action(&r), ("token_bucket", 5));
    let r = svc
        .answer(&mut s, &reports("", &[(&open, 1, 0)]))
        .await
        .unwrap();
    assert_eq!(action(&r), ("allow_all", 0));
}

#[tokio::test]
async fn a_stream_without_a_domain_is_refused() {
    let clock = Arc::new(ManualClock::new(T0));
    let svc = service(&clock, &Arc::new(Metrics::default()));
    let err = svc
        .answer(&mut StreamState::default(), &reports("", &[]))
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
}

/// Serves `svc` on a loopback port and opens a stream to it with `first`:
/// the sender of the next reports, and the answers.
async fn open_stream(
    svc: RlqsService<Arc<MemoryStore>>,
    first: RateLimitQuotaUsageReports,
) -> (
    tokio::sync::mpsc::Sender<RateLimitQuotaUsageReports>,
    tonic::Streaming<RateLimitQuotaResponse>,
) {
    let addr = support::serve_grpc(Routes::new(svc.into_server())).await;
    let mut client = RateLimitQuotaServiceClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    let (tx, rx) = tokio::sync::mpsc::channel::<RateLimitQuotaUsageReports>(4);
    let outbound =
        futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|r| (r, rx)) });
    tx.send(first).await.unwrap();
    let inbound = client
        .stream_rate_limit_quotas(outbound)
        .await
        .unwrap()
        .into_inner();
    (tx, inbound)
}

/// Over a socket with tonic's client, one long-lived stream as Envoy keeps it.
#[tokio::test]
async fn a_stream_is_answered_report_by_report() {
    let clock = Arc::new(ManualClock::new(T0));
    let metrics = Arc::new(Metrics::default());
    let svc = service(&clock, &metrics);
    let id = bucket("api", "socket");
    let (tx, mut inbound) = open_stream(svc, reports("quota", &[(&id, 2, 0)])).await;
    let first = inbound.message().await.unwrap().unwrap();
    assert_eq!(action(&first), ("token_bucket", 4));
    tx.send(reports("", &[(&id, 8, 1)])).await.unwrap();
    let second = inbound.message().await.unwrap().unwrap();
    assert_eq!(action(&second), ("deny_all", 0));
    assert!(metrics.render().contains("sluice_limiter_rlqs_streams 1"));
    assert!(metrics
        .render()
        .contains("sluice_limiter_rlqs_reports_total 2"));
    // Envoy ends the stream: the server ends its side, and counts it closed.
    drop(tx);
    assert!(inbound.message().await.unwrap().is_none());
    for _ in 0..100 {
        if metrics.render().contains("sluice_limiter_rlqs_streams 0") {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the stream stayed open: {}", metrics.render());
}

/// A limiter shutting down ends its streams instead of waiting for Envoy.
#[tokio::test]
async fn streams_end_when_the_service_stops() {
    let clock = Arc::new(ManualClock::new(T0));
    let metrics = Arc::new(Metrics::default());
    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    let svc = service(&clock, &metrics).until(stop);
    let id = bucket("api", "stopping");
    let (tx, mut inbound) = open_stream(svc, reports("quota", &[(&id, 1, 0)])).await;
    assert_eq!(
        action(&inbound.message().await.unwrap().unwrap()),
        ("token_bucket", 4)
    );
    stop_tx.send(true).unwrap();
    assert!(inbound.message().await.unwrap().is_none());
    drop(tx);
}

/// The listener stops with its streams: on the signal the service ends
/// them, and the server, its connections closed, is done.
#[tokio::test]
async fn the_listener_stops_once_its_streams_end() {
    let clock = Arc::new(ManualClock::new(T0));
    let metrics = Arc::new(Metrics::default());
    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    let svc = service(&clock, &metrics).until(stop.clone());
    let (addr, server) = support::serve_grpc_until(Routes::new(svc.into_server()), stop).await;
    let mut client = RateLimitQuotaServiceClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    let first = reports("quota", &[(&bucket("api", "listener"), 1, 0)]);
    use futures_util::StreamExt;
    let outbound = futures_util::stream::iter([first]).chain(futures_util::stream::pending());
    let mut inbound = client
        .stream_rate_limit_quotas(outbound)
        .await
        .unwrap()
        .into_inner();
    assert!(inbound.message().await.unwrap().is_some());
    stop_tx.send(true).unwrap();
    assert!(inbound.message().await.unwrap().is_none());
    tokio::time::timeout(Duration::from_secs(5), server)
        .await
        .unwrap()
        .unwrap();
}

/// A first report with nothing admitted (Envoy denying until its first
/// assignment) finds nothing charged yet: the share refills over the whole
/// window, not every second.
#[tokio::test]
async fn a_share_of_an_uncharged_limit_refills_over_its_window() {
    let clock = Arc::new(ManualClock::new(T0));
    let svc = service(&clock, &Arc::new(Metrics::default()));
    let id = bucket("api", "denied-first");
    let r = svc
        .answer(
            &mut StreamState::default(),
            &reports("quota", &[(&id, 0, 1)]),
        )
        .await
        .unwrap();
    assert_eq!(action(&r), ("token_bucket", 5));
    let Some(Action::QuotaAssignmentAction(a)) = &r.bucket_action[1].bucket_action else {
        panic!("{r:?}")
    };
    let Some(Strategy::TokenBucket(tb)) = &a.rate_limit_strategy.unwrap().strategy else {
        panic!("{r:?}")
    };
    assert_eq!(tb.fill_interval.unwrap().seconds, 60);
}

/// The refusals Envoy reports for a bucket (`num_requests_denied`) count
/// among the domain's top limited keys: the flooding bucket first, with
/// exactly what was reported; a bucket with no refusals is not listed.
#[tokio::test]
async fn the_refusals_envoy_reports_feed_the_top_limited_keys() {
    use sluice_limiter::top::{KeyDisplay, TopKeys};
    let clock = Arc::new(ManualClock::new(T0));
    let metrics = Arc::new(Metrics::default());
    let top = Arc::new(TopKeys::new(60 * SECOND, 16, KeyDisplay::Clear));
    let svc = service(&clock, &metrics).with_top(Arc::clone(&top));
    let (flood, steady, calm) = (
        bucket("api", "flood"),
        bucket("api", "steady"),
        bucket("api", "calm"),
    );
    let mut s = StreamState::default();
    let usages = [(&flood, 10, 0), (&steady, 3, 0), (&calm, 1, 0)];
    svc.answer(&mut s, &reports("quota", &usages))
        .await
        .unwrap();
    for _ in 0..3 {
        let usages = [(&flood, 2, 400), (&steady, 3, 5), (&calm, 1, 0)];
        svc.answer(&mut s, &reports("quota", &usages))
            .await
            .unwrap();
    }
    let listed: Vec<(String, String, u64, u64)> = top
        .top("quota", 10, clock.now())
        .into_iter()
        .map(|c| (c.subject.key, c.subject.limit, c.refusals, c.error))
        .collect();
    assert_eq!(
        listed,
        [
            ("name=api/tenant=flood".into(), "rlqs".into(), 1200, 0),
            ("name=api/tenant=steady".into(), "rlqs".into(), 15, 0),
        ]
    );
}
