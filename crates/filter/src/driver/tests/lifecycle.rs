//! Each kind of limit through each way a request can end.

use super::*;
use sluice_core::MILLISECOND;

const LOCAL: &str = r#"{"name":"user","key":["header:x-user"],"limits":[
    {"algorithm":"fixed_window","requests":3,"window":"1m"}]}"#;

const PERMITS: &str = r#"{"name":"inflight","key":["header:x-user"],"limits":[
    {"concurrency":2,"scope":"global"}]}"#;

const WAIT_FOR_PERMIT: &str = r#"{"name":"inflight","key":["header:x-user"],"limits":[
    {"concurrency":1,"scope":"global","on_exceed":"delay","max_delay":"1s"}]}"#;

const GLOBAL: &str = r#"{"name":"user","key":["header:x-user"],"limits":[
    {"algorithm":"fixed_window","requests":3,"window":"1m","scope":"global"}]}"#;

const COALESCED: &str = r#"{"name":"user","key":["header:x-user"],"limits":[
    {"algorithm":"fixed_window","requests":3,"window":"1m","scope":"global",
     "sync":{"mode":"coalesce"}}]}"#;

const TOKENS: &str = r#"{"name":"tokens","key":["header:x-user"],
    "cost":{"estimate":0,"response":"header:x-tokens"},
    "limits":[{"algorithm":"fixed_window","requests":100,"window":"1h","scope":"global"}]}"#;

#[test]
fn a_local_limit_admits_its_quota_and_denies_the_next_with_429() {
    let mut sim = Sim::new(LOCAL);
    for context in 10..13 {
        assert_eq!(sim.user(context, "a"), Action::Continue);
        sim.respond(context, &[]);
        sim.end(context);
    }
    assert_eq!(sim.user(13, "a"), Action::Pause);
    assert_eq!(sim.replied(13), Some(429));
    assert_eq!(sim.user(14, "b"), Action::Continue);
    assert!(sim.h.calls.is_empty(), "a local limit makes no call");
}

/// Where in its life a request's stream ends.
#[derive(Debug, Clone, Copy)]
enum End {
    /// Before the root made its check.
    BeforeTheCheck,
    /// While the check is out.
    DuringTheCheck,
    /// Admitted, before the response.
    BeforeTheResponse,
    /// After the response.
    AfterTheResponse,
}

const ENDS: [End; 4] = [
    End::BeforeTheCheck,
    End::DuringTheCheck,
    End::BeforeTheResponse,
    End::AfterTheResponse,
];

/// Runs a request of a global concurrency limit to `end`.
fn run_to(sim: &mut Sim, context: u32, end: End) {
    assert_eq!(sim.user(context, "a"), Action::Pause);
    if !matches!(end, End::BeforeTheCheck) {
        sim.wake();
        assert_eq!(sim.h.calls.len(), 1, "the check is out");
    }
    if matches!(end, End::BeforeTheResponse | End::AfterTheResponse) {
        sim.run();
        assert!(sim.resumed(context));
    }
    if matches!(end, End::AfterTheResponse) {
        sim.respond(context, &[]);
    }
    sim.end(context);
    sim.run();
}

#[test]
fn global_permits_come_back_however_the_stream_ends() {
    for end in ENDS {
        let mut sim = Sim::new(PERMITS);
        run_to(&mut sim, 10, end);
        assert_eq!(sim.limiter.permits_held(), 0, "{end:?}");
        assert_eq!(sim.gauge(), 0, "{end:?}");
        // Both permits are free again.
        for context in [20, 21] {
            sim.user(context, "a");
        }
        sim.run();
        assert!(sim.resumed(20) && sim.resumed(21), "{end:?}");
        assert_eq!(sim.limiter.permits_held(), 2, "{end:?}");
    }
}

#[test]
fn the_root_makes_a_check_that_takes_permits_once_woken() {
    let mut sim = Sim::new(PERMITS);
    assert_eq!(sim.user(10, "a"), Action::Pause);
    assert!(sim.h.calls.is_empty(), "not from the request's context");
    assert!(sim.wake());
    assert_eq!(sim.h.calls.len(), 1);
    assert_eq!(sim.h.calls[0].from, ROOT);
    // A request gone before the root ran is never checked.
    sim.user(11, "a");
    sim.end(11);
    sim.run();
    assert_eq!(sim.limiter.checks, 1);
}

#[test]
fn permits_are_held_until_the_stream_ends_and_deny_beyond_them() {
    let mut sim = Sim::new(PERMITS);
    for context in [10, 11, 12] {
        sim.user(context, "a");
        sim.run();
    }
    assert!(sim.resumed(10) && sim.resumed(11));
    assert_eq!(sim.replied(12), Some(429));
    assert_eq!(sim.gauge(), 2);
    sim.end(12);
    sim.end(10);
    sim.run();
    assert_eq!(sim.limiter.permits_held(), 1);
    sim.user(13, "a");
    sim.run();
    assert!(sim.resumed(13));
}

#[test]
fn a_failed_check_follows_the_failure_mode_and_takes_nothing() {
    let mut sim = Sim::new(PERMITS);
    sim.user(10, "a");
    sim.wake();
    let token = sim.h.calls[0].token;
    sim.fail(token);
    assert_eq!(sim.replied(10), Some(429), "failure_mode deny");
    sim.end(10);
    sim.run();
    assert_eq!(sim.limiter.permits_held(), 0);
    assert_eq!(sim.gauge(), 0);
}

#[test]
fn a_closing_root_ends_its_checks_as_failed() {
    let mut sim = Sim::new(PERMITS);
    sim.user(10, "a");
    sim.wake();
    sim.w.root_done(&mut sim.h, ROOT);
    assert_eq!(sim.replied(10), Some(429), "failure_mode deny");
    sim.end(10);
    assert_eq!(sim.gauge(), 0);
}

#[test]
fn a_request_waiting_for_a_permit_gets_one_when_it_frees_or_gives_back_what_it_took() {
    for gone_during_its_check in [false, true] {
        let mut sim = Sim::new(WAIT_FOR_PERMIT);
        sim.user(10, "a");
        sim.run();
        assert!(sim.resumed(10));
        // The second waits: decided again at the root's ticks.
        sim.user(11, "a");
        sim.run();
        assert_eq!(sim.replied(11), None);
        sim.tick(MILLISECOND);
        sim.run();
        assert!(!sim.resumed(11));
        sim.end(10);
        sim.run();
        sim.tick(MILLISECOND);
        assert_eq!(sim.h.calls.len(), 1, "the root checks again for it");
        if gone_during_its_check {
            sim.end(11);
        }
        sim.run();
        assert_eq!(sim.resumed(11), !gone_during_its_check);
        sim.end(11);
        sim.run();
        assert_eq!(
            sim.limiter.permits_held(),
            0,
            "gone: {gone_during_its_check}"
        );
        assert_eq!(sim.gauge(), 0);
    }
}

#[test]
fn a_global_limit_counts_each_admitted_request_once_however_it_ends() {
    let mut sim = Sim::new(GLOBAL);
    sim.user(10, "a");
    assert_eq!(sim.h.calls[0].from, 10, "its own check");
    sim.end(10);
    for context in [11, 12] {
        sim.user(context, "a");
        sim.run();
        assert!(sim.resumed(context));
    }
    sim.user(13, "a");
    sim.run();
    assert_eq!(sim.replied(13), Some(429));
    assert_eq!(sim.limiter.used.values().sum::<u64>(), 3);
}

#[test]
fn coalesced_requests_share_calls_and_a_carrier_gone_fails_only_its_own() {
    let mut sim = Sim::new(COALESCED);
    sim.user(10, "a");
    for context in [11, 12, 13] {
        assert_eq!(sim.user(context, "a"), Action::Pause);
    }
    assert_eq!(sim.h.calls.len(), 1, "one call while the first is out");
    sim.run();
    // 10 alone, then 11..13 in one shared call: 3 admitted, 1 denied.
    assert_eq!(sim.limiter.checks, 2);
    let admitted = [10, 11, 12, 13].iter().filter(|c| sim.resumed(**c)).count();
    assert_eq!(admitted, 3);
    assert_eq!(sim.replied(13), Some(429));
    // A group member whose client leaves before its call is answered.
    let mut sim = Sim::new(COALESCED);
    sim.user(20, "b");
    sim.user(21, "b");
    sim.end(21);
    sim.run();
    assert!(sim.resumed(20));
    assert_eq!(sim.limiter.checks, 1, "the member that left is not checked");
}

#[test]
fn a_response_cost_is_charged_once_whatever_the_end() {
    for respond in [false, true] {
        let mut sim = Sim::new(TOKENS);
        sim.user(10, "a");
        sim.run();
        assert!(sim.resumed(10));
        if respond {
            sim.respond(10, &[("x-tokens", "40")]);
        }
        sim.end(10);
        sim.run();
        // No response: its estimate (0) stands.
        let charged = if respond { 40 } else { 0 };
        assert_eq!(sim.limiter.charged, charged);
        assert_eq!(sim.limiter.used.values().sum::<u64>(), charged);
    }
}

#[test]
fn a_request_whose_group_cannot_make_its_next_call_is_still_resumed() {
    let mut sim = Sim::new(COALESCED);
    sim.user(10, "a");
    assert_eq!(sim.user(11, "a"), Action::Pause, "waits for the next call");
    sim.h.unreachable = true;
    assert!(sim.answer_one());
    // 10 carries the next call, which cannot be made: 11 gets the failure
    // mode, 10 its own outcome.
    assert_eq!(sim.replied(11), Some(429));
    assert!(!sim.resumed(11));
    assert!(sim.resumed(10));
}

#[test]
fn the_root_renews_the_permits_of_requests_it_resumed_from_its_own_context() {
    // A permit each, and a second request of the minute held in delay mode.
    let rules = r#"{"name":"inflight","key":["header:x-user"],"limits":[
        {"concurrency":5,"scope":"global","permit_ttl":"3s"},
        {"algorithm":"gcra","requests":1,"window":"1s","burst":1,
         "on_exceed":"delay","max_delay":"5s"}]}"#;
    let mut sim = Sim::new(rules);
    sim.user(10, "a");
    sim.run();
    sim.user(11, "a");
    sim.run();
    assert!(sim.resumed(10) && !sim.resumed(11), "11 is held");
    let mut renewals = 0;
    for _ in 0..8 {
        sim.tick(500 * MILLISECOND);
        for call in sim.h.calls.iter().filter(|c| c.path == "/v1/permits") {
            assert_eq!(
                call.from, ROOT,
                "a renewal made from a request ends with it"
            );
            renewals += 1;
        }
        sim.run();
    }
    assert!(sim.resumed(11));
    assert!(renewals > 0, "the permits were renewed");
}

#[test]
fn a_request_waiting_for_a_permit_is_decided_when_the_root_that_checks_for_it_closes() {
    for last in [true, false] {
        let mut sim = Sim::new(WAIT_FOR_PERMIT);
        sim.user(10, "a");
        sim.run();
        sim.user(11, "a");
        sim.run();
        sim.end(10);
        sim.run();
        // A newer configuration's root, unless the root closing is the last.
        const NEXT: u32 = ROOT + 1;
        if !last {
            sim.w.root_created(NEXT);
            sim.h.roots.push(NEXT);
            sim.h.focused = NEXT;
            let json = config(WAIT_FOR_PERMIT);
            assert!(sim.w.configure(&mut sim.h, NEXT, json.as_bytes(), None));
        }
        sim.tick(MILLISECOND);
        assert_eq!(sim.h.calls.len(), 1, "the root checks again for 11");
        sim.h.focused = ROOT;
        sim.w.root_done(&mut sim.h, ROOT);
        // Its call is dropped with it, here before the limiter saw it.
        sim.h.calls.clear();
        if last {
            assert_eq!(sim.replied(11), Some(429), "out of time");
        } else {
            // Decided again from the next root.
            sim.h.now += MILLISECOND;
            sim.h.focused = NEXT;
            sim.w.tick(&mut sim.h, NEXT);
            assert_eq!(sim.h.calls.len(), 1, "the next root checks for 11");
            assert_eq!(sim.h.calls[0].from, NEXT);
            let token = sim.h.calls[0].token;
            sim.answer(token);
            assert!(sim.resumed(11));
        }
        // Nothing left for the root gone: only 11, and its permit if admitted.
        let left: &[&str] = if last {
            &["requests"]
        } else {
            &["requests", "holdings"]
        };
        assert_eq!(sim.w.left(), left);
    }
}
