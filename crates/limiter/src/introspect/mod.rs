//! The read-only introspection API (`--introspection`): `GET /v1/limits`
//! (the RLS descriptor configuration's limits), `GET /v1/keys` (a key's
//! state in the store, read with a check of weight 0, which consumes
//! nothing: see `keys`) and `GET /v1/top` (the keys refused most, [`crate::top`]),
//! and `GET /status`, a page that shows them (`status`).
//! Served on the HTTP listener with its TLS; without the flag each answers
//! `404`. A bad parameter is answered `400` naming it.

mod keys;
mod limits;
mod query;
mod status;

pub use limits::{page, LimitsPage};
use query::Query;

use crate::clock::Clock;
use crate::overrides::Overrides;
use crate::rls::reload::ConfigCell;
use crate::store::Store;
use crate::top::{Counted, TopKeys};
use axum::extract::{RawQuery, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use keys::{Target, LIMIT_FIELDS};
use serde::Serialize;
use sluice_core::{Decision, Denial, MILLISECOND};
use std::sync::Arc;

/// Limits per page of `/v1/limits` unless `page_size` says.
pub const DEFAULT_PAGE_SIZE: usize = 100;
/// Most limits per page.
pub const MAX_PAGE_SIZE: usize = 1000;
/// Keys `/v1/top` answers unless `n` says.
pub const DEFAULT_TOP: usize = 10;

/// What the introspection API reads, when `--introspection` is on.
#[derive(Clone)]
pub struct Inspector {
    /// The top limited keys, fed by every refusal.
    pub top: Arc<TopKeys>,
    /// The RLS descriptors in force, when the limiter serves RLS.
    pub descriptors: Option<Arc<ConfigCell>>,
    /// Entries per domain on `/metrics` (`--top-keys`).
    pub metric_keys: usize,
    /// The limiter's clock (the windows of the top limited keys).
    pub clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for Inspector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inspector")
            .field("top", &self.top)
            .field("metric_keys", &self.metric_keys)
            .finish_non_exhaustive()
    }
}

impl Inspector {
    /// The `sluice_limiter_top_limited_key_refusals` family: the first
    /// `metric_keys` keys of each domain counted, in OpenMetrics text.
    pub fn metric_text(&self) -> String {
        let now = self.clock.now();
        let mut out = String::from(
            "# HELP sluice_limiter_top_limited_key_refusals Refusals of the keys refused most \
             over the last windows (Space-Saving upper bounds)\n\
             # TYPE sluice_limiter_top_limited_key_refusals gauge\n",
        );
        for domain in self.top.domains() {
            for c in self.top.top(&domain, self.metric_keys, now) {
                out.push_str(&format!(
                    "sluice_limiter_top_limited_key_refusals{{domain=\"{}\",key=\"{}\"}} {}\n",
                    escape_label(&domain),
                    escape_label(&c.subject.key),
                    c.refusals
                ));
            }
        }
        out
    }
}

/// A label value escaped as the exposition format reads it.
fn escape_label(text: &str) -> String {
    text.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// What the introspection handlers share.
#[derive(Clone)]
pub struct Introspect<S> {
    /// The store read by `/v1/keys`.
    pub store: S,
    /// The per-key limits the checks apply, applied alike.
    pub overrides: Arc<Overrides>,
    /// `None` when `--introspection` is off.
    pub inspector: Option<Arc<Inspector>>,
}

/// The introspection routes.
pub fn routes<S: Store + Clone>(state: Introspect<S>) -> Router {
    Router::new()
        .route("/v1/limits", get(list_limits::<S>))
        .route("/v1/keys", get(key_state::<S>))
        .route("/v1/top", get(top_keys::<S>))
        .route("/status", get(status::page::<S>))
        .with_state(state)
}

fn json<T: Serialize>(status: StatusCode, body: &T) -> Response {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    (status, [(header::CONTENT_TYPE, "application/json")], bytes).into_response()
}

fn error(status: StatusCode, message: String) -> Response {
    json(status, &sluice_wire::ErrorBody { error: message })
}

fn off() -> Response {
    error(
        StatusCode::NOT_FOUND,
        "introspection is off (start sluice-limiter with --introspection)".into(),
    )
}

async fn list_limits<S: Store>(
    State(st): State<Introspect<S>>,
    RawQuery(raw): RawQuery,
) -> Response {
    let Some(inspector) = &st.inspector else {
        return off();
    };
    let answer =
        Query::parse(raw.as_deref(), &["domain", "page_size", "page_token"]).and_then(|q| {
            let size = q.number("page_size", 1, MAX_PAGE_SIZE as u64)?;
            let start = q.number("page_token", 0, u64::MAX)?;
            let size = size.map_or(DEFAULT_PAGE_SIZE, |n| n as usize);
            let start = start.map_or(0, |n| usize::try_from(n).unwrap_or(usize::MAX));
            let page = match &inspector.descriptors {
                Some(cell) => page(&cell.current(), q.get("domain"), start, size),
                None => LimitsPage {
                    domains: Vec::new(),
                    next_page_token: None,
                },
            };
            Ok(page)
        });
    match answer {
        Ok(page) => json(StatusCode::OK, &page),
        Err(e) => error(StatusCode::BAD_REQUEST, e),
    }
}

/// One limit's state as `/v1/keys` shows it.
#[derive(Debug, Serialize)]
struct LimitState {
    algorithm: String,
    window_ms: u64,
    limit: u64,
    remaining: u64,
    reset_ms: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    retry_after_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    debt: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    held: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    blocked_until_ms: Option<u64>,
}

#[derive(Debug, Serialize)]
struct KeyAnswer {
    domain: String,
    key: String,
    limits: Vec<LimitState>,
}

/// What a read of weight 0 says of the state.
fn state_of(t: &Target, d: &Decision, now_ms: u64) -> LimitState {
    let ms = |n: u64| n.div_ceil(MILLISECOND);
    let blocked = matches!(d.denial, Some(Denial::Blocked { .. }));
    LimitState {
        algorithm: t.algorithm.clone(),
        window_ms: t.window_ms,
        limit: d.limit,
        remaining: d.remaining,
        reset_ms: ms(d.reset),
        retry_after_ms: (d.retry_after > 0).then(|| ms(d.retry_after)),
        debt: t.item.rate().and_then(|r| r.limit.debt(d)),
        held: t.concurrency().then(|| d.limit.saturating_sub(d.remaining)),
        blocked_until_ms: blocked.then(|| now_ms.saturating_add(ms(d.retry_after))),
    }
}

/// The state `q` names: an HTTP API key and its limit, or with
/// `service=rls` an RLS counter's key; `Err` is the answer.
async fn target<S: Store>(
    st: &Introspect<S>,
    inspector: &Inspector,
    q: &Query,
) -> Result<(String, Target), Response> {
    let bad = |e: String| error(StatusCode::BAD_REQUEST, e);
    let domain = q.required("domain").map_err(bad)?.to_string();
    match q.get("service") {
        Some("rls") => {
            if let Some(field) = LIMIT_FIELDS.iter().find(|f| q.get(f).is_some()) {
                return Err(bad(format!(
                    "{field}: not with service=rls (the descriptors give the limit)"
                )));
            }
            let key = q.required("key").map_err(bad)?;
            let config = match &inspector.descriptors {
                Some(cell) => cell.current(),
                None => return Err(bad("service: rls needs --descriptors".into())),
            };
            let t = keys::rls_target(&config, &domain, key).map_err(bad)?;
            Ok((domain, t))
        }
        None | Some("http") => {
            let mut check = keys::zero_check(q).map_err(bad)?;
            if let Err(e) = st.overrides.apply(&mut check).await {
                return Err(error(StatusCode::SERVICE_UNAVAILABLE, e.to_string()));
            }
            let t = keys::http_target(check, q).ok_or_else(|| bad("key: required".into()))?;
            Ok((domain, t))
        }
        Some(other) => Err(bad(format!("service: expected http or rls, got {other:?}"))),
    }
}

async fn key_state<S: Store>(State(st): State<Introspect<S>>, RawQuery(raw): RawQuery) -> Response {
    let Some(inspector) = &st.inspector else {
        return off();
    };
    let mut allowed = vec!["domain", "key", "service"];
    allowed.extend(LIMIT_FIELDS);
    let q = match Query::parse(raw.as_deref(), &allowed) {
        Ok(q) => q,
        Err(e) => return error(StatusCode::BAD_REQUEST, e),
    };
    let (domain, t) = match target(&st, inspector, &q).await {
        Ok(found) => found,
        Err(answer) => return answer,
    };
    match keys::read(&st.store, t.item.clone()).await {
        Ok(d) => {
            let now_ms = inspector.clock.now() / MILLISECOND;
            let key = inspector
                .top
                .display()
                .show(q.get("key").unwrap_or_default());
            let limits = vec![state_of(&t, &d, now_ms)];
            json(
                StatusCode::OK,
                &KeyAnswer {
                    domain,
                    key,
                    limits,
                },
            )
        }
        Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
    }
}

#[derive(Debug, Serialize)]
struct TopEntry {
    key: String,
    limit: String,
    refusals: u64,
    error: u64,
}

#[derive(Debug, Serialize)]
struct TopAnswer {
    domain: String,
    keys: Vec<TopEntry>,
}

async fn top_keys<S: Store>(State(st): State<Introspect<S>>, RawQuery(raw): RawQuery) -> Response {
    let Some(inspector) = &st.inspector else {
        return off();
    };
    let parsed = Query::parse(raw.as_deref(), &["domain", "n"]).and_then(|q| {
        let n = q.number("n", 1, crate::top::ENTRIES as u64)?;
        Ok((q.required("domain")?.to_string(), n))
    });
    let (domain, n) = match parsed {
        Ok(p) => p,
        Err(e) => return error(StatusCode::BAD_REQUEST, e),
    };
    let n = n.map_or(DEFAULT_TOP, |n| n as usize);
    let keys = inspector
        .top
        .top(&domain, n, inspector.clock.now())
        .into_iter()
        .map(|c: Counted| TopEntry {
            key: c.subject.key,
            limit: c.subject.limit,
            refusals: c.refusals,
            error: c.error,
        })
        .collect();
    json(StatusCode::OK, &TopAnswer { domain, keys })
}
