//! The headers of responses: the denial (local reply) and the additions to an
//! admitted request's upstream response.

use crate::config::Plan;
use crate::headers::{push_rate_limit_headers, retry_after_seconds, Reported};

/// Header naming the rule that denied a request.
pub const RULE_HEADER: &str = "x-sluice-rule";
/// Header listing the shadow rules that would have denied a request.
pub const SHADOW_HEADER: &str = "x-sluice-shadow-denied";

/// The extra headers of a denial: `retry-after`, the rate-limit headers of the
/// denying limit, `x-sluice-rule`, and `x-sluice-shadow-denied` when some
/// shadow rule would have denied too. The configured response headers come
/// from the plan.
pub fn denial_headers(
    plan: &Plan,
    denied: &Reported,
    shadow_denied: &[usize],
) -> Vec<(&'static str, String)> {
    let mut out = Vec::with_capacity(8);
    out.push(("retry-after", retry_after_seconds(denied).to_string()));
    let name = rule_name(plan, denied.rule);
    push_rate_limit_headers(plan.headers, name, denied, &mut out);
    out.push((RULE_HEADER, name.to_string()));
    push_shadow(plan, shadow_denied, &mut out);
    out
}

/// The headers added to an admitted request's response: the rate-limit
/// headers of the most restrictive limit (none when no enforcing rule
/// counted the request), and `x-sluice-shadow-denied`.
pub fn admitted_headers(
    plan: &Plan,
    report: Option<&Reported>,
    shadow_denied: &[usize],
) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    if let Some(report) = report {
        push_rate_limit_headers(plan.headers, rule_name(plan, report.rule), report, &mut out);
    }
    push_shadow(plan, shadow_denied, &mut out);
    out
}

fn rule_name(plan: &Plan, rule: usize) -> &str {
    plan.rules.get(rule).map_or("", |r| r.name.as_str())
}

fn push_shadow(plan: &Plan, shadow_denied: &[usize], out: &mut Vec<(&'static str, String)>) {
    if shadow_denied.is_empty() {
        return;
    }
    let mut names = String::new();
    for (i, &rule) in shadow_denied.iter().enumerate() {
        if i > 0 {
            names.push(',');
        }
        names.push_str(rule_name(plan, rule));
    }
    out.push((SHADOW_HEADER, names));
}
