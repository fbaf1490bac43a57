//! The read-only introspection API (`--introspection`): `GET /v1/limits`
//! (the RLS descriptor configuration's limits), `GET /v1/keys` (a key's
//! state in the store, read with a check of weight 0, which consumes
//! nothing) and `GET /v1/top` (the keys refused most, [`crate::top`]).
//! Served on the HTTP listener with its TLS; without the flag each answers
//! `404`. A bad parameter is answered `400` naming it.

mod limits;
mod query;

pub use limits::{page, LimitsPage};
use query::Query;

use crate::clock::Clock;
use crate::overrides::Overrides;
use crate::rls::reload::ConfigCell;
use crate::store::{permits_id, state_id, PermitItem, RateItem, Store, StoreItem};
use crate::top::{Counted, TopKeys};
use axum::extract::{RawQuery, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use serde::Serialize;
use sluice_core::{Decision, Denial, MILLISECOND};
use sluice_wire::{parse_check, KeyedLimit, Rule};
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

/// The parameters `/v1/keys` takes besides `domain` and `key`: a limit's
/// fields as a check names them.
const LIMIT_FIELDS: [&str; 7] = [
    "algorithm",
    "requests",
    "window_ms",
    "burst",
    "precision",
    "soft_percent",
    "block_ms",
];

/// The check of weight 0 that reads the state `q` names, or the error
/// naming the parameter at fault.
fn zero_check(q: &Query) -> Result<sluice_wire::ValidCheck, String> {
    let mut limit = serde_json::Map::new();
    limit.insert("key".into(), q.required("key")?.into());
    for field in LIMIT_FIELDS {
        let Some(text) = q.get(field) else { continue };
        let value: serde_json::Value = match field {
            "algorithm" => text.into(),
            _ => text
                .parse::<u64>()
                .map_err(|_| format!("{field}: expected a whole number, got {text:?}"))?
                .into(),
        };
        limit.insert(field.into(), value);
    }
    let body = serde_json::json!({
        "domain": q.required("domain")?,
        "hits": 0,
        "holder": 0,
        "limits": [limit],
    });
    let bytes = serde_json::to_vec(&body).map_err(|e| e.to_string())?;
    // The check's field paths, renamed to the query's parameters.
    parse_check(&bytes).map_err(|e| e.to_string().replace("limits[0].", ""))
}

/// The store item of a limit read at weight 0.
fn item(domain: &str, kl: KeyedLimit) -> StoreItem {
    match kl.rule {
        Rule::Rate(r) => RateItem {
            id: state_id(domain, &kl.key, &r.limit),
            limit: r.limit,
            hits: 0,
            lease: 0,
            returned: 0,
            returned_age: 0,
            reserve: 0,
            block: r.block,
        }
        .into(),
        Rule::Permits { permits, holder } => PermitItem {
            id: permits_id(domain, &kl.key),
            permits,
            holder,
            hits: 0,
        }
        .into(),
    }
}

/// What the decision of a weight-0 check says of the state.
fn state_of(q: &Query, d: &Decision, now_ms: u64, concurrency: bool) -> LimitState {
    let ms = |n: u64| n.div_ceil(MILLISECOND);
    let blocked = matches!(d.denial, Some(Denial::Blocked { .. }));
    LimitState {
        algorithm: q.get("algorithm").unwrap_or_default().to_string(),
        window_ms: q
            .get("window_ms")
            .and_then(|w| w.parse().ok())
            .unwrap_or_default(),
        limit: d.limit,
        remaining: d.remaining,
        reset_ms: ms(d.reset),
        retry_after_ms: (d.retry_after > 0).then(|| ms(d.retry_after)),
        held: concurrency.then(|| d.limit.saturating_sub(d.remaining)),
        blocked_until_ms: blocked.then(|| now_ms.saturating_add(ms(d.retry_after))),
    }
}

async fn key_state<S: Store>(State(st): State<Introspect<S>>, RawQuery(raw): RawQuery) -> Response {
    let Some(inspector) = &st.inspector else {
        return off();
    };
    let mut allowed = vec!["domain", "key"];
    allowed.extend(LIMIT_FIELDS);
    let parsed = Query::parse(raw.as_deref(), &allowed).and_then(|q| {
        q.required("algorithm")?;
        let check = zero_check(&q)?;
        Ok((q, check))
    });
    let (q, mut check) = match parsed {
        Ok(p) => p,
        Err(e) => return error(StatusCode::BAD_REQUEST, e),
    };
    if let Err(e) = st.overrides.apply(&mut check).await {
        return error(StatusCode::SERVICE_UNAVAILABLE, e.to_string());
    }
    let concurrency = check
        .limits
        .iter()
        .any(|kl| matches!(kl.rule, Rule::Permits { .. }));
    let items: Vec<StoreItem> = std::mem::take(&mut check.limits)
        .into_iter()
        .map(|kl| item(&check.domain, kl))
        .collect();
    match st.store.check(&items).await {
        Ok(verdict) => {
            let now_ms = inspector.clock.now() / MILLISECOND;
            let answer = KeyAnswer {
                domain: check.domain.clone(),
                key: inspector
                    .top
                    .display()
                    .show(q.get("key").unwrap_or_default()),
                limits: verdict
                    .decisions
                    .iter()
                    .map(|d| state_of(&q, d, now_ms, concurrency))
                    .collect(),
            };
            json(StatusCode::OK, &answer)
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
