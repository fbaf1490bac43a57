//! The HTTP surface: `POST /v1/check`, `POST /v1/permits`, `POST /v1/charge`, the probes (`GET /livez`: the
//! process serves; `GET /readyz` and `GET /healthz`: the store answers) and
//! `GET /metrics`, over any [`Store`].

use crate::introspect::{Inspector, Introspect};
use crate::metrics::Metrics;
use crate::overrides::Overrides;
use crate::store::{
    permits_id, state_id, AdjustItem, PermitItem, RateItem, Store, StoreError, StoreItem, Verdict,
};
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use futures_util::future::join_all;
use sluice_core::{FieldError, MILLISECOND};
use sluice_wire::{
    parse_charge, parse_check, parse_permits, Adjust, ChargeResponse, CheckResponse, ErrorBody,
    KeyedLimit, LimitResult, PermitsResponse, Rule, ValidCheck, MAX_BODY_BYTES,
};
use std::sync::Arc;
use std::time::Instant;

/// What every handler shares.
#[derive(Debug, Clone)]
pub struct AppState<S> {
    /// Where key states live.
    pub store: S,
    /// Counters served at `/metrics`.
    pub metrics: Arc<Metrics>,
    /// Per-key limits replacing the request's.
    pub overrides: Arc<Overrides>,
    /// `--introspection`: what the read-only API reads; `None` when off.
    pub introspection: Option<Arc<Inspector>>,
}

impl<S: Store> AppState<S> {
    /// State over `store` with fresh metrics and no overrides.
    pub fn new(store: S) -> Self {
        AppState {
            store,
            metrics: Arc::new(Metrics::default()),
            overrides: Arc::new(Overrides::default()),
            introspection: None,
        }
    }

    /// The same state with the introspection API on, read from `inspector`.
    pub fn with_introspection(mut self, inspector: Arc<Inspector>) -> Self {
        self.introspection = Some(inspector);
        self
    }
}

/// The service's router.
pub fn app<S: Store + Clone>(state: AppState<S>) -> Router {
    let introspect = crate::introspect::routes(Introspect {
        store: state.store.clone(),
        overrides: Arc::clone(&state.overrides),
        inspector: state.introspection.clone(),
    });
    Router::new()
        .route("/v1/check", post(check::<S>))
        .route("/v1/permits", post(permits::<S>))
        .route("/v1/charge", post(charge::<S>))
        .route("/healthz", get(healthz::<S>))
        .route("/livez", get(livez))
        .route("/readyz", get(healthz::<S>))
        // envoyproxy/ratelimit's probe path, as Envoy Gateway probes it.
        .route("/healthcheck", get(healthz::<S>))
        .route("/metrics", get(metrics::<S>))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(state)
        .merge(introspect)
}

/// The router of `--metrics-listen`: `/metrics` and the probes only.
pub fn metrics_app<S: Store + Clone>(state: AppState<S>) -> Router {
    Router::new()
        .route("/healthz", get(healthz::<S>))
        .route("/livez", get(livez))
        .route("/readyz", get(healthz::<S>))
        .route("/healthcheck", get(healthz::<S>))
        .route("/metrics", get(metrics::<S>))
        .with_state(state)
}

fn json(status: StatusCode, body: Vec<u8>) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

fn error(status: StatusCode, message: String) -> Response {
    let body = serde_json::to_vec(&ErrorBody { error: message }).unwrap_or_default();
    json(status, body)
}

async fn check<S: Store>(
    State(st): State<AppState<S>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    st.metrics.inc_checks();
    let started = Instant::now();
    let response = decide(&st, body).await;
    st.metrics.observe_duration(started.elapsed());
    response
}

/// The body, or why it could not be read (the status and the message to
/// answer with).
fn read_body(body: Result<Bytes, BytesRejection>) -> Result<Bytes, (StatusCode, String)> {
    body.map_err(|e| {
        let status = e.status();
        let msg = if status == StatusCode::PAYLOAD_TOO_LARGE {
            format!("body exceeds 64 KiB ({MAX_BODY_BYTES} bytes)")
        } else {
            e.body_text()
        };
        (status, msg)
    })
}

async fn decide<S: Store>(st: &AppState<S>, body: Result<Bytes, BytesRejection>) -> Response {
    let body = match read_body(body) {
        Ok(b) => b,
        Err((status, msg)) => return error(status, msg),
    };
    let mut check = match parse_check(&body) {
        Ok(c) => c,
        Err(e) => return error(StatusCode::BAD_REQUEST, e.to_string()),
    };
    if let Err(e) = st.overrides.apply(&mut check).await {
        st.metrics.record_store_error(e.reason());
        crate::warn_throttled!(error = %e, "override lookup failed");
        return error(StatusCode::SERVICE_UNAVAILABLE, e.to_string());
    }
    let requests = check.requests();
    // Every limit weighing nothing: a lease renewal, admitting no request.
    let renewal = !check.limits.is_empty() && check.limits.iter().all(|l| l.hits == 0);
    let items = match store_items(&check.domain, std::mem::take(&mut check.limits)) {
        Ok(items) => items,
        Err(e) => return error(StatusCode::BAD_REQUEST, e.to_string()),
    };
    let returned = items
        .iter()
        .filter_map(StoreItem::rate)
        .fold(0u64, |sum, i| sum.saturating_add(i.returned));
    let decided = if renewal && items.len() > 1 {
        renew_each(&st.store, &items).await
    } else {
        st.store.check_batch(&items, requests).await
    };
    match decided {
        Ok(verdict) => {
            if !renewal {
                count_refusals(st, &check.domain, &items, &verdict, requests);
            }
            respond(st, &check, &verdict, (requests, renewal), returned)
        }
        // No decision (see the `Store` contract): the filter applies its
        // failure mode.
        Err(e) => {
            st.metrics.record_store_error(e.reason());
            crate::warn_throttled!(error = %e, "check failed");
            error(StatusCode::SERVICE_UNAVAILABLE, e.to_string())
        }
    }
}

/// Counts each refusing limit's key among the top limited keys, once per
/// request refused.
fn count_refusals<S: Store>(
    st: &AppState<S>,
    domain: &str,
    items: &[StoreItem],
    verdict: &Verdict,
    requests: u32,
) {
    let Some(inspector) = &st.introspection else {
        return;
    };
    let refused = u64::from(requests.max(1).saturating_sub(verdict.admitted));
    if refused == 0 {
        return;
    }
    let now = inspector.clock.now();
    for (item, d) in items.iter().zip(&verdict.decisions) {
        if !d.allowed {
            let (key, limit) = crate::top::split_id(domain, item.id());
            inspector.top.refused(domain, key, limit, refused, now);
        }
    }
}

/// A renewal of several leases (an Envoy's worker renews all its keys
/// running low in one call): each key decided on its own, at once, so that
/// a key with nothing left grants nothing without refusing the others;
/// `allowed` when every key allowed. Any key's store error is the call's.
async fn renew_each<S: Store>(store: &S, items: &[StoreItem]) -> Result<Verdict, StoreError> {
    let each = items
        .iter()
        .map(|item| store.check_batch(std::slice::from_ref(item), 1));
    let mut verdict = Verdict {
        allowed: true,
        admitted: 1,
        decisions: Vec::with_capacity(items.len()),
        delays: Vec::new(),
        capacity_denied: false,
        leased: Vec::with_capacity(items.len()),
    };
    for one in join_all(each).await {
        let one = one?;
        verdict.allowed &= one.allowed;
        verdict.admitted = verdict.admitted.min(one.admitted);
        verdict.capacity_denied |= one.capacity_denied;
        verdict.decisions.extend(one.decisions);
        verdict
            .leased
            .push(one.leased.first().copied().unwrap_or(0));
    }
    Ok(verdict)
}

/// The answer to a decided check of `requests` requests (or a lease
/// `renewal`, of none), counted in metrics.
fn respond<S: Store>(
    st: &AppState<S>,
    check: &ValidCheck,
    verdict: &Verdict,
    (requests, renewal): (u32, bool),
    returned: u64,
) -> Response {
    if renewal {
        st.metrics.inc_lease_renewals();
    } else {
        st.metrics.record_decision(&check.domain, verdict.allowed);
    }
    st.metrics.record_blocks(&verdict.decisions);
    if verdict.capacity_denied {
        st.metrics.inc_capacity_denials();
        crate::warn_throttled!(
            "memory store full (--max-keys): checks needing a new key are denied"
        );
    }
    if check.batch.is_some() {
        st.metrics.record_batch(requests, verdict.admitted);
    }
    for &delay in verdict.delays.iter().filter(|&&d| d > 0) {
        st.metrics.record_delay(delay);
    }
    let leased = verdict
        .leased
        .iter()
        .fold(0u64, |s, &k| s.saturating_add(k));
    st.metrics.record_leases(leased, returned);
    let granted = verdict.leased.iter().chain(std::iter::repeat(&0));
    let resp = CheckResponse {
        allowed: verdict.allowed,
        limits: verdict
            .decisions
            .iter()
            .zip(granted)
            .map(|(d, &leased)| LimitResult {
                leased,
                ..LimitResult::from(d)
            })
            .collect(),
        // Only a check that said `batch` is answered with the count.
        admitted: check.batch.map(|_| verdict.admitted),
        delays_ms: match check.batch {
            Some(_) => verdict
                .delays
                .iter()
                .map(|d| d.div_ceil(MILLISECOND))
                .collect(),
            None => Vec::new(),
        },
    };
    json(
        StatusCode::OK,
        serde_json::to_vec(&resp).unwrap_or_default(),
    )
}

/// Gives each limit its state identity; two limits with one identity (same
/// key, algorithm and window; or two concurrency limits on one key) in one
/// check are an error, since they would share one state.
fn store_items(domain: &str, limits: Vec<KeyedLimit>) -> Result<Vec<StoreItem>, FieldError> {
    let mut items: Vec<StoreItem> = Vec::with_capacity(limits.len());
    for (i, kl) in limits.into_iter().enumerate() {
        let item: StoreItem = match kl.rule {
            Rule::Rate(r) => RateItem {
                id: state_id(domain, &kl.key, &r.limit),
                limit: r.limit,
                hits: kl.hits,
                lease: r.lease,
                returned: r.returned,
                returned_age: r.returned_age,
                reserve: r.reserve,
                block: r.block,
            }
            .into(),
            Rule::Permits { permits, holder } => PermitItem {
                id: permits_id(domain, &kl.key),
                permits,
                holder,
                hits: kl.hits,
            }
            .into(),
        };
        // At most 64 limits: a scan is cheaper than hashing.
        if let Some(first) = items.iter().position(|it| it.id() == item.id()) {
            return Err(FieldError::at(
                format!("limits[{i}].key"),
                format!("same key, algorithm and window as limits[{first}]"),
            ));
        }
        items.push(item);
    }
    Ok(items)
}

/// `POST /v1/permits`: a holder gives back permits and renews the others.
async fn permits<S: Store>(
    State(st): State<AppState<S>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    st.metrics.inc_permits_calls();
    let body = match read_body(body) {
        Ok(b) => b,
        Err((status, msg)) => return error(status, msg),
    };
    let req = match parse_permits(&body) {
        Ok(r) => r,
        Err(e) => return error(StatusCode::BAD_REQUEST, e.to_string()),
    };
    let release: Vec<(String, u64)> = req
        .release
        .iter()
        .map(|(key, hits)| (permits_id(&req.domain, key), *hits))
        .collect();
    let renew: Vec<String> = req
        .renew
        .iter()
        .map(|key| permits_id(&req.domain, key))
        .collect();
    match st
        .store
        .permits(req.holder, req.ttl, &release, &renew)
        .await
    {
        Ok(out) => {
            let keep = |keys: Vec<String>, flags: &[bool]| -> Vec<String> {
                keys.into_iter()
                    .zip(flags)
                    .filter_map(|(k, &held)| held.then_some(k))
                    .collect()
            };
            let released: Vec<String> = req.release.into_iter().map(|(k, _)| k).collect();
            let answer = PermitsResponse {
                released: keep(released, &out.released),
                renewed: keep(req.renew, &out.renewed),
            };
            st.metrics
                .record_permits(answer.released.len(), answer.renewed.len());
            json(
                StatusCode::OK,
                serde_json::to_vec(&answer).unwrap_or_default(),
            )
        }
        Err(e) => {
            st.metrics.record_store_error(e.reason());
            crate::warn_throttled!(error = %e, "permits failed");
            error(StatusCode::SERVICE_UNAVAILABLE, e.to_string())
        }
    }
}

/// `POST /v1/charge`: what requests really cost, charged (into debt if
/// need be) or refunded, each limit on its own.
async fn charge<S: Store>(
    State(st): State<AppState<S>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    st.metrics.inc_charge_calls();
    let body = match read_body(body) {
        Ok(b) => b,
        Err((status, msg)) => return error(status, msg),
    };
    let mut req = match parse_charge(&body) {
        Ok(r) => r,
        Err(e) => return error(StatusCode::BAD_REQUEST, e.to_string()),
    };
    // The same per-key limits as the checks, so the same states.
    let limits = req
        .limits
        .iter_mut()
        .map(|l| (l.key.as_str(), &mut l.limit));
    if let Err(e) = st.overrides.apply_to(&req.domain, limits.collect()).await {
        st.metrics.record_store_error(e.reason());
        crate::warn_throttled!(error = %e, "override lookup failed");
        return error(StatusCode::SERVICE_UNAVAILABLE, e.to_string());
    }
    let mut items: Vec<AdjustItem> = Vec::with_capacity(req.limits.len());
    for (i, l) in req.limits.into_iter().enumerate() {
        let id = state_id(&req.domain, &l.key, &l.limit);
        // One state per key, algorithm and window, as in a check.
        if let Some(first) = items.iter().position(|it| it.id == id) {
            let e = format!("limits[{i}].key: same key, algorithm and window as limits[{first}]");
            return error(StatusCode::BAD_REQUEST, e);
        }
        let (limit, adjust) = (l.limit, l.adjust);
        items.push(AdjustItem { id, limit, adjust });
    }
    match st.store.adjust(&items).await {
        Ok(decisions) => {
            let (charged, refunded) = items.iter().fold((0u64, 0u64), |(c, r), it| {
                match (it.adjust, it.limit.algorithm.carries_debt()) {
                    (Adjust::Charge(n), true) => (c.saturating_add(n), r),
                    (Adjust::Refund { cost, .. }, _) => (c, r.saturating_add(cost)),
                    (Adjust::Charge(_), false) => (c, r),
                }
            });
            st.metrics.record_charge(charged, refunded);
            let answer = ChargeResponse {
                limits: decisions.iter().map(LimitResult::from).collect(),
            };
            json(
                StatusCode::OK,
                serde_json::to_vec(&answer).unwrap_or_default(),
            )
        }
        Err(e) => {
            st.metrics.record_store_error(e.reason());
            crate::warn_throttled!(error = %e, "charge failed");
            error(StatusCode::SERVICE_UNAVAILABLE, e.to_string())
        }
    }
}

/// The process serves: answered without touching the store.
async fn livez() -> Response {
    (StatusCode::OK, "ok\n").into_response()
}

/// `/healthz` and `/readyz`: the store answers.
async fn healthz<S: Store>(State(st): State<AppState<S>>) -> Response {
    if st.store.healthy().await {
        (StatusCode::OK, "ok\n").into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "store unreachable\n").into_response()
    }
}

async fn metrics<S: Store>(State(st): State<AppState<S>>) -> Response {
    let status = st.store.status();
    let mut text = st.metrics.render_with(Some(&crate::metrics::StoreGauges {
        kind: st.store.kind(),
        up: status.up,
        keys: status.keys,
        blocked: status.blocked,
        round_trips: st.store.round_trips(),
    }));
    if let Some(inspector) = &st.introspection {
        // The family goes before the exposition's end.
        if let Some(body) = text.strip_suffix("# EOF\n") {
            text = format!("{body}{}# EOF\n", inspector.metric_text());
        }
    }
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)],
        text,
    )
        .into_response()
}
