use super::*;
use crate::config::{parse, LimitKind, Plan};
use crate::key::fake::FakeRequest;
use crate::key::Request;
use crate::local;
use crate::local::fake::MemoryStore;
use crate::local::MAX_ATTEMPTS;
use crate::metrics::fake::RecordingSink;
use crate::metrics::{GlobalEvent, RuleEvent};

/// The permit holder of the tests' configuration.
pub(super) const HOLDER: sluice_core::Holder = 7;
use crate::slots::SlotHasher;
use crate::table::{self, Table};
use sluice_core::{Denial, MILLISECOND};
use sluice_core::{Nanos, SECOND};
use std::sync::atomic::Ordering;

const NOW: Nanos = 1_700_000_000 * SECOND;

struct World {
    plan: Plan,
    hasher: SlotHasher,
    store: MemoryStore,
    metrics: RecordingSink,
}

impl World {
    fn new(json: &str) -> World {
        let plan = parse(json.as_bytes()).unwrap();
        World {
            hasher: SlotHasher::from_seed(&SlotHasher::new_seed(7)).unwrap(),
            store: MemoryStore::default(),
            metrics: RecordingSink::for_rules(&plan.rules),
            plan,
        }
    }

    fn eval(&self, req: &FakeRequest) -> Verdict {
        self.eval_at(req, NOW)
    }

    fn eval_at(&self, req: &FakeRequest, now: Nanos) -> Verdict {
        evaluate(
            &self.plan,
            &self.hasher,
            HOLDER,
            req,
            &self.store,
            &self.metrics,
            || now,
        )
    }

    /// Answers every call of `pending` with `answer` and finishes it.
    fn finish(&self, mut pending: PendingCheck, answer: Option<String>) -> Verdict {
        for call in 0..pending.call_count() {
            pending.record(call, answer.as_deref().map(str::as_bytes));
        }
        finish(&self.plan, pending, &self.store, &self.metrics)
    }
}

/// The events `rule` has counters for, in [`RuleEvent::ALL`]'s order.
fn counters_of(rule: &crate::config::Rule) -> Vec<RuleEvent> {
    RuleEvent::ALL
        .into_iter()
        .filter(|e| e.applies_to(rule))
        .collect()
}

fn allowed(v: &Verdict) -> bool {
    matches!(v, Verdict::Allow(_))
}

fn rules(rules: &str) -> String {
    format!(
        r#"{{"domain":"t","limiter":{{"cluster":"c","authority":"a","failure_mode":"allow"}},"rules":[{rules}]}}"#
    )
}

#[test]
fn admits_exactly_the_limit_and_reports() {
    let w = World::new(&rules(
        r#"{"name":"ip","key":["client_ip"],"limits":[{"algorithm":"fixed_window","requests":3,"window":"1m"}]}"#,
    ));
    let req = FakeRequest::get("/");
    for remaining in [2, 1, 0] {
        match w.eval(&req) {
            Verdict::Allow(a) => {
                let report = a.report.unwrap();
                assert_eq!(
                    (
                        report.rule,
                        report.decision.limit,
                        report.decision.remaining
                    ),
                    (0, 3, remaining)
                );
            }
            other => panic!("{other:?}"),
        }
    }
    match w.eval(&req) {
        Verdict::Deny(d) => {
            assert_eq!(d.report.rule, 0);
            assert!(!d.report.decision.allowed);
            assert!(d.report.decision.retry_after > 0);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(w.metrics.count(0, RuleEvent::Allowed), 3);
    assert_eq!(w.metrics.count(0, RuleEvent::Denied), 1);
    // Another client has its own bucket.
    let mut other = req.clone();
    other.source = Some("198.51.100.1:1".into());
    assert!(allowed(&w.eval(&other)));
}

#[test]
fn denied_request_consumes_nothing() {
    let w = World::new(&rules(
        r#"{"name":"a","key":["client_ip"],"limits":[{"algorithm":"fixed_window","requests":5,"window":"1m"}]},
           {"name":"b","match":{"headers":[{"name":"x-b","present":true}]},"key":["client_ip"],"limits":[{"algorithm":"token_bucket","requests":2,"window":"1m"}]}"#,
    ));
    let with_b = FakeRequest::get("/").with("x-b", "1");
    assert!(allowed(&w.eval(&with_b)));
    assert!(allowed(&w.eval(&with_b)));
    for _ in 0..3 {
        match w.eval(&with_b) {
            Verdict::Deny(d) => assert_eq!(d.report.rule, 1),
            other => panic!("{other:?}"),
        }
    }
    // Rule a saw 2 admitted requests; the denied ones were refunded.
    let plain = FakeRequest::get("/");
    let admitted = (0..10).filter(|_| allowed(&w.eval(&plain))).count();
    assert_eq!(admitted, 3);
}

#[test]
fn several_limits_of_one_rule_refund_in_order() {
    let w = World::new(&rules(
        r#"{"name":"r","key":["client_ip"],"limits":[
            {"algorithm":"gcra","requests":10,"window":"1m"},
            {"algorithm":"sliding_log","requests":1,"window":"1m"}]}"#,
    ));
    let req = FakeRequest::get("/");
    assert!(allowed(&w.eval(&req)));
    for _ in 0..20 {
        assert!(!allowed(&w.eval(&req)));
    }
    // gcra was refunded each time: 9 of its 10 remain.
    let LimitKind::Local(local) = &w.plan.rules[0].limits[0].kind else {
        panic!("local")
    };
    let table = Table::new(&local.state_prefix, local.keys);
    let fingerprint = w.hasher.fingerprint("203.0.113.7");
    let state = table::stored_state(&w.store, &table, fingerprint).unwrap();
    let probe = sluice_core::decide(&local.quota.limit, Some(&state), NOW, 1);
    assert_eq!(probe.decision.remaining, 8);
}

#[test]
fn shadow_rules_count_but_never_deny() {
    let w = World::new(&rules(
        r#"{"name":"enf","key":["client_ip"],"limits":[{"algorithm":"fixed_window","requests":100,"window":"1m"}]},
           {"name":"sh","key":["client_ip"],"mode":"shadow","limits":[{"algorithm":"fixed_window","requests":1,"window":"1m"}]}"#,
    ));
    let req = FakeRequest::get("/");
    match w.eval(&req) {
        Verdict::Allow(a) => {
            assert!(a.shadow_denied.is_empty());
            assert_eq!(
                a.report.unwrap().rule,
                0,
                "shadow rules stay out of the headers"
            );
        }
        other => panic!("{other:?}"),
    }
    match w.eval(&req) {
        Verdict::Allow(a) => assert_eq!(a.shadow_denied, vec![1]),
        other => panic!("{other:?}"),
    }
    assert_eq!(w.metrics.count(1, RuleEvent::ShadowDenied), 1);
    assert_eq!(w.metrics.count(1, RuleEvent::Allowed), 1);
    assert_eq!(w.metrics.count(0, RuleEvent::Allowed), 2);
}

#[test]
fn missing_key_part_skips_the_rule() {
    let w = World::new(&rules(
        r#"{"name":"user","key":["header:x-user"],"limits":[{"algorithm":"fixed_window","requests":1,"window":"1m"}]}"#,
    ));
    let anonymous = FakeRequest::get("/");
    for _ in 0..3 {
        match w.eval(&anonymous) {
            Verdict::Allow(a) => assert_eq!(a.report, None),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(w.metrics.count(0, RuleEvent::Skipped), 3);
    let alice = FakeRequest::get("/").with("x-user", "alice");
    assert!(allowed(&w.eval(&alice)));
    assert!(!allowed(&w.eval(&alice)));
}

#[test]
fn non_matching_rules_do_nothing() {
    let w = World::new(&rules(
        r#"{"name":"api","match":{"path_prefix":"/api/","methods":["POST"]},"key":["client_ip"],"limits":[{"algorithm":"fixed_window","requests":1,"window":"1m"}]}"#,
    ));
    for _ in 0..3 {
        match w.eval(&FakeRequest::get("/api/x")) {
            Verdict::Allow(a) => assert_eq!(a.report, None),
            other => panic!("{other:?}"),
        }
    }
    assert!(w.metrics.rules.borrow().is_empty());
}

#[test]
fn every_matching_rule_applies_in_configuration_order() {
    let limit =
        r#""key":["client_ip"],"limits":[{"algorithm":"fixed_window","requests":5,"window":"1m"}]"#;
    let matches = [
        r#"{"path_prefix":"/api/","methods":["GET"]}"#,
        r#"{"path":"/api/users"}"#,
        r#"{"path_regex":"/api/[a-z]+"}"#,
        r#"{"path_prefix":"/web/"}"#,
        r#"{"headers":[{"name":"x-internal","present":false}]}"#,
        r#"{"path_prefix":"/api/users","methods":["POST"]}"#,
        r#"{"path_prefix":"/api/","not":{"path_prefix":"/api/admin"}}"#,
        r#"{"path":"/api/users","methods":["get"]}"#,
    ];
    let all: Vec<String> = matches
        .iter()
        .enumerate()
        .map(|(i, m)| format!(r#"{{"name":"r{i}","match":{m},{limit}}}"#))
        .collect();
    let w = World::new(&rules(&all.join(",")));
    let applied = |req: &FakeRequest| match w.eval(req) {
        Verdict::Allow(a) => a.applied.iter().map(|r| r.rule).collect::<Vec<_>>(),
        other => panic!("{other:?}"),
    };
    // Methods are upper-cased when compiled: rule 7 takes GET.
    assert_eq!(
        applied(&FakeRequest::get("/api/users?x=1")),
        [0, 1, 2, 4, 6, 7]
    );
    assert_eq!(applied(&FakeRequest::get("/api/admin")), [0, 2, 4]);
    let internal = FakeRequest::get("/web/x").with("x-internal", "1");
    assert_eq!(applied(&internal), [3]);
}

#[test]
fn overrides_have_their_own_limit_and_key() {
    let w = World::new(&rules(
        r#"{"name":"u","key":["header:x-user"],"limits":[{"algorithm":"fixed_window","requests":1,"window":"1m"}],
            "overrides":[{"key":"vip","requests":5}]}"#,
    ));
    let vip = FakeRequest::get("/").with("x-user", "vip");
    assert_eq!((0..10).filter(|_| allowed(&w.eval(&vip))).count(), 5);
    let bob = FakeRequest::get("/").with("x-user", "bob");
    assert_eq!((0..10).filter(|_| allowed(&w.eval(&bob))).count(), 1);
    assert!(w
        .store
        .value("sluice/t/u/0/fixed_window/60000/=vip")
        .is_some());
}

/// Admitted requests of 20 clients, one request each then one more, in a
/// table for one key (two buckets of 8): 16 get entries of their own.
fn twenty_clients_in_a_table_for_one(when_full: &str) -> (World, Vec<usize>) {
    let w = World::new(&format!(
        r#"{{"domain":"t","local_max_keys":1,"local_when_full":"{when_full}","rules":[{{"name":"ip","key":["client_ip"],"limits":[{{"algorithm":"fixed_window","requests":1,"window":"1m"}}]}}]}}"#
    ));
    let admitted = (0..20)
        .map(|c| {
            let mut req = FakeRequest::get("/");
            req.source = Some(format!("10.0.0.{c}:1"));
            (0..2).filter(|_| allowed(&w.eval(&req))).count()
        })
        .collect();
    (w, admitted)
}

#[test]
fn clients_without_room_share_an_overflow_entry() {
    let (w, admitted) = twenty_clients_in_a_table_for_one("share");
    assert!(admitted.iter().all(|&n| n <= 1), "{admitted:?}");
    assert_eq!(admitted.iter().take(16).sum::<usize>(), 16, "{admitted:?}");
    // The 4 others share at most one entry per bucket.
    assert!(admitted.iter().skip(16).sum::<usize>() <= 2, "{admitted:?}");
    assert!(w.metrics.count(0, RuleEvent::TableFull) >= 4);
    assert_eq!(w.store.key_count(), 2);
}

#[test]
fn clients_without_room_evict_the_stalest() {
    let (w, admitted) = twenty_clients_in_a_table_for_one("evict");
    assert_eq!(admitted, vec![1; 20]);
    assert_eq!(w.metrics.count(0, RuleEvent::TableFull), 4);
}

#[test]
fn contention_denies_and_counts() {
    let w = World::new(&rules(
        r#"{"name":"ip","key":["client_ip"],"limits":[{"algorithm":"fixed_window","requests":2,"window":"1m"}]}"#,
    ));
    w.store
        .inject_mismatches
        .store(MAX_ATTEMPTS, Ordering::SeqCst);
    match w.eval(&FakeRequest::get("/")) {
        Verdict::Deny(d) => assert_eq!(d.report.decision.retry_after, SECOND),
        other => panic!("{other:?}"),
    }
    assert_eq!(w.metrics.count_global(GlobalEvent::CasExhausted), 1);
    assert!(allowed(&w.eval(&FakeRequest::get("/"))));
}

const GLOBAL: &str = r#"{"name":"g","key":["client_ip"],"limits":[
    {"algorithm":"fixed_window","requests":2,"window":"1m"},
    {"algorithm":"gcra","requests":100,"window":"1h","burst":10,"scope":"global"}]}"#;

fn answer(allowed: bool, retry_after_ms: u64) -> Option<String> {
    Some(format!(
        r#"{{"allowed":{allowed},"limits":[{{"allowed":{allowed},"limit":100,"remaining":{},"reset_ms":1000,"retry_after_ms":{retry_after_ms}}}]}}"#,
        if allowed { 9 } else { 0 }
    ))
}

fn pending(v: Verdict) -> PendingCheck {
    match v {
        Verdict::Check(p) => *p,
        other => panic!("{other:?}"),
    }
}

#[test]
fn global_check_body_and_allow() {
    let w = World::new(&rules(GLOBAL));
    let p = pending(w.eval(&FakeRequest::get("/")));
    assert_eq!(
        String::from_utf8(p.body(0).to_vec()).unwrap(),
        r#"{"domain":"t","hits":1,"limits":[{"key":"g/1/203.0.113.7","algorithm":"gcra","requests":100,"window_ms":3600000,"burst":10}]}"#
    );
    match w.finish(p, answer(true, 0)) {
        Verdict::Allow(a) => {
            // The local limit (1 of 2 left) is closer to exhaustion than the global one (9 of 100).
            let r = a.report.unwrap();
            assert_eq!((r.decision.limit, r.decision.remaining), (2, 1));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(w.metrics.count(0, RuleEvent::Allowed), 1);
}

#[test]
fn global_denial_refunds_local_and_is_cached() {
    let w = World::new(&rules(GLOBAL));
    let req = FakeRequest::get("/");
    let p = pending(w.eval(&req));
    match w.finish(p, answer(false, 2_000)) {
        Verdict::Deny(d) => {
            assert_eq!(d.report.rule, 0);
            assert_eq!(d.report.decision.retry_after, 2_000 * MILLISECOND);
        }
        other => panic!("{other:?}"),
    }
    // Cached: denied locally, no call-out, nothing consumed.
    match w.eval(&req) {
        Verdict::Deny(d) => assert_eq!(d.report.decision.retry_after, 2_000 * MILLISECOND),
        other => panic!("{other:?}"),
    }
    // Another client still calls out, and the local limit was refunded for
    // the first: it can still be admitted twice once the cache expires.
    let mut other = req.clone();
    other.source = Some("198.51.100.1:1".into());
    assert!(matches!(w.eval(&other), Verdict::Check(_)));
    let later = evaluate(
        &w.plan,
        &w.hasher,
        HOLDER,
        &req,
        &w.store,
        &w.metrics,
        || NOW + 3 * SECOND,
    );
    let p = pending(later);
    assert!(allowed(&w.finish(p, answer(true, 0))));
    let p = pending(evaluate(
        &w.plan,
        &w.hasher,
        HOLDER,
        &req,
        &w.store,
        &w.metrics,
        || NOW + 3 * SECOND,
    ));
    assert!(allowed(&w.finish(p, answer(true, 0))));
    assert!(!allowed(&evaluate(
        &w.plan,
        &w.hasher,
        HOLDER,
        &req,
        &w.store,
        &w.metrics,
        || NOW + 3 * SECOND
    )));
}

#[test]
fn a_cached_denial_holds_only_under_the_limit_that_denied() {
    let w = World::new(&rules(GLOBAL));
    let req = FakeRequest::get("/");
    let p = pending(w.eval(&req));
    assert!(matches!(
        w.finish(p, answer(false, 60_000)),
        Verdict::Deny(_)
    ));
    // The request under the next configuration, in the same shared data.
    // (A call left unanswered gives back what the request took locally.)
    let pushed = |from: &str, to: &str| {
        let plan = parse(rules(&GLOBAL.replace(from, to)).as_bytes()).unwrap();
        let verdict = evaluate(&plan, &w.hasher, HOLDER, &req, &w.store, &w.metrics, || NOW);
        match verdict {
            Verdict::Check(p) => {
                p.abandon(&plan, &w.store, &w.metrics);
                "check"
            }
            Verdict::Deny(_) => "deny",
            _ => "other",
        }
    };
    // An unchanged limit (another limit of the rule changed) keeps it.
    let same = pushed(r#""requests":2,"#, r#""requests":3,"#);
    assert_eq!(same, "deny");
    // A new window, algorithm, quota or burst asks the limiter again.
    for (from, to) in [
        (r#""window":"1h""#, r#""window":"2h""#),
        (r#""algorithm":"gcra""#, r#""algorithm":"token_bucket""#),
        (r#""requests":100"#, r#""requests":200"#),
        (r#""burst":10"#, r#""burst":20"#),
    ] {
        assert_eq!(pushed(from, to), "check", "{to}");
    }
}

#[test]
fn local_denial_makes_no_call() {
    let w = World::new(&rules(GLOBAL));
    let req = FakeRequest::get("/");
    for _ in 0..2 {
        let p = pending(w.eval(&req));
        assert!(allowed(&w.finish(p, answer(true, 0))));
    }
    assert!(matches!(w.eval(&req), Verdict::Deny(_)));
}

#[test]
fn failure_modes() {
    let w = World::new(&rules(GLOBAL));
    let p = pending(w.eval(&FakeRequest::get("/")));
    assert!(allowed(&w.finish(p, None)));
    assert_eq!(w.metrics.count_global(GlobalEvent::FailureModeAllowed), 1);
    // A wrong number of answers is a failure too.
    let p = pending(w.eval(&FakeRequest::get("/")));
    let two = Some(
        r#"{"allowed":true,"limits":[{"allowed":true,"limit":1,"remaining":1,"reset_ms":0,"retry_after_ms":0},{"allowed":true,"limit":1,"remaining":1,"reset_ms":0,"retry_after_ms":0}]}"#
            .to_string(),
    );
    assert!(allowed(&w.finish(p, two)));
    assert_eq!(w.metrics.count_global(GlobalEvent::FailureModeAllowed), 2);

    let deny =
        World::new(&rules(GLOBAL).replace(r#""failure_mode":"allow""#, r#""failure_mode":"deny""#));
    let req = FakeRequest::get("/");
    let p = pending(deny.eval(&req));
    assert!(matches!(deny.finish(p, None), Verdict::Deny(_)));
    assert_eq!(deny.metrics.count_global(GlobalEvent::LimiterErrors), 1);
    // The local limit was refunded: two more requests fit.
    for _ in 0..2 {
        let p = pending(deny.eval(&req));
        assert!(allowed(&deny.finish(p, answer(true, 0))));
    }
}

#[test]
fn shadow_global_denial_does_not_block() {
    let w = World::new(&rules(
        r#"{"name":"g","mode":"shadow","key":["client_ip"],"limits":[{"algorithm":"gcra","requests":100,"window":"1h","scope":"global"}]}"#,
    ));
    let p = pending(w.eval(&FakeRequest::get("/")));
    match w.finish(p, answer(false, 1_000)) {
        Verdict::Allow(a) => {
            assert_eq!(a.shadow_denied, vec![0]);
            assert_eq!(a.report, None);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(w.metrics.count(0, RuleEvent::ShadowDenied), 1);
}

#[test]
fn shadow_and_enforcing_global_limits_go_in_separate_calls() {
    let w = World::new(&rules(
        r#"{"name":"enf","key":["client_ip"],"limits":[{"algorithm":"gcra","requests":100,"window":"1h","scope":"global"}]},
           {"name":"sh","mode":"shadow","key":["client_ip"],"limits":[{"algorithm":"gcra","requests":1,"window":"1h","scope":"global"}]}"#,
    ));
    let mut p = pending(w.eval(&FakeRequest::get("/")));
    assert_eq!(p.call_count(), 2);
    assert!(String::from_utf8_lossy(p.body(0)).contains(r#""key":"enf/0/203.0.113.7""#));
    assert!(String::from_utf8_lossy(p.body(1)).contains(r#""key":"sh/0/203.0.113.7""#));
    // The shadow call denies, the enforcing call allows: the request passes.
    assert!(!p.record(1, answer(false, 5_000).as_deref().map(str::as_bytes)));
    assert!(p.record(0, answer(true, 0).as_deref().map(str::as_bytes)));
    match finish(&w.plan, p, &w.store, &w.metrics) {
        Verdict::Allow(a) => {
            assert_eq!(a.shadow_denied, vec![1]);
            assert_eq!(a.report.unwrap().rule, 0);
        }
        other => panic!("{other:?}"),
    }
    let mut p = pending(w.eval(&FakeRequest::get("/")));
    // The shadow key is now cached as denied: only the enforcing call remains.
    assert_eq!(p.call_count(), 1);
    assert!(p.record(0, answer(true, 0).as_deref().map(str::as_bytes)));
    assert!(allowed(&finish(&w.plan, p, &w.store, &w.metrics)));
    assert_eq!(w.metrics.count(1, RuleEvent::ShadowDenied), 2);
    assert_eq!(w.metrics.count_global(GlobalEvent::FailureModeAllowed), 0);
}

#[test]
fn failed_shadow_call_is_ignored() {
    let w = World::new(&rules(
        r#"{"name":"sh","mode":"shadow","key":["client_ip"],"limits":[{"algorithm":"gcra","requests":1,"window":"1h","scope":"global"}]}"#,
    ).replace(r#""failure_mode":"allow""#, r#""failure_mode":"deny""#));
    let mut p = pending(w.eval(&FakeRequest::get("/")));
    assert!(p.record(0, None));
    assert!(allowed(&finish(&w.plan, p, &w.store, &w.metrics)));
    assert_eq!(w.metrics.count_global(GlobalEvent::LimiterErrors), 0);
}

/// Rough cost of the pure request path (run with `--ignored --nocapture`).
#[test]
#[ignore]
fn time_the_request_path() {
    let w = World::new(&rules(
        r#"{"name":"ip","key":["client_ip"],"limits":[{"algorithm":"gcra","requests":1000000000,"window":"1s"}]}"#,
    ));
    let req = FakeRequest::get("/");
    let n = 200_000;
    let start = std::time::Instant::now();
    for i in 0..n {
        let v = evaluate(
            &w.plan,
            &w.hasher,
            HOLDER,
            &req,
            &w.store,
            &w.metrics,
            || NOW + i,
        );
        assert!(allowed(&v));
    }
    let per = start.elapsed() / n as u32;
    println!("evaluate: {per:?} per request (native, with a mutex-backed fake store)");
    w.metrics.rules.borrow_mut().clear();
    let limit = w.plan.rules[0].limits[0].limit();
    let start = std::time::Instant::now();
    let mut state = None;
    for i in 0..n {
        let o = sluice_core::decide(limit, state.as_deref(), NOW + i, 1);
        state = o.new_state.map(|s| s.as_bytes().to_vec());
    }
    println!("decide: {:?}", start.elapsed() / n as u32);
    let start = std::time::Instant::now();
    for i in 0..n {
        let _ = local::consume(&w.store, "k", limit, NOW + i, 1, 0);
    }
    println!("consume: {:?}", start.elapsed() / n as u32);
    let start = std::time::Instant::now();
    let mut out = String::new();
    for _ in 0..n {
        let r = Request::new(&req, &w.plan.client_ip);
        r.write_key(&w.plan.rules[0].key, &mut out);
    }
    println!("key: {:?}", start.elapsed() / n as u32);
    let start = std::time::Instant::now();
    let mut acc = 0;
    for _ in 0..n {
        acc ^= w.hasher.fingerprint(&out);
    }
    println!("hash: {:?} {acc}", start.elapsed() / n as u32);
}

#[test]
fn override_consumption_is_refunded_on_denial() {
    let w = World::new(&rules(
        r#"{"name":"u","key":["header:x-user"],"limits":[{"algorithm":"fixed_window","requests":1,"window":"1m"}],
            "overrides":[{"key":"vip","requests":3}]},
           {"name":"b","match":{"headers":[{"name":"x-b","present":true}]},"key":["const:all"],"limits":[{"algorithm":"fixed_window","requests":1,"window":"1m"}]}"#,
    ));
    let with_b = FakeRequest::get("/").with("x-user", "vip").with("x-b", "1");
    assert!(allowed(&w.eval(&with_b)));
    for _ in 0..5 {
        match w.eval(&with_b) {
            Verdict::Deny(d) => assert_eq!(d.report.rule, 1),
            other => panic!("{other:?}"),
        }
    }
    // The override's dedicated counter was given back each time: 2 of 3 remain.
    let vip = FakeRequest::get("/").with("x-user", "vip");
    assert_eq!((0..5).filter(|_| allowed(&w.eval(&vip))).count(), 2);
}

#[test]
fn overrides_apply_per_limit() {
    let w = World::new(&rules(
        r#"{"name":"u","key":["header:x-user"],"limits":[
            {"algorithm":"fixed_window","requests":1,"window":"1m"},
            {"algorithm":"gcra","requests":100,"window":"1h","scope":"global"}],
            "overrides":[{"key":"vip","requests":7,"limit":1}]}"#,
    ));
    // Only the global limit is replaced: its check carries the override, and
    // the local limit still admits one request.
    let vip = FakeRequest::get("/").with("x-user", "vip");
    let p = pending(w.eval(&vip));
    assert_eq!(
        String::from_utf8(p.body(0).to_vec()).unwrap(),
        r#"{"domain":"t","hits":1,"limits":[{"key":"u/1/vip","algorithm":"gcra","requests":7,"window_ms":3600000,"burst":7}]}"#
    );
    assert!(allowed(&w.finish(p, answer(true, 0))));
    assert!(matches!(w.eval(&vip), Verdict::Deny(_)));
}

#[test]
fn shadow_denial_drops_the_rules_global_limits() {
    let w = World::new(&rules(
        r#"{"name":"enf","key":["client_ip"],"limits":[{"algorithm":"gcra","requests":100,"window":"1h","scope":"global"}]},
           {"name":"sh","mode":"shadow","key":["client_ip"],"limits":[
             {"algorithm":"fixed_window","requests":1,"window":"1m"},
             {"algorithm":"gcra","requests":100,"window":"1h","scope":"global"}]}"#,
    ));
    let p = pending(w.eval(&FakeRequest::get("/")));
    assert_eq!(p.call_count(), 2);
    assert!(allowed(&w.finish(p, answer(true, 0))));
    // The shadow rule's local limit now denies: its global limit is not
    // checked, and the enforcing call alone remains.
    let p = pending(w.eval(&FakeRequest::get("/")));
    assert_eq!(p.call_count(), 1);
    assert!(String::from_utf8_lossy(p.body(0)).contains(r#""key":"enf/0/203.0.113.7""#));
    match w.finish(p, answer(true, 0)) {
        Verdict::Allow(a) => assert_eq!(a.shadow_denied, vec![1]),
        other => panic!("{other:?}"),
    }
}

#[test]
fn answers_are_matched_by_position_within_each_call() {
    let w = World::new(&rules(
        r#"{"name":"a","key":["client_ip"],"limits":[{"algorithm":"gcra","requests":100,"window":"1h","scope":"global"}]},
           {"name":"s","mode":"shadow","key":["client_ip"],"limits":[{"algorithm":"gcra","requests":100,"window":"1h","scope":"global"}]},
           {"name":"c","key":["client_ip"],"limits":[{"algorithm":"gcra","requests":100,"window":"1h","scope":"global"}]}"#,
    ));
    let mut p = pending(w.eval(&FakeRequest::get("/")));
    assert_eq!(p.call_count(), 2);
    let enforcing = String::from_utf8(p.body(0).to_vec()).unwrap();
    assert!(
        enforcing.contains(r#""key":"a/0/203.0.113.7""#)
            && enforcing.contains(r#""key":"c/0/203.0.113.7""#),
        "{enforcing}"
    );
    // The second enforcing limit (rule c) denies; the shadow one allows.
    let two = r#"{"allowed":false,"limits":[
        {"allowed":true,"limit":100,"remaining":50,"reset_ms":1000,"retry_after_ms":0},
        {"allowed":false,"limit":100,"remaining":0,"reset_ms":1000,"retry_after_ms":3000}]}"#;
    assert!(!p.record(0, Some(two.as_bytes())));
    assert!(p.record(1, answer(true, 0).as_deref().map(str::as_bytes)));
    match finish(&w.plan, p, &w.store, &w.metrics) {
        Verdict::Deny(d) => {
            assert_eq!(d.report.rule, 2);
            assert_eq!(d.report.decision.retry_after, 3 * SECOND);
            assert!(d.shadow_denied.is_empty());
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(w.metrics.count(2, RuleEvent::Denied), 1);
}

/// GCRA 10/s, burst 1, in delay mode up to 1s: one request per 100ms.
const PACED: &str = r#"{"name":"paced","key":["client_ip"],"limits":[
    {"algorithm":"gcra","requests":10,"window":"1s","burst":1,"on_exceed":"delay","max_delay":"1s"}]}"#;

fn delayed(v: Verdict) -> Delayed {
    match v {
        Verdict::Delay(d) => *d,
        other => panic!("{other:?}"),
    }
}

/// The delay of a verdict: zero for an admitted request, `None` for a denial.
fn delay_of(v: &Verdict) -> Option<Nanos> {
    match v {
        Verdict::Allow(_) => Some(0),
        Verdict::Delay(d) => Some(d.delay),
        _ => None,
    }
}

#[test]
fn delay_mode_holds_each_request_until_it_conforms() {
    let w = World::new(&rules(PACED));
    let req = FakeRequest::get("/");
    let delays: Vec<Option<Nanos>> = (0..12).map(|_| delay_of(&w.eval(&req))).collect();
    let expected: Vec<Option<Nanos>> = (0..11)
        .map(|k| Some(k * 100 * MILLISECOND))
        .chain([None])
        .collect();
    assert_eq!(delays, expected);
    // Beyond max_delay: denied as in deny mode, with the time it would conform.
    match w.eval(&req) {
        Verdict::Deny(d) => {
            assert_eq!(d.report.decision.denial, Some(Denial::DelayTooLong));
            assert_eq!(d.report.decision.retry_after, 1_100 * MILLISECOND);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(w.metrics.count(0, RuleEvent::Denied), 2);
    // Allowed is counted for the first now; the delayed ones once held.
    assert_eq!(w.metrics.count(0, RuleEvent::Allowed), 1);
}

#[test]
fn a_delayed_request_counts_when_it_conforms() {
    let w = World::new(&rules(PACED));
    let req = FakeRequest::get("/");
    for _ in 0..5 {
        w.eval(&req);
    }
    // The fifth conforms at +400ms; the next one at +500ms.
    let d = delayed(w.eval_at(&req, NOW + 400 * MILLISECOND));
    assert_eq!((d.delay, d.rule), (100 * MILLISECOND, 0));
    let a = d.admitted();
    let report = a.report.unwrap();
    assert_eq!(
        (report.decision.limit, report.decision.delay),
        (10, 100 * MILLISECOND)
    );
}

#[test]
fn accept_counts_the_rule_and_the_delay() {
    let w = World::new(&rules(PACED));
    let req = FakeRequest::get("/");
    w.eval(&req);
    let d = delayed(w.eval(&req));
    d.accept(&w.metrics);
    assert_eq!(w.metrics.count(0, RuleEvent::Allowed), 2);
    assert_eq!(*w.metrics.delays.borrow(), vec![(0, 100 * MILLISECOND)]);
}

#[test]
fn a_refused_delay_consumes_nothing_and_retries_after_its_delay() {
    let w = World::new(&rules(PACED));
    let req = FakeRequest::get("/");
    w.eval(&req);
    let d = delayed(w.eval(&req));
    let denied = d.refuse(&w.plan, &w.store, &w.metrics);
    assert_eq!(denied.report.rule, 0);
    assert!(!denied.report.decision.allowed);
    assert_eq!(denied.report.decision.retry_after, 100 * MILLISECOND);
    assert_eq!(w.metrics.count(0, RuleEvent::Denied), 1);
    assert!(w.metrics.delays.borrow().is_empty());
    // The quota is back: the next request waits what the refused one would have.
    assert_eq!(delay_of(&w.eval(&req)), Some(100 * MILLISECOND));
}

#[test]
fn a_client_leaving_while_held_gives_its_quota_back() {
    let w = World::new(&rules(PACED));
    let req = FakeRequest::get("/");
    w.eval(&req);
    w.eval(&req);
    let third = delayed(w.eval(&req));
    assert_eq!(third.delay, 200 * MILLISECOND);
    let left_at = NOW + 50 * MILLISECOND;
    third.give_back(&w.plan, &w.store, &w.metrics, left_at);
    // Conforming at +200ms instead of +300ms: 150ms from +50ms.
    assert_eq!(delay_of(&w.eval_at(&req, left_at)), Some(150 * MILLISECOND));
}

#[test]
fn the_longest_delay_holds_and_a_later_denial_refunds_the_delayed() {
    let w = World::new(&rules(
        r#"{"name":"fast","key":["client_ip"],"limits":[
            {"algorithm":"gcra","requests":10,"window":"1s","burst":1,"on_exceed":"delay","max_delay":"1s"}]},
           {"name":"slow","key":["client_ip"],"limits":[
            {"algorithm":"leaky_bucket","requests":5,"window":"1s","burst":1,"on_exceed":"delay","max_delay":"1s"}]},
           {"name":"cap","key":["header:x-cap"],"limits":[
            {"algorithm":"fixed_window","requests":1,"window":"1h"}]}"#,
    ));
    let plain = FakeRequest::get("/");
    assert!(allowed(&w.eval(&plain)));
    let d = delayed(w.eval(&plain));
    assert_eq!((d.delay, d.rule), (200 * MILLISECOND, 1));
    // "cap" admits one request with the header, then denies: the delays
    // consumed by "fast" and "slow" are given back.
    let capped = FakeRequest::get("/").with("x-cap", "1");
    assert_eq!(delay_of(&w.eval(&capped)), Some(400 * MILLISECOND));
    assert!(matches!(w.eval(&capped), Verdict::Deny(_)));
    assert_eq!(delay_of(&w.eval(&plain)), Some(600 * MILLISECOND));
}

#[test]
fn shadow_rules_never_hold() {
    let w = World::new(&rules(
        &PACED.replace(r#""key""#, r#""mode":"shadow","key""#),
    ));
    let req = FakeRequest::get("/");
    assert!(allowed(&w.eval(&req)));
    assert!(allowed(&w.eval(&req)));
}

#[test]
fn a_global_limit_in_delay_mode_holds_for_the_limiters_delay() {
    let w = World::new(&rules(
        r#"{"name":"g","key":["client_ip"],"limits":[
            {"algorithm":"gcra","requests":10,"window":"1s","burst":1,"scope":"global","on_exceed":"delay","max_delay":"1s"}]}"#,
    ));
    let p = pending(w.eval(&FakeRequest::get("/")));
    let body = String::from_utf8(p.body(0).to_vec()).unwrap();
    assert!(
        body.ends_with(r#""burst":1,"max_delay_ms":1000}]}"#),
        "{body}"
    );
    let answer = r#"{"allowed":true,"limits":[{"allowed":true,"limit":10,"remaining":0,"reset_ms":400,"retry_after_ms":0,"delay_ms":300}]}"#;
    let d = delayed(w.finish(p, Some(answer.to_string())));
    assert_eq!((d.delay, d.rule), (300 * MILLISECOND, 0));
    d.accept(&w.metrics);
    assert_eq!(w.metrics.count(0, RuleEvent::Allowed), 1);
    assert_eq!(*w.metrics.delays.borrow(), vec![(0, 300 * MILLISECOND)]);
}

#[test]
fn a_global_limit_held_in_delay_mode_gives_back_what_the_limiter_counted() {
    let w = World::new(&rules(
        r#"{"name":"g","key":["client_ip"],"limits":[
            {"algorithm":"gcra","requests":10,"window":"1s","burst":1,"scope":"global","on_exceed":"delay","max_delay":"1s"}]}"#,
    ));
    let p = pending(w.eval(&FakeRequest::get("/")));
    let answer = r#"{"allowed":true,"limits":[{"allowed":true,"limit":10,"remaining":0,"reset_ms":400,"retry_after_ms":0,"delay_ms":300}]}"#;
    let d = delayed(w.finish(p, Some(answer.to_string())));
    let taken = d.give_back(&w.plan, &w.store, &w.metrics, 0);
    let keys: Vec<(&str, Option<u64>)> = taken.iter().map(|s| (&*s.key, s.hits)).collect();
    assert_eq!(keys, [("g/0/203.0.113.7", Some(1))]);
}

/// Admitted requests of `req` before the first denial (at most 100).
fn admitted_in_a_row(w: &World, req: &FakeRequest) -> usize {
    (0..100).take_while(|_| allowed(&w.eval(req))).count()
}

#[test]
fn soft_limit_admits_above_the_quota_and_reports_the_quota() {
    let w = World::new(&rules(
        r#"{"name":"s","key":["client_ip"],"limits":[{"algorithm":"token_bucket","requests":10,"window":"1h","soft_percent":20}]}"#,
    ));
    let req = FakeRequest::get("/");
    let mut remaining = Vec::new();
    for _ in 0..12 {
        match w.eval(&req) {
            Verdict::Allow(a) => {
                let d = a.report.unwrap().decision;
                assert_eq!(d.limit, 10);
                remaining.push(d.remaining);
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(remaining, [9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 0, 0]);
    assert!(matches!(w.eval(&req), Verdict::Deny(_)));
}

#[test]
fn fixed_cost_consumes_and_refunds_its_weight() {
    let w = World::new(&rules(
        r#"{"name":"a","key":["client_ip"],"cost":3,"limits":[{"algorithm":"fixed_window","requests":20,"window":"1h"}]},
           {"name":"b","match":{"headers":[{"name":"x-b","present":true}]},"key":["client_ip"],"limits":[{"algorithm":"fixed_window","requests":1,"window":"1h"}]}"#,
    ));
    // Rule b admits one request, then denies: rule a gets its 3 units back
    // each time.
    let with_b = FakeRequest::get("/").with("x-b", "1");
    assert!(allowed(&w.eval(&with_b)));
    for _ in 0..5 {
        match w.eval(&with_b) {
            Verdict::Deny(d) => assert_eq!(d.report.rule, 1),
            other => panic!("{other:?}"),
        }
    }
    // 20 units: 6 requests of 3, one of them already admitted.
    assert_eq!(admitted_in_a_row(&w, &FakeRequest::get("/")), 5);
    assert_eq!(w.metrics.count(0, RuleEvent::Allowed), 6);
}

#[test]
fn header_cost_weighs_each_request() {
    let w = World::new(&rules(
        r#"{"name":"h","key":["client_ip"],"cost":"header:x-cost","limits":[{"algorithm":"fixed_window","requests":10,"window":"1h"}]}"#,
    ));
    let with_cost = |c: &str| FakeRequest::get("/").with("x-cost", c);
    let remaining = |v: Verdict| match v {
        Verdict::Allow(a) => a.report.unwrap().decision.remaining,
        other => panic!("{other:?}"),
    };
    assert_eq!(remaining(w.eval(&with_cost("4"))), 6);
    assert_eq!(remaining(w.eval(&with_cost(" 2 "))), 4);
    // Missing or malformed: weight 1, counted.
    assert_eq!(remaining(w.eval(&FakeRequest::get("/"))), 3);
    for bad in ["", "-1", "1.5", "+2", "0x3", "two"] {
        w.eval(&with_cost(bad));
    }
    assert_eq!(w.metrics.count(0, RuleEvent::CostInvalid), 7);
    // The 3 units left went to 3 of the 6 malformed ones; the rest were denied.
    assert_eq!(w.metrics.count(0, RuleEvent::Allowed), 6);
    assert_eq!(w.metrics.count(0, RuleEvent::Denied), 3);
    // Zero: the rule does not count the request.
    match w.eval(&with_cost("0")) {
        Verdict::Allow(a) => assert_eq!(a.report, None),
        other => panic!("{other:?}"),
    }
    assert_eq!(w.metrics.count(0, RuleEvent::Allowed), 6);
}

#[test]
fn a_cost_above_capacity_is_denied_for_good_and_consumes_nothing() {
    let w = World::new(&rules(
        r#"{"name":"site","key":["const:s"],"limits":[{"algorithm":"fixed_window","requests":100,"window":"1h"}]},
           {"name":"h","key":["client_ip"],"cost":"header:x-cost","limits":[
             {"algorithm":"gcra","requests":10,"window":"1h","soft_percent":50},
             {"algorithm":"gcra","requests":100,"window":"1h","scope":"global"}]}"#,
    ));
    for (cost, rule_limit) in [("16", 10), ("99999999999999999999999", 10)] {
        match w.eval(&FakeRequest::get("/").with("x-cost", cost)) {
            Verdict::Deny(d) => {
                assert_eq!(d.report.rule, 1);
                assert_eq!(d.report.decision.limit, rule_limit);
                assert_eq!(d.report.decision.retry_after, 0);
                assert_eq!(d.report.decision.denial, Some(Denial::CostExceedsCapacity));
            }
            other => panic!("{other:?}"),
        }
    }
    // The global limit (capacity 100) denies at once, without a call.
    let w2 = World::new(&rules(
        r#"{"name":"h","key":["client_ip"],"cost":"header:x-cost","limits":[{"algorithm":"gcra","requests":100,"window":"1h","scope":"global"}]}"#,
    ));
    match w2.eval(&FakeRequest::get("/").with("x-cost", "101")) {
        Verdict::Deny(d) => {
            assert_eq!(d.report.decision.denial, Some(Denial::CostExceedsCapacity));
        }
        other => panic!("{other:?}"),
    }
    // Rule site was refunded: 100 requests of weight 1 still pass it (and
    // 15 of them fit h's local limit, 10 + 50%).
    let one = FakeRequest::get("/").with("x-cost", "1");
    let mut passed = 0;
    for _ in 0..15 {
        let p = pending(w.eval(&one));
        passed += usize::from(allowed(&w.finish(p, answer(true, 0))));
    }
    assert_eq!(passed, 15);
    assert_eq!(w.metrics.count(0, RuleEvent::Denied), 0);
}

#[test]
fn global_checks_carry_the_weight() {
    let w = World::new(&rules(
        r#"{"name":"a","key":["client_ip"],"cost":3,"limits":[{"algorithm":"gcra","requests":100,"window":"1h","scope":"global"}]},
           {"name":"b","key":["client_ip"],"limits":[{"algorithm":"gcra","requests":100,"window":"1h","scope":"global"}]},
           {"name":"c","key":["client_ip"],"cost":"header:x-cost","limits":[{"algorithm":"gcra","requests":100,"window":"1h","scope":"global"}]}"#,
    ));
    let p = pending(w.eval(&FakeRequest::get("/").with("x-cost", "3")));
    let body: serde_json::Value = serde_json::from_slice(p.body(0)).unwrap();
    assert_eq!(body["hits"], 3);
    let hits: Vec<_> = body["limits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.get("hits").cloned())
        .collect();
    // Only the limit weighing otherwise than the call names its own.
    assert_eq!(hits, [None, Some(serde_json::json!(1)), None]);
}

#[test]
fn only_fixed_cost_global_denials_are_cached() {
    let w = World::new(&rules(
        r#"{"name":"h","key":["client_ip"],"cost":"header:x-cost","limits":[{"algorithm":"gcra","requests":100,"window":"1h","scope":"global"}]}"#,
    ));
    let req = FakeRequest::get("/").with("x-cost", "50");
    let p = pending(w.eval(&req));
    assert!(!allowed(&w.finish(p, answer(false, 2_000))));
    // A lighter request may still pass: it is asked about, not denied from
    // the cache.
    let light = FakeRequest::get("/").with("x-cost", "1");
    assert!(matches!(w.eval(&light), Verdict::Check(_)));
}

/// [`PACED`] with a cost of 3: one request per 300ms.
const PACED_COST_3: &str = r#"{"name":"paced","key":["client_ip"],"cost":3,"limits":[
    {"algorithm":"gcra","requests":10,"window":"1s","burst":3,"on_exceed":"delay","max_delay":"1s"}]}"#;

#[test]
fn a_weighted_request_is_held_until_its_whole_weight_conforms() {
    let w = World::new(&rules(PACED_COST_3));
    let req = FakeRequest::get("/");
    let delays: Vec<Option<Nanos>> = (0..6).map(|_| delay_of(&w.eval(&req))).collect();
    assert_eq!(
        delays,
        [
            Some(0),
            Some(300 * MILLISECOND),
            Some(600 * MILLISECOND),
            Some(900 * MILLISECOND),
            None,
            None
        ]
    );
}

#[test]
fn a_refused_weighted_delay_refunds_its_weight() {
    let w = World::new(&rules(PACED_COST_3));
    let req = FakeRequest::get("/");
    w.eval(&req);
    let d = delayed(w.eval(&req));
    assert_eq!(d.delay, 300 * MILLISECOND);
    d.refuse(&w.plan, &w.store, &w.metrics);
    // All three units are back: the next request waits the same 300ms.
    assert_eq!(delay_of(&w.eval(&req)), Some(300 * MILLISECOND));
}

#[test]
fn a_weighted_client_leaving_while_held_gives_its_weight_back() {
    let w = World::new(&rules(PACED_COST_3));
    let req = FakeRequest::get("/");
    w.eval(&req);
    w.eval(&req);
    let third = delayed(w.eval(&req));
    assert_eq!(third.delay, 600 * MILLISECOND);
    let left_at = NOW + 100 * MILLISECOND;
    third.give_back(&w.plan, &w.store, &w.metrics, left_at);
    // The key's schedule goes back by the third request's 300ms: the next
    // conforms at +600ms, 500ms from +100ms.
    assert_eq!(delay_of(&w.eval_at(&req, left_at)), Some(500 * MILLISECOND));
}

#[test]
fn a_global_weighted_limit_in_delay_mode_sends_both() {
    let w = World::new(&rules(
        r#"{"name":"g","key":["client_ip"],"cost":3,"limits":[
            {"algorithm":"gcra","requests":10,"window":"1s","burst":3,"scope":"global","on_exceed":"delay","max_delay":"1s"}]}"#,
    ));
    let p = pending(w.eval(&FakeRequest::get("/")));
    let body: serde_json::Value = serde_json::from_slice(p.body(0)).unwrap();
    assert_eq!(body["hits"], 3);
    assert_eq!(body["limits"][0]["max_delay_ms"], 1000);
    let answer = r#"{"allowed":true,"limits":[{"allowed":true,"limit":10,"remaining":0,"reset_ms":900,"retry_after_ms":0,"delay_ms":600}]}"#;
    let d = delayed(w.finish(p, Some(answer.to_string())));
    assert_eq!((d.delay, d.rule), (600 * MILLISECOND, 0));
}

mod elastic;

mod coalesced;

mod leased;

mod service_held;

mod concurrency;

mod response_cost;

mod by_outcome;

mod host_calls;

mod block;

mod metadata;

mod counters;

const GLOBAL_PRIORITY: &str = r#"{"name":"api","key":["const:all"],
    "priority":{"from":"header:x-priority","default":"bulk","classes":[
        {"name":"critical","share":100},{"name":"bulk","share":50}]},
    "limits":[{"algorithm":"fixed_window","requests":10,"window":"1m","scope":"global"}]}"#;

#[test]
fn a_global_limit_keeps_the_reserve_of_a_class_in_its_check() {
    let w = World::new(&rules(GLOBAL_PRIORITY));
    let class = |c: &str| FakeRequest::get("/").with("x-priority", c);
    let body = |p: &PendingCheck| String::from_utf8(p.body(0).to_vec()).unwrap();
    let bulk = pending(w.eval(&class("bulk")));
    assert!(
        body(&bulk).ends_with(r#""burst":10,"reserve":5}]}"#),
        "{}",
        body(&bulk)
    );
    assert!(!allowed(&w.finish(bulk, answer(false, 2_000))));
    // A denial that kept a reserve is not cached: critical still asks.
    let critical = pending(w.eval(&class("critical")));
    assert!(!body(&critical).contains("reserve"), "{}", body(&critical));
    assert!(!allowed(&w.finish(critical, answer(false, 2_000))));
    // A denial without reserve is: every class is denied at once.
    for c in ["critical", "bulk"] {
        assert!(matches!(w.eval(&class(c)), Verdict::Deny(_)), "{c}");
    }
}

#[test]
fn priority_classes_use_their_share_of_a_limit() {
    let w = World::new(&rules(
        r#"{"name":"api","key":["const:all"],
            "priority":{"from":"header:x-priority","default":"default","classes":[
                {"name":"critical","share":100},{"name":"default","share":80},{"name":"bulk","share":50}]},
            "limits":[{"algorithm":"fixed_window","requests":10,"window":"1m"}]}"#,
    ));
    let class = |c: &str| FakeRequest::get("/").with("x-priority", c);
    let admitted = |req: &FakeRequest, n: usize| (0..n).filter(|_| allowed(&w.eval(req))).count();
    assert_eq!(admitted(&class("bulk"), 8), 5, "bulk: half of 10");
    assert_eq!(
        admitted(&FakeRequest::get("/"), 8),
        3,
        "no class: default, to 8"
    );
    assert_eq!(
        admitted(&class("unknown"), 2),
        0,
        "an unknown class: default"
    );
    assert_eq!(admitted(&class("critical"), 8), 2, "critical: the rest");
}

#[test]
fn priority_applies_to_rate_limits_decided_per_request() {
    let limiter = r#""limiter":{"cluster":"c","authority":"a"}"#;
    let rls = r#""limiter":{"cluster":"c","protocol":"rls"}"#;
    for (limiter, limit, why) in [
        (limiter, r#"{"concurrency":3}"#, "a concurrency limit"),
        (
            limiter,
            r#"{"algorithm":"gcra","requests":10,"window":"1m","on_exceed":"delay","max_delay":"1s"}"#,
            "delay mode",
        ),
        (
            limiter,
            r#"{"algorithm":"gcra","requests":10,"window":"1m","scope":"global","on_exceed":"delay","max_delay":"1s"}"#,
            "delay mode",
        ),
        (
            limiter,
            r#"{"algorithm":"gcra","requests":10,"window":"1m","scope":"global","sync":{"mode":"coalesce"}}"#,
            "sync coalesce",
        ),
        (
            limiter,
            r#"{"algorithm":"gcra","requests":10,"window":"1m","scope":"global","sync":{"mode":"lease","max_share":"10%"}}"#,
            "sync lease",
        ),
        (rls, r#"{"scope":"global"}"#, "protocol rls"),
    ] {
        let json = format!(
            r#"{{"domain":"t",{limiter},"rules":[{{"name":"r","key":["const:a"],
                "priority":{{"from":"header:x-p","default":"a","classes":[{{"name":"a","share":50}}]}},
                "limits":[{limit}]}}]}}"#
        );
        let err = parse(json.as_bytes()).unwrap_err();
        assert_eq!(err.path, "rules[0].priority", "{limit}: {err}");
        assert!(err.message.contains(why), "{limit}: {err}");
    }
    for (priority, field) in [
        (
            r#"{"from":"header:x-p","default":"b","classes":[{"name":"a","share":50}]}"#,
            "rules[0].priority.default",
        ),
        (
            r#"{"from":"header:x-p","default":"a","classes":[{"name":"a","share":0}]}"#,
            "rules[0].priority.classes[0].share",
        ),
        (
            r#"{"from":"header:x-p","default":"a","classes":[{"name":"a","share":101}]}"#,
            "rules[0].priority.classes[0].share",
        ),
        (
            r#"{"from":"header:x-p","default":"a","classes":[{"name":"a","share":5},{"name":"a","share":6}]}"#,
            "rules[0].priority.classes[1].name",
        ),
        (
            r#"{"from":"cookie:x","default":"a","classes":[{"name":"a","share":5}]}"#,
            "rules[0].priority.from",
        ),
        (
            r#"{"from":"header:x-p","default":"a","classes":[]}"#,
            "rules[0].priority.classes",
        ),
    ] {
        let json = format!(
            r#"{{"domain":"t","rules":[{{"name":"r","key":["const:a"],"priority":{priority},
                "limits":[{{"algorithm":"gcra","requests":10,"window":"1m"}}]}}]}}"#
        );
        let err = parse(json.as_bytes()).unwrap_err();
        assert_eq!(err.path, field, "{priority}: {err}");
    }
}
