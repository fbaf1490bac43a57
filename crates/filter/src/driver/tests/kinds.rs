//! More kinds through their ends: local delay and permits, leases, elastic
//! limits, costs settled locally, configuration pushes and the VM closing.

use super::*;
use sluice_core::{MILLISECOND, SECOND};

/// One a second per user, held up to 5 s when over.
const PACED: &str = r#"{"name":"paced","key":["header:x-user"],"limits":[
    {"algorithm":"gcra","requests":1,"window":"1s","burst":1,"on_exceed":"delay","max_delay":"5s"}]}"#;

#[test]
fn a_held_request_whose_client_leaves_gives_back_its_place_in_the_schedule() {
    let mut sim = Sim::new(PACED);
    assert_eq!(sim.user(10, "a"), Action::Continue);
    assert_eq!(sim.user(11, "a"), Action::Pause, "held a second");
    sim.end(11);
    assert_eq!(sim.user(12, "a"), Action::Pause);
    sim.tick(SECOND);
    assert!(sim.resumed(12), "its place is the one 11 gave back");
    assert!(!sim.resumed(11));
}

#[test]
fn a_held_request_resumes_when_it_conforms_and_reports_its_delay() {
    let mut sim = Sim::new(PACED);
    sim.user(10, "a");
    sim.user(11, "a");
    sim.tick(SECOND - MILLISECOND);
    assert!(!sim.resumed(11));
    sim.tick(MILLISECOND);
    assert!(sim.resumed(11));
    sim.respond(11, &[]);
    let delayed = sim.h.effects.iter().any(|e| {
        matches!(e, Effect::Header { context: 11, name, value, .. }
            if name == "x-sluice-delayed-ms" && value == "1000")
    });
    assert!(delayed, "{:?}", sim.h.effects);
}

#[test]
fn local_permits_are_held_until_the_stream_ends() {
    let one = r#"{"name":"one","key":["header:x-user"],"limits":[{"concurrency":1}]}"#;
    let mut sim = Sim::new(one);
    assert_eq!(sim.user(10, "a"), Action::Continue);
    assert_eq!(sim.user(11, "a"), Action::Pause);
    assert_eq!(sim.replied(11), Some(429));
    assert_eq!(sim.gauge(), 1);
    sim.end(11);
    sim.end(10);
    assert_eq!(sim.gauge(), 0);
    assert_eq!(sim.user(12, "a"), Action::Continue);
}

#[test]
fn a_local_response_cost_is_settled_when_the_stream_ends() {
    let tokens = r#"{"name":"tokens","key":["header:x-user"],
        "cost":{"estimate":0,"response":"header:x-tokens"},
        "limits":[{"algorithm":"fixed_window","requests":100,"window":"1h"}]}"#;
    let mut sim = Sim::new(tokens);
    sim.user(10, "a");
    sim.respond(10, &[("x-tokens", "100")]);
    sim.end(10);
    // The hour's 100 tokens are spent: the next request is refused.
    assert_eq!(sim.user(11, "a"), Action::Pause);
    assert_eq!(sim.replied(11), Some(429));
    assert!(sim.h.calls.is_empty());
}

#[test]
fn a_leased_limit_spends_its_lease_locally_and_renews_it_from_the_root() {
    let leased = r#"{"name":"user","key":["header:x-user"],"limits":[
        {"algorithm":"fixed_window","requests":100,"window":"1m","scope":"global",
         "sync":{"mode":"lease","max_share":"10%","ttl":"10s"}}]}"#;
    let mut sim = Sim::new(leased);
    sim.user(10, "a");
    sim.run();
    assert!(sim.resumed(10));
    let checks = sim.limiter.checks;
    for context in 11..30 {
        sim.user(context, "a");
        sim.run();
        sim.end(context);
    }
    let resumed = (11..30).filter(|c| sim.resumed(*c)).count();
    let direct = (11..30)
        .filter(|c| sim.replied(*c).is_none() && !sim.resumed(*c))
        .count();
    assert_eq!(resumed + direct, 19, "every one admitted");
    assert!(
        sim.limiter.checks - checks < 19,
        "most spent from the lease"
    );
    // Units are never lost: at most the limit is ever counted.
    assert!(sim.limiter.used.values().sum::<u64>() <= 100);
}

/// 2 a minute per user, up to 4 while the pool (3 a minute) has room; all
/// global.
const ELASTIC: &str = r#"{"name":"user","key":["header:x-user"],"limits":[
    {"algorithm":"fixed_window","requests":2,"window":"1m","scope":"global",
     "elastic":{"ceiling":4,"pool":"spare"}}]},
   {"name":"spare","key":["const:all"],"limits":[
    {"algorithm":"fixed_window","requests":3,"window":"1m","scope":"global"}]}"#;

#[test]
fn an_elastic_limit_borrows_in_a_second_call_and_a_client_gone_meanwhile_takes_nothing_more() {
    let mut sim = Sim::new(ELASTIC);
    for context in [10, 11] {
        sim.user(context, "a");
        sim.run();
        assert!(sim.resumed(context));
    }
    // The third asks to borrow in a second call; its client leaves while
    // that call is out.
    sim.user(12, "a");
    assert!(sim.answer_one(), "the first call denies");
    assert_eq!(sim.h.calls.len(), 1, "the second call borrows");
    sim.end(12);
    sim.run();
    let borrowed = sim.limiter.used.values().sum::<u64>();
    // Lost with the client, the second call still counted: at most the
    // ceiling's extra unit and one of the pool.
    assert!(borrowed <= 4, "{:?}", sim.limiter.used);
    sim.user(13, "a");
    sim.run();
    assert!(sim.resumed(13) || sim.replied(13) == Some(429));
}

const PERMITS: &str = r#"{"name":"inflight","key":["header:x-user"],"limits":[
    {"concurrency":2,"scope":"global"}]}"#;

/// A second root configured with `rules`, as a configuration push makes.
fn push(sim: &mut Sim, root: u32, rules: &str) {
    sim.w.root_created(root);
    sim.h.roots.push(root);
    sim.h.focused = root;
    let json = config(rules);
    assert!(sim
        .w
        .configure(&mut sim.h, root, json.as_bytes(), Some([7; 16])));
}

#[test]
fn a_configuration_push_mid_request_keeps_its_permits_until_its_end() {
    let mut sim = Sim::new(PERMITS);
    sim.user(10, "a");
    sim.run();
    assert!(sim.resumed(10));
    push(&mut sim, 2, PERMITS);
    sim.h.focused = ROOT;
    sim.w.root_done(&mut sim.h, ROOT);
    sim.end(10);
    // The root left gives the permit back.
    sim.h.focused = 2;
    sim.w.queue_ready(&mut sim.h, 2, 1);
    sim.run();
    assert_eq!(sim.limiter.permits_held(), 0);
    assert_eq!(sim.gauge(), 0);
}

#[test]
fn the_vm_closing_resumes_held_requests_and_fails_those_waiting_on_the_limiter() {
    let rules = format!(
        "{PACED},{}",
        r#"{"name":"shared","match":{"path_prefix":"/g"},"key":["header:x-user"],"limits":[
            {"algorithm":"fixed_window","requests":9,"window":"1m","scope":"global",
             "sync":{"mode":"coalesce"}}]}"#
    );
    let mut sim = Sim::new(&rules);
    sim.user(10, "a");
    assert_eq!(sim.user(11, "a"), Action::Pause, "held");
    sim.start(20, &[("x-user", "b"), (":path", "/g")]);
    sim.start(21, &[("x-user", "b"), (":path", "/g")]);
    sim.h.focused = ROOT;
    sim.w.root_done(&mut sim.h, ROOT);
    assert!(sim.resumed(11), "a held request is let go");
    assert_eq!(
        sim.replied(21),
        Some(429),
        "the group's waiting request: failure_mode deny"
    );
}

#[test]
fn an_elastic_second_call_asked_as_the_last_root_closes_fails_at_once() {
    let rules = r#"{"name":"user","key":["header:x-user"],"limits":[
        {"concurrency":9,"scope":"global"},
        {"algorithm":"fixed_window","requests":1,"window":"1m","scope":"global",
         "elastic":{"ceiling":2,"pool":"spare"}}]},
       {"name":"spare","key":["const:all"],"limits":[
        {"algorithm":"fixed_window","requests":3,"window":"1m","scope":"global"}]},
       {"name":"watch","mode":"shadow","key":["header:x-user"],"limits":[
        {"algorithm":"fixed_window","requests":50,"window":"1m","scope":"global"}]}"#;
    let mut sim = Sim::new(rules);
    sim.user(10, "a");
    sim.run();
    assert!(sim.resumed(10));
    // The next is checked by the root: its enforcing call denies (it may
    // borrow) while its shadow call is out when the last root closes.
    sim.user(11, "a");
    sim.wake();
    assert_eq!(sim.h.calls.len(), 2);
    let enforcing = sim.h.calls[0].token;
    sim.answer(enforcing);
    sim.h.focused = ROOT;
    sim.w.root_done(&mut sim.h, ROOT);
    assert_eq!(sim.replied(11), Some(429), "failure_mode deny");
    assert!(!sim.w.left().contains(&"rooted"), "{:?}", sim.w.left());
}
