//! A request's context: it asks the engine for a verdict, carries it out
//! (alone, or through a coalescing group's shared call), and adds the
//! admitted response's headers.

use super::clock::now;
use super::coalesced::{self, MAX_BATCH};
use super::cost;
use super::limiter::{call_answer, call_failed, dispatch};
use super::outcome::{
    add_request_headers, add_response_headers, add_service_response_headers, hold, send_denial,
    unapplied,
};
use super::permits;
use super::renewal;
use super::request::{self, HostRequest, Shown};
use super::rooted;
use super::runtime::Runtime;
use super::shared_data::HostStore;
use super::state::{self, Headers, Member, SharedCall};
use super::waiting;
use proxy_wasm::hostcalls;
use proxy_wasm::traits::{Context, HttpContext};
use proxy_wasm::types::{Action, BufferType, MapType};
use sluice_core::Nanos;
use sluice_filter::coalesce::Joined;
use sluice_filter::engine::concurrency::Held;
use sluice_filter::engine::cost_reader::CostReader;
use sluice_filter::engine::settle::Owed;
use sluice_filter::engine::{self, Admitted, Delayed, PendingCheck, Verdict};
use sluice_filter::failure::{self, CallFailure};
use sluice_filter::metrics::{MetricSink, RuleEvent};
use sluice_filter::response;
use sluice_filter::rls::Reply;
use std::rc::Rc;

/// One request's context.
pub(super) struct Filter {
    context_id: u32,
    runtime: Option<Rc<Runtime>>,
    pending: Option<PendingCheck>,
    /// Outstanding limiter calls: (token, call index).
    tokens: Vec<(u32, usize)>,
    admitted: Option<Admitted>,
    /// A request held in delay mode: what to give back if its client leaves
    /// while it waits; kept for the `x-sluice-delayed-ms` header after.
    held: Option<Delayed>,
    /// The check of the coalescing group whose call in flight is this
    /// request's own: the group's next call waits for it.
    group: Option<Vec<u8>>,
    /// The group's call this request carries, and its own outcome, applied
    /// once that call is answered.
    carrying: Option<(SharedCall, Verdict)>,
    /// What the rate limit service asked for in its answer.
    reply: Option<Reply>,
    /// The permits of concurrency limits the request holds until its
    /// stream ends.
    holding: Held,
    /// What the response says the request cost, for the rules it owes.
    cost: Option<CostReader>,
    /// The request waits for its body (a rule estimates from it).
    awaiting_body: bool,
    /// The request's headers, taken when they went on before its body (it
    /// is decided once the body is in, when Envoy no longer shows them).
    shown: Option<Headers>,
    /// A request waiting for a permit: when it first found none, and until
    /// when it may wait.
    waiting: Option<(Nanos, Nanos)>,
    /// Its check takes global permits and is the root's to make.
    rooted: bool,
}

impl Filter {
    pub(super) fn new(context_id: u32, runtime: Option<Rc<Runtime>>) -> Filter {
        Filter {
            context_id,
            runtime,
            pending: None,
            tokens: Vec::new(),
            admitted: None,
            held: None,
            group: None,
            carrying: None,
            reply: None,
            holding: Held::default(),
            cost: None,
            awaiting_body: false,
            shown: None,
            waiting: None,
            rooted: false,
        }
    }
}

impl Filter {
    /// Carries out a final verdict; returns whether the request continues.
    fn apply(&mut self, runtime: &Runtime, verdict: Verdict) -> Action {
        match verdict {
            Verdict::Allow(mut admitted) => {
                self.keep(runtime, std::mem::take(&mut admitted.held));
                self.owe(std::mem::take(&mut admitted.owed));
                if admitted.report.is_some() || !admitted.shadow_denied.is_empty() {
                    self.admitted = Some(admitted);
                }
                self.reply.iter().for_each(add_request_headers);
                Action::Continue
            }
            Verdict::Delay(delayed) => {
                match hold(self.context_id, runtime, delayed) {
                    Ok(mut held) => {
                        self.keep(runtime, held.take_held());
                        self.owe(held.take_owed());
                        self.admitted = Some(held.admitted());
                        self.held = Some(held);
                        self.reply.iter().for_each(add_request_headers);
                    }
                    Err(taken) => self.keep(runtime, taken),
                }
                Action::Pause
            }
            Verdict::Deny(mut denied) => {
                if let Some(shared) = self.runtime.clone() {
                    let held = std::mem::take(&mut denied.held);
                    permits::give_back(&shared, held);
                    if denied.wait.is_some() {
                        // Its headers must still be there when the root decides again.
                        let body_phase = self.shown.is_some();
                        if !body_phase
                            && waiting::wait(self.context_id, &shared, &denied, &mut self.waiting)
                        {
                            return Action::Pause;
                        }
                        runtime.metrics.rule(denied.report.rule, RuleEvent::Denied);
                    }
                }
                send_denial(&runtime.plan, &denied, self.reply.as_ref());
                Action::Pause
            }
            Verdict::Check(pending) => self.check(runtime, pending),
        }
    }

    /// Asks the limiter: in a coalescing group's next call, alone, or from
    /// the root (see [`rooted`]) for a check that takes global permits or
    /// must wait for charges its worker owes on its keys.
    fn check(&mut self, runtime: &Runtime, pending: PendingCheck) -> Action {
        // The charges owed on its keys when it came, which it waits for.
        let owed = state::owing(|o| o.owes(pending.limiter_keys(), o.last()).then(|| o.last()));
        if let (true, Some(shared)) = (
            owed.is_some() || pending.takes_permits(),
            self.runtime.as_ref(),
        ) {
            let owed = owed.unwrap_or(0);
            rooted::queue(self.context_id, shared, pending, self.shown.clone(), owed);
            self.rooted = true;
            return Action::Pause;
        }
        let (Some(signature), Some(shared)) = (pending.coalescable(), self.runtime.as_ref()) else {
            return self.call_limiter(runtime, pending);
        };
        if self.shown.is_some() {
            // The root carries out a group's outcomes, without its headers.
            return self.call_limiter(runtime, pending);
        }
        let signature = signature.to_vec();
        let member = Member {
            runtime: Rc::clone(shared),
            pending,
        };
        let joined = state::groups(|g| g.join(&signature, self.context_id, member, MAX_BATCH));
        match joined {
            Joined::Waiting => Action::Pause,
            Joined::Full(member) => self.call_limiter(runtime, member.pending),
            Joined::Call(member) => {
                self.group = Some(signature);
                let action = self.call_limiter(runtime, member.pending);
                if self.tokens.is_empty() {
                    // Answered already (the call could not be made).
                    self.own_call_ended();
                }
                action
            }
        }
    }

    /// Reads what the response says the request cost, for the rules of
    /// `owed`, and settles when the stream ends.
    fn owe(&mut self, owed: Vec<Owed>) {
        if !owed.is_empty() {
            self.cost = CostReader::new(owed);
        }
    }

    /// Shows the request's snapshot of its headers in place of Envoy's while
    /// the guard lives, if it was decided after its body; else nothing.
    fn show(&self) -> Option<Shown> {
        self.shown.clone().map(|headers| Shown::new(Some(headers)))
    }

    /// Keeps the permits `held` until the stream ends.
    fn keep(&mut self, runtime: &Runtime, held: Held) {
        permits::keep(runtime, &held);
        self.holding.local.extend(held.local);
        self.holding.global.extend(held.global);
    }

    /// This request's call ended: its group's next call is due.
    fn own_call_ended(&mut self) {
        if let Some(signature) = self.group.take() {
            coalesced::finished(&signature);
        }
    }

    /// Takes the request out of the queue or its coalescing group if it
    /// still waits (its client left) and gives back what it consumed.
    fn leave(&mut self) {
        if self.rooted {
            rooted::leave(self.context_id);
        }
        self.take_handoff();
        if !self.tokens.is_empty() {
            // Its call is dropped with it: the group calls again.
            self.own_call_ended();
        }
        if let Some((shared, verdict)) = self.carrying.take() {
            // So is the call it carried: its requests get the failure mode.
            coalesced::carried(shared, None);
            if let Some(runtime) = self.runtime.as_ref() {
                unapplied(runtime, verdict);
            }
        }
        let member = state::groups(|g| g.leave(self.context_id));
        if let Some(member) = member {
            renewal::abandon(&member.runtime, member.pending);
        }
        state::remove_waiter(self.context_id);
        let waited = state::queue(|q| q.remove(self.context_id));
        let held = self.held.take();
        if let (true, Some(held), Some(runtime)) = (waited, held, self.runtime.as_ref()) {
            let resume_at = held.resume_at();
            let taken = held.give_back(&runtime.plan, &HostStore, &runtime.metrics, now());
            cost::refund(runtime, taken, resume_at);
            // Never sent upstream: what it consumed is back, nothing to settle.
            self.cost = None;
        }
        let Some(runtime) = self.runtime.clone() else {
            return;
        };
        if let Some(pending) = self.pending.take() {
            // Its call is still out: what it took locally goes back.
            renewal::abandon(&runtime, pending);
        }
        permits::release(&runtime, std::mem::take(&mut self.holding));
        if let Some(reader) = self.cost.take() {
            cost::settle(&runtime, reader);
        }
    }

    /// Takes what the root decided for this request, if anything.
    fn take_handoff(&mut self) {
        let Some(mut handoff) = state::take_handoff(self.context_id) else {
            return;
        };
        // Counted and renewed already: the request gives them back.
        let kept = std::mem::take(&mut handoff.kept);
        self.holding.local.extend(kept.local);
        self.holding.global.extend(kept.global);
        if let Some(runtime) = self.runtime.clone() {
            if let Some(admitted) = handoff.admitted.as_mut() {
                self.keep(&runtime, std::mem::take(&mut admitted.held));
                self.owe(std::mem::take(&mut admitted.owed));
            }
            if let Some(held) = handoff.held.as_mut() {
                self.keep(&runtime, held.take_held());
                self.owe(held.take_owed());
            }
        }
        self.admitted = handoff.admitted.or(self.admitted.take());
        self.held = handoff.held.or(self.held.take());
    }

    /// Sends the check calls; the request waits until all are answered.
    fn call_limiter(&mut self, runtime: &Runtime, mut pending: PendingCheck) -> Action {
        let mut complete = false;
        self.tokens.clear();
        for call in 0..pending.call_count() {
            match dispatch(runtime, pending.body(call)) {
                Some(token) => self.tokens.push((token, call)),
                None => {
                    call_failed(runtime, CallFailure::Unreachable);
                    complete = pending.record(call, None);
                }
            }
        }
        if self.tokens.is_empty() || complete {
            let mut verdict = engine::finish(&runtime.plan, pending, &HostStore, &runtime.metrics);
            self.renew(&mut verdict);
            return self.apply(runtime, verdict);
        }
        self.pending = Some(pending);
        Action::Pause
    }
}

impl Filter {
    /// The answer to the call this request carries, if `token` is it:
    /// decides the requests it carried, then applies this request's own
    /// outcome.
    fn carried_answered(&mut self, runtime: &Runtime, token: u32, body_size: usize) {
        if !self
            .carrying
            .as_ref()
            .is_some_and(|(shared, _)| shared.token == token)
        {
            return;
        }
        let Some((shared, verdict)) = self.carrying.take() else {
            return;
        };
        let answer = call_answer(Some(runtime), body_size);
        coalesced::carried(shared, answer.as_deref());
        // Handing out the answers moved the effective context.
        let _ = hostcalls::set_effective_context(self.context_id);
        if self.apply(runtime, verdict) == Action::Continue {
            let _ = hostcalls::resume_http_request();
        }
    }
}

impl Context for Filter {
    fn on_done(&mut self) -> bool {
        self.leave();
        true
    }

    fn on_http_call_response(
        &mut self,
        token: u32,
        _headers: usize,
        body_size: usize,
        _trailers: usize,
    ) {
        let Some(runtime) = self.runtime.clone() else {
            return;
        };
        let _shown = self.show();
        if !self.tokens.iter().any(|(t, _)| *t == token) {
            self.carried_answered(&runtime, token, body_size);
            return;
        }
        let answer = call_answer(Some(&runtime), body_size);
        self.answered(&runtime, token, answer);
    }

    fn on_grpc_call_response(&mut self, token: u32, status_code: u32, response_size: usize) {
        let Some(runtime) = self.runtime.clone() else {
            return;
        };
        let _shown = self.show();
        // gRPC status 0 is OK; any other is a failed call (the clock is read
        // only then, to tell a timeout from a refused connection).
        if status_code != 0 {
            let timeout = runtime.plan.limiter.as_ref().map_or(0, |l| l.timeout);
            let since = self.pending.as_ref().map_or(0, PendingCheck::decided_at);
            let timed_out = failure::timed_out(now().saturating_sub(since), timeout);
            if let Some(failure) = CallFailure::of_grpc(status_code, timed_out) {
                call_failed(&runtime, failure);
            }
        }
        let body = (status_code == 0)
            .then(|| hostcalls::get_buffer(BufferType::GrpcReceiveBuffer, 0, response_size))
            .and_then(|b| b.ok().flatten());
        self.answered(&runtime, token, body);
    }
}

impl Filter {
    /// The answer to this request's own call `token` (`None`: failed).
    fn answered(&mut self, runtime: &Runtime, token: u32, body: Option<Vec<u8>>) {
        let Some(position) = self.tokens.iter().position(|(t, _)| *t == token) else {
            return;
        };
        let (_, call) = self.tokens.swap_remove(position);
        let Some(mut pending) = self.pending.take() else {
            return;
        };
        let complete = pending.record(call, body.as_deref());
        if pending.unreadable(call) {
            call_failed(runtime, CallFailure::Unreadable);
        }
        if !complete {
            self.pending = Some(pending);
            return;
        }
        self.reply = pending.take_reply();
        let mut verdict = engine::finish(&runtime.plan, pending, &HostStore, &runtime.metrics);
        self.renew(&mut verdict);
        if let Some(signature) = self.group.take() {
            if let Some(shared) = coalesced::carry(signature) {
                self.carrying = Some((shared, verdict));
                return;
            }
        }
        if self.apply(runtime, verdict) == Action::Continue {
            let _ = hostcalls::resume_http_request();
        }
    }
}

impl Filter {
    /// Decides the request (its body of `body_size` bytes in, if waited
    /// for) and carries the verdict out.
    fn decide(&mut self, runtime: &Runtime, body_size: usize) -> Action {
        let mut verdict = engine::evaluate(
            &runtime.plan,
            &runtime.hasher,
            runtime.holder,
            &HostRequest { body_size },
            &HostStore,
            &runtime.metrics,
            now,
        );
        self.renew(&mut verdict);
        self.apply(runtime, verdict)
    }

    /// Sends the lease renewal `verdict` carries, if any.
    fn renew(&self, verdict: &mut Verdict) {
        if let Some(runtime) = &self.runtime {
            renewal::queue_from(runtime, verdict);
        }
    }
}

impl HttpContext for Filter {
    fn on_http_request_headers(&mut self, _num_headers: usize, end_of_stream: bool) -> Action {
        let Some(runtime) = self.runtime.clone() else {
            return Action::Continue;
        };
        if runtime.plan.rules.is_empty() {
            return Action::Continue;
        }
        if runtime.plan.request_body && !end_of_stream {
            // Decided once the body is in. Envoy's proxy-wasm host delivers
            // no body to a filter that holds the headers, so they go on and
            // the body is held until the decision.
            self.awaiting_body = true;
            self.shown = Some(request::snapshot());
            return Action::Continue;
        }
        self.decide(&runtime, 0)
    }

    fn on_http_request_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        if !self.awaiting_body {
            return Action::Continue;
        }
        if !end_of_stream {
            return Action::Pause;
        }
        self.awaiting_body = false;
        let _shown = self.show();
        match self.runtime.clone() {
            Some(runtime) => self.decide(&runtime, body_size),
            None => Action::Continue,
        }
    }

    fn on_http_response_body(&mut self, body_size: usize, _end_of_stream: bool) -> Action {
        if let Some(reader) = self.cost.as_mut().filter(|r| r.reads_body()) {
            cost::read_body(reader, body_size);
        }
        Action::Continue
    }

    fn on_http_response_trailers(&mut self, _num_trailers: usize) -> Action {
        if let (Some(runtime), Some(reader)) = (self.runtime.as_ref(), self.cost.as_mut()) {
            cost::read_trailers(runtime, reader);
        }
        Action::Continue
    }

    fn on_http_response_headers(&mut self, _num_headers: usize, _end_of_stream: bool) -> Action {
        let _shown = self.show();
        self.take_handoff();
        if let (Some(runtime), Some(reader)) = (self.runtime.as_ref(), self.cost.as_mut()) {
            cost::read_headers(runtime, reader);
        }
        if let (Some(runtime), Some(admitted)) = (self.runtime.as_ref(), self.admitted.take()) {
            add_response_headers(&runtime.plan, &admitted);
        }
        if let (Some(runtime), Some(reply)) = (self.runtime.as_ref(), self.reply.as_ref()) {
            add_service_response_headers(&runtime.plan, reply);
        }
        if let Some(held) = self.held.take() {
            let (name, value) = response::delayed_header(held.delay);
            let _ = hostcalls::add_map_value(MapType::HttpResponseHeaders, name, &value);
        }
        Action::Continue
    }

    fn on_log(&mut self) {
        self.leave();
    }
}
