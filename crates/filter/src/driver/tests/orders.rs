//! The lifecycle over random orders of events, for every kind of limit:
//! requests start, send their body, end, get their response; the root is
//! woken, calls are answered, reset or timed out in any order, time passes,
//! the limiter comes and goes, configurations are pushed and roots go, the
//! VM closes. Then the worker settles (a root there, the limiter reachable,
//! past every `max_delay`), every request ends, and it settles again.
//!
//! What is asserted (a failing order is shrunk by proptest):
//! - throughout: no user has more requests admitted and open than its
//!   permits;
//! - when the VM closes (its last root done), with no request's call out:
//!   no request still waits (no root will tick or be woken);
//! - once settled with requests open: none of them still waits;
//! - at the end: no call out and nothing left in the worker
//!   ([`Worker::left`]); the limiter holds exactly the permits lost (taken
//!   by checks whose answer was lost with their root or came after a
//!   timeout, or given back by calls it never saw); the permits gauges are
//!   0; local permits are free (that many fresh requests per user pass);
//!   each request got at most one outcome, none after its stream ended;
//! - rate limits: no user admitted more than its quota; at the limiter
//!   each request admitted was counted and none twice (`admitted ≤ used ≤
//!   started` per user; with leases, `admitted ≤ debited`);
//! - response costs: with no call failed, refused or lost, the limiter was
//!   charged exactly `Σ max(tokens − estimate, 0)` and refunded
//!   `Σ max(estimate − tokens, 0)` over the requests admitted and
//!   responded, and its units are the estimates of the checks it admitted
//!   plus that difference; otherwise at most those;
//! - counted by outcome: at most the quota admitted and open at once per
//!   user; with no call failed, the limiter was refunded exactly the
//!   requests admitted whose response did not match and keeps a unit for
//!   every other check it admitted; otherwise at most those refunds.
//!
//! 256 cases per kind; more with `PROPTEST_CASES=10000 cargo test -p
//! sluice-filter orders`.

use super::fake::Call;
use super::*;
use proptest::prelude::*;
use sluice_core::MILLISECOND;
use sluice_wire::PermitsRequest;

/// Request slots: each holds one request at a time.
const SLOTS: usize = 6;
/// The users requests come from (`x-user`).
const USERS: [&str; 2] = ["a", "b"];
/// What a response cost is estimated at.
const ESTIMATE: u64 = 10;
/// The body of every request, estimated at `ESTIMATE` where a rule reads it.
const BODY: &[u8] = br#"{"max_tokens":10}"#;

/// One event of the proxy, the limiter or the clock.
#[derive(Debug, Clone)]
enum Event {
    /// A request starts in a free slot, from user `USERS[user]`.
    Start { slot: usize, user: usize },
    /// The request of the slot has sent its body (`{"max_tokens":10}`),
    /// ending with it or (`trailers`) with trailers after it.
    Body { slot: usize, trailers: bool },
    /// The request of the slot ends (its client left, or it completed).
    End { slot: usize },
    /// Its upstream responds, `x-tokens: tokens`.
    Respond { slot: usize, tokens: u64 },
    /// The root's queue delivers its wake-up.
    Wake,
    /// The `k`-th call out (modulo their number) is answered.
    Answer { k: usize },
    /// It fails.
    Fail { k: usize, how: Failure },
    /// Time passes, and every root ticks.
    Tick { ms: u64 },
    /// Calls can be made, or not.
    Reachable(bool),
    /// A configuration push: a new root with the same configuration.
    Push,
    /// The oldest root goes (the last one: the VM closes).
    RootDone,
}

/// How a call fails.
#[derive(Debug, Clone, Copy)]
enum Failure {
    /// The connection was reset before the limiter saw it: Envoy's 503.
    Reset,
    /// The limiter decided it, the answer came too late: Envoy's 504.
    Timeout,
}

fn event() -> impl Strategy<Value = Event> {
    let slot = 0..SLOTS;
    prop_oneof![
        6 => (slot.clone(), 0..USERS.len()).prop_map(|(slot, user)| Event::Start { slot, user }),
        4 => (slot.clone(), any::<bool>()).prop_map(|(slot, trailers)| Event::Body { slot, trailers }),
        3 => slot.clone().prop_map(|slot| Event::End { slot }),
        3 => (slot, 0..40u64).prop_map(|(slot, tokens)| Event::Respond { slot, tokens }),
        4 => Just(Event::Wake),
        4 => Just(Event::Answer { k: 0 }),
        2 => (1..4usize).prop_map(|k| Event::Answer { k }),
        1 => (0..4usize, prop_oneof![Just(Failure::Reset), Just(Failure::Timeout)])
            .prop_map(|(k, how)| Event::Fail { k, how }),
        2 => prop_oneof![Just(1u64), Just(20), Just(400), Just(1500)]
            .prop_map(|ms| Event::Tick { ms }),
        1 => any::<bool>().prop_map(Event::Reachable),
        1 => Just(Event::Push),
        1 => Just(Event::RootDone),
    ]
}

fn events() -> impl Strategy<Value = Vec<Event>> {
    prop::collection::vec(event(), 1..60)
}

/// 256 cases, unless `PROPTEST_CASES` says otherwise.
fn cases() -> ProptestConfig {
    let mut config = ProptestConfig::default();
    if std::env::var_os("PROPTEST_CASES").is_none() {
        config.cases = 256;
    }
    config
}

/// What is counted at the limiter, and so what the properties assert of
/// it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Counted {
    /// Nothing beyond permits.
    Permits,
    /// Each request checked weighs one unit: the requests admitted were
    /// counted, and no request was counted twice.
    PerRequest,
    /// Units debited in advance: every request admitted spent one of them.
    Leased,
    /// Each admitted request weighs the estimate, then what its response
    /// says.
    ResponseCost,
    /// Counted by outcome: a unit per request the limiter admitted, given
    /// back when its response does not match (an odd `x-tokens`).
    ByOutcome,
}

/// A kind of limit under test.
struct Case {
    rules: &'static str,
    /// Per user, the most requests admitted and open at once.
    at_once: Option<usize>,
    /// Per user, the most requests admitted in all (every window outlasts
    /// a run).
    in_all: Option<usize>,
    counted: Counted,
    /// The limits are local concurrency limits of `at_once` permits per
    /// user: once settled, that many fresh requests of each user pass.
    probe: bool,
    /// Whether requests come with a body, decided once it is in.
    body: Body,
}

/// Whether requests come with a body, and what their headers do until it
/// is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Body {
    None,
    /// The headers go on (`headers_while_reading_body: forward`).
    Forwarded,
    /// Envoy holds them (`hold`).
    Held,
}

/// A request started.
struct Req {
    context: u32,
    user: usize,
    open: bool,
    /// Whether it was paused when decided (`None`: its body is not in).
    paused: Option<bool>,
    /// Its response came, admitted, with these tokens.
    tokens: Option<u64>,
    responded: bool,
    /// The number of effects when its stream ended.
    ended_at: Option<usize>,
}

/// A worker driven through random events, and what they did.
struct Run {
    sim: Sim,
    json: String,
    /// Whether requests come with a body.
    body: Body,
    /// The roots alive, oldest first; every root ever made.
    roots: Vec<u32>,
    made: Vec<u32>,
    slots: [Option<usize>; SLOTS],
    requests: Vec<Req>,
    next_context: u32,
    /// Permits the limiter keeps until their ttl: taken by checks whose
    /// answer was lost with their root or came after the timeout, or given
    /// back by calls the limiter never saw.
    lost: u64,
    /// Calls that failed, were refused or lost with their root.
    failures: usize,
}

/// The configuration of `case`: its rules, and its headers' setting.
fn case_config(case: &Case) -> String {
    let json = config(case.rules);
    match case.body {
        Body::None | Body::Forwarded => json,
        Body::Held => json.replacen(
            r#""rules":"#,
            r#""headers_while_reading_body":"hold","rules":"#,
            1,
        ),
    }
}

impl Run {
    fn new(case: &Case) -> Run {
        Run {
            sim: Sim::configured(&case_config(case)),
            json: case_config(case),
            body: case.body,
            roots: vec![ROOT],
            made: vec![ROOT],
            slots: [None; SLOTS],
            requests: Vec::new(),
            next_context: 10,
            lost: 0,
            failures: 0,
        }
    }

    fn apply(&mut self, event: &Event) {
        match *event {
            Event::Start { slot, user } => self.start(slot, user),
            Event::Body { slot, trailers } => self.body(slot, trailers),
            Event::End { slot } => self.end(slot),
            Event::Respond { slot, tokens } => self.respond(slot, tokens),
            Event::Wake => {
                self.wake();
            }
            Event::Answer { k } => {
                self.answer(k);
            }
            Event::Fail { k, how } => self.fail(k, how),
            Event::Tick { ms } => self.tick(ms * MILLISECOND),
            Event::Reachable(reachable) => self.sim.h.unreachable = !reachable,
            Event::Push => self.push(),
            Event::RootDone => self.root_done(),
        }
    }

    fn start(&mut self, slot: usize, user: usize) {
        let Some(&root) = self.roots.last() else {
            return;
        };
        if self.slots[slot].is_some() {
            return;
        }
        let context = self.next_context;
        self.next_context += 1;
        let stream = fake::Stream {
            request_headers: vec![("x-user".into(), USERS[user].into())],
            request_body: BODY.to_vec(),
            ..fake::Stream::default()
        };
        let h = &mut self.sim.h;
        h.streams.insert(context, stream);
        self.sim.w.request_created(root, context);
        h.focused = context;
        let no_body = self.body == Body::None;
        let action = self.sim.w.request_headers(h, context, no_body);
        let expected = match self.body {
            Body::None => action,
            Body::Forwarded => Action::Continue,
            Body::Held => Action::Pause,
        };
        assert_eq!(action, expected, "the headers of a request with a body");
        self.slots[slot] = Some(self.requests.len());
        self.requests.push(Req {
            context,
            user,
            open: true,
            paused: no_body.then_some(action == Action::Pause),
            tokens: None,
            responded: false,
            ended_at: None,
        });
    }

    fn body(&mut self, slot: usize, trailers: bool) {
        let Some(at) = self.slots[slot] else {
            return;
        };
        if self.requests[at].paused.is_some() {
            return;
        }
        let context = self.requests[at].context;
        self.sim.h.focused = context;
        let w = &mut self.sim.w;
        let action = w.request_body(&mut self.sim.h, context, BODY.len(), !trailers);
        // Trailers end it: it is decided on them, on the body held.
        let action = if trailers {
            assert_eq!(action, Action::Pause, "a body before its trailers is held");
            w.request_trailers(&mut self.sim.h, context)
        } else {
            action
        };
        self.requests[at].paused = Some(action == Action::Pause);
    }

    fn end(&mut self, slot: usize) {
        let Some(at) = self.slots[slot].take() else {
            return;
        };
        let context = self.requests[at].context;
        self.sim.h.focused = context;
        // Its log, then its end: the second finds nothing.
        for _ in 0..2 {
            self.sim.w.request_done(&mut self.sim.h, context);
        }
        // Envoy drops the calls it made; the limiter still decides them.
        let lost = take_calls(&mut self.sim.h.calls, |c| c.from == context);
        for call in lost {
            let _ = self.sim.limiter.serve(&call);
        }
        let req = &mut self.requests[at];
        req.open = false;
        req.ended_at = Some(self.sim.h.effects.len());
    }

    fn respond(&mut self, slot: usize, tokens: u64) {
        let Some(at) = self.slots[slot] else {
            return;
        };
        let context = self.requests[at].context;
        let admitted = self.admitted(&self.requests[at]);
        if self.requests[at].responded || !(admitted || self.sim.replied(context).is_some()) {
            return;
        }
        // A local reply carries no cost.
        let headers = if admitted {
            vec![
                (":status".to_string(), "200".to_string()),
                ("x-tokens".to_string(), tokens.to_string()),
            ]
        } else {
            Vec::new()
        };
        if let Some(stream) = self.sim.h.streams.get_mut(&context) {
            stream.response_headers = headers;
        }
        self.sim.h.focused = context;
        self.sim.w.response_headers(&mut self.sim.h, context);
        let req = &mut self.requests[at];
        req.responded = true;
        req.tokens = admitted.then_some(tokens);
    }

    /// The root that registered the queue runs, if woken and still there
    /// (a wake-up sent to a root gone is lost).
    fn wake(&mut self) -> bool {
        let h = &mut self.sim.h;
        if h.queued == 0 {
            return false;
        }
        if !self.roots.contains(&h.listener) {
            h.queued = 0;
            return false;
        }
        let root = h.listener;
        h.focused = root;
        self.sim.w.queue_ready(h, root, 1);
        true
    }

    /// The `k`-th call out is answered; returns whether one was.
    fn answer(&mut self, k: usize) -> bool {
        let calls = &mut self.sim.h.calls;
        if calls.is_empty() {
            return false;
        }
        let call = calls.remove(k % calls.len());
        let (status, body) = self.sim.limiter.serve(&call);
        self.deliver(&call, &status.to_string(), "application/json", body);
        true
    }

    fn fail(&mut self, k: usize, how: Failure) {
        let calls = &mut self.sim.h.calls;
        if calls.is_empty() {
            return;
        }
        let call = calls.remove(k % calls.len());
        self.failures += 1;
        let status = match how {
            Failure::Reset => {
                self.unseen(&call);
                "503"
            }
            Failure::Timeout => {
                self.decided_unread(&call);
                "504"
            }
        };
        self.deliver(&call, status, "text/plain", Vec::new());
    }

    fn deliver(&mut self, call: &Call, status: &str, content_type: &str, body: Vec<u8>) {
        let h = &mut self.sim.h;
        let size = body.len();
        h.answer = (status.into(), content_type.into(), body);
        h.focused = call.from;
        let answer = Answer::Http { body_size: size };
        self.sim.w.answered(h, call.from, call.token, answer);
    }

    /// The limiter decides `call`, whose answer the worker never reads:
    /// the permits a root's check took stay until their ttl.
    fn decided_unread(&mut self, call: &Call) {
        let before = self.sim.limiter.permits_held();
        let _ = self.sim.limiter.serve(call);
        let after = self.sim.limiter.permits_held();
        if self.made.contains(&call.from) && call.path == "/v1/check" {
            self.lost += after.saturating_sub(before);
        }
    }

    /// The limiter never sees `call`: the permits it gives back stay until
    /// their ttl.
    fn unseen(&mut self, call: &Call) {
        if call.path != "/v1/permits" {
            return;
        }
        if let Ok(request) = serde_json::from_slice::<PermitsRequest>(&call.body) {
            self.lost += request.release.iter().map(|r| r.hits).sum::<u64>();
        }
    }

    fn tick(&mut self, after: Nanos) {
        self.sim.h.now += after;
        for root in self.roots.clone() {
            self.sim.h.focused = root;
            self.sim.w.tick(&mut self.sim.h, root);
        }
    }

    /// A new root, configured with the same JSON; requests from now on
    /// belong to it.
    fn push(&mut self) {
        if self.roots.len() >= 2 {
            return;
        }
        let root = self.made.iter().max().map_or(ROOT, |r| r + 1);
        self.roots.push(root);
        self.made.push(root);
        self.sim.w.root_created(root);
        self.sim.h.roots.push(root);
        self.sim.h.focused = root;
        let seed = Some([7; crate::slots::SEED_LEN]);
        assert!(self
            .sim
            .w
            .configure(&mut self.sim.h, root, self.json.as_bytes(), seed));
    }

    /// The oldest root goes: Envoy drops its calls, the limiter still
    /// decides them.
    fn root_done(&mut self) {
        if self.roots.is_empty() {
            return;
        }
        let root = self.roots.remove(0);
        self.sim.h.focused = root;
        self.sim.w.root_done(&mut self.sim.h, root);
        self.sim.h.roots.retain(|r| *r != root);
        for call in take_calls(&mut self.sim.h.calls, |c| c.from == root) {
            self.failures += 1;
            self.decided_unread(&call);
        }
        if self.roots.is_empty() {
            self.none_waits_on_the_root();
        }
    }

    /// The VM closed: no root will tick or be woken, so a request still
    /// paused waits only for a request's call (its own, or one its
    /// coalescing group's carrier makes), if any is out.
    fn none_waits_on_the_root(&self) {
        if !self.sim.h.calls.is_empty() {
            return;
        }
        for req in self.requests.iter().filter(|r| r.open) {
            let decided = req.paused != Some(true)
                || self.sim.resumed(req.context)
                || self.sim.replied(req.context).is_some();
            assert!(decided, "request {} waits on a root gone", req.context);
        }
    }

    /// The limiter reachable and a root there, every wake-up delivered,
    /// every call answered, the roots ticking past every `max_delay`.
    fn settle(&mut self) {
        self.sim.h.unreachable = false;
        if self.roots.is_empty() {
            // A later configuration in the same VM: what the others left
            // is its to do.
            self.push();
        }
        for _ in 0..4 {
            self.drain();
            self.tick(1100 * MILLISECOND);
        }
        self.drain();
    }

    /// Every wake-up delivered, every call answered, oldest first.
    fn drain(&mut self) {
        let mut steps = 0;
        while self.wake() || self.answer(0) {
            steps += 1;
            assert!(steps < 10_000, "the worker never settles");
        }
    }

    fn admitted(&self, req: &Req) -> bool {
        req.paused == Some(false) || self.sim.resumed(req.context)
    }

    /// Calls refused while the limiter was unreachable: a give-back never
    /// seen.
    fn count_refused(&mut self) {
        for call in std::mem::take(&mut self.sim.h.refused) {
            self.failures += 1;
            self.unseen(&call);
        }
    }
}

/// Takes the calls of `calls` that `which` picks.
fn take_calls(calls: &mut Vec<Call>, which: impl Fn(&Call) -> bool) -> Vec<Call> {
    let (taken, kept) = std::mem::take(calls).into_iter().partition(which);
    *calls = kept;
    taken
}

/// Runs `events` on `case`, checking the invariants as it goes and once
/// settled.
fn check(case: &Case, events: &[Event]) {
    let mut run = Run::new(case);
    for event in events {
        run.apply(event);
        run.count_refused();
        at_once(case, &run);
    }
    run.settle();
    run.count_refused();
    for req in run
        .requests
        .iter()
        .filter(|r| r.open && r.paused == Some(true))
    {
        assert!(
            run.sim.resumed(req.context) || run.sim.replied(req.context).is_some(),
            "request {} still waits once settled",
            req.context
        );
    }
    for slot in 0..SLOTS {
        run.end(slot);
    }
    run.settle();
    run.count_refused();
    settled(case, &run);
    outcomes(&run);
    counted(case, &run);
    if case.probe {
        probe(case, &mut run);
    }
}

/// No user ever has more requests admitted and open than its permits.
fn at_once(case: &Case, run: &Run) {
    let Some(max) = case.at_once else {
        return;
    };
    for (user, name) in USERS.iter().enumerate() {
        let open = run
            .requests
            .iter()
            .filter(|r| r.open && r.user == user && run.admitted(r))
            .count();
        assert!(open <= max, "{open} requests of {name} admitted at once");
    }
}

/// Nothing is left: no call out, no work kept, every permit back.
fn settled(case: &Case, run: &Run) {
    assert_eq!(run.sim.h.calls, Vec::new(), "calls still out");
    assert_eq!(run.sim.w.left(), Vec::<&str>::new(), "work left");
    assert_eq!(
        run.sim.limiter.permits_held(),
        run.lost,
        "the permits the limiter holds are those lost"
    );
    assert_eq!(run.sim.gauge(), 0, "permits gauge");
    if let Some(max) = case.in_all {
        for (user, name) in USERS.iter().enumerate() {
            let admitted = run
                .requests
                .iter()
                .filter(|r| r.user == user && run.admitted(r))
                .count();
            assert!(admitted <= max, "{admitted} requests of {name} admitted");
        }
    }
}

/// Each request is resumed at most once or denied at most once, never
/// both, and nothing is done to it once its stream ended.
fn outcomes(run: &Run) {
    for req in &run.requests {
        let mine = |e: &&Effect| match e {
            Effect::Resume(c) => *c == req.context,
            Effect::Reply { context, .. } => *context == req.context,
            Effect::Header { .. } | Effect::State { .. } => false,
        };
        let effects = &run.sim.h.effects;
        let outcomes = effects.iter().filter(mine).count() + usize::from(req.paused == Some(false));
        assert!(
            outcomes <= 1,
            "request {}: {outcomes} outcomes",
            req.context
        );
        if let Some(at) = req.ended_at {
            let late = effects[at..].iter().filter(mine).count();
            assert_eq!(late, 0, "request {}: an outcome after its end", req.context);
        }
    }
}

/// The units the limiter counted are those of the requests it admitted,
/// each counted once.
fn counted(case: &Case, run: &Run) {
    match case.counted {
        Counted::Permits => {}
        Counted::PerRequest | Counted::Leased => {
            for (user, name) in USERS.iter().enumerate() {
                let of_user = run.requests.iter().filter(|r| r.user == user);
                let started = of_user.clone().count() as u64;
                let admitted = of_user.filter(|r| run.admitted(r)).count() as u64;
                // The limiter's key: rule, limit, value.
                let key = format!("user/0/{name}");
                let used = run.sim.limiter.used.get(&key).copied().unwrap_or(0);
                // Failure mode deny: each request admitted was counted, or
                // spent a unit debited.
                assert!(
                    admitted <= used,
                    "{name}: admitted {admitted}, counted {used}"
                );
                if case.counted == Counted::PerRequest {
                    assert!(used <= started, "{name}: counted {used} of {started}");
                }
            }
        }
        Counted::ResponseCost => response_cost(run),
        Counted::ByOutcome => by_outcome(run),
    }
}

/// Each request the limiter admitted holds its unit, given back once when
/// its response does not match. With no call failed, exactly; else at most.
fn by_outcome(run: &Run) {
    let limiter = &run.sim.limiter;
    let given_back = run
        .requests
        .iter()
        .filter(|r| run.admitted(r) && r.tokens.is_some_and(|t| t % 2 == 1))
        .count() as u64;
    let used: u64 = limiter.used.values().sum();
    if run.failures == 0 {
        assert_eq!(limiter.refunded, given_back, "given back");
        assert_eq!(used, limiter.admitted as u64 - given_back, "units kept");
    } else {
        assert!(
            limiter.refunded <= given_back,
            "given back {} of {given_back}",
            limiter.refunded
        );
    }
    assert_eq!(limiter.charged, 0);
}

/// Each request admitted weighs the estimate at the limiter; its response
/// charges or refunds the difference once. With no call failed, exactly;
/// else at most.
fn response_cost(run: &Run) {
    let limiter = &run.sim.limiter;
    let responded: Vec<u64> = run
        .requests
        .iter()
        .filter(|r| run.admitted(r))
        .filter_map(|r| r.tokens)
        .collect();
    let over: u64 = responded.iter().map(|t| t.saturating_sub(ESTIMATE)).sum();
    let under: u64 = responded.iter().map(|t| ESTIMATE.saturating_sub(*t)).sum();
    if run.failures == 0 {
        assert_eq!(
            (limiter.charged, limiter.refunded),
            (over, under),
            "charged and refunded"
        );
        let used: u64 = limiter.used.values().sum();
        let checked = ESTIMATE * limiter.admitted as u64;
        assert_eq!(used + under, checked + over, "units counted");
    } else {
        assert!(
            limiter.charged <= over,
            "charged {} of {over}",
            limiter.charged
        );
        assert!(
            limiter.refunded <= under,
            "refunded {} of {under}",
            limiter.refunded
        );
    }
}

/// Every local permit is free again: `at_once` fresh requests of each user
/// pass.
fn probe(case: &Case, run: &mut Run) {
    let max = case.at_once.unwrap_or(0);
    for (user, name) in USERS.iter().enumerate() {
        let contexts: Vec<u32> = (0..max).map(|i| 1000 + (user * 100 + i) as u32).collect();
        for &context in &contexts {
            let stream = fake::Stream {
                request_headers: vec![("x-user".into(), name.to_string())],
                ..fake::Stream::default()
            };
            let root = run.roots.last().copied().unwrap_or(ROOT);
            run.sim.h.streams.insert(context, stream);
            run.sim.w.request_created(root, context);
            run.sim.h.focused = context;
            let action = run.sim.w.request_headers(&mut run.sim.h, context, true);
            assert_eq!(action, Action::Continue, "a fresh request of {name}");
        }
        for context in contexts {
            run.sim.h.focused = context;
            run.sim.w.request_done(&mut run.sim.h, context);
        }
    }
}

/// Counted by outcome: the responses with an even `x-tokens`.
const LOCAL_OUTCOME: Case = Case {
    rules: r#"{"name":"user","key":["header:x-user"],"limits":[
        {"algorithm":"fixed_window","requests":3,"window":"1h",
         "count_when":{"header":{"name":"x-tokens","value":"[0-9]*[02468]"}}}]}"#,
    at_once: Some(3),
    in_all: None,
    counted: Counted::Permits,
    probe: false,
    body: Body::None,
};

const GLOBAL_OUTCOME: Case = Case {
    rules: r#"{"name":"user","key":["header:x-user"],"limits":[
        {"algorithm":"fixed_window","requests":3,"window":"1h","scope":"global",
         "count_when":{"header":{"name":"x-tokens","value":"[0-9]*[02468]"}}}]}"#,
    at_once: Some(3),
    in_all: None,
    counted: Counted::ByOutcome,
    probe: false,
    body: Body::None,
};

const LOCAL_RATE: Case = Case {
    rules: r#"{"name":"user","key":["header:x-user"],"limits":[
        {"algorithm":"fixed_window","requests":3,"window":"1h"}]}"#,
    at_once: None,
    in_all: Some(3),
    counted: Counted::Permits,
    probe: false,
    body: Body::None,
};

const LOCAL_BLOCK: Case = Case {
    rules: r#"{"name":"user","key":["header:x-user"],"limits":[
        {"algorithm":"fixed_window","requests":3,"window":"1h","on_exceed":"block","block_for":"2s"}]}"#,
    at_once: None,
    in_all: Some(3),
    counted: Counted::Permits,
    probe: false,
    body: Body::None,
};

const LOCAL_PERMITS: Case = Case {
    rules: r#"{"name":"inflight","key":["header:x-user"],"limits":[
        {"concurrency":2,"permit_ttl":"1h"}]}"#,
    at_once: Some(2),
    in_all: None,
    counted: Counted::Permits,
    probe: true,
    body: Body::None,
};

const LOCAL_WAIT: Case = Case {
    rules: r#"{"name":"inflight","key":["header:x-user"],"limits":[
        {"concurrency":1,"permit_ttl":"1h","on_exceed":"delay","max_delay":"1s"}]}"#,
    at_once: Some(1),
    in_all: None,
    counted: Counted::Permits,
    probe: true,
    body: Body::None,
};

const GLOBAL_RATE: Case = Case {
    rules: r#"{"name":"user","key":["header:x-user"],"limits":[
        {"algorithm":"fixed_window","requests":3,"window":"1h","scope":"global"}]}"#,
    at_once: None,
    in_all: Some(3),
    counted: Counted::PerRequest,
    probe: false,
    body: Body::None,
};

const GLOBAL_BLOCK: Case = Case {
    rules: r#"{"name":"user","key":["header:x-user"],"limits":[
        {"algorithm":"fixed_window","requests":3,"window":"1h","scope":"global",
         "on_exceed":"block","block_for":"2s"}]}"#,
    at_once: None,
    in_all: Some(3),
    counted: Counted::PerRequest,
    probe: false,
    body: Body::None,
};

const COALESCED: Case = Case {
    rules: r#"{"name":"user","key":["header:x-user"],"limits":[
        {"algorithm":"fixed_window","requests":3,"window":"1h","scope":"global",
         "sync":{"mode":"coalesce"}}]}"#,
    at_once: None,
    in_all: Some(3),
    counted: Counted::PerRequest,
    probe: false,
    body: Body::None,
};

const LEASED: Case = Case {
    rules: r#"{"name":"user","key":["header:x-user"],"limits":[
        {"algorithm":"fixed_window","requests":4,"window":"1h","scope":"global",
         "sync":{"mode":"lease","max_share":"50%","ttl":"1s"}}]}"#,
    at_once: None,
    in_all: Some(4),
    counted: Counted::Leased,
    probe: false,
    body: Body::None,
};

/// Renewed about every second while held (the fake limiter never lets
/// permits expire).
const GLOBAL_PERMITS: Case = Case {
    rules: r#"{"name":"inflight","key":["header:x-user"],"limits":[
        {"concurrency":2,"scope":"global","permit_ttl":"3s"}]}"#,
    at_once: Some(2),
    in_all: None,
    counted: Counted::Permits,
    probe: false,
    body: Body::None,
};

/// At most 2 requests wait per worker: the next is denied at once.
const GLOBAL_WAIT: Case = Case {
    rules: r#"{"name":"inflight","key":["header:x-user"],"max_queued":2,"limits":[
        {"concurrency":1,"scope":"global","permit_ttl":"1h","on_exceed":"delay","max_delay":"1s"}]}"#,
    at_once: Some(1),
    in_all: None,
    counted: Counted::Permits,
    probe: false,
    body: Body::None,
};

const LOCAL_COST: Case = Case {
    rules: r#"{"name":"tokens","key":["header:x-user"],
        "cost":{"estimate":10,"response":"header:x-tokens"},
        "limits":[{"algorithm":"fixed_window","requests":40,"window":"1h"}]}"#,
    at_once: None,
    in_all: None,
    counted: Counted::Permits,
    probe: false,
    body: Body::None,
};

const GLOBAL_COST: Case = Case {
    rules: r#"{"name":"tokens","key":["header:x-user"],
        "cost":{"estimate":10,"response":"header:x-tokens"},
        "limits":[{"algorithm":"fixed_window","requests":40,"window":"1h","scope":"global"}]}"#,
    at_once: None,
    in_all: None,
    counted: Counted::ResponseCost,
    probe: false,
    body: Body::None,
};

const ELASTIC: Case = Case {
    rules: r#"{"name":"user","key":["header:x-user"],"limits":[
        {"algorithm":"fixed_window","requests":2,"window":"1h","scope":"global",
         "elastic":{"ceiling":3,"pool":"spare"}}]},
       {"name":"spare","key":["const:all"],"limits":[
        {"algorithm":"fixed_window","requests":3,"window":"1h","scope":"global"}]}"#,
    at_once: None,
    in_all: Some(3),
    counted: Counted::Permits,
    probe: false,
    body: Body::None,
};

const MIXED: Case = Case {
    rules: r#"{"name":"local","key":["header:x-user"],"limits":[
        {"algorithm":"fixed_window","requests":4,"window":"1h"}]},
       {"name":"inflight","key":["header:x-user"],"limits":[
        {"concurrency":2,"scope":"global","permit_ttl":"1h"}]},
       {"name":"local_inflight","key":["header:x-user"],"limits":[
        {"concurrency":2,"permit_ttl":"1h"}]},
       {"name":"tokens","key":["header:x-user"],
        "cost":{"estimate":10,"response":"header:x-tokens"},
        "limits":[{"algorithm":"fixed_window","requests":40,"window":"1h","scope":"global"}]}"#,
    at_once: Some(2),
    in_all: Some(4),
    counted: Counted::ResponseCost,
    probe: false,
    body: Body::None,
};

const LOCAL_DELAYED: Case = Case {
    rules: r#"{"name":"user","key":["header:x-user"],"limits":[
        {"algorithm":"gcra","requests":2,"window":"1s","on_exceed":"delay","max_delay":"1s"}]}"#,
    at_once: None,
    in_all: None,
    counted: Counted::Permits,
    probe: false,
    body: Body::None,
};

const AFTER_BODY: Case = Case {
    rules: r#"{"name":"inflight","key":["header:x-user"],"limits":[
        {"concurrency":2,"scope":"global","permit_ttl":"1h"}]},
       {"name":"tokens","key":["header:x-user"],
        "cost":{"estimate":"body:max_tokens","response":"header:x-tokens"},
        "limits":[{"algorithm":"fixed_window","requests":40,"window":"1h","scope":"global"}]}"#,
    at_once: Some(2),
    in_all: None,
    counted: Counted::ResponseCost,
    probe: false,
    body: Body::Forwarded,
};

/// As [`AFTER_BODY`], the headers held in Envoy until the decision.
const AFTER_BODY_HEADERS_HELD: Case = Case {
    body: Body::Held,
    ..AFTER_BODY
};

/// Tokens in flight: 20 per user, each request estimated 10 (2 at once).
const LOCAL_TOKENS_IN_FLIGHT: Case = Case {
    rules: r#"{"name":"tokens","key":["header:x-user"],
        "cost":{"estimate":10,"response":"header:x-tokens"},
        "limits":[{"concurrency":20,"permit_ttl":"1h"},
                  {"algorithm":"fixed_window","requests":1000000,"window":"1h"}]}"#,
    at_once: Some(2),
    in_all: None,
    counted: Counted::Permits,
    probe: true,
    body: Body::None,
};

const GLOBAL_TOKENS_IN_FLIGHT: Case = Case {
    rules: r#"{"name":"tokens","key":["header:x-user"],
        "cost":{"estimate":10,"response":"header:x-tokens"},
        "limits":[{"concurrency":20,"scope":"global","permit_ttl":"1h"},
                  {"algorithm":"fixed_window","requests":40,"window":"1h","scope":"global"}]}"#,
    at_once: Some(2),
    in_all: None,
    counted: Counted::ResponseCost,
    probe: false,
    body: Body::None,
};

proptest! {
    #![proptest_config(cases())]

    #[test]
    fn orders_local_counted_by_outcome(events in events()) {
        check(&LOCAL_OUTCOME, &events);
    }

    #[test]
    fn orders_global_counted_by_outcome(events in events()) {
        check(&GLOBAL_OUTCOME, &events);
    }

    #[test]
    fn orders_local_rate(events in events()) {
        check(&LOCAL_RATE, &events);
    }

    #[test]
    fn orders_local_block(events in events()) {
        check(&LOCAL_BLOCK, &events);
    }

    #[test]
    fn orders_global_block(events in events()) {
        check(&GLOBAL_BLOCK, &events);
    }

    #[test]
    fn orders_local_permits(events in events()) {
        check(&LOCAL_PERMITS, &events);
    }

    #[test]
    fn orders_local_tokens_in_flight(events in events()) {
        check(&LOCAL_TOKENS_IN_FLIGHT, &events);
    }

    #[test]
    fn orders_global_tokens_in_flight(events in events()) {
        check(&GLOBAL_TOKENS_IN_FLIGHT, &events);
    }

    #[test]
    fn orders_local_permits_waited_for(events in events()) {
        check(&LOCAL_WAIT, &events);
    }

    #[test]
    fn orders_global_rate(events in events()) {
        check(&GLOBAL_RATE, &events);
    }

    #[test]
    fn orders_coalesced(events in events()) {
        check(&COALESCED, &events);
    }

    #[test]
    fn orders_leased(events in events()) {
        check(&LEASED, &events);
    }

    #[test]
    fn orders_global_permits(events in events()) {
        check(&GLOBAL_PERMITS, &events);
    }

    #[test]
    fn orders_global_permits_waited_for(events in events()) {
        check(&GLOBAL_WAIT, &events);
    }

    #[test]
    fn orders_local_response_cost(events in events()) {
        check(&LOCAL_COST, &events);
    }

    #[test]
    fn orders_global_response_cost(events in events()) {
        check(&GLOBAL_COST, &events);
    }

    #[test]
    fn orders_elastic(events in events()) {
        check(&ELASTIC, &events);
    }

    #[test]
    fn orders_mixed(events in events()) {
        check(&MIXED, &events);
    }

    #[test]
    fn orders_local_rate_delayed(events in events()) {
        check(&LOCAL_DELAYED, &events);
    }

    #[test]
    fn orders_decided_after_the_body(events in events()) {
        check(&AFTER_BODY, &events);
    }

    #[test]
    fn orders_decided_after_the_body_with_the_headers_held(events in events()) {
        check(&AFTER_BODY_HEADERS_HELD, &events);
    }
}
