//! Elastic limits: borrowing beyond the quota from a pool rule.

use super::*;

/// Per client: 2 per minute of its own, up to 4 while the pool (3 per
/// minute for everyone) has headroom.
const LOCAL: &str = r#"{"name":"user","key":["header:x-user"],"limits":[
    {"algorithm":"fixed_window","requests":2,"window":"1m","elastic":{"ceiling":4,"pool":"spare"}}]},
   {"name":"spare","key":["const:all"],"limits":[{"algorithm":"fixed_window","requests":3,"window":"1m"}]}"#;

fn user(name: &str) -> FakeRequest {
    FakeRequest::get("/").with("x-user", name)
}

fn admitted(v: Verdict) -> Admitted {
    match v {
        Verdict::Allow(a) => a,
        other => panic!("{other:?}"),
    }
}

fn denied(v: Verdict) -> Denied {
    match v {
        Verdict::Deny(d) => d,
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_client_borrows_up_to_its_ceiling_while_the_pool_lasts() {
    let w = World::new(&rules(LOCAL));
    let remaining = |v: Verdict| admitted(v).report.unwrap().decision.remaining;
    assert_eq!(remaining(w.eval(&user("a"))), 1);
    assert_eq!(remaining(w.eval(&user("a"))), 0);
    // Beyond its quota: borrowed, reported as the quota with nothing left.
    for _ in 0..2 {
        let report = admitted(w.eval(&user("a"))).report.unwrap();
        assert_eq!((report.rule, report.decision.limit), (0, 2));
        assert_eq!(report.decision.remaining, 0);
    }
    // The ceiling: denied as over its own limit.
    let d = denied(w.eval(&user("a")));
    assert_eq!((d.report.rule, d.report.decision.limit), (0, 2));
    assert!(d.report.decision.retry_after > 0);
    // Another client: its own quota, then the last unit of the pool.
    assert!(allowed(&w.eval(&user("b"))));
    assert!(allowed(&w.eval(&user("b"))));
    assert!(allowed(&w.eval(&user("b"))));
    assert_eq!(denied(w.eval(&user("b"))).report.rule, 0);
    // A third client still has its own quota, though the pool is spent.
    assert!(allowed(&w.eval(&user("c"))));
    assert!(allowed(&w.eval(&user("c"))));
    assert_eq!(denied(w.eval(&user("c"))).report.rule, 0);
    assert_eq!(w.metrics.count(0, RuleEvent::Borrowed), 3);
    assert_eq!(w.metrics.count(0, RuleEvent::Allowed), 9);
    assert_eq!(w.metrics.count(0, RuleEvent::Denied), 3);
    // The pool is never counted as a rule of its own.
    assert_eq!(w.metrics.count(1, RuleEvent::Allowed), 0);
}

#[test]
fn the_pool_is_not_applied_on_its_own() {
    let w = World::new(&rules(LOCAL));
    // Requests the elastic rule does not key (no x-user) pass freely: the
    // pool does not count them.
    for _ in 0..10 {
        let a = admitted(w.eval(&FakeRequest::get("/")));
        assert!(a.report.is_none());
    }
    let passed = (0..6).filter(|_| allowed(&w.eval(&user("a")))).count();
    assert_eq!(passed, 4);
}

#[test]
fn a_later_denial_gives_back_what_was_borrowed() {
    let w = World::new(&rules(&format!(
        r#"{LOCAL}, {{"name":"tight","match":{{"headers":[{{"name":"x-tight","present":true}}]}},"key":["const:t"],"limits":[{{"algorithm":"fixed_window","requests":1,"window":"1m"}}]}}"#
    )));
    assert!(allowed(&w.eval(&user("a"))));
    assert!(allowed(&w.eval(&user("a"))));
    // Borrows, passes the tight rule once, then the tight rule denies
    // after the borrowing: the pool and the extra allowance are given back.
    let tight = user("a").with("x-tight", "1");
    assert!(allowed(&w.eval(&tight)));
    for _ in 0..5 {
        assert_eq!(denied(w.eval(&tight)).report.rule, 2);
    }
    assert_eq!(w.metrics.count(0, RuleEvent::Borrowed), 1);
    // One more borrow for a (ceiling 4), two for b (pool 3 in all).
    assert!(allowed(&w.eval(&user("a"))));
    assert!(!allowed(&w.eval(&user("a"))));
    for _ in 0..2 {
        assert!(allowed(&w.eval(&user("b"))));
    }
    assert!(allowed(&w.eval(&user("b"))));
    assert!(!allowed(&w.eval(&user("b"))));
}

#[test]
fn borrowing_weighs_the_request_cost() {
    let w = World::new(&rules(
        r#"{"name":"user","key":["header:x-user"],"cost":2,"limits":[
            {"algorithm":"token_bucket","requests":4,"window":"1m","elastic":{"ceiling":8,"pool":"spare"}}]},
           {"name":"spare","key":["const:all"],"limits":[{"algorithm":"token_bucket","requests":5,"window":"1m"}]}"#,
    ));
    // 4 own units (2 requests), then the pool lends 2 + 2 of its 5; the
    // fifth unit is too few for a request of 2.
    let passed = (0..6).filter(|_| allowed(&w.eval(&user("a")))).count();
    assert_eq!(passed, 4);
    let passed = (0..6).filter(|_| allowed(&w.eval(&user("b")))).count();
    assert_eq!(passed, 2);
}

const GLOBAL_ELASTIC: &str = r#"{"name":"user","key":["header:x-user"],"limits":[
    {"algorithm":"gcra","requests":10,"window":"1s","scope":"global","elastic":{"ceiling":15,"pool":"spare"}},
    {"algorithm":"fixed_window","requests":100,"window":"1m","scope":"global"}]},
   {"name":"spare","key":["const:all"],"limits":[{"algorithm":"fixed_window","requests":50,"window":"1s","scope":"global"}]}"#;

fn limit_answer(allowed: bool, limit: u64) -> String {
    format!(
        r#"{{"allowed":{allowed},"limit":{limit},"remaining":{},"reset_ms":700,"retry_after_ms":{}}}"#,
        u64::from(allowed),
        if allowed { 0 } else { 100 }
    )
}

fn answer_of(limits: &[(bool, u64)]) -> String {
    let all = limits.iter().all(|l| l.0);
    let items: Vec<String> = limits.iter().map(|&(a, l)| limit_answer(a, l)).collect();
    format!(r#"{{"allowed":{all},"limits":[{}]}}"#, items.join(","))
}

#[test]
fn a_global_elastic_limit_borrows_in_a_second_call() {
    let w = World::new(&rules(GLOBAL_ELASTIC));
    let mut p = pending(w.eval(&user("a")));
    assert_eq!(p.call_count(), 1);
    // The elastic limit denies, the other admits: ask again, borrowing.
    assert!(p.record(0, Some(answer_of(&[(false, 10), (true, 100)]).as_bytes())));
    let mut second = pending(finish(&w.plan, p, &w.store, &w.metrics));
    let body = String::from_utf8(second.body(0).to_vec()).unwrap();
    assert_eq!(
        body,
        r#"{"domain":"t","hits":1,"limits":[{"key":"user+elastic/0/a","algorithm":"gcra","requests":5,"window_ms":1000,"burst":5},{"key":"spare/0/all","algorithm":"fixed_window","requests":50,"window_ms":1000,"burst":50},{"key":"user/1/a","algorithm":"fixed_window","requests":100,"window_ms":60000,"burst":100}]}"#
    );
    assert!(second.record(
        0,
        Some(answer_of(&[(true, 5), (true, 50), (true, 100)]).as_bytes())
    ));
    let a = admitted(finish(&w.plan, second, &w.store, &w.metrics));
    let report = a.report.unwrap();
    // The elastic limit is reported: its quota, nothing remaining.
    assert_eq!((report.rule, report.decision.limit), (0, 10));
    assert_eq!(report.decision.remaining, 0);
    assert_eq!(w.metrics.count(0, RuleEvent::Borrowed), 1);
    assert_eq!(w.metrics.count(0, RuleEvent::Allowed), 1);
}

#[test]
fn a_class_borrows_its_share_of_the_extra_allowance_and_the_pool() {
    let prioritised = GLOBAL_ELASTIC.replacen(
        r#""key":["header:x-user"],"#,
        r#""key":["header:x-user"],"priority":{"from":"header:x-p","default":"bulk","classes":[{"name":"bulk","share":60}]},"#,
        1,
    );
    let w = World::new(&rules(&prioritised));
    let mut p = pending(w.eval(&user("a")));
    assert!(p.record(0, Some(answer_of(&[(false, 10), (true, 100)]).as_bytes())));
    let second = pending(finish(&w.plan, p, &w.store, &w.metrics));
    let body = String::from_utf8(second.body(0).to_vec()).unwrap();
    // 40% of the extra allowance and of its own limit kept; the pool's rule
    // has no classes.
    assert_eq!(
        body,
        r#"{"domain":"t","hits":1,"limits":[{"key":"user+elastic/0/a","algorithm":"gcra","requests":5,"window_ms":1000,"burst":5,"reserve":2},{"key":"spare/0/all","algorithm":"fixed_window","requests":50,"window_ms":1000,"burst":50},{"key":"user/1/a","algorithm":"fixed_window","requests":100,"window_ms":60000,"burst":100,"reserve":40}]}"#
    );
}

#[test]
fn a_spent_pool_denies_as_over_the_own_limit() {
    let w = World::new(&rules(GLOBAL_ELASTIC));
    let mut p = pending(w.eval(&user("a")));
    p.record(0, Some(answer_of(&[(false, 10), (true, 100)]).as_bytes()));
    let mut second = pending(finish(&w.plan, p, &w.store, &w.metrics));
    second.record(
        0,
        Some(answer_of(&[(true, 5), (false, 50), (true, 100)]).as_bytes()),
    );
    let d = denied(finish(&w.plan, second, &w.store, &w.metrics));
    assert_eq!((d.report.rule, d.report.decision.limit), (0, 10));
    assert_eq!(d.report.decision.retry_after, 100 * MILLISECOND);
    assert_eq!(w.metrics.count(0, RuleEvent::Borrowed), 0);
    assert_eq!(w.metrics.count(0, RuleEvent::Denied), 1);
}

#[test]
fn no_second_call_when_another_limit_denies() {
    let w = World::new(&rules(GLOBAL_ELASTIC));
    let mut p = pending(w.eval(&user("a")));
    p.record(0, Some(answer_of(&[(false, 10), (false, 100)]).as_bytes()));
    let d = denied(finish(&w.plan, p, &w.store, &w.metrics));
    assert_eq!(d.report.rule, 0);
    // A failed second call follows the failure mode (allow here). Client b:
    // a's denial by the plain limit is cached.
    let mut p = pending(w.eval(&user("b")));
    p.record(0, Some(answer_of(&[(false, 10), (true, 100)]).as_bytes()));
    let second = pending(finish(&w.plan, p, &w.store, &w.metrics));
    assert!(allowed(&w.finish(second, None)));
    assert_eq!(w.metrics.count_global(GlobalEvent::FailureModeAllowed), 1);
}

#[test]
fn elastic_denials_are_not_cached() {
    let w = World::new(&rules(GLOBAL_ELASTIC));
    for _ in 0..2 {
        let mut p = pending(w.eval(&user("a")));
        p.record(0, Some(answer_of(&[(false, 10), (true, 100)]).as_bytes()));
        let mut second = pending(finish(&w.plan, p, &w.store, &w.metrics));
        second.record(
            0,
            Some(answer_of(&[(false, 5), (true, 50), (true, 100)]).as_bytes()),
        );
        assert!(!allowed(&finish(&w.plan, second, &w.store, &w.metrics)));
    }
}
