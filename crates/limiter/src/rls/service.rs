//! `ShouldRateLimit`: each descriptor of a call is matched against the
//! configuration (or takes the limit Envoy sends with it), and every
//! enforcing limit is decided in **one** store check: all pass or the call
//! is `OVER_LIMIT` and consumes nothing. Shadow-mode limits are decided
//! after an admitted call, each on its own, and never deny.

use super::config::{push_escaped, Action, Found, Unit};
use super::reload::ConfigCell;
use crate::clock::Clock;
use crate::metrics::Metrics;
use crate::store::{Store, StoreItem, Verdict};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit as PbRateLimit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::Duration as PbDuration;
use prost::Message;
use sluice_core::{Algorithm, Decision, Limit, Nanos, MILLISECOND};
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;
use tonic::{Request, Response, Status};

/// Most descriptors in one call (as many as limits in one `/v1/check`).
pub const MAX_DESCRIPTORS: usize = sluice_wire::MAX_LIMITS;

/// The RLS service over a store.
pub struct RlsService<S> {
    store: S,
    config: Arc<ConfigCell>,
    metrics: Arc<Metrics>,
    clock: Arc<dyn Clock>,
}

/// What a limit reports in `current_limit`.
#[derive(Debug, Clone)]
struct Report {
    requests_per_unit: u32,
    unit: Option<Unit>,
    name: String,
    window: Nanos,
}

impl Report {
    fn current_limit(&self) -> PbRateLimit {
        PbRateLimit {
            name: self.name.clone(),
            requests_per_unit: self.requests_per_unit,
            unit: self.unit.map_or(0, Unit::code),
        }
    }
}

/// What one descriptor of a call comes to.
#[derive(Debug)]
enum Plan {
    /// No limit applies.
    NoMatch,
    /// `unlimited: true`.
    Unlimited,
    /// Its limit is replaced by another limit of the call.
    Replaced,
    /// `requests_per_unit: 0`.
    Block { report: Report, shadow: bool },
    /// Decided in the store: the enforcing check's item `index`, or the
    /// shadow check `index`.
    Check {
        report: Report,
        shadow: bool,
        index: usize,
    },
}

fn duration(ns: Nanos) -> PbDuration {
    PbDuration {
        seconds: i64::try_from(ns / 1_000_000_000).unwrap_or(i64::MAX),
        nanos: i32::try_from(ns % 1_000_000_000).unwrap_or(0),
    }
}

fn clamp32(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// The store identity of a limit's state: `rls:` (no HTTP API domain has
/// a colon), the domain, the descriptor's key, the algorithm and the
/// window. Neither the count nor the burst is part of it, so a reload that
/// changes only those keeps the counter.
pub fn state_id(domain: &str, key: &str, limit: &Limit) -> String {
    let mut id = String::with_capacity(domain.len() + key.len() + 32);
    id.push_str("rls:");
    push_escaped(&mut id, domain);
    id.push('/');
    id.push_str(key);
    id.push('|');
    id.push_str(limit.algorithm.name());
    id.push('|');
    id.push_str(&(limit.window / MILLISECOND).to_string());
    id
}

/// The key of a descriptor Envoy sent its own limit with: every entry's
/// key and value.
fn override_key(d: &RateLimitDescriptor) -> String {
    let mut key = String::new();
    for (i, e) in d.entries.iter().enumerate() {
        if i > 0 {
            key.push('/');
        }
        push_escaped(&mut key, &e.key);
        key.push('=');
        push_escaped(&mut key, &e.value);
    }
    key
}

/// A decided call, before it becomes a response.
struct Decided {
    statuses: Vec<DescriptorStatus>,
    over: bool,
}

impl<S: Store> RlsService<S> {
    /// A service deciding in `store` from the configuration in `config`.
    pub fn new(
        store: S,
        config: Arc<ConfigCell>,
        metrics: Arc<Metrics>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        RlsService {
            store,
            config,
            metrics,
            clock,
        }
    }

    /// The tonic service to mount.
    pub fn into_server(self) -> RateLimitServiceServer<Self> {
        RateLimitServiceServer::new(self)
    }

    /// Answers one `ShouldRateLimit` call from its protobuf encoding, as
    /// tonic would decode it: the whole path from bytes to a decision
    /// without a transport (for the fuzzers and tests). Bytes that are no
    /// `RateLimitRequest` are an invalid argument, as tonic answers them.
    pub async fn decide_encoded(&self, bytes: &[u8]) -> Result<RateLimitResponse, Status> {
        let req = RateLimitRequest::decode(bytes)
            .map_err(|e| Status::invalid_argument(format!("malformed request: {e}")))?;
        self.decide(&req).await
    }

    /// Answers one `ShouldRateLimit` call.
    pub async fn decide(&self, req: &RateLimitRequest) -> Result<RateLimitResponse, Status> {
        let started = Instant::now();
        let config = self.config.current();
        let domain = config.domains.get(&req.domain);
        let label = if domain.is_some() {
            req.domain.as_str()
        } else {
            "_unknown"
        };
        if req.domain.is_empty() || req.descriptors.is_empty() {
            self.metrics.record_rls_call(label, "invalid");
            return Err(Status::invalid_argument(
                "a rate limit request needs a domain and at least one descriptor",
            ));
        }
        if req.descriptors.len() > MAX_DESCRIPTORS {
            self.metrics.record_rls_call(label, "invalid");
            return Err(Status::invalid_argument(format!(
                "at most {MAX_DESCRIPTORS} descriptors per request, got {}",
                req.descriptors.len()
            )));
        }
        let default_hits = u64::from(req.hits_addend.max(1));
        let hits_of = |d: &RateLimitDescriptor| d.hits_addend.map_or(default_hits, |h| h.value);

        // Match every descriptor first: `replaces` looks across them all.
        let mut found: Vec<Option<Found<'_>>> = Vec::with_capacity(req.descriptors.len());
        let mut replacing: HashSet<&str> = HashSet::new();
        for d in &req.descriptors {
            let f = match domain {
                Some(dom) if d.limit.is_none() && !d.is_negative_hits => {
                    dom.lookup(d.entries.iter().map(|e| (e.key.as_str(), e.value.as_str())))
                }
                _ => None,
            };
            if let Some(f) = &f {
                replacing.extend(f.rate_limit.replaces.iter().map(String::as_str));
            }
            found.push(f);
        }

        let mut plans: Vec<(Plan, String)> = Vec::with_capacity(req.descriptors.len());
        let mut enforcing: Vec<StoreItem> = Vec::new();
        let mut shadows: Vec<StoreItem> = Vec::new();
        for (i, (d, f)) in req.descriptors.iter().zip(&found).enumerate() {
            let hits = hits_of(d);
            // Envoy's own limit for this descriptor (enforcing, fixed window).
            if let (Some(over), Some(_), false) = (d.limit, domain, d.is_negative_hits) {
                let Some(unit) = Unit::from_code(over.unit) else {
                    self.metrics.record_rls_call(label, "invalid");
                    return Err(Status::invalid_argument(format!(
                        "descriptors[{i}].limit.unit: unknown unit {}",
                        over.unit
                    )));
                };
                let report = Report {
                    requests_per_unit: over.requests_per_unit,
                    unit: Some(unit),
                    name: String::new(),
                    window: unit.window(),
                };
                let plan = if over.requests_per_unit == 0 {
                    Plan::Block {
                        report,
                        shadow: false,
                    }
                } else {
                    let limit = Limit::new(
                        Algorithm::FixedWindow,
                        u64::from(over.requests_per_unit),
                        unit.window(),
                    )
                    .map_err(|e| {
                        Status::invalid_argument(format!("descriptors[{i}].limit: {e}"))
                    })?;
                    let id = state_id(&req.domain, &override_key(d), &limit);
                    let index = add_item(&mut enforcing, id, limit, hits);
                    Plan::Check {
                        report,
                        shadow: false,
                        index,
                    }
                };
                plans.push((plan, "_override".to_string()));
                continue;
            }
            let Some(f) = f else {
                plans.push((Plan::NoMatch, "_none".to_string()));
                continue;
            };
            let rl = f.rate_limit;
            if !rl.name.is_empty() && replacing.contains(rl.name.as_str()) {
                plans.push((Plan::Replaced, f.metric.clone()));
                continue;
            }
            let report = Report {
                requests_per_unit: rl.requests_per_unit,
                unit: rl.unit,
                name: rl.name.clone(),
                window: rl.window,
            };
            let shadow = f.node.shadow;
            let plan = match &rl.action {
                Action::Unlimited => Plan::Unlimited,
                Action::Block => Plan::Block { report, shadow },
                Action::Limit(limit) => {
                    let id = state_id(&req.domain, &f.key, limit);
                    let index = if shadow {
                        shadows.push(StoreItem::new(id, limit.clone(), hits));
                        shadows.len() - 1
                    } else {
                        add_item(&mut enforcing, id, limit.clone(), hits)
                    };
                    Plan::Check {
                        report,
                        shadow,
                        index,
                    }
                }
            };
            plans.push((plan, f.metric.clone()));
        }

        let blocked = plans
            .iter()
            .any(|(p, _)| matches!(p, Plan::Block { shadow: false, .. }));
        let verdict = if blocked || enforcing.is_empty() {
            None
        } else {
            match self.store.check(&enforcing).await {
                Ok(v) => Some(v),
                Err(e) => {
                    self.metrics.record_store_error(e.reason());
                    self.metrics.record_rls_call(label, "error");
                    crate::warn_throttled!(error = %e, domain = %req.domain, "rls check failed");
                    return Err(Status::unavailable(e.to_string()));
                }
            }
        };
        if verdict.as_ref().is_some_and(|v| v.capacity_denied) {
            self.metrics.inc_capacity_denials();
        }
        let admitted = !blocked && verdict.as_ref().is_none_or(|v| v.allowed);
        // Shadow limits count only what is admitted, like the others.
        let shadow_verdicts: Vec<Option<Verdict>> = if admitted && !shadows.is_empty() {
            let checks = shadows
                .iter()
                .map(|item| self.store.check(std::slice::from_ref(item)));
            futures_util::future::join_all(checks)
                .await
                .into_iter()
                .map(|r| match r {
                    Ok(v) => Some(v),
                    Err(e) => {
                        self.metrics.record_store_error(e.reason());
                        crate::warn_throttled!(error = %e, "rls shadow check failed");
                        None
                    }
                })
                .collect()
        } else {
            Vec::new()
        };

        let now = self.clock.now();
        let decided = self.statuses(&plans, verdict.as_ref(), &shadow_verdicts, now, label);
        let code = if decided.over {
            Code::OverLimit
        } else {
            Code::Ok
        };
        self.metrics
            .record_rls_call(label, if decided.over { "over_limit" } else { "ok" });
        self.metrics.observe_duration(started.elapsed());
        Ok(RateLimitResponse {
            overall_code: code as i32,
            statuses: decided.statuses,
            ..RateLimitResponse::default()
        })
    }

    fn statuses(
        &self,
        plans: &[(Plan, String)],
        verdict: Option<&Verdict>,
        shadow_verdicts: &[Option<Verdict>],
        now: Nanos,
        label: &str,
    ) -> Decided {
        let mut over = false;
        let mut statuses = Vec::with_capacity(plans.len());
        for (plan, metric) in plans {
            let (status, result) = match plan {
                Plan::NoMatch => (ok_status(None, 0, None), "no_match"),
                Plan::Replaced => (ok_status(None, 0, None), "replaced"),
                Plan::Unlimited => (ok_status(None, u32::MAX, None), "unlimited"),
                Plan::Block { report, shadow } => {
                    let window = report.window.max(1);
                    let reset = window - now % window;
                    let code = if *shadow { Code::Ok } else { Code::OverLimit };
                    over |= !*shadow;
                    let status = DescriptorStatus {
                        code: code as i32,
                        current_limit: Some(report.current_limit()),
                        limit_remaining: 0,
                        duration_until_reset: Some(duration(reset)),
                        quota: None,
                    };
                    (
                        status,
                        if *shadow {
                            "shadow_over_limit"
                        } else {
                            "over_limit"
                        },
                    )
                }
                Plan::Check {
                    report,
                    shadow,
                    index,
                } => {
                    let decision: Option<&Decision> = if *shadow {
                        shadow_verdicts
                            .get(*index)
                            .and_then(Option::as_ref)
                            .and_then(|v| v.decisions.first())
                    } else {
                        verdict.and_then(|v| v.decisions.get(*index))
                    };
                    match decision {
                        Some(d) => {
                            let denied = !d.allowed;
                            over |= denied && !*shadow;
                            let code = if denied && !*shadow {
                                Code::OverLimit
                            } else {
                                Code::Ok
                            };
                            let status = DescriptorStatus {
                                code: code as i32,
                                current_limit: Some(report.current_limit()),
                                limit_remaining: clamp32(d.remaining),
                                duration_until_reset: Some(duration(d.reset)),
                                quota: None,
                            };
                            let result = match (denied, *shadow) {
                                (false, _) => "ok",
                                (true, false) => "over_limit",
                                (true, true) => "shadow_over_limit",
                            };
                            (status, result)
                        }
                        // Not decided: the call was refused by another
                        // limit (a shadow limit is then not counted), or a
                        // shadow check failed.
                        None => (
                            ok_status(Some(report.current_limit()), 0, None),
                            "not_decided",
                        ),
                    }
                }
            };
            self.metrics.record_rls_descriptor(label, metric, result);
            statuses.push(status);
        }
        Decided { statuses, over }
    }
}

fn ok_status(
    current_limit: Option<PbRateLimit>,
    remaining: u32,
    reset: Option<PbDuration>,
) -> DescriptorStatus {
    DescriptorStatus {
        code: Code::Ok as i32,
        current_limit,
        limit_remaining: remaining,
        duration_until_reset: reset,
        quota: None,
    }
}

/// Adds an item to the enforcing check, or its hits to the item with the
/// same identity (two descriptors of one call on one counter weigh both);
/// returns its index.
fn add_item(items: &mut Vec<StoreItem>, id: String, limit: Limit, hits: u64) -> usize {
    if let Some(i) = items.iter().position(|it| it.id == id) {
        if let Some(it) = items.get_mut(i) {
            it.hits = it.hits.saturating_add(hits);
        }
        return i;
    }
    items.push(StoreItem::new(id, limit, hits));
    items.len() - 1
}

#[tonic::async_trait]
impl<S: Store> RateLimitService for RlsService<S> {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        self.decide(request.get_ref()).await.map(Response::new)
    }
}
