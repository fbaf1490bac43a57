//! `ShouldRateLimit`: each descriptor of a call is matched against the
//! configuration (or takes the limit Envoy sends with it), and every
//! enforcing limit is decided in **one** store check: all pass or the call
//! is `OVER_LIMIT` and consumes nothing. Shadow-mode limits are decided
//! after an admitted call, each on its own, and never deny.

use super::plan::{plan_call, rls_scope, Plan, Planned};
use super::reload::ConfigCell;
use super::status::{answer, Verdicts};
use crate::clock::Clock;
use crate::metrics::Metrics;
use crate::store::{Store, Verdict};
use crate::top::{split_id, TopKeys};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use prost::Message;
use std::sync::Arc;
use std::time::Instant;
use tonic::{Request, Response, Status};

/// Most descriptors in one call (as many as limits in one `/v1/check`).
pub const MAX_DESCRIPTORS: usize = sluice_wire::MAX_LIMITS;

/// What the service answers a call over the limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// `OVER_LIMIT`.
    #[default]
    Enforce,
    /// `OK`, each descriptor's status unchanged, the call counted
    /// (`--shadow-mode`, envoyproxy/ratelimit's `SHADOW_MODE`).
    Shadow,
}

/// The RLS service over a store.
pub struct RlsService<S> {
    store: S,
    config: Arc<ConfigCell>,
    metrics: Arc<Metrics>,
    clock: Arc<dyn Clock>,
    top: Option<Arc<TopKeys>>,
    mode: Mode,
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
            top: None,
            mode: Mode::Enforce,
        }
    }

    /// The same service answering calls over the limit as `mode` says.
    pub fn with_mode(mut self, mode: Mode) -> Self {
        self.mode = mode;
        self
    }

    /// The same service counting each refused descriptor's key in `top`.
    pub fn with_top(mut self, top: Arc<TopKeys>) -> Self {
        self.top = Some(top);
        self
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
        let invalid = |message: String| {
            self.metrics.record_rls_call(label, "invalid");
            Status::invalid_argument(message)
        };
        if req.domain.is_empty() || req.descriptors.is_empty() {
            return Err(invalid(
                "a rate limit request needs a domain and at least one descriptor".into(),
            ));
        }
        if req.descriptors.len() > MAX_DESCRIPTORS {
            return Err(invalid(format!(
                "at most {MAX_DESCRIPTORS} descriptors per request, got {}",
                req.descriptors.len()
            )));
        }
        let planned = plan_call(req, domain).map_err(invalid)?;
        let blocked = planned.blocked();
        let verdict = if blocked || planned.enforcing.is_empty() {
            None
        } else {
            match self.store.check(&planned.enforcing).await {
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
        // Shadow limits count only what is admitted, like the others.
        let admitted = !blocked && verdict.as_ref().is_none_or(|v| v.allowed);
        let shadows = if admitted {
            self.shadow_checks(&planned).await
        } else {
            Vec::new()
        };
        let verdicts = Verdicts {
            enforcing: verdict.as_ref(),
            shadows: &shadows,
        };
        let response = self.respond(&planned, &verdicts, label);
        self.metrics.observe_duration(started.elapsed());
        Ok(response)
    }

    /// Decides each shadow limit on its own; a failed one is left undecided.
    async fn shadow_checks(&self, planned: &Planned) -> Vec<Option<Verdict>> {
        let checks = planned
            .shadows
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
    }

    /// The response to a decided call, each descriptor counted in metrics.
    fn respond(
        &self,
        planned: &Planned,
        verdicts: &Verdicts<'_>,
        label: &str,
    ) -> RateLimitResponse {
        let now = self.clock.now();
        let mut over = false;
        let mut statuses = Vec::with_capacity(planned.plans.len());
        for (plan, metric) in &planned.plans {
            let a = answer(plan, verdicts, now);
            over |= a.over;
            if a.over {
                self.count_refusal(planned, plan, label, metric, now);
            }
            self.metrics.record_rls_descriptor(label, metric, a.result);
            statuses.push(a.status);
        }
        let code = match (over, self.mode) {
            (false, _) => Code::Ok,
            (true, Mode::Enforce) => Code::OverLimit,
            (true, Mode::Shadow) => {
                self.metrics.record_rls_global_shadow(label);
                Code::Ok
            }
        };
        let result = if code == Code::OverLimit {
            "over_limit"
        } else {
            "ok"
        };
        self.metrics.record_rls_call(label, result);
        RateLimitResponse {
            overall_code: code as i32,
            statuses,
            ..RateLimitResponse::default()
        }
    }
}

impl<S> RlsService<S> {
    /// Counts a refused descriptor's key among the top limited keys (a
    /// blocking limit, `requests_per_unit: 0`, has no key in the store and
    /// is not counted).
    fn count_refusal(&self, planned: &Planned, plan: &Plan, domain: &str, metric: &str, now: u64) {
        let Some(top) = &self.top else { return };
        if let Plan::Check { index, .. } = plan {
            if let Some(item) = planned.enforcing.get(*index) {
                let (key, _) = split_id(&rls_scope(domain), item.id());
                top.refused(domain, key, metric, 1, now);
            }
        }
    }
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
