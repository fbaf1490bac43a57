//! Which counters a rule has: only those of the features it uses (Envoy
//! defines each one at every start and configuration push).

use super::*;

fn defined(w: &World, rule: usize) -> Vec<RuleEvent> {
    counters_of(&w.plan.rules[rule])
}

#[test]
fn a_rule_has_the_counters_of_the_features_it_uses_only() {
    let w = World::new(&rules(
        r#"{"name":"plain","key":["path"],"limits":[{"algorithm":"gcra","requests":10,"window":"1m"}]},
           {"name":"global","key":["path"],"limits":[{"algorithm":"gcra","requests":10,"window":"1m","scope":"global"}]},
           {"name":"paced","key":["path"],"limits":[{"algorithm":"gcra","requests":10,"window":"1m",
              "on_exceed":"delay","max_delay":"1s"}],"overrides":[{"key":"/vip","requests":20}]},
           {"name":"user","key":["header:x-user"],"limits":[{"algorithm":"fixed_window","requests":2,"window":"1m",
              "elastic":{"ceiling":4,"pool":"spare"}}]},
           {"name":"weighed","key":["path"],"cost":"header:x-cost",
            "limits":[{"algorithm":"gcra","requests":10,"window":"1m"}]},
           {"name":"inflight","key":["path"],"limits":[{"concurrency":2,"on_exceed":"delay","max_delay":"1s"}]},
           {"name":"refused","key":["path"],"limits":[{"concurrency":2}]},
           {"name":"spare","key":["const:all"],"limits":[{"algorithm":"fixed_window","requests":3,"window":"1m"}]}"#,
    ));
    use RuleEvent::*;
    let everyone = [Allowed, Denied, ShadowDenied, Skipped];
    assert_eq!(defined(&w, 0), [&everyone[..], &[TableFull]].concat());
    assert_eq!(defined(&w, 1), everyone);
    assert_eq!(
        defined(&w, 2),
        [&everyone[..], &[Delayed, DelayedMs, TableFull]].concat()
    );
    assert_eq!(
        defined(&w, 3),
        [&everyone[..], &[Borrowed, TableFull]].concat()
    );
    assert_eq!(
        defined(&w, 4),
        [&everyone[..], &[CostInvalid, TableFull]].concat()
    );
    assert_eq!(
        defined(&w, 5),
        [&everyone[..], &[Delayed, DelayedMs, TableFull]].concat()
    );
    assert_eq!(defined(&w, 6), [&everyone[..], &[TableFull]].concat());
}
