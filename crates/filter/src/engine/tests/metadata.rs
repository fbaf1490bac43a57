//! Costs and limits another filter wrote into the request's dynamic metadata
//! (`cost: "metadata:NAMESPACE:KEY"`).

use super::*;

/// The property path of `example.cost:units`, as the fake request keys it.
const UNITS: &str = "metadata.filter_metadata.example.cost.units";

fn weighing(value: Option<&[u8]>) -> FakeRequest {
    let req = FakeRequest::get("/");
    match value {
        Some(v) => req.with_property(UNITS, v),
        None => req,
    }
}

fn remaining(v: Verdict) -> u64 {
    match v {
        Verdict::Allow(a) => a.report.map_or(u64::MAX, |r| r.decision.remaining),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_metadata_cost_weighs_each_request() {
    let w = World::new(&rules(
        r#"{"name":"m","key":["client_ip"],"cost":"metadata:example.cost:units","limits":[{"algorithm":"fixed_window","requests":20,"window":"1h"}]}"#,
    ));
    // A number (a double, as a Struct holds it) and text of digits.
    assert_eq!(
        remaining(w.eval(&weighing(Some(&5.0f64.to_le_bytes())))),
        15
    );
    assert_eq!(remaining(w.eval(&weighing(Some(b"4")))), 11);
    // Missing or malformed: weight 1, counted as cost_invalid.
    assert_eq!(remaining(w.eval(&weighing(None))), 10);
    assert_eq!(remaining(w.eval(&weighing(Some(&2.5f64.to_le_bytes())))), 9);
    assert_eq!(remaining(w.eval(&weighing(Some(b"-2")))), 8);
    assert_eq!(w.metrics.count(0, RuleEvent::CostInvalid), 3);
    // Zero: the rule does not count the request.
    assert_eq!(
        remaining(w.eval(&weighing(Some(&0.0f64.to_le_bytes())))),
        u64::MAX
    );
    assert_eq!(w.metrics.count(0, RuleEvent::Allowed), 5);
    // Over what is left: denied, nothing taken.
    assert!(!allowed(&w.eval(&weighing(Some(&9.0f64.to_le_bytes())))));
    assert_eq!(remaining(w.eval(&weighing(Some(&8.0f64.to_le_bytes())))), 0);
}

#[test]
fn a_global_check_carries_the_metadata_weight() {
    let w = World::new(&rules(
        r#"{"name":"m","key":["client_ip"],"cost":"metadata:example.cost:units","limits":[{"algorithm":"gcra","requests":100,"window":"1h","scope":"global"}]}"#,
    ));
    let p = pending(w.eval(&weighing(Some(&5.0f64.to_le_bytes()))));
    let body: serde_json::Value = serde_json::from_slice(p.body(0)).unwrap();
    assert_eq!(body["hits"], 5);
}

#[test]
fn a_metadata_cost_without_namespace_or_key_is_refused_naming_the_field() {
    for bad in [
        "metadata:",
        "metadata:units",
        "metadata::units",
        "metadata:example.cost:",
    ] {
        let json = rules(&format!(
            r#"{{"name":"m","key":["client_ip"],"cost":"{bad}","limits":[{{"algorithm":"fixed_window","requests":20,"window":"1h"}}]}}"#
        ));
        let err = parse(json.as_bytes()).unwrap_err().to_string();
        assert!(
            err.starts_with(&format!(
                "rules[0].cost: \"metadata:NAMESPACE:KEY\" needs a namespace and a key, got {bad:?}"
            )),
            "{err}"
        );
    }
}

/// The property path of `example.limit:lim`'s fields, as the fake request
/// keys them.
const LIM: &str = "metadata.filter_metadata.example.limit.lim";

const LIMITED: &str = r#"{"name":"m","key":["client_ip"],"limits":[{"algorithm":"fixed_window","requests":100,"window":"1h","scope":"global","limit_from_metadata":{"namespace":"example.limit","key":"lim"}}]}"#;

/// A request whose metadata holds `requests_per_unit` and `unit` (each
/// when given), or only a value at the place itself (`bare`).
fn limited(requests: Option<&[u8]>, unit: Option<&[u8]>, bare: Option<&[u8]>) -> FakeRequest {
    let mut req = FakeRequest::get("/");
    for (field, value) in [("requests_per_unit", requests), ("unit", unit)] {
        if let Some(v) = value {
            req = req.with_property(&format!("{LIM}.{field}"), v);
        }
    }
    match bare {
        Some(v) => req.with_property(LIM, v),
        None => req,
    }
}

fn sent_limit(w: &World, req: &FakeRequest) -> (u64, u64) {
    let p = pending(w.eval(req));
    let body: serde_json::Value = serde_json::from_slice(p.body(0)).unwrap();
    let limit = &body["limits"][0];
    (
        limit["requests"].as_u64().unwrap(),
        limit["window_ms"].as_u64().unwrap(),
    )
}

#[test]
fn a_limit_from_metadata_is_the_one_sent_to_the_limiter() {
    let w = World::new(&rules(LIMITED));
    let three = 3.0f64.to_le_bytes();
    assert_eq!(
        sent_limit(&w, &limited(Some(&three), Some(b"HOUR"), None)),
        (3, 3_600_000)
    );
    assert_eq!(
        sent_limit(&w, &limited(Some(b"7"), Some(b"minute"), None)),
        (7, 60_000)
    );
    // Missing: the configured limit, not counted as invalid.
    assert_eq!(sent_limit(&w, &limited(None, None, None)), (100, 3_600_000));
    assert_eq!(w.metrics.count(0, RuleEvent::LimitMetadataInvalid), 0);
    // Malformed: the configured limit, counted.
    for req in [
        limited(Some(&three), None, None),
        limited(Some(&three), Some(b"fortnight"), None),
        limited(Some(&0.0f64.to_le_bytes()), Some(b"hour"), None),
        limited(Some(&2.5f64.to_le_bytes()), Some(b"hour"), None),
        limited(None, None, Some(&3.0f64.to_le_bytes())),
    ] {
        assert_eq!(sent_limit(&w, &req), (100, 3_600_000), "{req:?}");
    }
    assert_eq!(w.metrics.count(0, RuleEvent::LimitMetadataInvalid), 5);
}

/// A rule `name` of two global limits reading their own limit at
/// `example.limit:lim` and at `example.limit:<second>`.
fn two_limits_from_metadata(name: &str, second: &str) -> String {
    let limit = |key: &str| {
        format!(
            r#"{{"algorithm":"fixed_window","requests":100,"window":"1h","scope":"global","limit_from_metadata":{{"namespace":"example.limit","key":"{key}"}}}}"#
        )
    };
    format!(
        r#"{{"name":"{name}","key":["client_ip"],"limits":[{},{}]}}"#,
        limit("lim"),
        limit(second)
    )
}

/// The property path of `example.limit:other`.
const OTHER: &str = "metadata.filter_metadata.example.limit.other";

#[test]
fn a_malformed_limit_from_metadata_is_counted_once_per_request_and_rule() {
    const N: usize = 3;
    let malformed = || limited(Some(b"3"), Some(b"eon"), None);
    // Both limits read the same place.
    let w = World::new(&rules(&two_limits_from_metadata("m", "lim")));
    for _ in 0..N {
        pending(w.eval(&malformed()));
    }
    assert_eq!(w.metrics.count(0, RuleEvent::LimitMetadataInvalid), N);
    // Each reads its own place, both malformed.
    let w = World::new(&rules(&two_limits_from_metadata("m", "other")));
    for _ in 0..N {
        let req = malformed().with_property(OTHER, &3.0f64.to_le_bytes());
        pending(w.eval(&req));
    }
    assert_eq!(w.metrics.count(0, RuleEvent::LimitMetadataInvalid), N);
    // One malformed, one a limit: counted once too.
    let req = malformed()
        .with_property(&format!("{OTHER}.requests_per_unit"), b"7")
        .with_property(&format!("{OTHER}.unit"), b"minute");
    pending(w.eval(&req));
    assert_eq!(w.metrics.count(0, RuleEvent::LimitMetadataInvalid), N + 1);
}

#[test]
fn a_malformed_limit_from_metadata_is_counted_in_each_rule_reading_it() {
    let w = World::new(&rules(&format!(
        "{},{}",
        two_limits_from_metadata("a", "lim"),
        two_limits_from_metadata("b", "lim")
    )));
    pending(w.eval(&limited(Some(b"3"), Some(b"eon"), None)));
    assert_eq!(w.metrics.count(0, RuleEvent::LimitMetadataInvalid), 1);
    assert_eq!(w.metrics.count(1, RuleEvent::LimitMetadataInvalid), 1);
}

#[test]
fn a_weight_above_the_limit_from_metadata_is_refused_without_a_call() {
    let w = World::new(&rules(&LIMITED.replace(
        r#""key":["client_ip"],"#,
        r#""key":["client_ip"],"cost":5,"#,
    )));
    let req = limited(Some(&3.0f64.to_le_bytes()), Some(b"hour"), None);
    match w.eval(&req) {
        Verdict::Deny(d) => assert_eq!(
            (d.report.decision.limit, d.report.window),
            (3, 3_600 * SECOND)
        ),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_request_with_its_own_limit_skips_the_over_limit_cache() {
    let w = World::new(&rules(LIMITED));
    let plain = FakeRequest::get("/");
    let p = pending(w.eval(&plain));
    assert!(matches!(
        w.finish(p, answer(false, 60_000)),
        Verdict::Deny(_)
    ));
    // The configured limit's denial is cached for the key...
    assert!(matches!(w.eval(&plain), Verdict::Deny(_)));
    // ...but says nothing of a request under its own limit, whose denial
    // is not cached either.
    let own = limited(Some(&500.0f64.to_le_bytes()), Some(b"hour"), None);
    let p = pending(w.eval(&own));
    assert!(matches!(
        w.finish(p, answer(false, 60_000)),
        Verdict::Deny(_)
    ));
    assert!(matches!(w.eval(&own), Verdict::Check(_)));
}

#[test]
fn a_limit_from_metadata_is_the_rls_descriptors_limit() {
    use crate::cost::metadata::{MetadataLimit, Unit};
    use crate::rls::{encode_request, Descriptor};
    let w = World::new(&format!(
        r#"{{"domain":"t","limiter":{{"cluster":"rls","protocol":"rls","failure_mode":"deny"}},"rules":[{}]}}"#,
        r#"{"name":"m","key":["client_ip"],"limits":[{"scope":"global","limit_from_metadata":{"namespace":"example.limit","key":"lim"}}]}"#
    ));
    let body = |req: &FakeRequest| pending(w.eval(req)).body(0).to_vec();
    let expected = |limit| {
        encode_request(
            "t",
            &[Descriptor {
                entries: vec![
                    ("generic_key".into(), "m".into()),
                    ("remote_address".into(), "203.0.113.7".into()),
                ],
                hits: None,
                limit,
            }],
            1,
        )
    };
    let own = MetadataLimit {
        requests: 3,
        unit: Unit::Hour,
    };
    assert_eq!(
        body(&limited(Some(&3.0f64.to_le_bytes()), Some(b"hour"), None)),
        expected(Some(own))
    );
    assert_eq!(body(&limited(None, None, None)), expected(None));
    assert_eq!(
        body(&limited(Some(b"3"), Some(b"eon"), None)),
        expected(None)
    );
    assert_eq!(w.metrics.count(0, RuleEvent::LimitMetadataInvalid), 1);
    // RateLimitOverride { requests_per_unit: 3, unit: HOUR } as field 2.
    let encoded = expected(Some(own));
    assert!(encoded.windows(6).any(|w| w == [0x12, 4, 0x08, 3, 0x10, 3]));
}

#[test]
fn a_limit_from_metadata_is_refused_naming_the_field_where_it_cannot_apply() {
    let place = r#""limit_from_metadata":{"namespace":"n","key":"k"}"#;
    let cases = [
        (
            format!(r#"{{"algorithm":"fixed_window","requests":5,"window":"1h",{place}}}"#),
            "rules[0].limits[0].limit_from_metadata: only for global limits (scope global)",
        ),
        (
            format!(r#"{{"algorithm":"fixed_window","requests":5,"window":"1h","scope":"global","sync":{{"mode":"coalesce"}},{place}}}"#),
            "rules[0].limits[0].limit_from_metadata: only for a global limit checked per request",
        ),
        (
            r#"{"algorithm":"fixed_window","requests":5,"window":"1h","scope":"global","limit_from_metadata":{"namespace":"","key":"k"}}"#.to_string(),
            "rules[0].limits[0].limit_from_metadata.namespace: must not be empty",
        ),
        (
            r#"{"algorithm":"fixed_window","requests":5,"window":"1h","scope":"global","limit_from_metadata":{"namespace":"n","key":""}}"#.to_string(),
            "rules[0].limits[0].limit_from_metadata.key: must not be empty",
        ),
    ];
    for (limit, expected) in cases {
        let json = rules(&format!(
            r#"{{"name":"m","key":["client_ip"],"limits":[{limit}]}}"#
        ));
        let err = parse(json.as_bytes()).unwrap_err().to_string();
        assert!(err.starts_with(expected), "{err}");
    }
}

#[test]
fn only_rules_with_a_limit_from_metadata_have_its_counter() {
    let w = World::new(&rules(&format!(
        "{LIMITED},{}",
        r#"{"name":"plain","key":["client_ip"],"limits":[{"algorithm":"gcra","requests":10,"window":"1m","scope":"global"}]}"#
    )));
    assert!(RuleEvent::LimitMetadataInvalid.applies_to(&w.plan.rules[0]));
    assert!(!RuleEvent::LimitMetadataInvalid.applies_to(&w.plan.rules[1]));
}

/// 100 an hour per user, admitted for 10, charged what `response` says.
fn response_world(response: &str) -> World {
    World::new(&rules(&format!(
        r#"{{"name":"tokens","key":["header:x-user"],"cost":{{"estimate":10,"response":{response}}},
           "limits":[{{"algorithm":"fixed_window","requests":100,"window":"1h"}}]}}"#
    )))
}

/// Admits a request, then ends its stream with `metadata` holding
/// `example.cost:used` (when given) and response header `x-in: 4`.
fn settled_with(w: &World, metadata: Option<&[u8]>) {
    use crate::engine::cost_reader::CostReader;
    let owed = match w.eval(&FakeRequest::get("/").with("x-user", "a")) {
        Verdict::Allow(a) => a.owed,
        other => panic!("{other:?}"),
    };
    let mut reader = CostReader::new(owed).unwrap();
    reader.on_headers(&w.plan, |n| (n == "x-in").then(|| "4".to_string()));
    let read = std::cell::RefCell::new(Vec::new());
    reader.on_end(&w.plan, |path| {
        read.borrow_mut().push(path.join("."));
        (path == ["metadata", "filter_metadata", "example.cost", "used"])
            .then(|| metadata.map(<[u8]>::to_vec))
            .flatten()
    });
    assert_eq!(
        read.into_inner(),
        ["metadata.filter_metadata.example.cost.used"]
    );
    assert!(reader.settle(&w.plan, &w.store, &w.metrics, NOW).is_empty());
}

#[test]
fn a_response_cost_reads_the_metadata_when_the_stream_ends() {
    let w = response_world(r#"["header:x-in","metadata:example.cost:used"]"#);
    // 4 + 31 = 35: 25 more than the estimate charged.
    settled_with(&w, Some(&31.0f64.to_le_bytes()));
    assert_eq!(w.metrics.count(0, RuleEvent::CostCharged), 25);
    // Text of digits too: 4 + 2 = 6, 4 given back.
    settled_with(&w, Some(b"2"));
    assert_eq!(w.metrics.count(0, RuleEvent::CostRefunded), 4);
    // Missing or malformed: the estimate stands.
    settled_with(&w, None);
    settled_with(&w, Some(&2.5f64.to_le_bytes()));
    assert_eq!(w.metrics.count(0, RuleEvent::CostMissing), 2);
    // 35 + 6 + 10 + 10 counted: the next request's 10 leaves 29.
    match w.eval(&FakeRequest::get("/").with("x-user", "a")) {
        Verdict::Allow(a) => assert_eq!(a.report.unwrap().decision.remaining, 29),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_response_cost_without_metadata_reads_none() {
    use crate::engine::cost_reader::CostReader;
    let w = response_world(r#""header:x-in""#);
    let owed = match w.eval(&FakeRequest::get("/").with("x-user", "a")) {
        Verdict::Allow(a) => a.owed,
        other => panic!("{other:?}"),
    };
    let mut reader = CostReader::new(owed).unwrap();
    reader.on_headers(&w.plan, |_| None);
    reader.on_end(&w.plan, |path| panic!("read {path:?}"));
}

#[test]
fn a_response_metadata_place_without_namespace_or_key_is_refused() {
    let json = rules(
        r#"{"name":"m","key":["client_ip"],"cost":{"response":"metadata:used"},"limits":[{"algorithm":"fixed_window","requests":20,"window":"1h"}]}"#,
    );
    let err = parse(json.as_bytes()).unwrap_err().to_string();
    assert!(
        err.starts_with(
            "rules[0].cost.response: \"metadata:NAMESPACE:KEY\" needs a namespace and a key, got \"metadata:used\""
        ),
        "{err}"
    );
}
