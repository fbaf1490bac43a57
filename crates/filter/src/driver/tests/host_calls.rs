//! The host calls a request makes in its whole life, per configuration
//! shape: every call crosses into Envoy, and most of a request's cost in
//! Envoy is there. A call added to a shape fails here.

use super::*;

/// The calls request `context` of `user` makes (see [`Sim::calls`]).
fn calls_of(sim: &mut Sim, context: u32, user: &str) -> Vec<&'static str> {
    sim.calls(context, &[("x-user", user)])
}

fn rule(limit: &str, key: &str) -> String {
    format!(r#"{{"name":"r","key":["{key}"],"limits":[{limit}]}}"#)
}

/// A local configuration: `top` fields, then one rule.
fn local(top: &str, rule: &str) -> Sim {
    Sim::configured(&format!(r#"{{"domain":"t"{top},"rules":[{rule}]}}"#))
}

const GCRA: &str = r#"{"algorithm":"gcra","requests":1000,"window":"1s"}"#;
const BEHIND_ONE_PROXY: &[(&str, &str)] = &[(":path", "/"), ("x-forwarded-for", "198.51.100.1")];

#[test]
fn a_request_under_one_local_limit() {
    let gcra = r#"{"algorithm":"gcra","requests":1000,"window":"1s"}"#;
    let mut sim = Sim::new(&rule(gcra, "client_ip"));
    calls_of(&mut sim, 9, "a");
    assert_eq!(
        calls_of(&mut sim, 10, "a"),
        [
            "property", // source.address, its key (no rule needs the path)
            "get",      // the key's bucket of the key table
            "now",      // the decision's one clock read, after the get
            "set",      // the bucket written back (compare-and-swap)
            "add_header",
            "add_header", // the rate-limit headers of the response
        ]
    );
}

#[test]
fn a_request_keyed_by_a_trusted_x_forwarded_for_entry() {
    let mut sim = local(
        r#","client_ip":{"xff_trusted_hops":1}"#,
        &rule(GCRA, "client_ip"),
    );
    sim.calls(9, BEHIND_ONE_PROXY);
    assert_eq!(
        sim.calls(10, BEHIND_ONE_PROXY),
        [
            "header",   // x-forwarded-for
            "property", // source.address: did Envoy append to it?
            "get",
            "now",
            "set",
            "add_header",
            "add_header",
        ]
    );
}

#[test]
fn a_request_behind_an_envoy_declared_to_append_reads_no_property() {
    // Appended: the proxy's entry, then Envoy's own; as sent: the proxy's.
    for (envoy_xff, xff) in [
        ("appended", "198.51.100.1, 10.0.0.1"),
        ("as_sent", "198.51.100.1"),
    ] {
        let top = format!(r#","client_ip":{{"xff_trusted_hops":1,"envoy_xff":"{envoy_xff}"}}"#);
        let mut sim = local(&top, &rule(GCRA, "client_ip"));
        let headers = [("x-forwarded-for", xff)];
        sim.calls(9, &headers);
        assert_eq!(
            sim.calls(10, &headers),
            [
                "header", // x-forwarded-for: its trusted entry is the key
                "get",
                "now",
                "set",
                "add_header",
                "add_header",
            ]
        );
        // Without the header, the downstream address.
        assert_eq!(sim.calls(11, &[])[..2], ["header", "property"]);
    }
}

#[test]
fn a_request_under_a_limit_without_headers_makes_no_response_call() {
    let mut sim = local(r#","headers":"none""#, &rule(GCRA, "client_ip"));
    calls_of(&mut sim, 9, "a");
    assert_eq!(
        calls_of(&mut sim, 10, "a"),
        ["property", "get", "now", "set"]
    );
}

#[test]
fn a_request_under_a_rule_matching_its_path() {
    let matched = format!(
        r#"{{"name":"r","match":{{"path_prefix":"/api"}},"key":["client_ip"],"limits":[{GCRA}]}}"#
    );
    let mut sim = local("", &matched);
    let api = [(":path", "/api/x")];
    sim.calls(9, &api);
    assert_eq!(
        sim.calls(10, &api),
        [
            "header", // :path, to find the rules that apply
            "property",
            "get",
            "now",
            "set",
            "add_header",
            "add_header",
        ]
    );
}

#[test]
fn a_denied_request() {
    let once = r#"{"algorithm":"gcra","requests":1,"window":"1h"}"#;
    let mut sim = local("", &rule(once, "client_ip"));
    calls_of(&mut sim, 9, "a");
    assert_eq!(
        calls_of(&mut sim, 10, "a"),
        [
            "property",
            "get",
            "now", // no write: the state is unchanged
            "set_state",
            "set_state", // the outcome and rule, for the access log
            "header",    // content-type: a gRPC request gets a gRPC denial
            "reply",     // the 429
        ]
    );
}

#[test]
fn a_fresh_key_among_ten_thousand() {
    let mut sim = local(r#","local_max_keys":10000"#, &rule(GCRA, "header:x-user"));
    for i in 0..10_000 {
        calls_of(&mut sim, 100 + i, &format!("user-{i}"));
    }
    assert_eq!(
        calls_of(&mut sim, 20_000, "a-fresh-user"),
        [
            "header", // x-user, its key
            "get",    // its first bucket: not there
            "get",    // its second bucket: not there either
            "now",
            "set", // placed in the bucket with fewer live keys
            "add_header",
            "add_header",
        ]
    );
}

#[test]
fn a_request_under_a_local_limit_with_a_penalty_box() {
    let boxed = r#"{"algorithm":"gcra","requests":1000,"window":"1s",
        "on_exceed":"block","block_for":"1m"}"#;
    let mut sim = Sim::new(&rule(boxed, "client_ip"));
    calls_of(&mut sim, 9, "a");
    assert_eq!(
        calls_of(&mut sim, 10, "a"),
        [
            "property",
            "now", // the block table is read at the request's time
            "get",
            "get", // the key's two buckets of the block table: no block
            "get",
            "clock", // the key table's bucket decides at the clock after its get
            "set",
            "add_header",
            "add_header",
        ]
    );
}

#[test]
fn a_request_under_no_rule_reads_its_path_only() {
    let json = r#"{"name":"r","match":{"path_prefix":"/other"},"key":["client_ip"],
        "limits":[{"algorithm":"gcra","requests":10,"window":"1s"}]}"#;
    let mut sim = Sim::new(json);
    assert_eq!(calls_of(&mut sim, 10, "a"), ["header"]);
}

#[test]
fn a_request_under_one_global_limit() {
    let global = r#"{"algorithm":"gcra","requests":1000,"window":"1s","scope":"global"}"#;
    let mut sim = Sim::new(&rule(global, "header:x-user"));
    calls_of(&mut sim, 9, "a");
    assert_eq!(
        calls_of(&mut sim, 10, "a"),
        [
            "header",   // x-user, its key
            "now",      // the decision's clock
            "get",      // the over-limit cache
            "dispatch", // its check
            "header",   // the answer's :status (200: no content-type read)
            "buffer",   // the answer's body
            "resume",
            "add_header",
            "add_header", // the rate-limit headers of the response
        ]
    );
}

#[test]
fn a_cost_from_metadata_reads_its_one_property_after_the_key() {
    let global = r#"{"algorithm":"gcra","requests":1000,"window":"1s","scope":"global"}"#;
    let weighed = r#"{"name":"r","key":["header:x-user"],"cost":"metadata:example.cost:units","limits":[GLOBAL]}"#;
    let mut sim = Sim::new(&weighed.replace("GLOBAL", global));
    calls_of(&mut sim, 9, "a");
    assert_eq!(
        calls_of(&mut sim, 10, "a"),
        [
            "header",   // x-user, its key
            "property", // its cost, once the rule has a key
            "now",
            // No over-limit cache: a denial for one weight says nothing
            // of another.
            "dispatch",
            "header",
            "buffer",
            "resume",
            "add_header",
            "add_header",
        ]
    );
}

#[test]
fn a_limit_from_metadata_reads_its_struct_after_the_key() {
    let global = r#"{"algorithm":"gcra","requests":1000,"window":"1s","scope":"global",
        "limit_from_metadata":{"namespace":"example.limit","key":"lim"}}"#;
    let mut sim = Sim::new(&rule(global, "header:x-user"));
    calls_of(&mut sim, 9, "a");
    assert_eq!(
        calls_of(&mut sim, 10, "a"),
        [
            "header",   // x-user, its key
            "property", // lim.requests_per_unit: missing,
            "property", // so lim itself: missing too (not malformed)
            "now",      // the configured limit applies: as without it
            "get",
            "dispatch",
            "header",
            "buffer",
            "resume",
            "add_header",
            "add_header",
        ]
    );
}

#[test]
fn a_request_under_a_global_limit_with_a_penalty_box_makes_the_same_calls() {
    // The limiter holds the block: block_ms in the check, no host call more.
    let boxed = r#"{"algorithm":"gcra","requests":1000,"window":"1s","scope":"global",
        "on_exceed":"block","block_for":"1m"}"#;
    let plain = r#"{"algorithm":"gcra","requests":1000,"window":"1s","scope":"global"}"#;
    let mut calls = Vec::new();
    for limit in [boxed, plain] {
        let mut sim = Sim::new(&rule(limit, "header:x-user"));
        calls_of(&mut sim, 9, "a");
        calls.push(calls_of(&mut sim, 10, "a"));
    }
    assert_eq!(calls[0], calls[1]);
}

#[test]
fn a_request_under_a_global_concurrency_limit_is_checked_by_the_root() {
    let permits = r#"{"concurrency":5,"scope":"global"}"#;
    let mut sim = Sim::new(&rule(permits, "header:x-user"));
    calls_of(&mut sim, 9, "a");
    let calls = calls_of(&mut sim, 10, "a");
    assert_eq!(
        calls,
        [
            "header",  // x-user, its key
            "now",     // the decision's clock
            "enqueue", // the root woken
            "dequeue",
            "dequeue", // its queue emptied
            "focus",
            "dispatch", // the root's check
            "focus",
            "header", // the answer's :status
            "buffer", // the answer's body
            "focus",  // the request, from the root
            "now",    // its permits counted as held from now
            "resume", // (nothing queued for the root: no focus back)
            "add_header",
            "add_header", // the rate-limit headers of the response
            "enqueue",    // the root woken to give the permit back
            "dequeue",
            "dequeue",
            "focus",
            "dispatch", // the give-back
            "header",   // its answer's :status
            "buffer",   // its answer's body
        ]
    );
}

#[test]
fn a_request_under_a_local_limit_counted_by_outcome() {
    let login =
        r#"{"algorithm":"gcra","requests":1000,"window":"1s","count_when":{"status":["401"]}}"#;
    let mut sim = Sim::new(&rule(login, "client_ip"));
    calls_of(&mut sim, 9, "a");
    assert_eq!(
        calls_of(&mut sim, 10, "a"),
        [
            "property",
            "get",
            "now",
            "set",      // the unit reserved, as a local limit takes it
            "header",   // the response's content-type (its cost reader)
            "property", // response.code_details: from the upstream?
            "header",   // its :status
            "add_header",
            "add_header",
            "now", // the settlement's clock (no status: the unit is kept)
        ]
    );
}

#[test]
fn requests_of_a_coalesced_call() {
    let coalesced = r#"{"algorithm":"gcra","requests":1000,"window":"1s","scope":"global",
        "sync":{"mode":"coalesce"}}"#;
    let mut sim = Sim::new(&rule(coalesced, "header:x-user"));
    calls_of(&mut sim, 9, "a");
    sim.h.made.borrow_mut().clear();
    // 10 calls alone; 11 and 12 wait for the group's next call.
    sim.start(10, &[("x-user", "a")]);
    let request = [
        "header", // x-user, its key
        "now",    // the decision's clock
        "get",    // the over-limit cache
    ];
    let mut first = request.to_vec();
    first.push("dispatch"); // its own check
    assert_eq!(sim.h.made.borrow_mut().drain(..).collect::<Vec<_>>(), first);
    for context in [11, 12] {
        sim.start(context, &[("x-user", "a")]);
        assert_eq!(
            sim.h.made.borrow_mut().drain(..).collect::<Vec<_>>(),
            request,
            "{context} joins the group: no call of its own"
        );
    }
    sim.run();
    assert_eq!(
        sim.h.made.borrow_mut().drain(..).collect::<Vec<_>>(),
        [
            "header",   // 10's answer: its :status
            "buffer",   // and body
            "dispatch", // the group's call for 11 and 12, which 10 carries
            "header",   // its answer's :status
            "buffer",   // and body, read once for the batch
            "focus",    // 11, from the context the answer came to
            "resume", "focus", // 12
            "resume", "focus", // 10, once the call it carried is answered
            "resume",
        ]
    );
    for context in [10, 11, 12] {
        sim.respond(context, &[]);
        assert_eq!(
            sim.h.made.borrow_mut().drain(..).collect::<Vec<_>>(),
            ["add_header", "add_header"], // the rate-limit headers
        );
    }
}

#[test]
fn a_failed_answer_reads_its_content_type_for_the_reason() {
    use crate::metrics::GlobalEvent;
    let global = r#"{"algorithm":"gcra","requests":1000,"window":"1s","scope":"global"}"#;
    let answers = [
        ("500", "application/json", GlobalEvent::LimiterStatus),
        ("503", "text/plain", GlobalEvent::LimiterUnreachable),
        ("504", "text/plain", GlobalEvent::LimiterTimeout),
    ];
    for (status, content_type, event) in answers {
        let mut sim = Sim::new(&rule(global, "header:x-user"));
        sim.user(10, "a");
        let token = sim.h.calls[0].token;
        sim.h.calls.clear();
        sim.h.made.borrow_mut().clear();
        sim.h.answer = (status.into(), content_type.into(), Vec::new());
        sim.h.focused = 10;
        sim.w
            .answered(&mut sim.h, 10, token, Answer::Http { body_size: 0 });
        let made = sim.h.made.borrow().clone();
        // :status, then content-type: the limiter's JSON or Envoy's reply.
        assert_eq!(made[..2], ["header", "header"], "{status}");
        assert_eq!(sim.h.recorded.sink.count_global(event), 1, "{status}");
        assert_eq!(sim.replied(10), Some(429), "failure_mode deny");
    }
}

#[test]
fn a_request_under_a_leased_limit_once_its_lease_runs() {
    let leased = r#"{"algorithm":"gcra","requests":1000,"window":"1s","scope":"global",
        "sync":{"mode":"lease","max_share":"10%"}}"#;
    let mut sim = Sim::new(&rule(leased, "header:x-user"));
    // The first requests ask for the lease (and their check) and renew it.
    for context in 5..10 {
        calls_of(&mut sim, context, "a");
    }
    // Then a request spends from it as from a local limit's bucket.
    assert_eq!(
        calls_of(&mut sim, 10, "a"),
        [
            "header", // x-user, its key
            "now",    // the lease's clock
            "get",    // the key's lease
            "set",    // spent (compare-and-swap)
            "add_header",
            "add_header",
        ]
    );
}
