//! The quota endpoint: a poll is answered by the filter with the caller's
//! figures, the very ones its requests' headers carry, and consumes
//! nothing, locally or at the limiter.

use super::fake::START;
use super::*;
use crate::engine::quota;
use serde_json::Value;

const FIXED: &str = r#"{"algorithm":"fixed_window","requests":5,"window":"60s"}"#;

/// A configuration answering `/rate_limit`, with both header sets.
fn quota_config(limiter: bool, rules: &str) -> String {
    let limiter = match limiter {
        true => r#","limiter":{"cluster":"c","authority":"a"}"#,
        false => "",
    };
    format!(
        r#"{{"domain":"t","headers":"both"{limiter},"quota_endpoint":{{"path":"/rate_limit"}},"rules":[{rules}]}}"#
    )
}

fn per_user(name: &str, limit: &str) -> String {
    format!(r#"{{"name":"{name}","key":["header:x-user"],"limits":[{limit}]}}"#)
}

/// A request of `user` (headers set) to `path` with `method`.
fn poll(sim: &mut Sim, context: u32, user: &str, path: &str, method: &str) -> Action {
    sim.start(
        context,
        &[(":path", path), (":method", method), ("x-user", user)],
    )
}

/// The reply sent to `context`: status, headers and body as JSON.
fn reply_of(sim: &Sim, context: u32) -> (u32, Vec<(String, String)>, Value) {
    sim.h
        .effects
        .iter()
        .find_map(|e| match e {
            Effect::Reply {
                context: c,
                status,
                headers,
                body,
            } if *c == context => {
                let json = serde_json::from_slice(body).unwrap_or(Value::Null);
                Some((*status, headers.clone(), json))
            }
            _ => None,
        })
        .expect("a reply")
}

/// The response header `name` added to `context`.
fn header_of(sim: &Sim, context: u32, name: &str) -> String {
    sim.h
        .effects
        .iter()
        .find_map(|e| match e {
            Effect::Header {
                context: c,
                name: n,
                value,
                ..
            } if *c == context && n == name => Some(value.clone()),
            _ => None,
        })
        .unwrap_or_default()
}

/// Request `context` of `user` goes through: admitted, answered, ended.
fn request(sim: &mut Sim, context: u32, user: &str) {
    sim.start(context, &[(":path", "/api"), ("x-user", user)]);
    sim.run();
    sim.respond(context, &[]);
    sim.end(context);
}

#[test]
fn a_poll_gives_the_figures_of_the_last_requests_headers_and_consumes_nothing() {
    let mut sim = Sim::configured(&quota_config(false, &per_user("per-user", FIXED)));
    for context in 10..13 {
        request(&mut sim, context, "alice");
    }
    assert_eq!(header_of(&sim, 12, "x-ratelimit-limit"), "5");
    assert_eq!(header_of(&sim, 12, "x-ratelimit-remaining"), "2");
    // The fake clock stands at a whole second: 20 s into the minute.
    assert_eq!(START % (60 * sluice_core::SECOND), 20 * sluice_core::SECOND);
    assert_eq!(header_of(&sim, 12, "x-ratelimit-reset"), "40");
    assert_eq!(header_of(&sim, 12, "ratelimit"), "\"per-user\";r=2;t=40");
    let state_before = sim.h.store.key_count();
    sim.h.made.borrow_mut().clear();
    assert_eq!(
        poll(&mut sim, 20, "alice", "/rate_limit", "GET"),
        Action::Pause
    );
    let (status, headers, body) = reply_of(&sim, 20);
    assert_eq!(status, 200);
    assert!(headers.contains(&("content-type".into(), "application/json".into())));
    assert!(headers.contains(&("cache-control".into(), "no-store".into())));
    let expected = serde_json::json!({"domain": "t", "limits": [{
        "rule": "per-user", "name": "per-user", "scope": "local", "mode": "enforce",
        "algorithm": "fixed_window", "limit": 5, "remaining": 2, "used": 3,
        "reset": 40, "reset_at": START / sluice_core::SECOND + 40, "next": 40,
        "window": 60,
    }]});
    assert_eq!(body, expected);
    // Read, never written, never sent upstream.
    let made = sim.h.made.borrow().clone();
    assert!(!made.contains(&"set"), "{made:?}");
    assert!(!made.contains(&"resume"), "{made:?}");
    assert_eq!(sim.h.store.key_count(), state_before);
    // Polling again finds the same: nothing was consumed.
    poll(&mut sim, 21, "alice", "/rate_limit", "GET");
    assert_eq!(reply_of(&sim, 21).2, expected);
    request(&mut sim, 22, "alice");
    assert_eq!(header_of(&sim, 22, "x-ratelimit-remaining"), "1");
}

#[test]
fn a_caller_who_never_came_has_its_full_quota_and_writes_nothing() {
    let mut sim = Sim::configured(&quota_config(false, &per_user("per-user", FIXED)));
    request(&mut sim, 10, "alice");
    let keys = sim.h.store.key_count();
    poll(&mut sim, 20, "bob", "/rate_limit", "GET");
    let limits = &reply_of(&sim, 20).2["limits"];
    assert_eq!(limits[0]["remaining"], 5);
    assert_eq!(limits[0]["used"], 0);
    assert_eq!(limits[0]["reset"], 0);
    // Alice's key is not Bob's: his poll shows only his own.
    assert_eq!(limits.as_array().map(Vec::len), Some(1));
    assert_eq!(sim.h.store.key_count(), keys);
}

#[test]
fn every_method_but_get_and_head_is_refused_with_405() {
    let mut sim = Sim::configured(&quota_config(true, &per_user("per-user", FIXED)));
    for (context, method) in [(20, "POST"), (21, "PUT"), (22, "DELETE")] {
        assert_eq!(
            poll(&mut sim, context, "alice", "/rate_limit", method),
            Action::Pause
        );
        let (status, headers, _) = reply_of(&sim, context);
        assert_eq!(status, 405);
        assert!(headers.contains(&("allow".into(), "GET, HEAD".into())));
    }
    poll(&mut sim, 23, "alice", "/rate_limit", "HEAD");
    assert_eq!(reply_of(&sim, 23).0, 200);
    // Only the exact path: anything else is an ordinary request.
    assert_eq!(
        poll(&mut sim, 24, "alice", "/rate_limit/x", "GET"),
        Action::Continue
    );
    assert_eq!(sim.replied(24), None);
}

#[test]
fn a_global_limit_is_asked_of_the_limiter_at_weight_zero() {
    let global = r#"{"algorithm":"fixed_window","requests":4,"window":"60s","scope":"global"}"#;
    let rules = [per_user("local", FIXED), per_user("global", global)].join(",");
    let mut sim = Sim::configured(&quota_config(true, &rules));
    for context in 10..13 {
        request(&mut sim, context, "alice");
    }
    assert_eq!(sim.limiter.used.get("global/0/alice"), Some(&3));
    assert_eq!(
        poll(&mut sim, 20, "alice", "/rate_limit?x=1", "GET"),
        Action::Pause
    );
    assert_eq!(sim.replied(20), None);
    let call = sim.h.calls.first().cloned().expect("a check");
    assert_eq!(call.path, "/v1/check");
    let check: Value = serde_json::from_slice(&call.body).unwrap_or(Value::Null);
    assert_eq!(check["hits"], 0);
    assert_eq!(check["limits"][0]["key"], "global/0/alice");
    assert_eq!(check["limits"][0]["hits"], 0);
    sim.run();
    let limits = &reply_of(&sim, 20).2["limits"];
    assert_eq!(limits[0]["scope"], "local");
    assert_eq!(limits[0]["remaining"], 2);
    assert_eq!(limits[1]["scope"], "global");
    assert_eq!(limits[1]["limit"], 4);
    assert_eq!(limits[1]["remaining"], 1);
    assert_eq!(limits[1]["used"], 3);
    // The fake limiter's reset: 60 s.
    assert_eq!(limits[1]["reset"], 60);
    assert_eq!(sim.limiter.used.get("global/0/alice"), Some(&3));
    assert!(!sim.resumed(20));
}

#[test]
fn a_limiter_that_does_not_answer_gives_no_global_figures() {
    let global = r#"{"algorithm":"fixed_window","requests":4,"window":"60s","scope":"global"}"#;
    let mut sim = Sim::configured(&quota_config(true, &per_user("global", global)));
    poll(&mut sim, 20, "alice", "/rate_limit", "GET");
    let token = sim.h.calls.first().map(|c| c.token).unwrap_or(0);
    sim.fail(token);
    let limits = &reply_of(&sim, 20).2["limits"];
    assert_eq!(limits[0]["remaining"], Value::Null);
    assert_eq!(limits[0]["reason"], "the limiter did not answer");
    // A poll that leaves before the answer takes nothing with it.
    poll(&mut sim, 21, "alice", "/rate_limit", "GET");
    sim.end(21);
    assert_eq!(sim.replied(21), None);
    assert!(!sim.w.requests.contains_key(&21));
    assert!(sim.h.calls.is_empty());
}

#[test]
fn a_blocked_caller_sees_its_block_and_its_end() {
    let block = r#"{"algorithm":"fixed_window","requests":2,"window":"60s","on_exceed":"block","block_for":"300s"}"#;
    let mut sim = Sim::configured(&quota_config(false, &per_user("boxed", block)));
    for context in 10..13 {
        request(&mut sim, context, "alice");
    }
    assert_eq!(sim.replied(12), Some(429));
    let (_, denial, _) = reply_of(&sim, 12);
    assert!(denial.contains(&("retry-after".into(), "300".into())));
    poll(&mut sim, 20, "alice", "/rate_limit", "GET");
    let limit = &reply_of(&sim, 20).2["limits"][0];
    assert_eq!(limit["remaining"], 0);
    assert_eq!(limit["reset"], 300);
    assert_eq!(limit["next"], 300);
    assert_eq!(limit["blocked_until"], START / sluice_core::SECOND + 300);
}

#[test]
fn rules_filed_by_path_answer_for_the_path_the_caller_names() {
    let api = format!(
        r#"{{"name":"api","match":{{"path_prefix":"/api","methods":["POST"]}},"key":["header:x-user"],"limits":[{FIXED}]}}"#
    );
    let by_path =
        format!(r#"{{"name":"by-path","key":["header:x-user","path"],"limits":[{FIXED}]}}"#);
    let rules = [api, by_path, per_user("all", FIXED)].join(",");
    let mut sim = Sim::configured(&quota_config(false, &rules));
    let names = |sim: &Sim, context| -> Vec<String> {
        let body = reply_of(sim, context).2;
        let limits = body["limits"].as_array().cloned().unwrap_or_default();
        limits
            .iter()
            .map(|l| l["rule"].as_str().unwrap_or("").to_string())
            .collect()
    };
    // No path named: rules whose conditions beyond path and method hold
    // and whose key needs no path.
    poll(&mut sim, 20, "alice", "/rate_limit", "GET");
    assert_eq!(names(&sim, 20), ["api", "all"]);
    poll(
        &mut sim,
        21,
        "alice",
        "/rate_limit?path=/api/x&method=POST",
        "GET",
    );
    assert_eq!(names(&sim, 21), ["api", "by-path", "all"]);
    poll(&mut sim, 22, "alice", "/rate_limit?path=/api/x", "GET");
    assert_eq!(names(&sim, 22), ["by-path", "all"]);
    poll(&mut sim, 23, "alice", "/rate_limit?path=/other", "GET");
    assert_eq!(names(&sim, 23), ["by-path", "all"]);
}

#[test]
fn a_concurrency_limit_reports_its_requests_in_flight() {
    let conc = r#"{"concurrency":3}"#;
    let mut sim = Sim::configured(&quota_config(false, &per_user("conc", conc)));
    sim.start(10, &[(":path", "/api"), ("x-user", "alice")]);
    sim.start(11, &[(":path", "/api"), ("x-user", "alice")]);
    poll(&mut sim, 20, "alice", "/rate_limit", "GET");
    let limit = &reply_of(&sim, 20).2["limits"][0];
    assert_eq!(limit["algorithm"], "concurrency");
    assert_eq!(limit["limit"], 3);
    assert_eq!(limit["in_flight"], 2);
    assert_eq!(limit["remaining"], 1);
    sim.end(10);
    sim.end(11);
    poll(&mut sim, 21, "alice", "/rate_limit", "GET");
    assert_eq!(reply_of(&sim, 21).2["limits"][0]["in_flight"], 0);
}

#[test]
fn the_endpoint_costs_other_requests_one_header_read() {
    let gcra = r#"{"algorithm":"gcra","requests":1000,"window":"1s"}"#;
    let rule = format!(r#"{{"name":"r","key":["client_ip"],"limits":[{gcra}]}}"#);
    let plain = format!(r#"{{"domain":"t","headers":"none","rules":[{rule}]}}"#);
    let with = format!(
        r#"{{"domain":"t","headers":"none","quota_endpoint":{{"path":"/rate_limit"}},"rules":[{rule}]}}"#
    );
    let api = [(":path", "/api"), (":method", "GET")];
    let mut sim = Sim::configured(&plain);
    sim.calls(9, &api);
    assert_eq!(sim.calls(10, &api), ["property", "get", "now", "set"]);
    let mut sim = Sim::configured(&with);
    sim.calls(9, &api);
    assert_eq!(
        sim.calls(10, &api),
        ["header", "property", "get", "now", "set"]
    );
    // With the top limited keys' path too: still one read of `:path`.
    let both = with.replace(
        r#""rules""#,
        r#""top_limited_keys":{"path":"/top"},"rules""#,
    );
    let mut both = Sim::configured(&both);
    both.calls(9, &api);
    assert_eq!(
        both.calls(10, &api),
        ["header", "property", "get", "now", "set"]
    );
    // A poll: its path and method, the clock, its headers (the request
    // the rules are asked about), its key's reads, its reply.
    let poll = [(":path", "/rate_limit"), (":method", "GET")];
    assert_eq!(
        sim.calls(11, &poll),
        [
            "header",
            "header",
            "now",
            "request_headers",
            "property",
            "get",
            "reply"
        ]
    );
}

/// A global limit's block another Envoy started: this Envoy has not
/// refused the key, so it asks, with the limit's block; the limiter reports
/// the block, and a poll of a spent key that no block holds starts none.
#[test]
fn a_global_block_started_elsewhere_is_asked_with_the_block_and_shown() {
    let block = r#"{"algorithm":"fixed_window","requests":2,"window":"60s","scope":"global",
        "on_exceed":"block","block_for":"300s"}"#;
    let mut sim = Sim::configured(&quota_config(true, &per_user("boxed", block)));
    sim.limiter.blocked.insert("boxed/0/alice".into());
    poll(&mut sim, 20, "alice", "/rate_limit", "GET");
    let call = sim.h.calls.first().cloned().expect("a check");
    let check: Value = serde_json::from_slice(&call.body).unwrap_or(Value::Null);
    assert_eq!(check["limits"][0]["block_ms"], 300_000);
    assert_eq!(check["limits"][0]["hits"], 0);
    sim.run();
    let limit = &reply_of(&sim, 20).2["limits"][0];
    assert_eq!(limit["remaining"], 0);
    assert_eq!(limit["blocked_until"], START / sluice_core::SECOND + 300);
    // Bob spent his quota here; his poll reads it and starts no block.
    for context in 30..32 {
        request(&mut sim, context, "bob");
    }
    poll(&mut sim, 40, "bob", "/rate_limit", "GET");
    sim.run();
    let limit = &reply_of(&sim, 40).2["limits"][0];
    assert_eq!(limit["remaining"], 0);
    assert_eq!(limit.get("blocked_until"), None);
    assert!(!sim.limiter.blocked.contains("boxed/0/bob"));
}

/// The Envoy that refused a key into the limiter's penalty box caches the
/// refusal: its poll is answered from the cache, unasked, with the block's end.
#[test]
fn a_block_this_envoy_caches_is_shown_with_its_end() {
    let block = r#"{"algorithm":"fixed_window","requests":2,"window":"60s","scope":"global",
        "on_exceed":"block","block_for":"300s"}"#;
    let mut sim = Sim::configured(&quota_config(true, &per_user("boxed", block)));
    for context in 10..13 {
        request(&mut sim, context, "alice");
    }
    assert_eq!(sim.replied(12), Some(429));
    assert!(sim.limiter.blocked.contains("boxed/0/alice"));
    sim.h.now += 10 * sluice_core::SECOND;
    poll(&mut sim, 20, "alice", "/rate_limit", "GET");
    assert!(sim.h.calls.is_empty(), "answered from the cache");
    let limit = &reply_of(&sim, 20).2["limits"][0];
    assert_eq!(limit["remaining"], 0);
    assert_eq!(limit["blocked_until"], START / sluice_core::SECOND + 300);
    assert_eq!(limit["reset"], 290);
}

#[test]
fn a_key_this_envoy_caches_as_refused_is_answered_from_the_cache() {
    let global = r#"{"algorithm":"fixed_window","requests":2,"window":"60s","scope":"global"}"#;
    let mut sim = Sim::configured(&quota_config(true, &per_user("global", global)));
    for context in 10..13 {
        request(&mut sim, context, "alice");
    }
    assert_eq!(sim.replied(12), Some(429));
    let (_, denial, _) = reply_of(&sim, 12);
    assert!(denial.contains(&("retry-after".into(), "1".into())));
    let checks = sim.limiter.checks;
    poll(&mut sim, 20, "alice", "/rate_limit", "GET");
    // No call: the refusal a request would get from the cache.
    assert!(sim.h.calls.is_empty());
    assert_eq!(sim.limiter.checks, checks);
    let limit = &reply_of(&sim, 20).2["limits"][0];
    assert_eq!(limit["scope"], "global");
    assert_eq!(limit.get("blocked_until"), None, "a refusal, no block");
    assert_eq!(
        (limit["limit"].as_u64(), limit["remaining"].as_u64()),
        (Some(2), Some(0))
    );
    assert_eq!(
        (limit["reset"].as_u64(), limit["next"].as_u64()),
        (Some(1), Some(1))
    );
    // Once the cache lets go, the limiter is asked again.
    sim.h.now += 2 * sluice_core::SECOND;
    poll(&mut sim, 21, "alice", "/rate_limit", "GET");
    assert_eq!(sim.h.calls.len(), 1);
    sim.run();
    assert_eq!(reply_of(&sim, 21).2["limits"][0]["remaining"], 0);
}

#[test]
fn a_shadow_rule_is_reported_as_one() {
    let shadow =
        format!(r#"{{"name":"watch","mode":"shadow","key":["header:x-user"],"limits":[{FIXED}]}}"#);
    let mut sim = Sim::configured(&quota_config(false, &shadow));
    request(&mut sim, 10, "alice");
    poll(&mut sim, 20, "alice", "/rate_limit", "GET");
    let limit = &reply_of(&sim, 20).2["limits"][0];
    assert_eq!(
        (limit["mode"].as_str(), limit["remaining"].as_u64()),
        (Some("shadow"), Some(4))
    );
}

#[test]
fn a_leased_limit_reports_the_limiters_figures_leases_counted_as_spent() {
    let leased = r#"{"algorithm":"fixed_window","requests":100,"window":"60s","scope":"global",
         "sync":{"mode":"lease","max_share":"10%","ttl":"10s"}}"#;
    let mut sim = Sim::configured(&quota_config(true, &per_user("leased", leased)));
    request(&mut sim, 10, "alice");
    sim.run();
    let used = sim.limiter.used.get("leased/0/alice").copied();
    // The headers count this Envoy's lease as its own to spend.
    assert_eq!(header_of(&sim, 10, "x-ratelimit-remaining"), "99");
    // The request's unit and the lease this Envoy holds beside it.
    assert_eq!(used, Some(2));
    poll(&mut sim, 20, "alice", "/rate_limit", "GET");
    sim.run();
    let limit = &reply_of(&sim, 20).2["limits"][0];
    assert_eq!(
        (limit["limit"].as_u64(), limit["remaining"].as_u64()),
        (Some(100), Some(98))
    );
    assert_eq!(sim.limiter.used.get("leased/0/alice").copied(), used);
}

#[test]
fn what_cannot_be_asked_without_consuming_is_null_with_its_reason() {
    let conc = per_user("permits", r#"{"concurrency":3,"scope":"global"}"#);
    let mut sim = Sim::configured(&quota_config(true, &conc));
    poll(&mut sim, 20, "alice", "/rate_limit", "GET");
    assert!(sim.h.calls.is_empty());
    let limit = &reply_of(&sim, 20).2["limits"][0];
    assert_eq!(limit["remaining"], Value::Null);
    assert_eq!(limit["reason"], quota::PERMITS_UNKNOWN);
    let service = per_user("svc", r#"{"scope":"global"}"#);
    let rls = format!(
        r#"{{"domain":"t","limiter":{{"cluster":"c","protocol":"rls"}},"quota_endpoint":{{"path":"/rate_limit"}},"rules":[{service}]}}"#
    );
    let mut sim = Sim::configured(&rls);
    poll(&mut sim, 20, "alice", "/rate_limit", "GET");
    assert!(sim.h.calls.is_empty());
    let limit = &reply_of(&sim, 20).2["limits"][0];
    assert_eq!(
        (limit["scope"].as_str(), &limit["remaining"]),
        (Some("global"), &Value::Null)
    );
    assert_eq!(limit["reason"], quota::SERVICE_UNKNOWN);
}

#[test]
fn token_costs_and_priority_classes_show_as_the_headers_show_them() {
    let tokens = r#"{"name":"tokens","key":["header:x-user"],"cost":"header:x-cost",
        "priority":{"from":"header:x-class","classes":[{"name":"low","share":50},{"name":"high","share":100}],"default":"high"},
        "limits":[{"algorithm":"fixed_window","requests":100,"window":"60s"}]}"#;
    let mut sim = Sim::configured(&quota_config(false, tokens));
    let low = [
        (":path", "/api"),
        ("x-user", "alice"),
        ("x-cost", "30"),
        ("x-class", "low"),
    ];
    sim.start(10, &low);
    sim.respond(10, &[]);
    sim.end(10);
    assert_eq!(header_of(&sim, 10, "x-ratelimit-remaining"), "70");
    // A poll weighs nothing and belongs to no class: the units left.
    sim.start(
        20,
        &[
            (":path", "/rate_limit"),
            (":method", "GET"),
            ("x-user", "alice"),
            ("x-class", "low"),
        ],
    );
    let limit = &reply_of(&sim, 20).2["limits"][0];
    assert_eq!(
        (limit["remaining"].as_u64(), limit["used"].as_u64()),
        (Some(70), Some(30))
    );
}
