//! Costs another filter wrote into the request's dynamic metadata
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
