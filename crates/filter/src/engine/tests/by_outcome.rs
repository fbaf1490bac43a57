//! Limits counted by the response's outcome (`count_when`): a unit reserved
//! at admission, kept when the response matches (or never comes), given
//! back when it does not.

use super::*;
use crate::config::{CountWhen, Outcome, OutcomeTest};
use crate::engine::cost_reader::{remember_over_limit, CostReader, GlobalSettlement};
use crate::engine::settle::{Adjustment, Owed};
use crate::rls::{encode_request, Descriptor};

/// 5 failed logins (401) a minute per user.
const LOGIN: &str = r#"{"name":"login","key":["header:x-user"],
    "limits":[{"algorithm":"fixed_window","requests":5,"window":"1m","count_when":{"status":["401"]}}]}"#;

fn login(user: &str) -> FakeRequest {
    FakeRequest::get("/login").with("x-user", user)
}

fn owed(v: Verdict) -> Vec<Owed> {
    match v {
        Verdict::Allow(a) => a.owed,
        other => panic!("{other:?}"),
    }
}

/// The response shown to what `owed` owes: `status` (`None`: the stream
/// ended without one), `headers` and `trailers`; the global settlements.
fn respond(
    w: &World,
    owed: Vec<Owed>,
    status: Option<u16>,
    headers: &[(&str, &str)],
    trailers: &[(&str, &str)],
) -> Vec<GlobalSettlement> {
    let mut reader = CostReader::new(owed).unwrap();
    assert!(reader.reads_outcome());
    let find = |list: &[(&str, &str)], name: &str| {
        list.iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.to_string())
    };
    if status.is_some() || !headers.is_empty() {
        reader.on_headers(&w.plan, |n| find(headers, n));
        reader.on_outcome(status, |n| find(headers, n));
        reader.on_trailers(&w.plan, |n| find(trailers, n));
    }
    reader.settle(&w.plan, &w.store, &w.metrics, NOW)
}

/// How many requests of `user` are admitted in a row now (each left
/// unanswered: its unit stays reserved).
fn admitted_in_a_row(w: &World, user: &str) -> usize {
    let mut n = 0;
    while allowed(&w.eval(&login(user))) {
        n += 1;
    }
    n
}

#[test]
fn a_unit_is_reserved_at_admission_and_given_back_when_the_response_does_not_match() {
    let w = World::new(&rules(LOGIN));
    // Five in flight at once take the five units: the sixth is refused
    // before the upstream sees it.
    let flying: Vec<Vec<Owed>> = (0..5).map(|_| owed(w.eval(&login("a")))).collect();
    assert!(!allowed(&w.eval(&login("a"))));
    let mut flying = flying.into_iter();
    for _ in 0..3 {
        let o = flying.next().unwrap();
        assert!(respond(&w, o, Some(200), &[], &[]).is_empty());
    }
    for _ in 0..2 {
        let o = flying.next().unwrap();
        assert!(respond(&w, o, Some(401), &[], &[]).is_empty());
    }
    assert_eq!(w.metrics.count(0, RuleEvent::OutcomeGivenBack), 3);
    assert_eq!(w.metrics.count(0, RuleEvent::OutcomeCounted), 2);
    // The three successes gave their units back; the two failures keep
    // theirs.
    assert_eq!(admitted_in_a_row(&w, "a"), 3);
    // Another user is untouched.
    assert_eq!(admitted_in_a_row(&w, "b"), 5);
}

#[test]
fn successes_never_count_and_failures_stop_at_the_limit() {
    let w = World::new(&rules(LOGIN));
    for _ in 0..50 {
        let o = owed(w.eval(&login("a")));
        respond(&w, o, Some(200), &[], &[]);
    }
    let mut failures = 0;
    for _ in 0..20 {
        match w.eval(&login("a")) {
            Verdict::Allow(a) => {
                failures += 1;
                respond(&w, a.owed, Some(401), &[], &[]);
            }
            Verdict::Deny(d) => assert_eq!(d.report.decision.limit, 5),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(failures, 5);
    assert_eq!(w.metrics.count(0, RuleEvent::OutcomeGivenBack), 50);
    assert_eq!(w.metrics.count(0, RuleEvent::OutcomeCounted), 5);
    assert_eq!(w.metrics.count(0, RuleEvent::Denied), 15);
}

#[test]
fn a_stream_ended_without_a_response_status_keeps_its_unit() {
    let w = World::new(&rules(LOGIN));
    // Ended before the response (client gone, upstream reset, timeout,
    // VM closed): no status shown.
    for _ in 0..2 {
        let o = owed(w.eval(&login("a")));
        respond(&w, o, None, &[], &[]);
    }
    // A reply Envoy made itself is shown as no status too.
    let o = owed(w.eval(&login("a")));
    respond(&w, o, None, &[(":status", "503")], &[]);
    assert_eq!(w.metrics.count(0, RuleEvent::OutcomeCounted), 3);
    assert_eq!(w.metrics.count(0, RuleEvent::OutcomeGivenBack), 0);
    assert_eq!(admitted_in_a_row(&w, "a"), 2);
}

/// A response (status, headers, trailers) and whether it counts.
type Case = (
    u16,
    &'static [(&'static str, &'static str)],
    &'static [(&'static str, &'static str)],
    bool,
);

#[test]
fn statuses_classes_ranges_headers_and_grpc_statuses_are_tested_together() {
    let w = World::new(&rules(
        r#"{"name":"fails","key":["header:x-user"],"limits":[{"algorithm":"fixed_window","requests":100,"window":"1m",
            "count_when":{"status":["403","5xx","200-201"],"header":{"name":"x-login-failed","value":"[0-9]+"},"grpc_status":[7,16]}}]}"#,
    ));
    let cases: &[Case] = &[
        (403, &[("x-login-failed", "1")], &[], true),
        (502, &[("x-login-failed", "1")], &[], true),
        (
            201,
            &[("x-login-failed", "1")],
            &[("grpc-status", "16")],
            true,
        ),
        (
            200,
            &[("x-login-failed", "1"), ("grpc-status", "7")],
            &[],
            true,
        ),
        // gRPC status 0 in the trailers: not counted.
        (
            200,
            &[("x-login-failed", "1")],
            &[("grpc-status", "0")],
            false,
        ),
        // No header, or one whose value does not match: not counted.
        (403, &[], &[], false),
        (403, &[("x-login-failed", "no")], &[], false),
        // A status outside the lists: not counted.
        (401, &[("x-login-failed", "1")], &[], false),
        (202, &[("x-login-failed", "1")], &[], false),
    ];
    for (i, (status, headers, trailers, counted)) in cases.iter().enumerate() {
        let before = w.metrics.count(0, RuleEvent::OutcomeCounted);
        let o = owed(w.eval(&login("a")));
        respond(&w, o, Some(*status), headers, trailers);
        let after = w.metrics.count(0, RuleEvent::OutcomeCounted);
        assert_eq!(after - before, usize::from(*counted), "case {i}");
    }
    assert_eq!(w.metrics.count(0, RuleEvent::OutcomeGivenBack), 5);
}

#[test]
fn what_the_stream_never_showed_counts() {
    let when = CountWhen {
        tests: vec![
            OutcomeTest::Status(vec![(200, 200)]),
            OutcomeTest::GrpcStatus(vec![16]),
        ],
    };
    let outcome = |status, grpc_status| Outcome {
        status,
        header: None,
        grpc_status,
    };
    assert!(when.counts(&outcome(None, None)));
    // The trailers never came: the gRPC status is unknown.
    assert!(when.counts(&outcome(Some(200), None)));
    assert!(!when.counts(&outcome(Some(200), Some(0))));
    assert!(!when.counts(&outcome(Some(500), None)));
}

#[test]
fn a_shadow_rule_that_would_deny_owes_nothing() {
    let w = World::new(&rules(
        &LOGIN.replace(r#""name":"login","#, r#""name":"login","mode":"shadow","#),
    ));
    for _ in 0..5 {
        assert_eq!(owed(w.eval(&login("a"))).len(), 1);
    }
    assert!(owed(w.eval(&login("a"))).is_empty());
    assert_eq!(w.metrics.count(0, RuleEvent::ShadowDenied), 1);
}

/// 5 failed logins a minute per user, at the limiter.
const GLOBAL_LOGIN: &str = r#"{"name":"login","key":["header:x-user"],
    "limits":[{"algorithm":"fixed_window","requests":5,"window":"1m","scope":"global","count_when":{"status":["401"]}}]}"#;

#[test]
fn a_global_limit_is_checked_at_admission_and_refunded_when_the_response_does_not_match() {
    let w = World::new(&rules(GLOBAL_LOGIN));
    let p = pending(w.eval(&login("a")));
    assert_eq!(
        String::from_utf8(p.body(0).to_vec()).unwrap(),
        r#"{"domain":"t","hits":1,"limits":[{"key":"login/0/a","algorithm":"fixed_window","requests":5,"window_ms":60000,"burst":5}]}"#
    );
    let o = owed(w.finish(p, answer(true, 0)));
    let refund = respond(&w, o, Some(200), &[], &[]);
    assert_eq!(refund.len(), 1);
    assert_eq!(refund[0].adjustment, Adjustment::Refund(1));
    assert_eq!(refund[0].limits[0].key, "login/0/a");
    assert_eq!(refund[0].admitted_at, NOW);
    // A failure keeps its unit at the limiter: nothing to send.
    let p = pending(w.eval(&login("a")));
    let o = owed(w.finish(p, answer(true, 0)));
    assert!(respond(&w, o, Some(401), &[], &[]).is_empty());
    // So does a stream that ended without a response.
    let p = pending(w.eval(&login("a")));
    let o = owed(w.finish(p, answer(true, 0)));
    assert!(respond(&w, o, None, &[], &[]).is_empty());
    assert_eq!(w.metrics.count(0, RuleEvent::OutcomeCounted), 2);
    assert_eq!(w.metrics.count(0, RuleEvent::OutcomeGivenBack), 1);
}

#[test]
fn a_global_denial_is_not_cached_since_a_unit_given_back_frees_the_key() {
    let w = World::new(&rules(GLOBAL_LOGIN));
    let p = pending(w.eval(&login("a")));
    assert!(matches!(
        w.finish(p, answer(false, 60_000)),
        Verdict::Deny(_)
    ));
    // Asked again at once: no over-limit cache holds the key.
    assert!(matches!(w.eval(&login("a")), Verdict::Check(_)));
}

#[test]
fn a_global_limit_the_limiter_could_not_count_is_charged_when_the_response_matches() {
    let w = World::new(&rules(GLOBAL_LOGIN));
    let p = pending(w.eval(&login("a")));
    // The call failed; failure_mode allow let it through.
    let o = owed(w.finish(p, None));
    let charge = respond(&w, o, Some(401), &[], &[]);
    assert_eq!(charge.len(), 1);
    assert_eq!(charge[0].adjustment, Adjustment::Charge(1));
    let p = pending(w.eval(&login("a")));
    let o = owed(w.finish(p, None));
    assert!(respond(&w, o, Some(200), &[], &[]).is_empty());
}

fn rls_world(rules: &str) -> World {
    World::new(&format!(
        r#"{{"domain":"t","limiter":{{"cluster":"rls","protocol":"rls","failure_mode":"deny"}},"rules":[{rules}]}}"#
    ))
}

const RLS_LOGIN: &str = r#"{"name":"login","key":["header:x-user"],
    "limits":[{"scope":"global","count_when":{"status":["401"]}}]}"#;

#[test]
fn a_limit_a_service_holds_takes_nothing_at_admission_and_is_charged_at_the_end() {
    let w = rls_world(RLS_LOGIN);
    // No call at admission.
    let o = owed(w.eval(&login("a")));
    let charge = respond(&w, o, Some(401), &[], &[]);
    assert_eq!(charge.len(), 1);
    assert_eq!(charge[0].adjustment, Adjustment::Charge(1));
    assert!(charge[0].limits.is_empty());
    let descriptor = Descriptor {
        entries: vec![
            ("generic_key".into(), "login".into()),
            ("x-user".into(), "a".into()),
        ],
        hits: None,
        limit: None,
    };
    assert_eq!(charge[0].descriptors, vec![descriptor.clone()]);
    assert_eq!(
        encode_request("t", &charge[0].descriptors, 1),
        encode_request("t", &[descriptor], 1)
    );
    // A success is not charged.
    let o = owed(w.eval(&login("a")));
    assert!(respond(&w, o, Some(200), &[], &[]).is_empty());
    // The service's OVER_LIMIT to a charge refuses the key until its reset
    // (a second when the answer does not say).
    let o = owed(w.eval(&login("a")));
    let charge = respond(&w, o, Some(401), &[], &[]);
    let cache = charge[0].cache.clone().unwrap();
    remember_over_limit(&w.store, &cache, Some(&[0x08, 2]), NOW);
    match w.eval(&login("a")) {
        Verdict::Deny(d) => assert_eq!(d.report.decision.retry_after, SECOND),
        other => panic!("{other:?}"),
    }
    assert!(allowed(&w.eval(&login("b"))));
    assert!(allowed(&w.eval_at(&login("a"), NOW + SECOND)));
    // An OK answer caches nothing.
    remember_over_limit(&w.store, &cache, Some(&[0x08, 1]), NOW + SECOND);
    assert!(allowed(&w.eval_at(&login("a"), NOW + SECOND)));
}

/// A `RateLimitResponse` of `overall` code with `headers` to add, and one
/// status (code, remaining, reset seconds) if given.
fn rls_answer(overall: u8, headers: &[(&str, &str)], status: Option<(u8, u8, u8)>) -> Vec<u8> {
    let mut out = vec![0x08, overall];
    if let Some((code, remaining, reset)) = status {
        let status = [
            0x08, code, 0x12, 4, 0x08, 5, 0x10, 2, 0x18, remaining, 0x22, 2, 0x08, reset,
        ];
        out.extend([0x12, status.len() as u8]);
        out.extend(status);
    }
    for (name, value) in headers {
        let mut header = vec![0x0a, name.len() as u8];
        header.extend(name.bytes());
        header.extend([0x12, value.len() as u8]);
        header.extend(value.bytes());
        out.extend([0x1a, header.len() as u8]);
        out.extend(header);
    }
    out
}

#[test]
fn a_charge_the_service_admits_leaving_nothing_refuses_the_key_until_its_reset() {
    let cases = [
        // Limitador's draft 03 headers.
        (
            rls_answer(
                1,
                &[("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", "30")],
                None,
            ),
            Some(30),
        ),
        (
            rls_answer(
                1,
                &[("x-ratelimit-remaining", "1"), ("x-ratelimit-reset", "30")],
                None,
            ),
            None,
        ),
        // A status per descriptor (envoyproxy/ratelimit, sluice-limiter).
        (rls_answer(1, &[], Some((1, 0, 20))), Some(20)),
        (rls_answer(1, &[], Some((1, 2, 20))), None),
        // Over the limit, the reset the headers give.
        (
            rls_answer(2, &[("x-ratelimit-reset", "40")], None),
            Some(40),
        ),
        // An OK that says nothing caches nothing.
        (rls_answer(1, &[], None), None),
    ];
    for (i, (answer, refused_for)) in cases.into_iter().enumerate() {
        let w = rls_world(RLS_LOGIN);
        let o = owed(w.eval(&login("a")));
        let cache = respond(&w, o, Some(401), &[], &[])[0]
            .cache
            .clone()
            .unwrap();
        remember_over_limit(&w.store, &cache, Some(&answer), NOW);
        match (w.eval(&login("a")), refused_for) {
            (Verdict::Deny(d), Some(s)) => {
                assert_eq!(d.report.decision.retry_after, s * SECOND, "case {i}")
            }
            (Verdict::Allow(_), None) => {}
            (other, _) => panic!("case {i}: {other:?}"),
        }
    }
}

#[test]
fn configuration_errors_name_the_field() {
    let limit = |extra: &str| {
        format!(
            r#"{{"name":"r","key":["client_ip"],"limits":[{{"algorithm":"fixed_window","requests":5,"window":"1m"}},{{"algorithm":"fixed_window","requests":5,"window":"1m",{extra}}}]}}"#
        )
    };
    let when = r#""count_when":{"status":["401"]}"#;
    let cases = [
        (
            limit(r#""count_when":{"status":["401","5xx","6xx"]}"#),
            "rules[0].limits[1].count_when.status[2]",
        ),
        (
            limit(r#""count_when":{"status":["504-500"]}"#),
            "rules[0].limits[1].count_when.status[0]",
        ),
        (
            limit(r#""count_when":{"status":["40"]}"#),
            "rules[0].limits[1].count_when.status[0]",
        ),
        (
            limit(r#""count_when":{"status":[]}"#),
            "rules[0].limits[1].count_when.status",
        ),
        (limit(r#""count_when":{}"#), "rules[0].limits[1].count_when"),
        (
            limit(r#""count_when":{"grpc_status":[3,17]}"#),
            "rules[0].limits[1].count_when.grpc_status[1]",
        ),
        (
            limit(r#""count_when":{"header":{"name":"x","value":"("}}"#),
            "rules[0].limits[1].count_when.header.value",
        ),
        (
            limit(&format!(r#""on_exceed":"delay","max_delay":"1s",{when}"#)),
            "rules[0].limits[1].on_exceed",
        ),
        (
            limit(&format!(
                r#""scope":"global","sync":{{"mode":"coalesce"}},{when}"#
            )),
            "rules[0].limits[1].sync",
        ),
        (
            limit(&format!(
                r#""scope":"global","sync":{{"mode":"lease","max_share":"50%","ttl":"1s"}},{when}"#
            )),
            "rules[0].limits[1].sync",
        ),
        (
            format!(r#"{{"name":"r","key":["client_ip"],"limits":[{{"concurrency":3,{when}}}]}}"#),
            "rules[0].limits[0].concurrency",
        ),
        (
            format!(
                r#"{{"name":"r","key":["client_ip"],"limits":[{{"algorithm":"fixed_window","requests":5,"window":"1m","elastic":{{"ceiling":9,"pool":"p"}},{when}}}]}},
                   {{"name":"p","key":["client_ip"],"limits":[{{"algorithm":"fixed_window","requests":50,"window":"1m"}}]}}"#
            ),
            "rules[0].limits[0].elastic",
        ),
        (
            format!(
                r#"{{"name":"r","key":["client_ip"],"cost":{{"estimate":1,"response":"header:x-cost"}},"limits":[{{"algorithm":"fixed_window","requests":5,"window":"1m",{when}}}]}}"#
            ),
            "rules[0].limits[0].count_when",
        ),
    ];
    for (rule, field) in cases {
        let err = parse(rules(&rule).as_bytes()).unwrap_err();
        assert_eq!(err.path, field, "{rule}: {err}");
    }
}

#[test]
fn only_rules_with_a_limit_counted_by_outcome_have_its_counters() {
    let w = World::new(&rules(&format!(
        r#"{LOGIN},{{"name":"plain","key":["path"],"limits":[{{"algorithm":"gcra","requests":10,"window":"1m"}}]}}"#
    )));
    let (login, plain) = (&w.plan.rules[0], &w.plan.rules[1]);
    for event in [RuleEvent::OutcomeCounted, RuleEvent::OutcomeGivenBack] {
        assert!(event.applies_to(login));
        assert!(!event.applies_to(plain));
    }
    assert_eq!(
        RuleEvent::OutcomeCounted.metric_name("login"),
        "sluice.login.outcome_counted"
    );
    assert_eq!(
        RuleEvent::OutcomeGivenBack.metric_name("login"),
        "sluice.login.outcome_given_back"
    );
}
