//! The driver's lifecycle, natively: a fake proxy (manual clock, every
//! effect recorded) and a fake limiter that never forgets, driven through
//! the ways a request can end.

mod block;
mod by_outcome;
mod fake;
mod host_calls;
mod kinds;
mod lifecycle;
mod orders;
mod quota;
mod renewals;
mod topkeys;

use super::{Action, Answer, Worker};
use fake::{Effect, FakeHost, FakeLimiter, Stream};
use sluice_core::Nanos;

/// The root context of every test.
const ROOT: u32 = 1;

/// A worker under test, its proxy and the limiter behind it.
struct Sim {
    w: Worker<FakeHost>,
    h: FakeHost,
    limiter: FakeLimiter,
}

/// A configuration with a limiter cluster and `rules`.
fn config(rules: &str) -> String {
    format!(
        r#"{{"domain":"t","limiter":{{"cluster":"c","authority":"a","failure_mode":"deny"}},"rules":[{rules}]}}"#
    )
}

impl Sim {
    fn new(rules: &str) -> Sim {
        Sim::configured(&config(rules))
    }

    /// A worker whose root is configured with the whole configuration `json`.
    fn configured(json: &str) -> Sim {
        let mut sim = Sim {
            w: Worker::default(),
            h: FakeHost::default(),
            limiter: FakeLimiter::default(),
        };
        sim.w.root_created(ROOT);
        sim.h.roots.push(ROOT);
        sim.h.focused = ROOT;
        assert!(sim.w.configure(
            &mut sim.h,
            ROOT,
            json.as_bytes(),
            Some([7; crate::slots::SEED_LEN])
        ));
        sim
    }

    /// Request `context` comes with `headers` and no body.
    fn start(&mut self, context: u32, headers: &[(&str, &str)]) -> Action {
        let stream = Stream {
            request_headers: headers
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..Stream::default()
        };
        self.h.streams.insert(context, stream);
        self.w.request_created(ROOT, context);
        self.h.focused = context;
        self.w.request_headers(&mut self.h, context, true)
    }

    /// A request of user `user`.
    fn user(&mut self, context: u32, user: &str) -> Action {
        self.start(context, &[("x-user", user)])
    }

    /// The limiter answers call `token` (in the context that made it).
    fn answer(&mut self, token: u32) {
        let Some(at) = self.h.calls.iter().position(|c| c.token == token) else {
            return;
        };
        let call = self.h.calls.remove(at);
        let (status, body) = self.limiter.serve(&call);
        let size = body.len();
        self.h.answer = (status.to_string(), "application/json".into(), body);
        self.h.focused = call.from;
        self.w.answered(
            &mut self.h,
            call.from,
            call.token,
            Answer::Http { body_size: size },
        );
    }

    /// The oldest call out, if any, is answered; returns whether one was.
    fn answer_one(&mut self) -> bool {
        match self.h.calls.first() {
            Some(call) => {
                let token = call.token;
                self.answer(token);
                true
            }
            None => false,
        }
    }

    /// Call `token` fails (reset, timeout): Envoy reports a 503.
    fn fail(&mut self, token: u32) {
        let Some(at) = self.h.calls.iter().position(|c| c.token == token) else {
            return;
        };
        let call = self.h.calls.remove(at);
        self.h.answer = ("503".into(), "text/plain".into(), Vec::new());
        self.h.focused = call.from;
        self.w.answered(
            &mut self.h,
            call.from,
            call.token,
            Answer::Http { body_size: 0 },
        );
    }

    /// The root runs if woken.
    fn wake(&mut self) -> bool {
        if self.h.queued == 0 {
            return false;
        }
        self.h.focused = ROOT;
        self.w.queue_ready(&mut self.h, ROOT, 1);
        true
    }

    /// Everything settles: the root does what it was left, every call is
    /// answered.
    fn run(&mut self) {
        for _ in 0..1000 {
            if !self.wake() && !self.answer_one() {
                return;
            }
        }
        panic!("the worker never settles");
    }

    /// The stream of `context` ends: Envoy drops the calls it made (the
    /// limiter still decides them; their answers are lost).
    fn end(&mut self, context: u32) {
        self.h.focused = context;
        self.w.request_done(&mut self.h, context);
        let (lost, kept) = std::mem::take(&mut self.h.calls)
            .into_iter()
            .partition(|c| c.from == context);
        self.h.calls = kept;
        for call in lost {
            let _ = self.limiter.serve(&call);
        }
    }

    /// The upstream answers request `context` with `headers`.
    fn respond(&mut self, context: u32, headers: &[(&str, &str)]) {
        if let Some(stream) = self.h.streams.get_mut(&context) {
            stream.response_headers = headers
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
        }
        self.h.focused = context;
        self.w.response_headers(&mut self.h, context);
    }

    /// The root ticks `after` from now.
    fn tick(&mut self, after: Nanos) {
        self.h.now += after;
        self.h.focused = ROOT;
        self.w.tick(&mut self.h, ROOT);
    }

    fn resumed(&self, context: u32) -> bool {
        self.h.effects.contains(&Effect::Resume(context))
    }

    /// The status of the local reply sent to `context`, if one was.
    fn replied(&self, context: u32) -> Option<u32> {
        self.h.effects.iter().find_map(|e| match e {
            Effect::Reply {
                context: c, status, ..
            } if *c == context => Some(*status),
            _ => None,
        })
    }

    /// The host calls request `context` with `headers` makes from its
    /// headers to its end, with the worker's own work (the root's) for it.
    fn calls(&mut self, context: u32, headers: &[(&str, &str)]) -> Vec<&'static str> {
        self.h.made.borrow_mut().clear();
        self.start(context, headers);
        self.run();
        self.respond(context, &[]);
        self.end(context);
        self.run();
        self.h.made.borrow().clone()
    }

    /// The permits gauge of every rule, summed.
    fn gauge(&self) -> i64 {
        self.h.recorded.permits.borrow().values().sum()
    }
}
