//! Global limits held by a rate limit service (`protocol: rls`).

use super::*;
use crate::rls::{decode_response, encode_request, Descriptor};

fn rls_world(rules: &str) -> World {
    World::new(&format!(
        r#"{{"domain":"t","limiter":{{"cluster":"rls","protocol":"rls","failure_mode":"deny"}},"rules":[{rules}]}}"#
    ))
}

const PER_IP: &str = r#"{"name":"per-ip","key":["client_ip"],"limits":[{"scope":"global"}]}"#;

/// A response: overall code, then (code, requests_per_unit, unit,
/// remaining, reset seconds) per status.
fn answer(overall: u8, statuses: &[(u8, u8, u8, u8, u8)]) -> Vec<u8> {
    let mut out = vec![0x08, overall];
    for &(code, per_unit, unit, remaining, reset) in statuses {
        let status = [
            0x08, code, 0x12, 4, 0x08, per_unit, 0x10, unit, 0x18, remaining, 0x22, 2, 0x08, reset,
        ];
        out.push(0x12);
        out.push(status.len() as u8);
        out.extend_from_slice(&status);
    }
    out
}

#[test]
fn the_call_carries_the_descriptor_of_each_global_limit() {
    let w = rls_world(PER_IP);
    let p = pending(w.eval(&FakeRequest::get("/")));
    let expected = encode_request(
        "t",
        &[Descriptor {
            entries: vec![
                ("generic_key".into(), "per-ip".into()),
                ("remote_address".into(), "203.0.113.7".into()),
            ],
            hits: None,
            limit: None,
        }],
        1,
    );
    assert_eq!(p.body(0), expected.as_slice());
}

#[test]
fn an_answer_reports_the_services_limit_and_window() {
    let w = rls_world(PER_IP);
    let mut p = pending(w.eval(&FakeRequest::get("/")));
    assert!(p.record(0, Some(&answer(1, &[(1, 100, 2, 41, 30)]))));
    match finish(&w.plan, p, &w.store, &w.metrics) {
        Verdict::Allow(a) => {
            let r = a.report.unwrap();
            assert_eq!(r.window, 60 * SECOND);
            assert_eq!((r.decision.limit, r.decision.remaining), (100, 41));
            assert_eq!(r.decision.reset, 30 * SECOND);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn an_over_limit_answer_denies_and_is_cached_until_the_reset() {
    let w = rls_world(PER_IP);
    let mut p = pending(w.eval(&FakeRequest::get("/")));
    p.record(0, Some(&answer(2, &[(2, 10, 1, 0, 1)])));
    match finish(&w.plan, p, &w.store, &w.metrics) {
        Verdict::Deny(d) => assert_eq!(d.report.decision.retry_after, SECOND),
        other => panic!("{other:?}"),
    }
    // Denied from the cache without a call, reporting no quota.
    match w.eval(&FakeRequest::get("/")) {
        Verdict::Deny(d) => assert_eq!(d.report.decision.limit, 0),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        w.eval_at(&FakeRequest::get("/"), NOW + 2 * SECOND),
        Verdict::Check(_)
    ));
}

#[test]
fn a_failed_or_malformed_answer_applies_the_failure_mode() {
    let w = rls_world(PER_IP);
    // No answer, an unreadable one, an UNKNOWN overall code.
    for body in [None, Some(vec![0x08]), Some(answer(0, &[(2, 1, 1, 0, 1)]))] {
        let mut p = pending(w.eval(&FakeRequest::get("/")));
        p.record(0, body.as_deref());
        assert_eq!(p.unreadable(0), body.is_some());
        assert!(matches!(
            finish(&w.plan, p, &w.store, &w.metrics),
            Verdict::Deny(_)
        ));
    }
    assert_eq!(w.metrics.count_global(GlobalEvent::LimiterErrors), 3);
}

#[test]
fn weights_go_in_hits_addend() {
    let w = rls_world(
        r#"{"name":"heavy","key":["client_ip"],"cost":3,"limits":[{"scope":"global"}]},
           {"name":"site","key":["const:all"],"limits":[{"scope":"global","descriptor":[{"key":"site","value":"all"}]}]}"#,
    );
    let p = pending(w.eval(&FakeRequest::get("/")));
    let expected = encode_request(
        "t",
        &[
            Descriptor {
                entries: vec![
                    ("generic_key".into(), "heavy".into()),
                    ("remote_address".into(), "203.0.113.7".into()),
                ],
                hits: None,
                limit: None,
            },
            Descriptor {
                entries: vec![("site".into(), "all".into())],
                hits: Some(1),
                limit: None,
            },
        ],
        3,
    );
    assert_eq!(p.body(0), expected.as_slice());
    assert!(decode_response(&answer(1, &[(1, 1, 1, 1, 1), (1, 1, 1, 1, 1)]), 2).is_some());
}

/// Limitador's answers: the overall code only.
#[test]
fn an_answer_without_statuses_is_decided_by_its_overall_code() {
    let w = rls_world(PER_IP);
    let mut p = pending(w.eval(&FakeRequest::get("/")));
    assert!(p.record(0, Some(&answer(1, &[]))));
    assert!(!p.unreadable(0));
    match finish(&w.plan, p, &w.store, &w.metrics) {
        // Admitted, with no quota to report.
        Verdict::Allow(a) => assert_eq!(a.report.map(|r| r.decision.limit), Some(0)),
        other => panic!("{other:?}"),
    }
    let mut p = pending(w.eval(&FakeRequest::get("/")));
    p.record(0, Some(&answer(2, &[])));
    assert_eq!(p.take_reply().and_then(|r| r.retry_after), None);
    match finish(&w.plan, p, &w.store, &w.metrics) {
        Verdict::Deny(d) => {
            assert_eq!(d.report.decision.limit, 0);
            assert_eq!(d.report.decision.retry_after, 0);
        }
        other => panic!("{other:?}"),
    }
    // Nothing said when to retry: the denial is not cached.
    assert!(matches!(w.eval(&FakeRequest::get("/")), Verdict::Check(_)));
    assert_eq!(w.metrics.count_global(GlobalEvent::LimiterErrors), 0);
    assert_eq!(w.metrics.count_global(GlobalEvent::FailureModeAllowed), 0);
}

#[test]
fn an_answer_whose_statuses_disagree_with_its_overall_code_follows_the_code() {
    let w = rls_world(PER_IP);
    // OK overall, a denying status: admitted.
    let mut p = pending(w.eval(&FakeRequest::get("/")));
    p.record(0, Some(&answer(1, &[(2, 10, 1, 0, 1)])));
    assert!(matches!(
        finish(&w.plan, p, &w.store, &w.metrics),
        Verdict::Allow(_)
    ));
    // OVER_LIMIT overall, no denying status: denied, no quota reported.
    let mut p = pending(w.eval(&FakeRequest::get("/")));
    p.record(0, Some(&answer(2, &[(1, 10, 1, 5, 1)])));
    match finish(&w.plan, p, &w.store, &w.metrics) {
        Verdict::Deny(d) => assert_eq!(d.report.decision.limit, 0),
        other => panic!("{other:?}"),
    }
}
