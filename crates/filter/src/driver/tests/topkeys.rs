//! Top limited keys and the access log's key: refusals are counted per
//! worker with no host call, folded into shared data at the flush tick,
//! listed by the configured path, and the refused key goes to the access
//! log only when asked.

use super::*;
use crate::topkeys::hashed;
use serde_json::{json, Value};
use std::rc::Rc;

const ONE: &str = r#"{"algorithm":"fixed_window","requests":1,"window":"60s"}"#;

fn top_config(keys: &str, extra: &str) -> String {
    format!(
        r#"{{"domain":"t","top_limited_keys":{{"entries":4,"keys":"{keys}","path":"/top"}}{extra},"rules":[{{"name":"per_user","key":["header:x-user"],"limits":[{ONE}]}}]}}"#
    )
}

/// `n` requests of `user` from `from` on; the first is admitted.
fn flood(sim: &mut Sim, from: u32, user: &str, n: u32) {
    for c in from..from + n {
        sim.start(c, &[(":path", "/api"), ("x-user", user)]);
        sim.end(c);
    }
}

/// The JSON answer to a request for the list.
fn list(sim: &mut Sim, context: u32) -> Value {
    sim.start(context, &[(":path", "/top"), (":method", "GET")]);
    sim.h
        .effects
        .iter()
        .find_map(|e| match e {
            Effect::Reply {
                context: c,
                status: 200,
                body,
                ..
            } if *c == context => serde_json::from_slice(body).ok(),
            _ => None,
        })
        .unwrap_or(Value::Null)
}

fn states(sim: &Sim, name: &str) -> Vec<String> {
    sim.h
        .effects
        .iter()
        .filter_map(|e| match e {
            Effect::State { name: n, value, .. } if n == name => Some(value.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn refusals_cost_no_host_call_until_the_tick_folds_them_into_shared_data() {
    let mut sim = Sim::configured(&top_config("clear", ""));
    flood(&mut sim, 10, "alice", 6);
    flood(&mut sim, 20, "bob", 3);
    // Counted per worker: nothing in shared data yet.
    assert_eq!(
        list(&mut sim, 90),
        json!({"rules":[{"rule":"per_user","keys":[]}]})
    );
    sim.h.made.borrow_mut().clear();
    sim.tick(crate::metrics::FLUSH_PERIOD.as_nanos() as u64);
    let made = sim.h.made.borrow().clone();
    assert_eq!(made.iter().filter(|c| **c == "set").count(), 1, "{made:?}");
    let want = json!({"rules":[{"rule":"per_user","keys":[
        {"key":"alice","refusals":5,"error":0},
        {"key":"bob","refusals":2,"error":0},
    ]}]});
    assert_eq!(list(&mut sim, 91), want);
    // A tick with nothing refused since makes no call for the list.
    sim.h.made.borrow_mut().clear();
    sim.tick(crate::metrics::FLUSH_PERIOD.as_nanos() as u64);
    assert!(!sim.h.made.borrow().contains(&"set"));
}

#[test]
fn two_workers_fold_into_one_list_hashed_and_halved_every_minute() {
    let mut a = Sim::configured(&top_config("hashed", ""));
    let mut b = Sim::configured(&top_config("hashed", ""));
    b.h.store = Rc::clone(&a.h.store);
    flood(&mut a, 10, "mallory", 9);
    // The limit is shared too: b's 9 are all refused.
    flood(&mut b, 10, "mallory", 9);
    flood(&mut b, 30, "carol", 2);
    a.tick(crate::metrics::FLUSH_PERIOD.as_nanos() as u64);
    b.tick(crate::metrics::FLUSH_PERIOD.as_nanos() as u64);
    let want = json!({"rules":[{"rule":"per_user","keys":[
        {"key":hashed("mallory"),"refusals":17,"error":0},
        {"key":hashed("carol"),"refusals":1,"error":0},
    ]}]});
    assert_eq!(list(&mut a, 90), want);
    a.h.now += super::super::topkeys::DECAY;
    let want = json!({"rules":[{"rule":"per_user","keys":[
        {"key":hashed("mallory"),"refusals":8,"error":0},
    ]}]});
    assert_eq!(list(&mut a, 91), want);
}

#[test]
fn the_access_log_gets_the_refused_key_only_when_asked() {
    let mut sim = Sim::configured(&top_config("clear", r#","access_log_key":"hashed""#));
    flood(&mut sim, 10, "alice", 2);
    assert_eq!(states(&sim, "sluice_key"), vec![hashed("alice")]);
    assert_eq!(states(&sim, "sluice_rule"), vec!["per_user".to_owned()]);
    let mut sim = Sim::configured(&top_config("clear", r#","access_log_key":"clear""#));
    flood(&mut sim, 10, "alice", 2);
    assert_eq!(states(&sim, "sluice_key"), vec!["alice".to_owned()]);
    let mut sim = Sim::configured(&top_config("clear", ""));
    flood(&mut sim, 10, "alice", 2);
    assert_eq!(states(&sim, "sluice_key"), Vec::<String>::new());
    assert_eq!(states(&sim, "sluice_outcome"), vec!["denied".to_owned()]);
}

#[test]
fn the_list_path_answers_only_get_and_head() {
    let mut sim = Sim::configured(&top_config("clear", ""));
    sim.start(5, &[(":path", "/top"), (":method", "POST")]);
    assert_eq!(sim.replied(5), Some(405));
    sim.start(6, &[(":path", "/top?x=1"), (":method", "HEAD")]);
    assert_eq!(sim.replied(6), Some(200));
    sim.start(
        7,
        &[(":path", "/topx"), (":method", "GET"), ("x-user", "a")],
    );
    assert_eq!(sim.replied(7), None);
}

#[test]
fn a_refusal_the_limiter_decided_is_listed_and_logged_with_its_key() {
    let global = r#"{"algorithm":"fixed_window","requests":1,"window":"60s","scope":"global"}"#;
    let config = top_config("clear", r#","access_log_key":"clear","limiter":{"cluster":"c","authority":"a","failure_mode":"deny"}"#)
        .replace(ONE, global);
    let mut sim = Sim::configured(&config);
    for context in [10, 11] {
        sim.start(context, &[(":path", "/api"), ("x-user", "alice")]);
        assert_eq!(sim.h.calls.len(), 1, "the limiter decides");
        sim.run();
        sim.end(context);
    }
    assert_eq!(sim.replied(11), Some(429));
    assert_eq!(states(&sim, "sluice_key"), vec!["alice".to_owned()]);
    sim.tick(crate::metrics::FLUSH_PERIOD.as_nanos() as u64);
    let want = json!({"rules":[{"rule":"per_user","keys":[
        {"key":"alice","refusals":1,"error":0},
    ]}]});
    assert_eq!(list(&mut sim, 90), want);
}
