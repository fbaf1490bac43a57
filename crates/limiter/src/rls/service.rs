//! `ShouldRateLimit`: each descriptor of a call is matched against the
//! configuration (or takes the limit Envoy sends with it), and every
//! enforcing limit is decided in **one** store check: all pass or the call
//! is `OVER_LIMIT` and consumes nothing. Quota-mode limits over their
//! limits are left out of the check and the rest decided again, until
//! every quota-mode descriptor is spent. Shadow-mode limits are decided
//! after an admitted call, each on its own, and never deny. Hits given
//! back (`is_negative_hits`) are refunded first, whatever the outcome.

use super::plan::{plan_call, rls_scope, Plan, Planned, Role};
use super::reload::ConfigCell;
use super::status::{answer, Verdicts};
use crate::clock::Clock;
use crate::metrics::Metrics;
use crate::store::{Store, StoreItem, Verdict};
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
    quota_mode: Role,
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
            quota_mode: Role::Rate,
        }
    }

    /// The same service in global quota mode (envoyproxy/ratelimit's
    /// `QUOTA_MODE`): every descriptor of a call counts as in `quota_mode`.
    pub fn with_quota_mode(mut self) -> Self {
        self.quota_mode = Role::Quota;
        self
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
        if !self.config.loaded() {
            // As envoyproxy/ratelimit started without its first configuration.
            return Err(Status::unavailable(
                "no rate limit configuration loaded yet",
            ));
        }
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
        let planned = plan_call(req, domain, self.quota_mode).map_err(invalid)?;
        // Hits given back first: returning is not consuming.
        let refunded = if planned.refunds.is_empty() {
            Ok(Vec::new())
        } else {
            self.store.adjust(&planned.refunds).await
        };
        let decided = match refunded {
            Ok(refunds) => self
                .check_enforcing(&planned)
                .await
                .map(|(verdict, admitted)| (verdict, admitted, refunds)),
            Err(e) => Err(e),
        };
        let (verdict, admitted, refunds) = match decided {
            Ok(decided) => decided,
            Err(e) => {
                self.metrics.record_store_error(e.reason());
                self.metrics.record_rls_call(label, "error");
                crate::warn_throttled!(error = %e, domain = %req.domain, "rls check failed");
                return Err(Status::unavailable(e.to_string()));
            }
        };
        if verdict.as_ref().is_some_and(|v| v.capacity_denied) {
            self.metrics.inc_capacity_denials();
        }
        // Shadow limits count only what is admitted, like the others.
        let shadows = if admitted {
            self.shadow_checks(&planned).await
        } else {
            Vec::new()
        };
        let verdicts = Verdicts {
            enforcing: verdict.as_ref(),
            refunds: &refunds,
            shadows: &shadows,
        };
        let response = self.respond(&planned, &verdicts, label, admitted);
        self.metrics.observe_duration(started.elapsed());
        Ok(response)
    }

    /// Decides the enforcing items in one check: the verdict (none when the
    /// store was not asked) and whether the call is admitted. Quota-mode
    /// items over their limits are left out and the rest decided again,
    /// until the check admits, a rate limit refuses, or every quota-mode
    /// descriptor is spent; each round drops one item or more, so there
    /// are at most as many rounds as quota-mode items, plus one.
    async fn check_enforcing(
        &self,
        planned: &Planned,
    ) -> Result<(Option<Verdict>, bool), crate::store::StoreError> {
        if planned.refused(&[]) {
            return Ok((None, false));
        }
        if planned.enforcing.is_empty() {
            return Ok((None, true));
        }
        let mut verdict = self.store.check(&planned.enforcing).await?;
        let mut decisions = verdict.decisions.clone();
        let mut dropped: Vec<usize> = Vec::new();
        loop {
            let kept: Vec<usize> = (0..planned.enforcing.len())
                .filter(|i| !dropped.contains(i))
                .collect();
            for (&i, d) in kept.iter().zip(&verdict.decisions) {
                if let Some(slot) = decisions.get_mut(i) {
                    *slot = *d;
                }
            }
            let denied = || {
                kept.iter()
                    .zip(&verdict.decisions)
                    .filter(|(_, d)| !d.allowed)
            };
            let spent: Vec<usize> = denied().map(|(&i, _)| i).collect();
            if verdict.allowed || spent.is_empty() || denied().any(|(&i, _)| !planned.droppable(i))
            {
                break;
            }
            // Left out whole: every descriptor on it is over, none fits.
            for &i in &spent {
                if let Some(d) = decisions.get_mut(i) {
                    d.remaining = 0;
                }
            }
            dropped.extend(spent);
            if planned.refused(&dropped) {
                verdict.allowed = false;
                break;
            }
            let items: Vec<StoreItem> = planned
                .enforcing
                .iter()
                .enumerate()
                .filter(|(i, _)| !dropped.contains(i))
                .map(|(_, item)| item.clone())
                .collect();
            if items.is_empty() {
                // Only quota descriptors that cannot be spent (shadow) are left.
                verdict.allowed = true;
                verdict.capacity_denied = false;
                verdict.decisions.clear();
                break;
            }
            verdict = self.store.check(&items).await?;
        }
        let admitted = verdict.allowed;
        verdict.decisions = decisions;
        Ok((Some(verdict), admitted))
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
        admitted: bool,
    ) -> RateLimitResponse {
        let now = self.clock.now();
        let over = !admitted;
        let mut statuses = Vec::with_capacity(planned.plans.len());
        for (plan, metric) in &planned.plans {
            let a = answer(plan, verdicts, now);
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
