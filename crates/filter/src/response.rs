//! The headers of responses: the denial (local reply) and the additions to an
//! admitted request's upstream response.

use crate::config::Plan;
use crate::headers::{next_quota, push_rate_limit_headers, retry_after_seconds, Named, Reported};
use crate::metrics::ceil_millis;
use sluice_core::{Algorithm, Denial, Nanos};

/// Header naming the rule that denied a request.
pub const RULE_HEADER: &str = "x-sluice-rule";
/// Header listing the shadow rules that would have denied a request.
pub const SHADOW_HEADER: &str = "x-sluice-shadow-denied";
/// Header of a response whose request was held in delay mode: the hold in
/// milliseconds, rounded up.
pub const DELAYED_HEADER: &str = "x-sluice-delayed-ms";
/// Header Envoy's own rate-limit filters put on their denials (`true`), for
/// access logs and clients that know it.
pub const ENVOY_RATELIMITED_HEADER: &str = "x-envoy-ratelimited";

/// The `x-sluice-delayed-ms` header of a request held `delay`.
pub fn delayed_header(delay: Nanos) -> (&'static str, String) {
    (DELAYED_HEADER, ceil_millis(delay).to_string())
}
/// Header giving a denial's reason when retrying cannot help.
pub const REASON_HEADER: &str = "x-sluice-reason";
/// [`REASON_HEADER`]'s value for a request weighing more than the denying
/// limit can ever admit.
pub const COST_EXCEEDS_CAPACITY: &str = "cost-exceeds-capacity";

/// The extra headers of a denial: `retry-after` (never earlier than the IETF
/// `t`), the rate-limit headers (the policies of `applied`, the state of the
/// denying limit), `x-envoy-ratelimited: true`, `x-sluice-rule`,
/// `x-sluice-reason: cost-exceeds-capacity` when the request weighs more than
/// the limit can ever admit (then `retry-after` is the limit's window), and
/// `x-sluice-shadow-denied` when some shadow rule would have denied too. The
/// configured response headers come from the plan.
///
/// A denial by a rate limit service that reported no quota and no wait has
/// `retry-after` only when the service said one otherwise (`service_wait`,
/// in seconds).
pub fn denial_headers(
    plan: &Plan,
    denied: &Reported,
    applied: &[Reported],
    shadow_denied: &[usize],
    service_wait: Option<u64>,
) -> Vec<(&'static str, String)> {
    let mut out = Vec::with_capacity(9);
    let t = next_quota(denied, algorithm(plan, denied));
    let unknown = denied.decision.limit == 0 && denied.decision.retry_after == 0;
    let wait = if unknown {
        service_wait
    } else {
        Some(retry_after_seconds(denied, t))
    };
    if let Some(wait) = wait {
        out.push(("retry-after", wait.to_string()));
    }
    push_limits(plan, denied, applied, t, &mut out);
    out.push((ENVOY_RATELIMITED_HEADER, "true".to_string()));
    out.push((RULE_HEADER, rule_name(plan, denied.rule).to_string()));
    if denied.decision.denial == Some(Denial::CostExceedsCapacity) {
        out.push((REASON_HEADER, COST_EXCEEDS_CAPACITY.to_string()));
    }
    push_shadow(plan, shadow_denied, &mut out);
    out
}

/// `ours` with the headers a rate limit service asked for: a header the
/// service sends replaces ours of that name.
pub fn with_service_headers<'a>(
    ours: impl Iterator<Item = (&'a str, &'a str)>,
    service: &'a [(String, String)],
) -> Vec<(&'a str, &'a str)> {
    let mut out: Vec<(&str, &str)> = ours
        .filter(|(name, _)| !service.iter().any(|(s, _)| s.eq_ignore_ascii_case(name)))
        .collect();
    out.extend(service.iter().map(|(n, v)| (n.as_str(), v.as_str())));
    out
}

/// The headers added to an admitted request's response: the rate-limit
/// headers (the policies of `applied`, the state of `report`, the most
/// restrictive; none when no enforcing rule counted the request), and
/// `x-sluice-shadow-denied`.
pub fn admitted_headers(
    plan: &Plan,
    report: Option<&Reported>,
    applied: &[Reported],
    shadow_denied: &[usize],
) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    if let Some(report) = report {
        let t = next_quota(report, algorithm(plan, report));
        push_limits(plan, report, applied, t, &mut out);
    }
    push_shadow(plan, shadow_denied, &mut out);
    out
}

/// The rate-limit headers of `current` among `applied` (each limit once, in
/// order; `current` too if missing).
fn push_limits(
    plan: &Plan,
    current: &Reported,
    applied: &[Reported],
    t: Nanos,
    out: &mut Vec<(&'static str, String)>,
) {
    let mut named: Vec<Named<'_>> = Vec::with_capacity(applied.len().saturating_add(1));
    for reported in applied.iter().chain(std::iter::once(current)) {
        let seen = named
            .iter()
            .any(|n| n.reported.rule == reported.rule && n.reported.limit == reported.limit);
        if !seen {
            named.push(name(plan, reported));
        }
    }
    push_rate_limit_headers(plan.headers, &named, &name(plan, current), t, out);
}

/// `reported`'s limit by its IETF name: its configured `name`, else its
/// rule's name, with the limit's index when the rule has several.
pub(crate) fn name<'a>(plan: &'a Plan, reported: &'a Reported) -> Named<'a> {
    let rule = plan.rules.get(reported.rule);
    let configured = rule
        .and_then(|r| r.limits.get(reported.limit))
        .and_then(|l| l.name.as_deref());
    if let Some(name) = configured {
        return Named {
            rule: name,
            index: None,
            reported,
        };
    }
    Named {
        rule: rule.map_or("", |r| r.name.as_str()),
        index: rule
            .is_some_and(|r| r.limits.len() > 1)
            .then_some(reported.limit),
        reported,
    }
}

fn algorithm(plan: &Plan, reported: &Reported) -> Option<Algorithm> {
    plan.rules
        .get(reported.rule)
        .and_then(|r| r.limits.get(reported.limit))
        .map(|l| l.limit().algorithm)
}

/// The name of rule `rule`.
pub fn rule_name(plan: &Plan, rule: usize) -> &str {
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
            limit: 0,
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
        let headers = denial_headers(&plan("ietf"), &denied(), &[], &[1, 2], None);
        let expected: Vec<(&str, String)> = vec![
            ("retry-after", "2".into()),
            ("ratelimit-policy", "\"a\";q=5;w=10".into()),
            ("ratelimit", "\"a\";r=0;t=2".into()),
            (ENVOY_RATELIMITED_HEADER, "true".into()),
            (RULE_HEADER, "a".into()),
            (SHADOW_HEADER, "b,c".into()),
        ];
        assert_eq!(headers, expected);
        let none = denial_headers(&plan("none"), &denied(), &[], &[], None);
        assert_eq!(
            none,
            vec![
                ("retry-after", "2".to_string()),
                (ENVOY_RATELIMITED_HEADER, "true".to_string()),
                (RULE_HEADER, "a".to_string())
            ]
        );
    }

    #[test]
    fn policies_name_each_limit_once() {
        let p = parse(
            br#"{"domain":"d","headers":"ietf","rules":[
                {"name":"a","key":["path"],"limits":[{"algorithm":"gcra","requests":5,"window":"10s"}]},
                {"name":"m","key":["path"],"limits":[
                    {"algorithm":"gcra","requests":5,"window":"10s"},
                    {"name":"hourly","algorithm":"fixed_window","requests":100,"window":"1h"}]}]}"#,
        )
        .unwrap();
        let first = denied();
        let mut second = denied();
        second.rule = 1;
        let mut third = denied();
        third.rule = 1;
        third.limit = 1;
        third.window = 3_600 * SECOND;
        third.decision.limit = 100;
        let headers = denial_headers(&p, &third, &[first, second, first, third], &[], None);
        assert_eq!(
            headers[1],
            (
                "ratelimit-policy",
                "\"a\";q=5;w=10, \"m.0\";q=5;w=10, \"hourly\";q=100;w=3600".to_string()
            )
        );
        assert_eq!(headers[2], ("ratelimit", "\"hourly\";r=0;t=2".to_string()));
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
        let headers = denial_headers(&plan("none"), &hopeless, &[], &[], None);
        assert_eq!(
            headers,
            vec![
                ("retry-after", "10".to_string()),
                (ENVOY_RATELIMITED_HEADER, "true".to_string()),
                (RULE_HEADER, "a".to_string()),
                (REASON_HEADER, COST_EXCEEDS_CAPACITY.to_string()),
            ]
        );
    }

    #[test]
    fn admitted_headers_only_when_something_to_say() {
        let p = plan("legacy");
        assert!(admitted_headers(&p, None, &[], &[]).is_empty());
        assert_eq!(
            admitted_headers(&p, None, &[], &[2]),
            vec![(SHADOW_HEADER, "c".to_string())]
        );
        let mut ok = denied();
        ok.decision.allowed = true;
        ok.decision.remaining = 3;
        let headers = admitted_headers(&p, Some(&ok), &[ok], &[]);
        assert_eq!(headers.len(), 3);
        assert_eq!(headers[1], ("x-ratelimit-remaining", "3".to_string()));
    }

    #[test]
    fn a_denial_with_nothing_known_says_only_what_the_service_said() {
        let mut unknown = denied();
        unknown.decision.limit = 0;
        unknown.decision.retry_after = 0;
        let plan = plan("both");
        let none = denial_headers(&plan, &unknown, &[], &[], None);
        assert!(none.iter().all(|(n, _)| *n != "retry-after"), "{none:?}");
        assert!(
            none.iter().all(|(n, _)| !n.contains("ratelimit-")),
            "{none:?}"
        );
        let told = denial_headers(&plan, &unknown, &[], &[], Some(42));
        assert_eq!(told.first(), Some(&("retry-after", "42".to_string())));
    }

    #[test]
    fn service_headers_replace_ours_of_the_same_name() {
        let service = vec![
            ("content-type".to_string(), "application/json".to_string()),
            ("x-ratelimit-limit".to_string(), "5".to_string()),
        ];
        let ours = [
            ("Content-Type", "text/plain"),
            ("retry-after", "3"),
            ("x-ratelimit-limit", "9"),
        ];
        let merged = with_service_headers(ours.into_iter(), &service);
        assert_eq!(
            merged,
            [
                ("retry-after", "3"),
                ("content-type", "application/json"),
                ("x-ratelimit-limit", "5")
            ]
        );
    }
}
