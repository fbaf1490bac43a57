//! `StreamRateLimitQuotas`: one task per Envoy stream. Each reports message
//! is answered with one action per bucket it carries: the bucket's usage is
//! charged into its limit, the Envoys reporting it are counted, and
//! [`assign`](super::assign::assign) picks the assignment, sent with
//! `assignment_time_to_live`. A bucket with no request for
//! `abandon_after` is abandoned (Envoy forgets it, and subscribes again
//! with its next request). A stream's buckets are forgotten when it ends;
//! an Envoy reconnecting starts over, reporting every bucket it holds.

use super::assign::{assign, Assignment, Report, Standing};
use super::config::{quota_for, Quota};
use super::presence::Presence;
use crate::clock::Clock;
use crate::metrics::Metrics;
use crate::rls::reload::ConfigCell;
use crate::store::{Store, StoreItem};
use crate::top::TopKeys;
use envoy_types::pb::envoy::r#type::v3::rate_limit_strategy::{BlanketRule, Strategy};
use envoy_types::pb::envoy::r#type::v3::{RateLimitStrategy, TokenBucket as PbTokenBucket};
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::bucket_action::{
    AbandonAction, BucketAction as Action, QuotaAssignmentAction,
};
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::BucketAction;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_server::{
    RateLimitQuotaService, RateLimitQuotaServiceServer,
};
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_usage_reports::BucketQuotaUsage;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::{
    BucketId, RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use envoy_types::pb::google::protobuf::{Duration as PbDuration, UInt32Value};
use futures_util::Stream;
use sluice_core::Nanos;
use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tonic::{Request, Response, Status, Streaming};

/// Most buckets one stream may hold; reports of further ones are answered
/// with an abandon.
pub const MAX_BUCKETS: usize = 10_000;

/// How assignments are sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// `assignment_time_to_live` of every assignment; also the presence
    /// window over which Envoys are counted.
    pub ttl: Duration,
    /// A bucket with no request (allowed or denied) reported for this long
    /// is abandoned.
    pub abandon_after: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            ttl: Duration::from_secs(10),
            abandon_after: Duration::from_secs(300),
        }
    }
}

struct Inner<S> {
    store: S,
    config: Arc<ConfigCell>,
    metrics: Arc<Metrics>,
    clock: Arc<dyn Clock>,
    settings: Settings,
    /// The top limited keys, fed by the refusals Envoy reports.
    top: Option<Arc<TopKeys>>,
}

/// The RLQS service over a store.
pub struct RlqsService<S> {
    inner: Arc<Inner<S>>,
    /// Ends every stream once true (the limiter shutting down).
    stop: Option<watch::Receiver<bool>>,
}

/// One bucket as a stream holds it.
struct Held {
    presence: Presence,
    /// When a request was last reported (or the bucket first seen).
    last_active: Nanos,
    /// Which report of the bucket the next one is.
    report: Report,
}

/// What one stream holds: its domain and its buckets, by sorted entries.
#[derive(Default)]
pub struct StreamState {
    domain: Option<String>,
    buckets: HashMap<Vec<(String, String)>, Held>,
}

impl StreamState {
    /// Buckets held now.
    pub fn buckets(&self) -> usize {
        self.buckets.len()
    }
}

fn bucket_key(id: &BucketId) -> Vec<(String, String)> {
    let mut key: Vec<(String, String)> = id
        .bucket
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    key.sort_unstable();
    key
}

impl<S: Store> RlqsService<S> {
    /// A service deciding in `store` from the configuration in `config`.
    pub fn new(
        store: S,
        config: Arc<ConfigCell>,
        metrics: Arc<Metrics>,
        clock: Arc<dyn Clock>,
        settings: Settings,
    ) -> Self {
        RlqsService {
            inner: Arc::new(Inner {
                store,
                config,
                metrics,
                clock,
                settings,
                top: None,
            }),
            stop: None,
        }
    }

    /// The same service counting the refusals Envoy reports for each
    /// bucket (`num_requests_denied`) among `top`'s limited keys: the
    /// bucket's entries as `key=value/...` (sorted), under the limit
    /// `rlqs`. Called before the service is shared.
    pub fn with_top(mut self, top: Arc<TopKeys>) -> Self {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.top = Some(top);
        }
        self
    }

    /// Ends every stream (Envoy reconnects, to another limiter if there is
    /// one) once `stop` turns true: a stream lasts as long as Envoy runs, so
    /// a shutdown would otherwise wait out its bound.
    pub fn until(mut self, stop: watch::Receiver<bool>) -> Self {
        self.stop = Some(stop);
        self
    }

    /// The tonic service to mount.
    pub fn into_server(self) -> RateLimitQuotaServiceServer<Self> {
        RateLimitQuotaServiceServer::new(self)
    }

    /// Answers one reports message of a stream whose state is `stream`:
    /// one action per bucket reported, none before the first configuration
    /// comes. A stream whose first message names no domain is an invalid
    /// argument.
    pub async fn answer(
        &self,
        stream: &mut StreamState,
        reports: &RateLimitQuotaUsageReports,
    ) -> Result<RateLimitQuotaResponse, Status> {
        if stream.domain.is_none() {
            if reports.domain.is_empty() {
                return Err(Status::invalid_argument(
                    "the first usage reports of a stream need a domain",
                ));
            }
            stream.domain = Some(reports.domain.clone());
        }
        let inner = &self.inner;
        inner
            .metrics
            .rlqs_reports_received(reports.bucket_quota_usages.len());
        if !inner.config.loaded() {
            // No configuration yet (an xDS source not yet heard): no bucket
            // is assigned, so Envoy applies each bucket's
            // `no_assignment_behavior`, as RLS answers UNAVAILABLE.
            return Ok(RateLimitQuotaResponse::default());
        }
        let mut actions = Vec::with_capacity(reports.bucket_quota_usages.len());
        for usage in &reports.bucket_quota_usages {
            let Some(id) = &usage.bucket_id else { continue };
            if id.bucket.is_empty() {
                continue;
            }
            let Some(action) = self.bucket_action(stream, id, usage).await else {
                continue;
            };
            if is_token_bucket(&action) {
                actions.push(BucketAction {
                    bucket_id: Some(id.clone()),
                    bucket_action: Some(Action::QuotaAssignmentAction(assignment_action(
                        &Assignment::DenyAll,
                        self.inner.settings.ttl,
                    ))),
                });
            }
            actions.push(BucketAction {
                bucket_id: Some(id.clone()),
                bucket_action: Some(action),
            });
        }
        Ok(RateLimitQuotaResponse {
            bucket_action: actions,
        })
    }

    /// The action for one bucket's usage; `None` when the store failed
    /// (the bucket keeps its assignment until it expires).
    async fn bucket_action(
        &self,
        stream: &mut StreamState,
        id: &BucketId,
        usage: &BucketQuotaUsage,
    ) -> Option<Action> {
        let inner = &self.inner;
        let now = inner.clock.now();
        let key = bucket_key(id);
        let settings = inner.settings;
        let window = u64::try_from(settings.ttl.as_nanos()).unwrap_or(u64::MAX);
        let active = usage.num_requests_allowed > 0 || usage.num_requests_denied > 0;
        let full = stream.buckets.len() >= MAX_BUCKETS && !stream.buckets.contains_key(&key);
        let held = stream.buckets.entry(key.clone()).or_insert_with(|| Held {
            presence: Presence::new(window),
            last_active: now,
            report: Report::First,
        });
        if active {
            held.last_active = now;
        }
        let idle = now.saturating_sub(held.last_active);
        let abandon_ns = u64::try_from(settings.abandon_after.as_nanos()).unwrap_or(u64::MAX);
        if full || idle >= abandon_ns {
            stream.buckets.remove(&key);
            inner.metrics.rlqs_assignment_sent("abandon");
            return Some(Action::AbandonAction(AbandonAction {}));
        }
        let domain = stream.domain.as_deref().unwrap_or_default();
        if let Some(top) = &inner.top {
            let shown: Vec<String> = key.iter().map(|(k, v)| format!("{k}={v}")).collect();
            top.refused(
                domain,
                &shown.join("/"),
                "rlqs",
                usage.num_requests_denied,
                now,
            );
        }
        let quota = quota_for(&inner.config.current(), domain, &id.bucket);
        let assignment = match quota {
            Quota::Unconfigured | Quota::Unlimited => Assignment::AllowAll,
            Quota::Blocked => Assignment::DenyAll,
            Quota::Limited { id, limit, shadow } => {
                let item = StoreItem::new(id, limit, 1);
                let standing = self
                    .charge(&item, usage.num_requests_allowed, held, now)
                    .await?;
                held.report = Report::Later;
                if shadow {
                    Assignment::AllowAll
                } else {
                    assign(&standing)
                }
            }
        };
        inner.metrics.rlqs_assignment_sent(assignment.kind());
        Some(Action::QuotaAssignmentAction(assignment_action(
            &assignment,
            settings.ttl,
        )))
    }

    /// Charges `allowed` requests into `item`'s limit (as many as it still
    /// admits: what Envoy let through beyond it is not owed later), counts
    /// this stream in the bucket's presence, and reads the standing.
    async fn charge(
        &self,
        item: &StoreItem,
        allowed: u64,
        held: &mut Held,
        now: Nanos,
    ) -> Option<Standing> {
        let inner = &self.inner;
        let presence = &mut held.presence;
        let mut usage = item.clone();
        if let (0, StoreItem::Rate(r)) = (allowed, &mut usage) {
            r.hits = 0;
        }
        let requests = u32::try_from(allowed).unwrap_or(u32::MAX);
        let charged = inner
            .store
            .check_batch(std::slice::from_ref(&usage), requests);
        let seen = presence.item(item.id(), now);
        let counted = async {
            match &seen {
                Some(p) => Some(inner.store.check(std::slice::from_ref(p)).await),
                None => None,
            }
        };
        let (charged, counted) = futures_util::future::join(charged, counted).await;
        let verdict = match charged {
            Ok(v) => v,
            Err(e) => {
                inner.metrics.record_store_error(e.reason());
                crate::warn_throttled!(error = %e, "rlqs usage could not be charged");
                return None;
            }
        };
        match counted {
            Some(Ok(c)) => {
                if let Some(d) = c.decisions.first() {
                    presence.observe(now, d.remaining);
                }
            }
            Some(Err(e)) => inner.metrics.record_store_error(e.reason()),
            None => {}
        }
        let decision = verdict.decisions.first()?;
        let remaining = if verdict.allowed {
            decision.remaining
        } else {
            0
        };
        // A limit nothing was charged into yet resets in 0: its share would
        // refill every second. Its window is the longest the rest can be.
        let reset = match decision.reset.max(decision.retry_after) {
            0 => item.rate().map_or(0, |r| r.limit.window),
            reset => reset,
        };
        Some(Standing {
            remaining,
            reset,
            envoys: presence.envoys(),
            // Shares for an unsettled count leave room for Envoys not seen.
            report: match (held.report, presence.settled()) {
                (Report::Later, true) => Report::Later,
                (Report::First | Report::Later, _) => Report::First,
            },
        })
    }

    /// Runs one stream until Envoy ends it or goes away.
    async fn run(
        self,
        mut inbound: Streaming<RateLimitQuotaUsageReports>,
        out: tokio::sync::mpsc::Sender<Result<RateLimitQuotaResponse, Status>>,
    ) {
        let _open = self.inner.metrics.rlqs_stream_opened();
        let mut stream = StreamState::default();
        let mut stop = self.stop.clone();
        loop {
            let next = tokio::select! {
                next = inbound.message() => next,
                () = stopped(stop.as_mut()) => break,
            };
            let reports = match next {
                Ok(Some(r)) => r,
                Ok(None) => break,
                Err(status) => {
                    tracing::debug!(%status, "rlqs stream ended");
                    break;
                }
            };
            let answer = self.answer(&mut stream, &reports).await;
            let last = answer.is_err();
            if out.send(answer).await.is_err() || last {
                break;
            }
        }
    }
}

impl<S> Clone for RlqsService<S> {
    fn clone(&self) -> Self {
        RlqsService {
            inner: Arc::clone(&self.inner),
            stop: self.stop.clone(),
        }
    }
}

/// Resolves once `stop` is true or its sender is gone; never without one.
async fn stopped(stop: Option<&mut watch::Receiver<bool>>) {
    match stop {
        Some(rx) => {
            let _ = rx.wait_for(|s| *s).await;
        }
        None => std::future::pending().await,
    }
}

/// Whether `action` assigns a token bucket. Envoy 1.40 starts a token
/// bucket that replaces another with the old one's fraction of tokens left
/// (none, once spent), and a full one only after a blanket rule: each token
/// bucket is sent after a `DENY_ALL` for the same bucket in the same
/// response, which Envoy applies in order before its workers see either, so
/// every report hands the Envoy its whole share.
fn is_token_bucket(action: &Action) -> bool {
    match action {
        Action::QuotaAssignmentAction(a) => matches!(
            a.rate_limit_strategy
                .as_ref()
                .and_then(|r| r.strategy.as_ref()),
            Some(Strategy::TokenBucket(_))
        ),
        Action::AbandonAction(_) => false,
    }
}

/// An assignment as Envoy reads it.
fn assignment_action(a: &Assignment, ttl: Duration) -> QuotaAssignmentAction {
    let strategy = match a {
        Assignment::AllowAll => Strategy::BlanketRule(BlanketRule::AllowAll as i32),
        Assignment::DenyAll => Strategy::BlanketRule(BlanketRule::DenyAll as i32),
        Assignment::TokenBucket(tb) => Strategy::TokenBucket(PbTokenBucket {
            max_tokens: tb.max_tokens,
            tokens_per_fill: Some(UInt32Value {
                value: tb.tokens_per_fill,
            }),
            fill_interval: Some(PbDuration {
                seconds: i64::try_from(tb.fill_interval_secs).unwrap_or(i64::MAX),
                nanos: 0,
            }),
        }),
    };
    QuotaAssignmentAction {
        assignment_time_to_live: Some(PbDuration {
            seconds: i64::try_from(ttl.as_secs()).unwrap_or(i64::MAX),
            nanos: i32::try_from(ttl.subsec_nanos()).unwrap_or(0),
        }),
        rate_limit_strategy: Some(RateLimitStrategy {
            strategy: Some(strategy),
        }),
    }
}

/// The answers of one stream, as tonic sends them.
pub type Responses = Pin<Box<dyn Stream<Item = Result<RateLimitQuotaResponse, Status>> + Send>>;

#[tonic::async_trait]
impl<S: Store> RateLimitQuotaService for RlqsService<S> {
    type StreamRateLimitQuotasStream = Responses;

    async fn stream_rate_limit_quotas(
        &self,
        request: Request<Streaming<RateLimitQuotaUsageReports>>,
    ) -> Result<Response<Responses>, Status> {
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        tokio::spawn(self.clone().run(request.into_inner(), tx));
        let responses =
            futures_util::stream::unfold(
                rx,
                |mut rx| async move { rx.recv().await.map(|r| (r, rx)) },
            );
        Ok(Response::new(Box::pin(responses)))
    }
}
