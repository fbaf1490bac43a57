//! Concurrency limits: permits taken at admission, given back at the end.

use super::*;
use crate::engine::concurrency::{release_local, Held, HeldPermit};
use sluice_core::permits;

/// Two requests in flight per user, and 10 per minute.
const LOCAL: &str = r#"{"name":"user","key":["header:x-user"],"limits":[
    {"concurrency":2},
    {"algorithm":"fixed_window","requests":10,"window":"1m"}]}"#;

fn user(name: &str) -> FakeRequest {
    FakeRequest::get("/").with("x-user", name)
}

fn held(v: Verdict) -> Held {
    match v {
        Verdict::Allow(a) => a.held,
        other => panic!("{other:?}"),
    }
}

/// The permits in use in the entry of `permit`.
fn in_use(w: &World, permit: &HeldPermit) -> u64 {
    let state = crate::table::entry_state(&w.store, &permit.key, permit.fingerprint);
    assert!(state.is_some(), "no entry for {permit:?}");
    permits::in_use(state.as_deref(), NOW)
}

fn end(w: &World, held: &Held) {
    for permit in &held.local {
        release_local(&w.store, permit, NOW).unwrap();
    }
}

#[test]
fn at_most_the_permits_are_in_flight_and_an_end_frees_one() {
    let w = World::new(&rules(LOCAL));
    let first = held(w.eval(&user("a")));
    let second = held(w.eval(&user("a")));
    assert_eq!(first.local.len(), 1);
    assert_eq!(first.local[0].holder, HOLDER);
    let refused = match w.eval(&user("a")) {
        Verdict::Deny(d) => d,
        other => panic!("{other:?}"),
    };
    assert_eq!((refused.report.rule, refused.report.limit), (0, 0));
    assert_eq!(
        refused.report.decision.retry_after,
        permits::PERMIT_RETRY_AFTER
    );
    assert_eq!(refused.report.window, 0);
    // Another user has permits of its own.
    let other = held(w.eval(&user("b")));
    end(&w, &first);
    let third = held(w.eval(&user("a")));
    for h in [second, other, third] {
        end(&w, &h);
    }
    assert_eq!(in_use(&w, &first.local[0]), 0);
}

#[test]
fn a_rate_limit_that_denies_gives_the_permit_back() {
    let w = World::new(&rules(
        r#"{"name":"user","key":["header:x-user"],"limits":[
        {"concurrency":5},
        {"algorithm":"fixed_window","requests":1,"window":"1m"}]}"#,
    ));
    let first = held(w.eval(&user("a")));
    assert!(matches!(w.eval(&user("a")), Verdict::Deny(_)));
    assert_eq!(in_use(&w, &first.local[0]), 1);
}

#[test]
fn a_later_rule_that_denies_gives_the_permit_back() {
    let w = World::new(&rules(
        r#"{"name":"user","key":["header:x-user"],"limits":[{"concurrency":5}]},
           {"name":"all","key":["const:x"],"limits":[{"algorithm":"fixed_window","requests":1,"window":"1m"}]}"#,
    ));
    let first = held(w.eval(&user("a")));
    assert!(matches!(w.eval(&user("a")), Verdict::Deny(_)));
    assert_eq!(in_use(&w, &first.local[0]), 1);
}

#[test]
fn a_weighted_request_holds_its_weight() {
    let w = World::new(&rules(
        r#"{"name":"user","key":["header:x-user"],"cost":"header:x-cost","limits":[{"concurrency":3}]}"#,
    ));
    let two = held(w.eval(&user("a").with("x-cost", "2")));
    assert_eq!(two.local[0].weight, 2);
    assert!(matches!(
        w.eval(&user("a").with("x-cost", "2")),
        Verdict::Deny(_)
    ));
    let never = match w.eval(&user("a").with("x-cost", "4")) {
        Verdict::Deny(d) => d,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        never.report.decision.denial,
        Some(Denial::CostExceedsCapacity)
    );
    assert!(matches!(w.eval(&user("a")), Verdict::Allow(_)));
}

#[test]
fn a_shadow_rule_holds_permits_but_never_denies() {
    let w = World::new(&rules(
        r#"{"name":"user","mode":"shadow","key":["header:x-user"],"limits":[{"concurrency":1}]}"#,
    ));
    let first = held(w.eval(&user("a")));
    assert_eq!(first.local.len(), 1);
    let second = match w.eval(&user("a")) {
        Verdict::Allow(a) => a,
        other => panic!("{other:?}"),
    };
    assert_eq!(second.shadow_denied, vec![0]);
    assert!(second.held.is_empty());
}

#[test]
fn configuration_errors_name_the_field() {
    let cases = [
        (r#"{"concurrency":0}"#, "rules[0].limits[0].concurrency"),
        (
            r#"{"concurrency":2,"window":"1s"}"#,
            "rules[0].limits[0].window",
        ),
        (
            r#"{"concurrency":2,"algorithm":"gcra"}"#,
            "rules[0].limits[0].algorithm",
        ),
        (
            r#"{"concurrency":2,"max_delay":"1s"}"#,
            "rules[0].limits[0].max_delay",
        ),
        (
            r#"{"concurrency":2,"on_exceed":"delay"}"#,
            "rules[0].limits[0].max_delay",
        ),
        (
            r#"{"concurrency":2,"on_exceed":"delay","max_delay":"2m"}"#,
            "rules[0].limits[0].max_delay",
        ),
        (
            r#"{"concurrency":2,"permit_ttl":"10ms"}"#,
            "rules[0].limits[0].permit_ttl",
        ),
        (
            r#"{"algorithm":"gcra","requests":1,"window":"1s","permit_ttl":"10s"}"#,
            "rules[0].limits[0].permit_ttl",
        ),
    ];
    for (limit, path) in cases {
        let json = rules(&format!(
            r#"{{"name":"r","key":["path"],"limits":[{limit}]}}"#
        ));
        let err = parse(json.as_bytes()).unwrap_err();
        assert_eq!(err.path, path, "{limit}: {err}");
    }
    let json = rules(r#"{"name":"r","key":["path"],"cost":3,"limits":[{"concurrency":2}]}"#);
    let err = parse(json.as_bytes()).unwrap_err();
    assert_eq!(err.path, "rules[0].cost", "{err}");
    assert!(err.to_string().contains("its permits"), "{err}");
}

#[test]
fn delay_mode_waits_at_most_a_minute() {
    let json = rules(
        r#"{"name":"r","key":["path"],"limits":[{"concurrency":1,"on_exceed":"delay","max_delay":"60s"}]}"#,
    );
    let plan = parse(json.as_bytes()).unwrap();
    let c = plan.rules[0].limits[0].concurrency().unwrap();
    assert_eq!(c.max_wait, Some(60 * SECOND));
}

#[test]
fn nine_hundred_keys_in_a_table_for_a_thousand_each_hold_their_own_permits() {
    let w = World::new(
        r#"{"domain":"t","local_max_keys":1000,"rules":[{"name":"user","key":["header:x-user"],"limits":[{"concurrency":1}]}]}"#,
    );
    let first: Vec<Held> = (0..900)
        .map(|i| held(w.eval(&user(&format!("u{i}")))))
        .collect();
    for i in 0..900 {
        assert!(
            matches!(w.eval(&user(&format!("u{i}"))), Verdict::Deny(_)),
            "{i}"
        );
    }
    assert_eq!(w.metrics.count(0, RuleEvent::TableFull), 0);
    for h in &first {
        end(&w, h);
    }
    assert!(first.iter().all(|h| in_use(&w, &h.local[0]) == 0));
}

/// A global concurrency limit and a global rate limit, in two rules.
const GLOBAL_PERMITS: &str = r#"{"name":"inflight","key":["header:x-user"],"limits":[
    {"concurrency":2,"scope":"global"}]},
    {"name":"rate","key":["header:x-user"],"limits":[
    {"algorithm":"gcra","requests":10,"window":"1m","scope":"global"}]}"#;

#[test]
fn a_check_that_takes_global_permits_says_so_and_its_answer_names_them() {
    let w = World::new(&rules(GLOBAL_PERMITS));
    let p = pending(w.eval(&user("a")));
    // Its answer must be read even if the request is gone: the host makes
    // it from the root and gives back what the answer took.
    assert!(p.takes_permits());
    let both = r#"{"allowed":true,"limits":[
        {"allowed":true,"limit":2,"remaining":1,"reset_ms":0,"retry_after_ms":0},
        {"allowed":true,"limit":10,"remaining":9,"reset_ms":1000,"retry_after_ms":0}]}"#;
    let taken = held(w.finish(p, Some(both.to_string())));
    assert_eq!(taken.global.len(), 1);
    assert_eq!(
        (taken.global[0].holder, taken.global[0].weight),
        (HOLDER, 1)
    );
    // A check without permits is the request's own.
    let w = World::new(&rules(GLOBAL));
    assert!(!pending(w.eval(&user("a"))).takes_permits());
}
