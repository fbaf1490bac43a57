//! Costs known from the response: admitted for the estimate, settled when
//! the response says what the request cost.

use super::*;
use crate::engine::cost_reader::CostReader;
use crate::engine::settle::{Adjustment, LocalState, Owed};
use crate::local::SharedStore;

/// 100 tokens an hour per user, the cost read from `response`.
fn world(estimate: &str, response: &str) -> World {
    World::new(&rules(&format!(
        r#"{{"name":"tokens","key":["header:x-user"],"cost":{{"estimate":{estimate},"response":{response}}},
           "limits":[{{"algorithm":"fixed_window","requests":100,"window":"1h"}}]}}"#
    )))
}

fn owed(v: Verdict) -> Vec<Owed> {
    match v {
        Verdict::Allow(a) => a.owed,
        other => panic!("{other:?}"),
    }
}

/// What remains after one more request (which takes its estimate).
fn remaining(w: &World) -> u64 {
    match w.eval(&FakeRequest::get("/").with("x-user", "a")) {
        Verdict::Allow(a) => a.report.unwrap().decision.remaining,
        Verdict::Deny(d) => d.report.decision.remaining,
        other => panic!("{other:?}"),
    }
}

/// Reads a response with `headers`, `body` (in chunks of 7 bytes) and
/// `trailers`, then settles.
fn settle(
    w: &World,
    owed: Vec<Owed>,
    headers: &[(&str, &str)],
    body: &str,
    trailers: &[(&str, &str)],
) {
    let mut reader = CostReader::new(owed).unwrap();
    let find = |list: &[(&str, &str)], name: &str| {
        list.iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.to_string())
    };
    reader.on_headers(&w.plan, |n| find(headers, n));
    for chunk in body.as_bytes().chunks(7) {
        reader.on_body(chunk);
    }
    reader.on_trailers(&w.plan, |n| find(trailers, n));
    let global = reader.settle(&w.plan, &w.store, &w.metrics, NOW);
    assert!(global.is_empty());
}

const JSON: &[(&str, &str)] = &[("content-type", "application/json")];

#[test]
fn the_difference_is_charged_after_the_response() {
    let w = world("10", r#""body:usage.total_tokens""#);
    let o = owed(w.eval(&FakeRequest::get("/").with("x-user", "a")));
    assert_eq!(o.len(), 1);
    assert_eq!(o[0].estimate, 10);
    settle(
        &w,
        o,
        JSON,
        r#"{"id":"x","usage":{"prompt_tokens":5,"total_tokens":35}}"#,
        &[],
    );
    assert_eq!(w.metrics.count(0, RuleEvent::CostCharged), 25);
    // 35 counted: the next request, estimated 10, leaves 55.
    assert_eq!(remaining(&w), 55);
}

#[test]
fn a_smaller_cost_is_refunded_and_an_event_stream_is_read_to_its_last_usage() {
    let w = world("50", r#""body:usage.total_tokens""#);
    let o = owed(w.eval(&FakeRequest::get("/").with("x-user", "a")));
    let sse =
        "data: {\"usage\":null}\n\ndata: {\"usage\":{\"total_tokens\":12}}\n\ndata: [DONE]\n\n";
    settle(&w, o, &[("content-type", "text/event-stream")], sse, &[]);
    assert_eq!(w.metrics.count(0, RuleEvent::CostRefunded), 38);
    // 12 kept; the next request's estimate of 50 takes 50 more.
    assert_eq!(remaining(&w), 38);
}

#[test]
fn sources_are_summed_from_headers_trailers_and_body() {
    let w = world("0", r#"["header:x-in","trailer:x-out","body:usage.extra"]"#);
    let o = owed(w.eval(&FakeRequest::get("/").with("x-user", "a")));
    settle(
        &w,
        o,
        &[("x-in", "4")],
        r#"{"usage":{"extra":2}}"#,
        &[("x-out", "30")],
    );
    assert_eq!(w.metrics.count(0, RuleEvent::CostCharged), 36);
    assert_eq!(remaining(&w), 64);
}

/// input + 4 × output + 0.1 × cached input, as LLM prices weigh them.
const PRICED: &str = r#"["body:usage.input_tokens",{"from":"body:usage.output_tokens","times":4},
    {"from":"body:usage.input_tokens_details.cached_tokens","times":"0.1"}]"#;

#[test]
fn priced_counts_are_weighted_and_rounded_up_once() {
    // 10 + 4 × 5 + 0.1 × 7 = 30.7: 31 counted.
    let json = r#"{"usage":{"input_tokens":10,"output_tokens":5,"input_tokens_details":{"cached_tokens":7}}}"#;
    let w = world("0", PRICED);
    let o = owed(w.eval(&FakeRequest::get("/").with("x-user", "a")));
    settle(&w, o, JSON, json, &[]);
    assert_eq!(w.metrics.count(0, RuleEvent::CostCharged), 31);
    assert_eq!(remaining(&w), 69);
    // The same usage in the last event of a stream that carries it.
    let w = world("0", PRICED);
    let o = owed(w.eval(&FakeRequest::get("/").with("x-user", "a")));
    let sse = format!("data: {{\"usage\":null}}\n\ndata: {json}\n\ndata: [DONE]\n\n");
    settle(&w, o, &[("content-type", "text/event-stream")], &sse, &[]);
    assert_eq!(w.metrics.count(0, RuleEvent::CostCharged), 31);
    // Headers and trailers: 3 × 0.1 = 0.3 is 1, never free; 2 × 1.5 = 3.
    let w = world(
        "0",
        r#"[{"from":"header:x-in","times":0.1},{"from":"trailer:x-out","times":1.5}]"#,
    );
    let o = owed(w.eval(&FakeRequest::get("/").with("x-user", "a")));
    settle(&w, o, &[("x-in", "3")], "", &[("x-out", "2")]);
    assert_eq!(w.metrics.count(0, RuleEvent::CostCharged), 4);
    assert_eq!(remaining(&w), 96);
    // A price of 0 counts nothing, but its place must still say.
    let w = world("5", r#"["header:x-in",{"from":"header:x-free","times":0}]"#);
    let o = owed(w.eval(&FakeRequest::get("/").with("x-user", "a")));
    settle(&w, o, &[("x-in", "2")], "", &[]);
    assert_eq!(w.metrics.count(0, RuleEvent::CostMissing), 1);
}

#[test]
fn a_priced_total_beyond_u64_saturates() {
    let w = World::new(&rules(
        r#"{"name":"tokens","key":["header:x-user"],"cost":{"response":[{"from":"header:x-in","times":1000000},"header:x-out"]},
           "limits":[{"algorithm":"gcra","requests":1000,"window":"1m","scope":"global"}]}"#,
    ));
    let p = pending(w.eval(&FakeRequest::get("/").with("x-user", "a")));
    // The check failed and was admitted: the whole cost is charged.
    let mut reader = CostReader::new(owed(w.finish(p, None))).unwrap();
    reader.on_headers(&w.plan, |n| match n {
        "x-in" => Some(u64::MAX.to_string()),
        "x-out" => Some("1".to_string()),
        _ => None,
    });
    let global = reader.settle(&w.plan, &w.store, &w.metrics, NOW);
    assert_eq!(global[0].adjustment, Adjustment::Charge(u64::MAX));
}

#[test]
fn a_response_that_does_not_say_keeps_the_estimate() {
    for (headers, body, trailers) in [
        (JSON, r#"{"usage":{}}"#, &[][..]),
        (JSON, r#"{"usage":{"total_tokens":-3}}"#, &[][..]),
        (JSON, r#"{"usage":{"total_tokens":12.5}}"#, &[][..]),
        (JSON, r#"{"usage":{"total_to"#, &[][..]),
    ] {
        let w = world("20", r#""body:usage.total_tokens""#);
        let o = owed(w.eval(&FakeRequest::get("/").with("x-user", "a")));
        settle(&w, o, headers, body, trailers);
        assert_eq!(w.metrics.count(0, RuleEvent::CostMissing), 1, "{body}");
        // The estimate of 20 kept, and 20 more for the next request.
        assert_eq!(remaining(&w), 60, "{body}");
    }
    // A stream that ended before its response headers came.
    let w = world("20", r#""header:x-used""#);
    let o = owed(w.eval(&FakeRequest::get("/").with("x-user", "a")));
    let reader = CostReader::new(o).unwrap();
    assert!(reader.settle(&w.plan, &w.store, &w.metrics, NOW).is_empty());
    assert_eq!(w.metrics.count(0, RuleEvent::CostMissing), 1);
}

#[test]
fn a_charge_may_go_into_debt_and_then_the_limit_denies() {
    let w = world("0", r#""header:x-used""#);
    let o = owed(w.eval(&FakeRequest::get("/").with("x-user", "a")));
    settle(&w, o, &[("x-used", "150")], "", &[]);
    assert_eq!(w.metrics.count(0, RuleEvent::CostDebt), 1);
    match w.eval(&FakeRequest::get("/").with("x-user", "a")) {
        Verdict::Deny(d) => assert!(d.report.decision.retry_after > 0),
        other => panic!("{other:?}"),
    }
}

#[test]
fn an_estimate_of_zero_admits_while_not_in_debt_and_consumes_nothing() {
    let w = world("0", r#""header:x-used""#);
    for _ in 0..3 {
        let o = owed(w.eval(&FakeRequest::get("/").with("x-user", "a")));
        assert_eq!(o[0].estimate, 0);
    }
    let owed = owed(w.eval(&FakeRequest::get("/").with("x-user", "a")));
    let LocalState::Entry { prefix, spot, .. } = &owed[0].local[0].0 else {
        panic!("{owed:?}")
    };
    let (state, _) = w.store.get(&format!("{prefix}b{}", spot.bucket));
    assert!(state.is_none(), "nothing was written");
}

#[test]
fn a_global_limit_is_settled_by_the_limiter() {
    let w = World::new(&rules(
        r#"{"name":"tokens","key":["header:x-user"],"cost":{"estimate":"header:x-max","response":"header:x-used"},
           "limits":[{"algorithm":"gcra","requests":1000,"window":"1m","scope":"global"}]}"#,
    ));
    let p = pending(
        w.eval(
            &FakeRequest::get("/")
                .with("x-user", "a")
                .with("x-max", "40"),
        ),
    );
    let body: serde_json::Value = serde_json::from_slice(p.body(0)).unwrap();
    assert_eq!(body["hits"], 40);
    let answer = r#"{"allowed":true,"limits":[{"allowed":true,"limit":1000,"remaining":960,"reset_ms":2400,"retry_after_ms":0}]}"#;
    let o = owed(w.finish(p, Some(answer.to_string())));
    assert_eq!(o[0].adjustment(30), Some(Adjustment::Refund(10)));
    let mut reader = CostReader::new(o).unwrap();
    reader.on_headers(&w.plan, |n| (n == "x-used").then(|| "30".to_string()));
    let global = reader.settle(&w.plan, &w.store, &w.metrics, NOW + SECOND);
    assert_eq!(global.len(), 1);
    assert_eq!(global[0].adjustment, Adjustment::Refund(10));
    assert_eq!(global[0].limits[0].key, "tokens/0/a");
    // Refunded as consumed when the request was decided, one second ago
    // (a global-only rule reads the clock for it).
    assert_eq!(global[0].admitted_at, NOW);
    // A failed check admitted by the failure mode is charged whole.
    let p = pending(
        w.eval(
            &FakeRequest::get("/")
                .with("x-user", "b")
                .with("x-max", "40"),
        ),
    );
    let o = owed(w.finish(p, None));
    assert_eq!(o[0].adjustment(30), Some(Adjustment::Charge(30)));
}

#[test]
fn response_costs_refuse_what_cannot_be_charged_later() {
    let cases = [
        (
            r#"{"algorithm":"sliding_log","requests":10,"window":"1m"}"#,
            "rules[0].limits[0].algorithm",
        ),
        (
            r#"{"algorithm":"gcra","requests":10,"window":"1m","on_exceed":"delay","max_delay":"1s"}"#,
            "rules[0].limits[0].on_exceed",
        ),
        (
            r#"{"algorithm":"gcra","requests":10,"window":"1m","scope":"global","sync":{"mode":"coalesce"}}"#,
            "rules[0].limits[0].sync",
        ),
        (
            r#"{"concurrency":3,"on_exceed":"delay","max_delay":"1s"}"#,
            "rules[0].limits[0].on_exceed",
        ),
    ];
    for (limit, path) in cases {
        let json = rules(&format!(
            r#"{{"name":"r","key":["path"],"cost":{{"response":"header:x"}},"limits":[{limit}]}}"#
        ));
        let err = parse(json.as_bytes()).unwrap_err();
        assert_eq!(err.path, path, "{limit}: {err}");
    }
    for (cost, path) in [
        (r#"{"response":[]}"#, "rules[0].cost.response"),
        (r#"{"response":"body:a..b"}"#, "rules[0].cost.response"),
        (
            r#"{"response":["header:x","query:y"]}"#,
            "rules[0].cost.response[1]",
        ),
        (
            r#"{"estimate":"path","response":"header:x"}"#,
            "rules[0].cost.estimate",
        ),
        (
            r#"{"estimate":-1,"response":"header:x"}"#,
            "rules[0].cost.estimate",
        ),
        (r#"{"estimate":5}"#, "rules[0].cost"),
        (
            r#"{"response":["header:a","header:b",{"from":"header:c","times":"0.0001"}]}"#,
            "rules[0].cost.response[2].times",
        ),
        (
            r#"{"response":[{"from":"header:c","times":-1}]}"#,
            "rules[0].cost.response.times",
        ),
        (
            r#"{"response":["header:a",{"from":"header:c","times":1000001}]}"#,
            "rules[0].cost.response[1].times",
        ),
        (
            r#"{"response":["header:a",{"from":"header:c","times":true}]}"#,
            "rules[0].cost.response[1].times",
        ),
        (
            r#"{"response":["header:a",{"from":"query:c","times":2}]}"#,
            "rules[0].cost.response[1].from",
        ),
        (
            r#"{"response":["header:a",{"from":"header:c"}]}"#,
            "rules[0].cost.response[1]",
        ),
        (
            r#"{"response":["header:a",{"from":"header:c","times":2,"x":1}]}"#,
            "rules[0].cost.response[1].x",
        ),
        (r#"{"response":[7]}"#, "rules[0].cost.response[0]"),
    ] {
        let json = rules(&format!(
            r#"{{"name":"r","key":["path"],"cost":{cost},"limits":[{{"algorithm":"gcra","requests":10,"window":"1m"}}]}}"#
        ));
        let err = parse(json.as_bytes()).unwrap_err();
        assert_eq!(err.path, path, "{cost}: {err}");
        if path.ends_with(".times") && !cost.contains("true") {
            assert!(
                err.to_string().contains(
                    "must be a non-negative decimal of at most 3 decimal places, at most 1000000"
                ),
                "{err}"
            );
        }
    }
}

#[test]
fn only_rules_that_settle_have_the_settlement_counters() {
    let w = World::new(&rules(
        r#"{"name":"tokens","key":["path"],"cost":{"response":"header:x-used"},
           "limits":[{"algorithm":"gcra","requests":10,"window":"1m"}]},
           {"name":"plain","key":["path"],"limits":[{"algorithm":"gcra","requests":10,"window":"1m"}]}"#,
    ));
    let (settles, plain) = (&w.plan.rules[0], &w.plan.rules[1]);
    // A plain local limit: what any rule counts, and its key table's.
    let plain_counters = [
        RuleEvent::Allowed,
        RuleEvent::Denied,
        RuleEvent::ShadowDenied,
        RuleEvent::Skipped,
        RuleEvent::TableFull,
    ];
    assert_eq!(counters_of(plain), plain_counters);
    // And the settlement's (its estimate is fixed: no `cost_invalid`).
    assert_eq!(
        counters_of(settles),
        [
            RuleEvent::Allowed,
            RuleEvent::Denied,
            RuleEvent::ShadowDenied,
            RuleEvent::Skipped,
            RuleEvent::CostCharged,
            RuleEvent::CostRefunded,
            RuleEvent::CostMissing,
            RuleEvent::CostDebt,
            RuleEvent::TableFull,
        ]
    );
}

/// A request admitted with a cost from the response: what it owes, and
/// the permits it holds.
fn admitted(v: Verdict) -> (Vec<Owed>, crate::engine::concurrency::Held) {
    match v {
        Verdict::Allow(a) => (a.owed, a.held),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_concurrency_limit_caps_the_estimates_in_flight() {
    // 30 tokens in flight per user; an estimate from a header.
    let w = World::new(&rules(
        r#"{"name":"tokens","key":["header:x-user"],"cost":{"estimate":"header:x-max","response":"header:x-used"},
           "limits":[{"concurrency":30},{"algorithm":"fixed_window","requests":1000,"window":"1h"}]}"#,
    ));
    let req = |max: &str| FakeRequest::get("/").with("x-user", "a").with("x-max", max);
    let (owed_a, held_a) = admitted(w.eval(&req("10")));
    assert_eq!(held_a.local[0].weight, 10);
    let (_, held_b) = admitted(w.eval(&req("20")));
    assert_eq!(held_b.local[0].weight, 20);
    // 30 in flight: one more of 10 is refused, by the concurrency limit.
    match w.eval(&req("10")) {
        Verdict::Deny(d) => assert_eq!((d.report.rule, d.report.limit), (0, 0)),
        other => panic!("{other:?}"),
    }
    // An estimate of 0 still holds one permit: refused too.
    match w.eval(&req("0")) {
        Verdict::Deny(d) => assert_eq!(d.report.limit, 0),
        other => panic!("{other:?}"),
    }
    // More than the cap can never pass.
    match w.eval(&req("31")) {
        Verdict::Deny(d) => assert_eq!(
            d.report.decision.denial,
            Some(sluice_core::Denial::CostExceedsCapacity)
        ),
        other => panic!("{other:?}"),
    }
    // The first settles (charged 25) and gives its 10 back: one of 0 is
    // admitted and holds 1.
    assert_eq!(owed_a[0].local.len(), 1, "only the rate limit is settled");
    settle(&w, owed_a, &[("x-used", "25")], "", &[]);
    for permit in &held_a.local {
        crate::engine::concurrency::release_local(&w.store, permit, NOW).unwrap();
    }
    let (owed_c, held_c) = admitted(w.eval(&req("0")));
    assert_eq!(held_c.local[0].weight, 1);
    assert_eq!(owed_c[0].estimate, 0);
    assert_eq!(w.metrics.count(0, RuleEvent::CostCharged), 15);
}

#[test]
fn a_global_concurrency_limit_takes_the_estimate_in_permits_and_is_not_charged() {
    let w = World::new(&rules(
        r#"{"name":"tokens","key":["header:x-user"],"cost":{"estimate":"header:x-max","response":"header:x-used"},
           "limits":[{"algorithm":"gcra","requests":1000,"window":"1m","scope":"global"},{"concurrency":100,"scope":"global"}]}"#,
    ));
    for (max, permits) in [("40", 40), ("0", 1)] {
        let p = pending(w.eval(&FakeRequest::get("/").with("x-user", "a").with("x-max", max)));
        let body: serde_json::Value = serde_json::from_slice(p.body(0)).unwrap();
        let limits = body["limits"].as_array().unwrap();
        assert_eq!(limits[1]["algorithm"], "concurrency");
        assert_eq!(limits[1]["hits"], permits, "{body}");
        assert_eq!(limits[0].get("hits"), None, "{body}");
        let answer = r#"{"allowed":true,"limits":[{"allowed":true,"limit":1000,"remaining":960,"reset_ms":2400,"retry_after_ms":0},{"allowed":true,"limit":100,"remaining":60,"reset_ms":0,"retry_after_ms":0}]}"#;
        let (owed, held) = admitted(w.finish(p, Some(answer.to_string())));
        assert_eq!(held.global.len(), 1);
        assert_eq!(held.global[0].weight, permits);
        // Only the rate limit is settled.
        assert_eq!(owed[0].global.len(), 1);
        assert_eq!(owed[0].global[0].key, "tokens/0/a");
    }
}
