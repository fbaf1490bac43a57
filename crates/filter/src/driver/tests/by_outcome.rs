//! Limits counted by the response's outcome through every way a request
//! ends, local and global: the unit reserved at admission is kept when the
//! response matches or never comes, given back when it does not.

use super::*;
use crate::metrics::RuleEvent;

/// 3 failed logins (401) a minute per user, in shared data.
const LOCAL: &str = r#"{"name":"login","key":["header:x-user"],"limits":[
    {"algorithm":"fixed_window","requests":3,"window":"1m","count_when":{"status":["401"]}}]}"#;

/// The same, at the limiter.
const GLOBAL: &str = r#"{"name":"login","key":["header:x-user"],"limits":[
    {"algorithm":"fixed_window","requests":3,"window":"1m","scope":"global","count_when":{"status":["401"]}}]}"#;

/// Where in its life a request's stream ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// Before its headers were decided.
    BeforeTheCheck,
    /// While its limiter call is out (global only).
    DuringTheCheck,
    /// Admitted, before the response.
    BeforeTheResponse,
    /// Envoy answered itself after the upstream reset (a 503 not from the
    /// upstream).
    UpstreamReset,
    /// After the response's headers: `401` (matching) or `200`.
    Responded(&'static str),
}

const ENDS: [End; 6] = [
    End::BeforeTheCheck,
    End::DuringTheCheck,
    End::BeforeTheResponse,
    End::UpstreamReset,
    End::Responded("401"),
    End::Responded("200"),
];

/// Runs a request of user `a` to `end`; every call is answered after.
fn run_to(sim: &mut Sim, context: u32, end: End) {
    if end == End::BeforeTheCheck {
        sim.w.request_created(ROOT, context);
        sim.h.focused = context;
        sim.w.request_done(&mut sim.h, context);
        sim.run();
        return;
    }
    if end == End::DuringTheCheck {
        sim.user(context, "a");
    } else {
        assert!(admitted(sim, context), "{end:?}");
    }
    match end {
        End::UpstreamReset => {
            if let Some(stream) = sim.h.streams.get_mut(&context) {
                stream.code_details = Some("upstream_reset_before_response_started".into());
            }
            sim.respond(context, &[(":status", "503")]);
        }
        End::Responded(status) => sim.respond(context, &[(":status", status)]),
        End::BeforeTheCheck | End::DuringTheCheck | End::BeforeTheResponse => {}
    }
    sim.end(context);
    sim.run();
}

/// Whether a request of user `a` is admitted (at once, or once its call is
/// answered).
fn admitted(sim: &mut Sim, context: u32) -> bool {
    if sim.user(context, "a") == Action::Continue {
        return true;
    }
    sim.run();
    sim.resumed(context)
}

/// How many more requests of user `a` are admitted in a row (left in
/// flight: each holds its unit).
fn admitted_in_a_row(sim: &mut Sim, first: u32) -> u32 {
    let mut context = first;
    while admitted(sim, context) {
        context += 1;
    }
    context - first
}

/// Whether a request that ended so keeps its unit.
fn kept(end: End) -> bool {
    match end {
        // Never admitted: nothing taken.
        End::BeforeTheCheck => false,
        // The limiter counted it; its answer is lost with the stream.
        End::DuringTheCheck => true,
        End::BeforeTheResponse | End::UpstreamReset | End::Responded("401") => true,
        End::Responded(_) => false,
    }
}

#[test]
fn a_local_unit_is_kept_or_given_back_by_how_the_request_ends() {
    for end in ENDS.into_iter().filter(|e| *e != End::DuringTheCheck) {
        let mut sim = Sim::new(LOCAL);
        run_to(&mut sim, 10, end);
        let left = 3 - u32::from(kept(end));
        assert_eq!(admitted_in_a_row(&mut sim, 20), left, "{end:?}");
        assert!(sim.h.calls.is_empty(), "a local limit makes no call");
        let counted = sim.h.recorded.sink.count(0, RuleEvent::OutcomeCounted);
        let given_back = sim.h.recorded.sink.count(0, RuleEvent::OutcomeGivenBack);
        let settled = end != End::BeforeTheCheck;
        assert_eq!(counted, usize::from(settled && kept(end)), "{end:?}");
        assert_eq!(given_back, usize::from(settled && !kept(end)), "{end:?}");
    }
}

#[test]
fn a_global_unit_is_kept_or_refunded_by_how_the_request_ends() {
    for end in ENDS {
        let mut sim = Sim::new(GLOBAL);
        run_to(&mut sim, 10, end);
        let kept = u64::from(kept(end));
        assert_eq!(sim.limiter.used.values().sum::<u64>(), kept, "{end:?}");
        let refunded = u64::from(matches!(end, End::Responded("200")));
        assert_eq!(sim.limiter.refunded, refunded, "{end:?}");
        assert_eq!(sim.limiter.charged, 0, "{end:?}");
        // The refund was sent from the root: nothing is left waiting.
        assert!(sim.w.left().is_empty(), "{end:?}: {:?}", sim.w.left());
    }
}

#[test]
fn requests_in_flight_hold_their_units_until_their_responses_say() {
    for rules in [LOCAL, GLOBAL] {
        let mut sim = Sim::new(rules);
        // Three admitted at once take the three units: the fourth is refused
        // before the upstream sees it.
        let actions: Vec<Action> = [10, 11, 12].iter().map(|c| sim.user(*c, "a")).collect();
        sim.run();
        let admitted = |c: usize| actions[c] == Action::Continue || sim.resumed(10 + c as u32);
        assert!((0..3).all(admitted));
        sim.user(13, "a");
        sim.run();
        assert_eq!(sim.replied(13), Some(429));
        // Two successes give theirs back, one failure keeps its.
        for (context, status) in [(10, "200"), (11, "200"), (12, "401")] {
            sim.respond(context, &[(":status", status)]);
            sim.end(context);
        }
        sim.end(13);
        sim.run();
        assert_eq!(
            admitted_in_a_row(&mut sim, 20),
            2,
            "{rules} {:?} {:?}",
            sim.limiter.used,
            sim.h.effects
        );
    }
}

#[test]
fn a_unit_reserved_when_the_vm_closes_is_kept() {
    // Global: the worker's last root goes, then the stream ends with a
    // success; its refund is never sent, the limiter keeps the unit.
    let mut sim = Sim::new(GLOBAL);
    assert!(admitted(&mut sim, 10));
    sim.h.focused = ROOT;
    sim.w.root_done(&mut sim.h, ROOT);
    sim.respond(10, &[(":status", "200")]);
    sim.end(10);
    assert!(sim.h.calls.is_empty());
    assert_eq!(sim.limiter.used.values().sum::<u64>(), 1);
    assert_eq!(sim.limiter.refunded, 0);
    // Local: a VM closed with the request in flight never settles it: its
    // unit stays in shared data, for the next VM.
    let mut sim = Sim::new(LOCAL);
    assert!(admitted(&mut sim, 10));
    sim.h.focused = ROOT;
    sim.w.root_done(&mut sim.h, ROOT);
    let mut next = Sim::new(LOCAL);
    next.h.store = std::mem::take(&mut sim.h.store);
    assert_eq!(admitted_in_a_row(&mut next, 20), 2);
}

#[test]
fn a_limit_a_service_holds_is_charged_from_the_root_and_its_exhausted_answer_refuses_the_key() {
    let rules = r#"{"name":"login","key":["header:x-user"],"limits":[
        {"scope":"global","count_when":{"status":["401"]}}]}"#;
    let json = format!(
        r#"{{"domain":"t","limiter":{{"cluster":"c","protocol":"rls","failure_mode":"deny"}},"rules":[{rules}]}}"#
    );
    let mut sim = Sim::configured(&json);
    // A success makes no call at all, at admission or after.
    assert_eq!(sim.user(10, "a"), Action::Continue);
    sim.respond(10, &[(":status", "200")]);
    sim.end(10);
    while sim.wake() {}
    assert!(sim.h.calls.is_empty());
    // A failure is charged at the stream's end, from the root.
    assert_eq!(sim.user(11, "a"), Action::Continue);
    sim.respond(11, &[(":status", "401")]);
    sim.end(11);
    while sim.wake() {}
    assert_eq!(sim.h.calls.len(), 1);
    let call = sim.h.calls.remove(0);
    assert_eq!((call.from, call.path.as_str()), (ROOT, crate::rls::METHOD));
    let descriptor = crate::rls::Descriptor {
        entries: vec![
            ("generic_key".into(), "login".into()),
            ("x-user".into(), "a".into()),
        ],
        hits: None,
        limit: None,
    };
    assert_eq!(call.body, crate::rls::encode_request("t", &[descriptor], 1));
    // The service answers OVER_LIMIT: the key is refused at admission.
    let over_limit = vec![0x08, 2];
    let size = over_limit.len();
    sim.h.answer = ("200".into(), "application/grpc".into(), over_limit);
    sim.h.focused = ROOT;
    let answer = Answer::Grpc { status: 0, size };
    sim.w.answered(&mut sim.h, ROOT, call.token, answer);
    assert_eq!(sim.user(12, "a"), Action::Pause);
    assert_eq!(sim.replied(12), Some(429));
    assert_eq!(sim.user(13, "b"), Action::Continue);
    // 13 ends without a response: its unit counts, charged as a failure.
    for context in [12, 13] {
        sim.end(context);
    }
    while sim.wake() {}
    assert_eq!(sim.h.calls.len(), 1);
    let call = sim.h.calls.remove(0);
    sim.h.answer = ("200".into(), "application/grpc".into(), vec![0x08, 1]);
    sim.h.focused = ROOT;
    let answer = Answer::Grpc { status: 0, size: 2 };
    sim.w.answered(&mut sim.h, ROOT, call.token, answer);
    assert!(sim.w.left().is_empty(), "{:?}", sim.w.left());
    assert_eq!(sim.user(14, "b"), Action::Continue);
}
