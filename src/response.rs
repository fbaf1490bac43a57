//! The headers of responses: the denial (local reply) and the additions to an
//! admitted request's upstream response.

use crate::config::Plan;
use crate::headers::{push_rate_limit_headers, retry_after_seconds, Reported};
use crate::metrics::ceil_millis;
use sluice_core::{Denial, Nanos};

/// Header naming the rule that denied a request.
pub const RULE_HEADER: &str = "x-sluice-rule";
/// Header listing the shadow rules that would have denied a request.
pub const SHADOW_HEADER: &str = "x-sluice-shadow-denied";
/// Header of a response whose request was held in delay mode: the hold in
/// milliseconds, rounded up.
pub const DELAYED_HEADER: &str = "x-sluice-delayed-ms";

/// The `x-sluice-delayed-ms` header of a request held `delay`.
pub fn delayed_header(delay: Nanos) -> (&'static str, String) {
    (DELAYED_HEADER, ceil_millis(delay).to_string())
}
/// Header giving a denial's reason when retrying cannot help.
pub const REASON_HEADER: &str = "x-sluice-reason";
/// [`REASON_HEADER`]'s value for a request weighing more than the denying
/// limit can ever admit.
pub const COST_EXCEEDS_CAPACITY: &str = "cost-exceeds-capacity";

/// The extra headers of a denial: `retry-after`, the rate-limit headers of the
/// denying limit, `x-sluice-rule`, `x-sluice-reason: cost-exceeds-capacity`
/// when the request weighs more than the limit can ever admit (then
/// `retry-after` is the limit's window), and `x-sluice-shadow-denied` when
/// some shadow rule would have denied too. The configured response headers
/// come from the plan.
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
    if denied.decision.denial == Some(Denial::CostExceedsCapacity) {
        out.push((REASON_HEADER, COST_EXCEEDS_CAPACITY.to_string()));
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse;
    use sluice_core::{Decision, MILLISECOND, SECOND};

    fn plan(headers: &str) -> Plan {
        parse(
            format!(
                r#"{{"domain":"d","headers":"{headers}","rules":[
                    {{"name":"a","key":["path"],"limits":[{{"algorithm":"gcra","requests":5,"window":"10s"}}]}},
                    {{"name":"b","key":["path"],"mode":"shadow","limits":[{{"algorithm":"gcra","requests":5,"window":"10s"}}]}},
                    {{"name":"c","key":["path"],"mode":"shadow","limits":[{{"algorithm":"gcra","requests":5,"window":"10s"}}]}}]}}"#
            )
            .as_bytes(),
        )
        .unwrap()
    }

    fn denied() -> Reported {
        Reported {
            rule: 0,
            window: 10 * SECOND,
            decision: Decision {
                allowed: false,
                limit: 5,
                remaining: 0,
                reset: 9_500 * MILLISECOND,
                retry_after: 1_500 * MILLISECOND,
                delay: 0,
                denial: Some(Denial::OverLimit),
            },
        }
    }

    #[test]
    fn denial_headers_in_order() {
        let headers = denial_headers(&plan("ietf"), &denied(), &[1, 2]);
        let expected: Vec<(&str, String)> = vec![
            ("retry-after", "2".into()),
            ("ratelimit-policy", "\"a\";q=5;w=10".into()),
            ("ratelimit", "\"a\";r=0;t=10".into()),
            (RULE_HEADER, "a".into()),
            (SHADOW_HEADER, "b,c".into()),
        ];
        assert_eq!(headers, expected);
        let none = denial_headers(&plan("none"), &denied(), &[]);
        assert_eq!(
            none,
            vec![
                ("retry-after", "2".to_string()),
                (RULE_HEADER, "a".to_string())
            ]
        );
    }

    #[test]
    fn delayed_header_in_whole_milliseconds_rounded_up() {
        assert_eq!(
            delayed_header(100 * MILLISECOND),
            (DELAYED_HEADER, "100".to_string())
        );
        assert_eq!(
            delayed_header(99_000_001),
            (DELAYED_HEADER, "100".to_string())
        );
    }

    #[test]
    fn a_hopeless_cost_says_why_and_advertises_the_window() {
        let mut hopeless = denied();
        hopeless.decision.retry_after = 0;
        hopeless.decision.denial = Some(Denial::CostExceedsCapacity);
        let headers = denial_headers(&plan("none"), &hopeless, &[]);
        assert_eq!(
            headers,
            vec![
                ("retry-after", "10".to_string()),
                (RULE_HEADER, "a".to_string()),
                (REASON_HEADER, COST_EXCEEDS_CAPACITY.to_string()),
            ]
        );
    }

    #[test]
    fn admitted_headers_only_when_something_to_say() {
        let p = plan("legacy");
        assert!(admitted_headers(&p, None, &[]).is_empty());
        assert_eq!(
            admitted_headers(&p, None, &[2]),
            vec![(SHADOW_HEADER, "c".to_string())]
        );
        let mut ok = denied();
        ok.decision.allowed = true;
        ok.decision.remaining = 3;
        let headers = admitted_headers(&p, Some(&ok), &[]);
        assert_eq!(headers.len(), 3);
        assert_eq!(headers[1], ("x-ratelimit-remaining", "3".to_string()));
    }
}
