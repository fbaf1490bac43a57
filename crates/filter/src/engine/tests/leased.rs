//! Leased global limits: units spent in the Envoy, asked for with checks.

use super::*;
use crate::engine::core::renewal::lease_expiry;
use sluice_core::Limit;

const LEASED: &str = r#"{"name":"g","key":["client_ip"],"limits":[
    {"algorithm":"fixed_window","requests":100,"window":"1h","scope":"global","sync":{"mode":"lease","max_share":"10%","ttl":"1s"}}]}"#;

fn body(p: &PendingCheck) -> String {
    String::from_utf8(p.body(0).to_vec()).unwrap()
}

fn granted(units: u64, remaining: u64) -> String {
    format!(
        r#"{{"allowed":true,"limits":[{{"allowed":true,"limit":100,"remaining":{remaining},"reset_ms":60000,"retry_after_ms":0,"leased":{units}}}]}}"#
    )
}

/// The renewal an admitted request started.
fn renewal_of(v: Verdict) -> Renewal {
    match v {
        Verdict::Allow(mut a) => a.renewal.take().expect("a renewal"),
        other => panic!("{other:?}"),
    }
}

/// Settles `renewal` with `answer` (`None`: its call failed).
fn settle(w: &World, renewal: Renewal, answer: Option<String>) {
    renewal.settle(
        &w.plan,
        &w.store,
        &w.metrics,
        answer.as_deref().map(str::as_bytes),
    );
}

/// Evaluates a request at `now` that must call; answers it with `answer`.
fn call_at(w: &World, now: Nanos, answer: &str) -> (String, Verdict) {
    let mut p = pending(w.eval_at(&FakeRequest::get("/"), now));
    let sent = body(&p);
    p.record(0, Some(answer.as_bytes()));
    (sent, finish(&w.plan, p, &w.store, &w.metrics))
}

#[test]
fn grants_are_spent_without_calls_and_grow_when_spent_early() {
    let w = World::new(&rules(LEASED));
    let (sent, v) = call_at(&w, NOW, &granted(1, 98));
    assert!(sent.contains(r#""lease":1"#), "{sent}");
    assert!(allowed(&v));
    // Served from the lease: no call, reporting the limiter's remaining
    // plus what is held (none left after this one).
    match w.eval_at(&FakeRequest::get("/"), NOW + MILLISECOND) {
        Verdict::Allow(a) => assert_eq!(a.report.unwrap().decision.remaining, 98),
        other => panic!("{other:?}"),
    }
    // Spent early: the next ask doubles.
    let (sent, _) = call_at(&w, NOW + 2 * MILLISECOND, &granted(2, 95));
    assert!(
        sent.contains(r#""lease":2"#) && !sent.contains("returned"),
        "{sent}"
    );
    assert!(allowed(
        &w.eval_at(&FakeRequest::get("/"), NOW + 3 * MILLISECOND)
    ));
    // Spending the next unit leaves less than half of the grant: the
    // request is served from the lease and starts a renewal, doubled, that
    // no request waits for (it weighs nothing: the request was served).
    let renewal = renewal_of(w.eval_at(&FakeRequest::get("/"), NOW + 4 * MILLISECOND));
    assert_eq!(
        String::from_utf8(renewal.body(&w.plan.domain)).unwrap(),
        r#"{"domain":"t","hits":0,"limits":[{"key":"g/0/203.0.113.7","algorithm":"fixed_window","requests":100,"window_ms":3600000,"burst":100,"lease":4}]}"#
    );
    // While it is awaited, a request finding the lease empty checks alone.
    let alone = pending(w.eval_at(&FakeRequest::get("/"), NOW + 5 * MILLISECOND));
    assert!(!body(&alone).contains("lease"), "{}", body(&alone));
    settle(&w, renewal, Some(granted(4, 90)));
    // The four new units are spent without a call; the third starts the
    // next renewal.
    for i in 0..4 {
        match w.eval_at(&FakeRequest::get("/"), NOW + 6 * MILLISECOND) {
            Verdict::Allow(a) => assert_eq!(a.renewal.is_some(), i == 2, "{i}"),
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn an_expired_lease_gives_back_its_units_with_the_next_ask() {
    let w = World::new(&rules(LEASED));
    call_at(&w, NOW, &granted(1, 98));
    assert!(allowed(&w.eval_at(&FakeRequest::get("/"), NOW)));
    call_at(&w, NOW, &granted(2, 95));
    assert!(allowed(&w.eval_at(&FakeRequest::get("/"), NOW)));
    // One unit of the second grant is left when it expires (ttl 1s).
    let (sent, _) = call_at(&w, NOW + 1500 * MILLISECOND, &granted(1, 95));
    assert!(
        sent.contains(r#""lease":1,"returned":1,"returned_age_ms":1500"#),
        "{sent}"
    );
}

#[test]
fn while_an_ask_is_awaited_other_requests_check_alone() {
    let w = World::new(&rules(LEASED));
    let first = pending(w.eval(&FakeRequest::get("/")));
    assert!(body(&first).contains(r#""lease":1"#));
    let second = pending(w.eval(&FakeRequest::get("/")));
    assert!(!body(&second).contains("lease"), "{}", body(&second));
    // A failed call ends the ask: the next request asks again.
    assert!(allowed(&w.finish(first, None)));
    let third = pending(w.eval(&FakeRequest::get("/")));
    assert!(body(&third).contains(r#""lease":1"#), "{}", body(&third));
}

#[test]
fn a_request_denied_by_another_limit_gives_its_units_back_to_the_lease() {
    let w = World::new(&rules(&format!(
        r#"{LEASED}, {{"name":"tight","match":{{"headers":[{{"name":"x-t","present":true}}]}},"key":["const:t"],"limits":[{{"algorithm":"fixed_window","requests":1,"window":"1h"}}]}}"#
    )));
    call_at(&w, NOW, &granted(3, 96));
    let tight = FakeRequest::get("/").with("x-t", "1");
    assert!(allowed(&w.eval(&tight)));
    // Spent from the lease, then denied by "tight": the unit goes back.
    for _ in 0..5 {
        assert!(matches!(w.eval(&tight), Verdict::Deny(_)));
    }
    // Two units are left: one is spent; the next request starts the
    // renewal, and is denied by "tight": the renewal is sent all the same
    // and the unit goes back.
    assert!(allowed(&w.eval(&FakeRequest::get("/"))));
    let renewal = match w.eval(&tight) {
        Verdict::Deny(mut d) => d.renewal.take().expect("a renewal"),
        other => panic!("{other:?}"),
    };
    let sent = String::from_utf8(renewal.body(&w.plan.domain)).unwrap();
    assert!(sent.contains(r#""lease":6"#), "{sent}");
    // The unit given back is spent while the renewal is awaited (no second
    // renewal), then the grant joins the lease.
    match w.eval(&FakeRequest::get("/")) {
        Verdict::Allow(a) => assert!(a.renewal.is_none()),
        other => panic!("{other:?}"),
    }
    settle(&w, renewal, Some(granted(6, 80)));
    for _ in 0..6 {
        assert!(allowed(&w.eval(&FakeRequest::get("/"))));
    }
    assert!(matches!(w.eval(&FakeRequest::get("/")), Verdict::Check(_)));
}

#[test]
fn a_denied_check_grants_nothing_and_the_denial_is_cached() {
    let w = World::new(&rules(LEASED));
    let denied = r#"{"allowed":false,"limits":[{"allowed":false,"limit":100,"remaining":0,"reset_ms":60000,"retry_after_ms":60000}]}"#;
    let (_, v) = call_at(&w, NOW, denied);
    assert!(matches!(v, Verdict::Deny(_)));
    assert!(matches!(w.eval(&FakeRequest::get("/")), Verdict::Deny(_)));
}

#[test]
fn a_window_ends_its_leases() {
    let limit = Limit::new(sluice_core::Algorithm::FixedWindow, 10, 60 * SECOND).unwrap();
    let start = 1_700_000_020 * SECOND; // 20 s before a minute boundary
    assert_eq!(lease_expiry(&limit, SECOND, start), start + SECOND);
    assert_eq!(
        lease_expiry(&limit, 30 * SECOND, start),
        start + 20 * SECOND
    );
    let gcra = Limit::new(sluice_core::Algorithm::Gcra, 10, 60 * SECOND).unwrap();
    assert_eq!(lease_expiry(&gcra, 30 * SECOND, start), start + 30 * SECOND);
}

#[test]
fn an_ask_not_sent_is_cancelled() {
    let w = World::new(&rules(&format!(
        r#"{LEASED}, {{"name":"tight","match":{{"headers":[{{"name":"x-t","present":true}}]}},"key":["const:t"],"limits":[{{"algorithm":"fixed_window","requests":1,"window":"1h"}}]}}"#
    )));
    let tight = FakeRequest::get("/").with("x-t", "1");
    // Uses up "tight" (its check asks for a lease, answered with none).
    let mut p = pending(w.eval(&tight));
    p.record(0, Some(granted(0, 99).as_bytes()));
    assert!(allowed(&finish(&w.plan, p, &w.store, &w.metrics)));
    // Asks, then "tight" denies before any call: the ask ends at once, and
    // the next request asks again instead of checking alone.
    assert!(matches!(w.eval(&tight), Verdict::Deny(_)));
    let next = pending(w.eval(&FakeRequest::get("/")));
    assert!(body(&next).contains(r#""lease":"#), "{}", body(&next));
}

/// A leased limit under `failure_mode: deny` whose grant of 4 units has 2
/// left: the next request starts a renewal.
fn two_of_four_spent_failing_closed() -> World {
    let w =
        World::new(&rules(LEASED).replace(r#""failure_mode":"allow""#, r#""failure_mode":"deny""#));
    call_at(&w, NOW, &granted(4, 95));
    assert!(allowed(&w.eval(&FakeRequest::get("/"))));
    assert!(allowed(&w.eval(&FakeRequest::get("/"))));
    w
}

#[test]
fn units_in_hand_serve_while_renewals_fail() {
    let w = two_of_four_spent_failing_closed();
    // The renewal's call fails: the ask ends with nothing granted, and the
    // unit in hand serves the next request.
    let renewal = renewal_of(w.eval(&FakeRequest::get("/")));
    settle(&w, renewal, None);
    assert!(allowed(&w.eval(&FakeRequest::get("/"))));
    // None left: the request asks with its check, which fails too; the
    // failure mode denies.
    let last = pending(w.eval(&FakeRequest::get("/")));
    assert!(body(&last).contains(r#""lease":"#), "{}", body(&last));
    assert!(matches!(w.finish(last, None), Verdict::Deny(_)));
    assert_eq!(w.metrics.count_global(GlobalEvent::LimiterErrors), 1);
}

#[test]
fn a_failed_check_is_served_from_units_a_renewal_brought_meanwhile() {
    let w = two_of_four_spent_failing_closed();
    let renewal = renewal_of(w.eval(&FakeRequest::get("/")));
    assert!(allowed(&w.eval(&FakeRequest::get("/"))));
    // Nothing left and a renewal awaited: checked alone.
    let alone = pending(w.eval(&FakeRequest::get("/")));
    settle(&w, renewal, Some(granted(8, 80)));
    // Its check fails: it is served from the lease the renewal filled.
    assert!(allowed(&w.finish(alone, None)));
    assert_eq!(w.metrics.count_global(GlobalEvent::LimiterErrors), 0);
}

#[test]
fn a_renewal_denied_grants_nothing_and_ends_its_ask() {
    let w = World::new(&rules(LEASED));
    call_at(&w, NOW, &granted(2, 97));
    assert!(allowed(&w.eval(&FakeRequest::get("/"))));
    let renewal = renewal_of(w.eval(&FakeRequest::get("/")));
    let denied = r#"{"allowed":false,"limits":[{"allowed":false,"limit":100,"remaining":0,"reset_ms":60000,"retry_after_ms":60000,"leased":0}]}"#;
    settle(&w, renewal, Some(denied.to_string()));
    // The ask ended: the next request asks with its check.
    let next = pending(w.eval(&FakeRequest::get("/")));
    assert!(body(&next).contains(r#""lease":"#), "{}", body(&next));
}

#[test]
fn a_request_that_calls_for_another_limit_carries_its_renewal_to_its_verdict() {
    let w = World::new(&rules(&format!(
        r#"{LEASED}, {{"name":"other","match":{{"headers":[{{"name":"x-o","present":true}}]}},"key":["const:o"],"limits":[{{"algorithm":"gcra","requests":10,"window":"1h","scope":"global"}}]}}"#
    )));
    call_at(&w, NOW, &granted(2, 97));
    assert!(allowed(&w.eval(&FakeRequest::get("/"))));
    // Spends the last unit (starting the renewal), then checks "other".
    let mut p = pending(w.eval(&FakeRequest::get("/").with("x-o", "1")));
    assert!(!body(&p).contains("lease"), "{}", body(&p));
    assert!(p.record(0, answer(true, 0).as_deref().map(str::as_bytes)));
    let renewal = renewal_of(finish(&w.plan, p, &w.store, &w.metrics));
    let sent = String::from_utf8(renewal.body(&w.plan.domain)).unwrap();
    assert!(
        sent.contains(r#""hits":0"#) && sent.contains(r#""lease":4"#),
        "{sent}"
    );
}
