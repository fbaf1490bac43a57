//! The quota endpoint (`quota_endpoint`): a request to its path is answered
//! here, never sent upstream, with the caller's own quota under each limit
//! of the rules that apply to it ([`crate::engine::quota`]), consuming
//! nothing. Local limits are read from shared data at once; global ones are
//! asked of the limiter in one check of weight 0, and the request waits for
//! its answer ([`Phase::Quota`]).
//!
//! Cost: a request that is not for the path pays one host call (its
//! `:path`) and one compare; a poll of the path, besides its reply, reads
//! its method, the clock and its headers (once), what its rules' keys read
//! beyond headers, and per local limit the shared data a request of its key
//! would read (one or two gets, never a set); with global limits, one call
//! to the limiter.

use super::host::{Action, Host, LocalReply, Map};
use super::limiter::{dispatch, http_answer};
use super::parts::{Asking, Headers, Shared};
use super::request::{Phase, Request, View};
use super::worker::Worker;
use crate::config::Plan;
use crate::decimal::push_u64;
use crate::engine::quota::{self, Figures, Quota};
use crate::headers::{ceil_seconds, next_quota, Reported};
use crate::response;
use sluice_core::{Decision, Nanos, SECOND};
use sluice_wire::{check_json, CheckResponse};

/// The limiter did not answer the check of the global limits.
const NO_ANSWER: &str = "the limiter did not answer";

/// Answers a request for the quota endpoint, whose path came with `query`.
pub(super) fn serve<H: Host>(
    host: &mut H,
    req: &mut Request<H>,
    runtime: &Shared<H>,
    query: &str,
) -> Action {
    req.phase = Phase::Decided;
    let method = host.header(Map::RequestHeaders, ":method");
    if !matches!(method.as_deref(), Some("GET" | "HEAD")) {
        let body = br#"{"error":"method not allowed: GET or HEAD"}"#;
        let headers = [("allow", "GET, HEAD"), ("content-type", "application/json")];
        send(host, 405, &headers, body);
        return Action::Pause;
    }
    let now = host.now();
    // The caller's headers, with the path and method it names (none when
    // it names no path): the request the rules are asked about.
    let mut headers = host.request_headers();
    headers.retain(|(name, _)| name != ":path" && name != ":method");
    let named = param(query, "path");
    if let Some(path) = named {
        let method = param(query, "method").unwrap_or("GET");
        headers.push((":path".into(), path.into()));
        headers.push((":method".into(), method.into()));
    }
    let shown: Headers = headers.into();
    let view = View {
        host: &*host,
        shown: Some(&shown),
        body_size: 0,
    };
    let plan = &runtime.plan;
    let named = named.is_some();
    let found = quota::quotas(plan, &runtime.hasher, &view, &*host, now, named);
    let mut quotas = found.limits;
    if !found.asks.is_empty() {
        let body = check_json(&plan.domain, 0, &found.asks, None, None);
        if let Some(token) = dispatch(host, runtime, &body) {
            req.phase = Phase::Quota(Asking { token, quotas, now });
            return Action::Pause;
        }
        fill(&mut quotas, None, now);
    }
    reply(host, runtime, &quotas, now);
    Action::Pause
}

/// The answer to the check of `asking` (`body_size`: an HTTP answer's
/// body; `None`: the call failed).
pub(super) fn answered<H: Host>(
    w: &mut Worker<H>,
    host: &mut H,
    runtime: &Shared<H>,
    asking: Asking,
    body_size: Option<usize>,
) {
    let Asking {
        mut quotas, now, ..
    } = asking;
    let body = body_size.and_then(|size| http_answer(w, host, Some(runtime), size));
    let asked = quotas.iter().filter(|q| is_ask(q)).count();
    let answer = body.and_then(|b| CheckResponse::parse(&b, asked));
    fill(&mut quotas, answer.as_ref(), now);
    reply(host, runtime, &quotas, now);
}

/// Puts the limiter's answer (`None`: none) in the quotas asked of it, in
/// order; a limit the answer says is blocked ends its block after its
/// `retry_after` from `now`.
fn fill(quotas: &mut [Quota], answer: Option<&CheckResponse>, now: Nanos) {
    let mut results = answer.map(|a| a.limits.iter());
    for q in quotas.iter_mut().filter(|q| is_ask(q)) {
        let result = results.as_mut().and_then(Iterator::next);
        q.figures = match (&q.figures, result) {
            (Figures::Ask { window, algorithm }, Some(r)) => Figures::Rate {
                decision: r.decision(),
                window: *window,
                algorithm: *algorithm,
                blocked_until: r
                    .blocked
                    .then(|| now.saturating_add(r.decision().retry_after)),
            },
            (_, _) => Figures::Unknown(NO_ANSWER),
        };
    }
}

fn is_ask(q: &Quota) -> bool {
    matches!(q.figures, Figures::Ask { .. })
}

/// The raw value of query parameter `name`, if present and not empty.
fn param<'q>(query: &'q str, name: &str) -> Option<&'q str> {
    query.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=')?;
        (k == name && !v.is_empty()).then_some(v)
    })
}

/// Sends the quotas as seen at `now`.
fn reply<H: Host>(host: &mut H, runtime: &Shared<H>, quotas: &[Quota], now: Nanos) {
    let plan = &runtime.plan;
    // Names (domain, rules, limits, algorithms) are of letters, digits,
    // `_`, `.` and `-`, and reasons are fixed: nothing to escape.
    let mut body = String::with_capacity(64 + 256 * quotas.len());
    body.push_str(r#"{"domain":""#);
    body.push_str(&plan.domain);
    body.push_str(r#"","limits":["#);
    for (i, q) in quotas.iter().enumerate() {
        if i > 0 {
            body.push(',');
        }
        render(&mut body, plan, q, now);
    }
    body.push_str("]}");
    let headers = [
        ("content-type", "application/json"),
        ("cache-control", "no-store"),
    ];
    send(host, 200, &headers, body.as_bytes());
}

fn send<H: Host>(host: &mut H, status: u32, headers: &[(&str, &str)], body: &[u8]) {
    let reply = LocalReply::Http {
        status,
        headers: headers.to_vec(),
        body,
    };
    if !host.reply(reply) {
        log::warn!("sluice: cannot answer the quota endpoint");
    }
}

/// Appends `"name":"text"` (after a comma unless first in its object).
fn text(out: &mut String, name: &str, value: &str) {
    field(out, name);
    out.push('"');
    out.push_str(value);
    out.push('"');
}

/// Appends `"name":n`.
fn number(out: &mut String, name: &str, value: u64) {
    field(out, name);
    push_u64(out, value);
}

fn field(out: &mut String, name: &str) {
    if !out.ends_with('{') {
        out.push(',');
    }
    out.push('"');
    out.push_str(name);
    out.push_str("\":");
}

/// Appends one limit's object: its rule, name and scope, then its figures.
fn render(out: &mut String, plan: &Plan, q: &Quota, now: Nanos) {
    out.push('{');
    let rule = plan.rules.get(q.rule).map_or("", |r| r.name.as_str());
    text(out, "rule", rule);
    let reported = Reported {
        rule: q.rule,
        limit: q.limit,
        window: 0,
        decision: Decision::over_limit(0, 0),
    };
    text(out, "name", &response::name(plan, &reported).name());
    text(out, "scope", if q.global { "global" } else { "local" });
    let shadow = plan.rules.get(q.rule).is_some_and(|r| r.shadow);
    text(out, "mode", if shadow { "shadow" } else { "enforce" });
    match &q.figures {
        Figures::Rate {
            decision: d,
            window,
            algorithm,
            blocked_until,
        } => {
            let reported = Reported {
                window: *window,
                decision: *d,
                ..reported
            };
            let next = next_quota(&reported, Some(*algorithm));
            text(out, "algorithm", algorithm.name());
            number(out, "limit", d.limit);
            number(out, "remaining", d.remaining);
            number(out, "used", d.limit.saturating_sub(d.remaining));
            number(out, "reset", ceil_seconds(d.reset));
            // Counted from the poll's second, as a header's reset counts
            // from its request's: a fixed window's end, a block's end.
            let second = now / SECOND;
            number(
                out,
                "reset_at",
                second.saturating_add(ceil_seconds(d.reset)),
            );
            number(out, "next", ceil_seconds(next));
            number(out, "window", ceil_seconds(*window));
            if let Some(end) = blocked_until {
                let wait = ceil_seconds(end.saturating_sub(now));
                number(out, "blocked_until", second.saturating_add(wait));
            }
        }
        Figures::Permits { in_flight, cap } => {
            text(out, "algorithm", "concurrency");
            number(out, "limit", *cap);
            number(out, "remaining", cap.saturating_sub(*in_flight));
            number(out, "in_flight", *in_flight);
        }
        Figures::Ask { .. } => unknown(out, NO_ANSWER),
        Figures::Unknown(reason) => unknown(out, reason),
    }
    out.push('}');
}

/// Appends a `remaining` of `null` and its reason.
fn unknown(out: &mut String, reason: &str) {
    field(out, "remaining");
    out.push_str("null");
    text(out, "reason", reason);
}
