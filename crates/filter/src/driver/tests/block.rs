//! The penalty box (`on_exceed: block`) through the driver: the refusal's
//! headers, every worker sharing the block, and every way a request of a
//! blocking limit ends.

use super::*;
use sluice_core::SECOND;

const LOCAL: &str = r#"{"name":"user","key":["header:x-user"],"limits":[
    {"algorithm":"fixed_window","requests":3,"window":"1s","on_exceed":"block","block_for":"10s"}]}"#;

const GLOBAL: &str = r#"{"name":"user","key":["header:x-user"],"limits":[
    {"algorithm":"fixed_window","requests":1,"window":"1m","scope":"global",
     "on_exceed":"block","block_for":"15m"}]}"#;

/// The `retry-after` header of the reply sent to `context`.
fn retry_after(sim: &Sim, context: u32) -> Option<String> {
    sim.h.effects.iter().find_map(|e| match e {
        Effect::Reply {
            context: c,
            headers,
            ..
        } if *c == context => headers
            .iter()
            .find(|(n, _)| n == "retry-after")
            .map(|(_, v)| v.clone()),
        _ => None,
    })
}

#[test]
fn a_blocked_key_gets_429_with_the_blocks_end_until_it_ends() {
    let mut sim = Sim::new(LOCAL);
    for context in 10..13 {
        assert_eq!(sim.user(context, "a"), Action::Continue);
        sim.end(context);
    }
    assert_eq!(sim.user(13, "a"), Action::Pause);
    assert_eq!(sim.replied(13), Some(429));
    assert_eq!(retry_after(&sim, 13).as_deref(), Some("10"));
    sim.end(13);
    sim.h.now += 4 * SECOND;
    assert_eq!(sim.user(14, "a"), Action::Pause);
    assert_eq!(retry_after(&sim, 14).as_deref(), Some("6"));
    sim.end(14);
    assert_eq!(sim.user(15, "b"), Action::Continue, "another key");
    sim.end(15);
    sim.h.now += 6 * SECOND;
    assert_eq!(sim.user(16, "a"), Action::Continue, "the block ended");
    sim.end(16);
    assert!(sim.h.calls.is_empty(), "a local block makes no call");
    assert_eq!(sim.w.left(), Vec::<&str>::new());
}

#[test]
fn a_block_started_on_one_worker_refuses_the_key_on_another() {
    let mut a = Sim::new(LOCAL);
    let mut b = Sim::new(LOCAL);
    // The workers of one Envoy share its shared data.
    b.h.store = std::rc::Rc::clone(&a.h.store);
    for context in 10..14 {
        a.user(context, "a");
        a.end(context);
    }
    b.h.now = a.h.now + 2 * SECOND;
    assert_eq!(b.user(10, "a"), Action::Pause);
    assert_eq!(retry_after(&b, 10).as_deref(), Some("8"));
}

/// Where a request of a global blocking limit ends.
#[derive(Debug, Clone, Copy)]
enum End {
    DuringTheCheck,
    BeforeTheResponse,
    AfterTheResponse,
    Refused,
}

#[test]
fn every_end_of_a_request_of_a_global_block_leaves_nothing() {
    for end in [
        End::DuringTheCheck,
        End::BeforeTheResponse,
        End::AfterTheResponse,
        End::Refused,
    ] {
        let mut sim = Sim::new(GLOBAL);
        if matches!(end, End::Refused) {
            sim.user(9, "a");
            sim.run();
            sim.end(9);
        }
        sim.user(10, "a");
        assert_eq!(sim.h.calls.len(), 1, "{end:?}: its check");
        if !matches!(end, End::DuringTheCheck) {
            sim.run();
        }
        if matches!(end, End::AfterTheResponse) {
            sim.respond(10, &[]);
        }
        sim.end(10);
        sim.run();
        assert_eq!(sim.w.left(), Vec::<&str>::new(), "{end:?}");
        assert_eq!(sim.limiter.used.values().sum::<u64>(), 1, "{end:?}");
        if matches!(end, End::Refused) {
            assert_eq!(sim.replied(10), Some(429));
            assert_eq!(retry_after(&sim, 10).as_deref(), Some("900"));
            // Cached until the block ends: no call.
            sim.h.now += 899 * SECOND;
            assert_eq!(sim.user(11, "a"), Action::Pause);
            assert!(sim.h.calls.is_empty(), "{end:?}");
            assert_eq!(retry_after(&sim, 11).as_deref(), Some("1"));
            sim.end(11);
            assert_eq!(sim.w.left(), Vec::<&str>::new());
        }
    }
}

#[test]
fn the_vm_closing_with_a_global_block_check_out_leaves_nothing() {
    let mut sim = Sim::new(GLOBAL);
    sim.user(10, "a");
    assert_eq!(sim.h.calls.len(), 1);
    sim.h.focused = ROOT;
    sim.w.root_done(&mut sim.h, ROOT);
    sim.end(10);
    assert_eq!(sim.w.left(), Vec::<&str>::new());
}
