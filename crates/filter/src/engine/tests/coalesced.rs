//! Checks shared by several requests (coalescing).

use super::*;

const COALESCED: &str = r#"{"name":"g","key":["client_ip"],"limits":[
    {"algorithm":"gcra","requests":100,"window":"1h","scope":"global","sync":{"mode":"coalesce"}}]}"#;

fn batch_answer(admitted: u32, delays: &str) -> String {
    let all = admitted == 3;
    format!(
        r#"{{"allowed":{all},"limits":[{{"allowed":{all},"limit":100,"remaining":0,"reset_ms":5000,"retry_after_ms":{}}}],"admitted":{admitted}{delays}}}"#,
        if all { 0 } else { 700 }
    )
}

#[test]
fn only_coalescing_enforcing_checks_share_calls() {
    let w = World::new(&rules(COALESCED));
    let p = pending(w.eval(&FakeRequest::get("/")));
    assert_eq!(p.coalescable(), Some(p.body(0)));
    // The same check from another client is another group.
    let mut other = FakeRequest::get("/");
    other.source = Some("198.51.100.1:1".into());
    let q = pending(w.eval(&other));
    assert_ne!(q.coalescable(), p.coalescable());
    // Per-request limits, shadow rules and elastic limits call alone.
    for json in [
        GLOBAL,
        r#"{"name":"s","mode":"shadow","key":["client_ip"],"limits":[{"algorithm":"gcra","requests":100,"window":"1h","scope":"global","sync":{"mode":"coalesce"}}]}"#,
        r#"{"name":"e","key":["client_ip"],"limits":[{"algorithm":"gcra","requests":100,"window":"1h","scope":"global","sync":{"mode":"coalesce"},"elastic":{"ceiling":200,"pool":"p"}}]},
           {"name":"p","key":["const:p"],"limits":[{"algorithm":"gcra","requests":100,"window":"1h","scope":"global"}]}"#,
    ] {
        let w = World::new(&rules(json));
        assert!(
            pending(w.eval(&FakeRequest::get("/")))
                .coalescable()
                .is_none(),
            "{json}"
        );
    }
}

#[test]
fn a_waiting_requests_signature_is_its_body_taken_out_and_put_back() {
    let w = World::new(&rules(COALESCED));
    let mut p = pending(w.eval(&FakeRequest::get("/")));
    let body = p.body(0).to_vec();
    let signature = p.take_signature();
    assert_eq!(signature.as_deref(), Some(body.as_slice()));
    // A waiting request's share is read from its specs, not its body.
    assert_eq!(p.body(0), b"");
    assert!(!p.batch_body("t", 2).is_empty());
    p.restore_signature(signature.unwrap_or_default());
    assert_eq!(p.body(0), body.as_slice());
    // A check that calls alone keeps its body.
    let w = World::new(&rules(GLOBAL));
    let mut alone = pending(w.eval(&FakeRequest::get("/")));
    let body = alone.body(0).to_vec();
    assert_eq!(alone.take_signature(), None);
    assert_eq!(alone.body(0), body.as_slice());
}

#[test]
fn a_batch_body_carries_the_count() {
    let w = World::new(&rules(COALESCED));
    let p = pending(w.eval(&FakeRequest::get("/")));
    assert_eq!(
        String::from_utf8(p.batch_body("t", 7)).unwrap(),
        r#"{"domain":"t","hits":1,"limits":[{"key":"g/0/203.0.113.7","algorithm":"gcra","requests":100,"window_ms":3600000,"burst":100}],"batch":7}"#
    );
}

#[test]
fn each_request_gets_its_share_of_a_batch_answer() {
    let w = World::new(&rules(COALESCED));
    let answer = batch_answer(2, "");
    let mut verdicts = Vec::new();
    for position in 0..3 {
        let mut p = pending(w.eval(&FakeRequest::get("/")));
        let parsed = p.parse_batch(answer.as_bytes(), 3);
        p.record_batch(parsed.as_ref(), position);
        verdicts.push(finish(&w.plan, p, &w.store, &w.metrics));
    }
    for v in &verdicts[..2] {
        match v {
            Verdict::Allow(a) => {
                let d = a.report.unwrap().decision;
                assert!(d.allowed && d.retry_after == 0 && d.remaining == 0);
            }
            other => panic!("{other:?}"),
        }
    }
    match &verdicts[2] {
        Verdict::Deny(d) => assert_eq!(d.report.decision.retry_after, 700 * MILLISECOND),
        other => panic!("{other:?}"),
    }
    assert_eq!(w.metrics.count(0, RuleEvent::Allowed), 2);
    assert_eq!(w.metrics.count(0, RuleEvent::Denied), 1);
}

#[test]
fn batch_delays_hold_each_request_its_own_time() {
    let w = World::new(&rules(
        r#"{"name":"g","key":["client_ip"],"limits":[
            {"algorithm":"gcra","requests":10,"window":"1s","burst":1,"scope":"global","on_exceed":"delay","max_delay":"1s","sync":{"mode":"coalesce"}}]}"#,
    ));
    let answer = batch_answer(3, r#","delays_ms":[0,100,200]"#);
    let mut holds = Vec::new();
    for position in 0..3 {
        let mut p = pending(w.eval(&FakeRequest::get("/")));
        let parsed = p.parse_batch(answer.as_bytes(), 3);
        p.record_batch(parsed.as_ref(), position);
        holds.push(match finish(&w.plan, p, &w.store, &w.metrics) {
            Verdict::Allow(_) => 0,
            Verdict::Delay(d) => d.delay,
            other => panic!("{other:?}"),
        });
    }
    assert_eq!(holds, [0, 100 * MILLISECOND, 200 * MILLISECOND]);
}

#[test]
fn a_malformed_or_failed_batch_answer_applies_the_failure_mode() {
    let w = World::new(&rules(COALESCED));
    // More admitted than carried, an answer without `admitted`, no answer.
    for body in [
        Some(batch_answer(3, "")),
        Some(answer(true, 0).unwrap()),
        None,
    ] {
        let mut p = pending(w.eval(&FakeRequest::get("/")));
        let parsed = body.and_then(|b| p.parse_batch(b.as_bytes(), 2));
        p.record_batch(parsed.as_ref(), 0);
        assert!(allowed(&finish(&w.plan, p, &w.store, &w.metrics)));
    }
    assert_eq!(w.metrics.count_global(GlobalEvent::FailureModeAllowed), 3);
}

#[test]
fn an_abandoned_check_gives_back_its_local_limits() {
    let w = World::new(&rules(GLOBAL));
    // GLOBAL's local limit admits 2; a request that leaves gives its unit back.
    for _ in 0..3 {
        pending(w.eval(&FakeRequest::get("/"))).abandon(&w.plan, &w.store, &w.metrics);
    }
    assert!(matches!(w.eval(&FakeRequest::get("/")), Verdict::Check(_)));
    assert!(matches!(w.eval(&FakeRequest::get("/")), Verdict::Check(_)));
    assert!(matches!(w.eval(&FakeRequest::get("/")), Verdict::Deny(_)));
}
