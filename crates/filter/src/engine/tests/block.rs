//! The penalty box (`on_exceed: block`): a key its limit refuses is refused
//! for `block_for` from that refusal, locally and through the limiter.

use super::*;

/// 3 per second per client, blocked for 10 s once over.
const BOXED: &str = r#"{"name":"ip","key":["client_ip"],"limits":[
    {"algorithm":"fixed_window","requests":3,"window":"1s","on_exceed":"block","block_for":"10s"}]}"#;

fn denial_at(w: &World, req: &FakeRequest, now: Nanos) -> sluice_core::Decision {
    match w.eval_at(req, now) {
        Verdict::Deny(d) => d.report.decision,
        other => panic!("{other:?}"),
    }
}

fn client(n: u32) -> FakeRequest {
    let mut req = FakeRequest::get("/");
    req.source = Some(format!("10.0.0.{n}:1"));
    req
}

#[test]
fn a_refused_key_is_refused_for_exactly_block_for_then_let_in() {
    let w = World::new(&rules(BOXED));
    let req = FakeRequest::get("/");
    assert_eq!((0..3).filter(|_| allowed(&w.eval(&req))).count(), 3);
    let first = denial_at(&w, &req, NOW);
    assert_eq!(first.denial, Some(Denial::Blocked { started: true }));
    assert_eq!((first.retry_after, first.reset), (10 * SECOND, 10 * SECOND));
    assert_eq!(first.remaining, 0);
    // The window allows again after 1 s; the block holds.
    let later = denial_at(&w, &req, NOW + 5 * SECOND);
    assert_eq!(later.denial, Some(Denial::Blocked { started: false }));
    assert_eq!((later.retry_after, later.reset), (5 * SECOND, 5 * SECOND));
    let last = denial_at(&w, &req, NOW + 10 * SECOND - 1);
    assert_eq!(last.retry_after, 1);
    // Another client is untouched.
    assert!(allowed(&w.eval_at(&client(1), NOW + SECOND)));
    // Once it ends, the key is let in as its limit allows.
    let after = NOW + 10 * SECOND;
    let admitted = (0..5).filter(|_| allowed(&w.eval_at(&req, after))).count();
    assert_eq!(admitted, 3);
    assert_eq!(w.metrics.count(0, RuleEvent::BlocksStarted), 2);
    assert_eq!(w.metrics.count(0, RuleEvent::Blocked), 3);
    assert_eq!(w.metrics.count(0, RuleEvent::Denied), 5);
}

#[test]
fn a_refusal_while_blocked_consumes_nothing() {
    let w = World::new(&rules(&format!(
        r#"{BOXED},{{"name":"all","key":["const:all"],"limits":[{{"algorithm":"fixed_window","requests":10,"window":"1h"}}]}}"#
    )));
    let req = FakeRequest::get("/");
    for _ in 0..4 {
        w.eval(&req);
    }
    for s in 1..5 {
        denial_at(&w, &req, NOW + s * SECOND);
    }
    // Rule `all` counted the 3 admitted requests only.
    let other = client(1);
    let admitted = (1..5)
        .flat_map(|s| [s; 3])
        .filter(|&s| allowed(&w.eval_at(&other, NOW + s * SECOND)))
        .count();
    assert_eq!(admitted, 7);
}

#[test]
fn a_block_is_seen_by_every_worker_of_the_envoy() {
    let w = World::new(&rules(BOXED));
    let req = FakeRequest::get("/");
    for _ in 0..4 {
        w.eval(&req);
    }
    // Another worker: its own plan, the same shared data.
    let plan = parse(rules(BOXED).as_bytes()).unwrap();
    let other = evaluate(&plan, &w.hasher, HOLDER, &req, &w.store, &w.metrics, || {
        NOW + 2 * SECOND
    });
    match other {
        Verdict::Deny(d) => assert_eq!(d.report.decision.retry_after, 8 * SECOND),
        other => panic!("{other:?}"),
    }
}

#[test]
fn shadow_blocks_refuse_nothing_and_count_what_they_would_refuse() {
    let w = World::new(&rules(
        &BOXED.replace(r#""key""#, r#""mode":"shadow","key""#),
    ));
    let req = FakeRequest::get("/");
    assert!((0..4).all(|_| allowed(&w.eval(&req))));
    assert!(allowed(&w.eval_at(&req, NOW + 5 * SECOND)));
    assert_eq!(w.metrics.count(0, RuleEvent::ShadowDenied), 2);
    assert_eq!(w.metrics.count(0, RuleEvent::BlocksStarted), 1);
    assert_eq!(w.metrics.count(0, RuleEvent::Blocked), 1);
    assert_eq!(w.metrics.count(0, RuleEvent::Denied), 0);
}

#[test]
fn a_full_block_table_lets_the_blocks_that_end_first_go() {
    // Two buckets of 8 entries: 16 blocks at most.
    let w = World::new(
        r#"{"domain":"t","local_max_keys":1,"local_when_full":"evict","rules":[{"name":"ip","key":["client_ip"],"limits":[
            {"algorithm":"fixed_window","requests":1,"window":"1s","on_exceed":"block","block_for":"1m"}]}]}"#,
    );
    for c in 0..20 {
        let at = NOW + u64::from(c) * MILLISECOND;
        assert!(allowed(&w.eval_at(&client(c), at)));
        let d = denial_at(&w, &client(c), at);
        assert_eq!(d.denial, Some(Denial::Blocked { started: true }));
    }
    let later = NOW + 2 * SECOND;
    let let_in: Vec<u32> = (0..20)
        .filter(|&c| allowed(&w.eval_at(&client(c), later)))
        .collect();
    assert_eq!(let_in, vec![0, 1, 2, 3]);
    // The last 4 keys found no room for their state (live for a second),
    // then their blocks took the places of the first 4 blocks.
    assert_eq!(w.metrics.count(0, RuleEvent::TableFull), 8);
}

#[test]
fn a_global_block_is_the_limiters_and_cached_until_it_ends() {
    let w = World::new(&rules(
        r#"{"name":"g","key":["client_ip"],"limits":[
            {"algorithm":"fixed_window","requests":3,"window":"1s","scope":"global","on_exceed":"block","block_for":"15m"}]}"#,
    ));
    let req = FakeRequest::get("/");
    let p = pending(w.eval(&req));
    assert_eq!(
        String::from_utf8(p.body(0).to_vec()).unwrap(),
        r#"{"domain":"t","hits":1,"limits":[{"key":"g/0/203.0.113.7","algorithm":"fixed_window","requests":3,"window_ms":1000,"burst":3,"block_ms":900000}]}"#
    );
    let blocked = r#"{"allowed":false,"limits":[{"allowed":false,"limit":3,"remaining":0,"reset_ms":900000,"retry_after_ms":900000}]}"#;
    match w.finish(p, Some(blocked.into())) {
        Verdict::Deny(d) => assert_eq!(d.report.decision.retry_after, 900 * SECOND),
        other => panic!("{other:?}"),
    }
    // Cached until the block ends: no call.
    let d = denial_at(&w, &req, NOW + 600 * SECOND);
    assert_eq!(d.retry_after, 300 * SECOND);
    assert!(matches!(
        w.eval_at(&req, NOW + 900 * SECOND),
        Verdict::Check(_)
    ));
    // A coalesced check carries the block too.
    let w = World::new(&rules(
        r#"{"name":"g","key":["client_ip"],"limits":[
            {"algorithm":"fixed_window","requests":3,"window":"1s","scope":"global","sync":{"mode":"coalesce"},"on_exceed":"block","block_for":"1s"}]}"#,
    ));
    let p = pending(w.eval(&req));
    assert!(String::from_utf8(p.body(0).to_vec())
        .unwrap()
        .ends_with(r#""block_ms":1000}]}"#));
}

#[test]
fn a_limit_counted_by_outcome_blocks_locally_and_asks_the_limiter_to_block() {
    // Local: the reserved units of 2 failures fill the limit; the third
    // attempt is refused and starts the box.
    let w = World::new(&rules(
        r#"{"name":"login","key":["client_ip"],"limits":[
            {"algorithm":"fixed_window","requests":2,"window":"1s","count_when":{"status":["401"]},"on_exceed":"block","block_for":"1m"}]}"#,
    ));
    let req = FakeRequest::get("/");
    assert!(allowed(&w.eval(&req)));
    assert!(allowed(&w.eval(&req)));
    let d = denial_at(&w, &req, NOW);
    assert_eq!(d.denial, Some(Denial::Blocked { started: true }));
    assert_eq!(d.retry_after, 60 * SECOND);
    // The window's end does not open the box.
    let d = denial_at(&w, &req, NOW + 2 * SECOND);
    assert_eq!(d.retry_after, 58 * SECOND);
    assert!(RuleEvent::BlocksStarted.applies_to(&w.plan.rules[0]));
    assert_eq!(w.metrics.count(0, RuleEvent::BlocksStarted), 1);
    // Global: the check carries the block for the limiter to hold.
    let w = World::new(&rules(
        r#"{"name":"login","key":["client_ip"],"limits":[
            {"algorithm":"fixed_window","requests":2,"window":"1s","scope":"global","count_when":{"status":["401"]},"on_exceed":"block","block_for":"1m"}]}"#,
    ));
    let p = pending(w.eval(&req));
    assert!(String::from_utf8(p.body(0).to_vec())
        .unwrap()
        .ends_with(r#""block_ms":60000}]}"#));
}

#[test]
fn block_settings_are_refused_where_they_do_not_apply() {
    let refused = |limit: &str| {
        let json = rules(&format!(
            r#"{{"name":"r","key":["client_ip"],"limits":[{limit}]}},{{"name":"pool","key":["const:p"],"limits":[{{"algorithm":"gcra","requests":5,"window":"1s"}}]}}"#
        ));
        parse(json.as_bytes()).unwrap_err().to_string()
    };
    let rate = r#""algorithm":"gcra","requests":5,"window":"1s""#;
    let cases = [
        (
            format!(r#"{{{rate},"on_exceed":"block"}}"#),
            "rules[0].limits[0].block_for: required with on_exceed: block",
        ),
        (
            format!(r#"{{{rate},"block_for":"1m"}}"#),
            "rules[0].limits[0].block_for: only applies with on_exceed: block",
        ),
        (
            format!(r#"{{{rate},"on_exceed":"block","block_for":"999ms"}}"#),
            "rules[0].limits[0].block_for: must be from 1s to 24h",
        ),
        (
            format!(r#"{{{rate},"on_exceed":"block","block_for":"25h"}}"#),
            "rules[0].limits[0].block_for: must be from 1s to 24h",
        ),
        (
            format!(r#"{{{rate},"on_exceed":"block","block_for":"1m","max_delay":"1s"}}"#),
            "rules[0].limits[0].max_delay: only applies with on_exceed: delay",
        ),
        (
            r#"{"concurrency":2,"on_exceed":"block","block_for":"1m"}"#.to_string(),
            "rules[0].limits[0].on_exceed: block does not apply to concurrency limits",
        ),
        (
            format!(
                r#"{{{rate},"on_exceed":"block","block_for":"1m","elastic":{{"ceiling":9,"pool":"pool"}}}}"#
            ),
            "rules[0].limits[0].on_exceed: block does not apply to elastic limits",
        ),
        (
            format!(
                r#"{{{rate},"scope":"global","on_exceed":"block","block_for":"1m","sync":{{"mode":"lease","max_share":"10%"}}}}"#
            ),
            "rules[0].limits[0].on_exceed: block does not apply to global limits with sync lease",
        ),
    ];
    for (limit, message) in cases {
        assert_eq!(refused(&limit), message, "{limit}");
    }
    let rls = r#"{"domain":"t","limiter":{"cluster":"c","protocol":"rls"},"rules":[{"name":"r","key":["client_ip"],"limits":[{"scope":"global","on_exceed":"block","block_for":"1m"}]}]}"#;
    assert_eq!(
        parse(rls.as_bytes()).unwrap_err().to_string(),
        "rules[0].limits[0].on_exceed: block does not apply to limits a rate limit service holds (protocol rls)"
    );
}
