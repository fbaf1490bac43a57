//! Lease renewals batched by the worker's root: one call for every key
//! whose lease runs low, through the ways a renewal can end.

use super::*;
use crate::metrics::GlobalEvent;
use sluice_core::MILLISECOND;

/// 100 a minute per user, global, leased 10% (10 units) at a time.
const LEASED: &str = r#"{"name":"user","key":["header:x-user"],"limits":[
    {"algorithm":"fixed_window","requests":100,"window":"1m","scope":"global",
     "sync":{"mode":"lease","max_share":"10%","ttl":"10s"}}]}"#;

/// Requests of `user` (contexts from `*next`), each settled and ended,
/// until one starts a renewal, left queued for the root (not yet sent).
fn until_renewal(sim: &mut Sim, next: &mut u32, user: &str) {
    let queued = sim.w.renewals_queued.len();
    for _ in 0..100 {
        let context = *next;
        *next += 1;
        sim.user(context, user);
        if sim.w.renewals_queued.len() > queued {
            sim.end(context);
            return;
        }
        sim.run();
        sim.end(context);
    }
    panic!("no renewal for {user}");
}

/// The keys a check names, each with the units it asks for.
type Asks = Vec<(String, Option<u64>)>;

/// The calls out to `/v1/check`: the context that made each, and its asks.
fn checks(sim: &Sim) -> Vec<(u32, Asks)> {
    sim.h
        .calls
        .iter()
        .filter(|c| c.path == "/v1/check")
        .map(|c| {
            let check: sluice_wire::CheckRequest =
                serde_json::from_slice(&c.body).expect("a check");
            let asks = check
                .limits
                .iter()
                .map(|l| (l.key.to_string(), l.lease))
                .collect();
            (c.from, asks)
        })
        .collect()
}

/// Requests of `user` served from its lease (no call, admitted), counted
/// until one is not; contexts from `*next`.
fn served_from_lease(sim: &mut Sim, next: &mut u32, user: &str) -> usize {
    let mut served = 0;
    loop {
        let context = *next;
        *next += 1;
        let action = sim.user(context, user);
        let quiet = sim.h.calls.is_empty() && sim.w.renewals_queued.is_empty();
        if action != Action::Continue || !quiet {
            sim.run();
            sim.end(context);
            return served;
        }
        sim.end(context);
        served += 1;
    }
}

#[test]
fn the_root_renews_every_key_running_low_in_one_call() {
    let mut sim = Sim::new(LEASED);
    let mut next = 10;
    // Each key's first renewal (4 units, at 0 left), sent and answered.
    for user in ["a", "b", "c"] {
        until_renewal(&mut sim, &mut next, user);
        sim.run();
    }
    // Then each spends 2 of its 4 from the lease, and the third request
    // of each, leaving 1, starts a renewal before the root runs.
    for user in ["a", "b", "c"] {
        for _ in 0..2 {
            assert_eq!(sim.user(next, user), Action::Continue);
            sim.end(next);
            next += 1;
        }
        let queued = sim.w.renewals_queued.len();
        assert_eq!(sim.user(next, user), Action::Continue);
        sim.end(next);
        next += 1;
        assert_eq!(sim.w.renewals_queued.len(), queued + 1, "{user}");
    }
    assert!(sim.h.calls.is_empty(), "no request waits for a renewal");
    let before = sim.limiter.checks;
    assert!(sim.wake());
    let sent = checks(&sim);
    assert_eq!(sent.len(), 1, "one call: {sent:?}");
    let (from, asks) = &sent[0];
    assert_eq!(*from, ROOT);
    let keys: Asks = ["a", "b", "c"]
        .iter()
        .map(|u| (format!("user/0/{u}"), Some(8)))
        .collect();
    assert_eq!(*asks, keys);
    sim.run();
    assert_eq!(sim.limiter.checks - before, 1);
    // Counted per call, as the limiter counts them: the three first
    // renewals and this one.
    let renewals = sim.h.recorded.sink.count_global(GlobalEvent::LeaseRenewals);
    assert_eq!(renewals, 4);
    // Each key holds 9 units, renewed below 4: 5 spent from the lease.
    for user in ["a", "b", "c"] {
        assert_eq!(served_from_lease(&mut sim, &mut next, user), 5, "{user}");
    }
    assert!(sim.limiter.used.values().all(|&u| u <= 100));
}

#[test]
fn a_key_asked_for_twice_before_the_root_runs_is_asked_for_once() {
    let mut sim = Sim::new(LEASED);
    let mut next = 10;
    until_renewal(&mut sim, &mut next, "a");
    sim.run();
    // Its second renewal (4 units granted, 1 left after it) stays queued
    // longer than the limiter's timeout: the ask is given up, and the next
    // request, spending the last unit, renews again.
    until_renewal(&mut sim, &mut next, "a");
    sim.h.now += 60 * MILLISECOND;
    sim.user(next, "a");
    sim.end(next);
    next += 1;
    assert_eq!(sim.w.renewals_queued.len(), 2);
    assert!(sim.wake());
    let sent = checks(&sim);
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(
        sent[0].1,
        vec![("user/0/a".to_string(), Some(8))],
        "the key once, the newer ask"
    );
    sim.run();
    assert_eq!(served_from_lease(&mut sim, &mut next, "a"), 4);
    assert!(sim.limiter.used["user/0/a"] <= 100);
}

/// As [`LEASED`], a lease spendable 20 ms (less than the limiter's 50 ms
/// timeout, so that it can end while its renewal is awaited).
const SHORT: &str = r#"{"name":"user","key":["header:x-user"],"limits":[
    {"algorithm":"fixed_window","requests":100,"window":"1m","scope":"global",
     "sync":{"mode":"lease","max_share":"10%","ttl":"20ms"}}]}"#;

#[test]
fn a_lease_that_ends_while_its_renewal_is_out_gives_back_the_late_units() {
    let mut sim = Sim::new(SHORT);
    let mut next = 10;
    until_renewal(&mut sim, &mut next, "a");
    assert!(sim.wake());
    let token = sim.h.calls[0].token;
    // The lease ends before the answer: a request checks alone meanwhile.
    sim.h.now += 30 * MILLISECOND;
    let alone = next;
    next += 1;
    sim.user(alone, "a");
    let sent = checks(&sim);
    assert_eq!(sent.len(), 2, "{sent:?}");
    assert_eq!(sent[1].1, vec![("user/0/a".to_string(), None)]);
    // The renewal's 4 units come after the lease ended: none is spent.
    sim.answer(token);
    sim.run();
    sim.end(alone);
    assert!(sim.resumed(alone));
    // The next request asks anew and gives them back.
    sim.h.now += 30 * MILLISECOND;
    let used = sim.limiter.used["user/0/a"];
    sim.user(next, "a");
    let returned = sim.h.calls.iter().find_map(|c| {
        let check: sluice_wire::CheckRequest = serde_json::from_slice(&c.body).ok()?;
        check.limits.first().and_then(|l| l.returned)
    });
    assert_eq!(returned, Some(4), "the 4 late units go back");
    sim.run();
    sim.end(next);
    assert!(sim.resumed(next));
    // Given back 4, then debited the request and a lease of 1 (the lease
    // before it used none of its grant).
    assert_eq!(sim.limiter.used["user/0/a"], used - 4 + 1 + 1);
}

#[test]
fn a_renewal_goes_out_after_the_request_that_started_it_ended() {
    let mut sim = Sim::new(LEASED);
    let mut next = 10;
    // until_renewal ended the request that started it.
    until_renewal(&mut sim, &mut next, "a");
    assert!(sim.wake());
    assert_eq!(checks(&sim).len(), 1);
    sim.run();
    assert_eq!(served_from_lease(&mut sim, &mut next, "a"), 2);
}

#[test]
fn a_root_that_closes_with_a_renewal_out_ends_its_ask() {
    let mut sim = Sim::new(LEASED);
    let mut next = 10;
    until_renewal(&mut sim, &mut next, "a");
    assert!(sim.wake());
    assert_eq!(checks(&sim).len(), 1);
    // A newer configuration's root takes over; the old one closes with
    // the renewal out, whose answer is lost.
    const NEXT: u32 = ROOT + 1;
    sim.w.root_created(NEXT);
    sim.h.roots.push(NEXT);
    sim.h.focused = NEXT;
    assert!(sim
        .w
        .configure(&mut sim.h, NEXT, config(LEASED).as_bytes(), None));
    sim.h.focused = ROOT;
    sim.w.root_done(&mut sim.h, ROOT);
    sim.h.calls.clear();
    // The lease no longer waits: the request that finds it empty asks for
    // units with its check instead of checking alone.
    let context = next;
    let stream = fake::Stream {
        request_headers: vec![("x-user".into(), "a".into())],
        ..fake::Stream::default()
    };
    sim.h.streams.insert(context, stream);
    sim.w.request_created(NEXT, context);
    sim.h.focused = context;
    sim.w.request_headers(&mut sim.h, context, true);
    let asks = checks(&sim);
    assert_eq!(asks.len(), 1, "{asks:?}");
    assert_eq!(asks[0].1, vec![("user/0/a".to_string(), Some(4))]);
}
