//! The Envoy side: proxy-wasm contexts that adapt host calls to the pure
//! request path in [`crate::engine`].
//!
//! Requests held in delay mode wait in one [`Queue`] per VM (a worker
//! thread), shared by the root context and the HTTP contexts of that thread.
//! Every root context ticks at [`FLUSH_PERIOD`] to flush metrics, and at
//! [`HOLD_TICK`] while requests wait, resuming those that are due; any root
//! of the VM serves the queue, so requests held under a replaced
//! configuration are still resumed.
//!
//! Global checks that coalesce wait in one [`Coalescer`] per VM; their
//! shared calls are made by the root context ([`coalesced`]), which hands
//! each request its outcome.

use crate::coalesce::{Coalescer, Joined};
use crate::config::ServiceHeaders;
use crate::config::{self, Plan, Protocol, Rule};
use crate::engine::{self, Admitted, Delayed, Denied, PendingCheck, Verdict};
use crate::failure::{self, CallFailure, Throttle};
use crate::grpc;
use crate::key::RequestView;
use crate::local::{self, SetError, SharedStore};
use crate::metrics::{
    ceil_millis, Batch, GlobalEvent, MetricSink, RuleEvent, DELAY_HISTOGRAM, FLUSH_PERIOD,
};
use crate::queue::Queue;
use crate::response;
use crate::rls::{self, Reply};
use crate::slots::SlotHasher;
use proxy_wasm::hostcalls;
use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::{
    Action, BufferType, ContextType, GrpcStatusCode, LogLevel, MapType, MetricType, Status,
};
use sluice_core::{Nanos, MILLISECOND};
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::{Duration, UNIX_EPOCH};

proxy_wasm::main! {{
    proxy_wasm::set_log_level(LogLevel::Info);
    // A panic traps the VM; make sure the reason reaches Envoy's log.
    std::panic::set_hook(Box::new(|info| {
        let _ = hostcalls::log(LogLevel::Critical, &format!("sluice: panic: {info}"));
    }));
    proxy_wasm::set_root_context(|id| -> Box<dyn RootContext> { Box::new(Root::new(id)) });
}}

/// The root's tick period while requests wait: their resume times are kept
/// to within about this.
const HOLD_TICK: Duration = Duration::from_millis(1);

thread_local! {
    /// The requests this VM holds in delay mode.
    static WAITING: RefCell<Queue> = RefCell::new(Queue::default());
    /// Root contexts alive in this VM: the last one to go resumes every
    /// waiting request rather than leave it stuck.
    static ROOTS: Cell<usize> = const { Cell::new(0) };
    /// The requests of this VM waiting for a shared global check.
    static GROUPS: RefCell<Coalescer<Member>> = RefCell::new(Coalescer::default());
    /// What the root decided for requests of this VM, until their contexts
    /// take it.
    static HANDOFF: RefCell<Vec<(u32, Handoff)>> = const { RefCell::new(Vec::new()) };
    /// When this VM last logged a failed limiter call.
    static FAILURE_LOG: RefCell<Throttle> = RefCell::new(Throttle::default());
}

/// A request waiting for a shared global check.
struct Member {
    runtime: Rc<Runtime>,
    pending: PendingCheck,
}

/// An outcome the root decided for a request: what its response reports.
#[derive(Default)]
struct Handoff {
    admitted: Option<Admitted>,
    held: Option<Delayed>,
}

/// Shared data through host calls.
struct HostStore;

impl SharedStore for HostStore {
    fn get(&self, key: &str) -> (Option<Vec<u8>>, Option<u32>) {
        hostcalls::get_shared_data(key).unwrap_or((None, None))
    }

    fn set(&self, key: &str, value: &[u8], cas: Option<u32>) -> Result<(), SetError> {
        match hostcalls::set_shared_data(key, Some(value), cas) {
            Ok(()) => Ok(()),
            Err(Status::CasMismatch) => Err(SetError::CasMismatch),
            Err(_) => Err(SetError::Failed),
        }
    }
}

/// Metric ids, defined when a configuration is accepted, and the counts
/// not yet handed to Envoy.
#[derive(Default)]
struct Metrics {
    /// Host metric id per [`Batch`] position.
    ids: Vec<u32>,
    batch: Batch,
    /// Host metric id of [`DELAY_HISTOGRAM`].
    delay_histogram: u32,
}

impl Metrics {
    /// Defines every counter of `rules` rules (none before a plan exists).
    fn define(rules: &[Rule]) -> Metrics {
        let mut ids: Vec<u32> = GlobalEvent::ALL
            .iter()
            .map(|e| define(e.metric_name()))
            .collect();
        for rule in rules {
            ids.extend(RuleEvent::ALL.map(|e| define(&e.metric_name(&rule.name))));
        }
        Metrics {
            ids,
            batch: Batch::new(rules.len()),
            delay_histogram: hostcalls::define_metric(MetricType::Histogram, DELAY_HISTOGRAM)
                .unwrap_or(u32::MAX),
        }
    }

    fn add(&self, position: usize) {
        self.add_n(position, 1);
    }

    fn add_n(&self, position: usize, n: u64) {
        if self.batch.add_n(position, n) {
            self.flush();
        }
    }

    /// Hands the batched counts to Envoy.
    fn flush(&self) {
        // Retries are tallied per VM by the CAS loop, which has no sink.
        let retries = local::take_cas_retries();
        if retries > 0 {
            self.batch
                .add_n(Batch::global_position(GlobalEvent::CasRetries), retries);
        }
        self.batch.drain(|position, count| {
            if let (Some(&id), Ok(count)) = (self.ids.get(position), i64::try_from(count)) {
                let _ = hostcalls::increment_metric(id, count);
            }
        });
    }
}

impl Drop for Metrics {
    // A replaced configuration (or a rejected one) still reports what it counted.
    fn drop(&mut self) {
        self.flush();
    }
}

/// Counts a rejected configuration, at once.
fn config_error() {
    // Dropping the metrics flushes them.
    Metrics::define(&[]).global(GlobalEvent::ConfigErrors);
}

fn define(name: &str) -> u32 {
    hostcalls::define_metric(MetricType::Counter, name).unwrap_or(u32::MAX)
}

impl MetricSink for Metrics {
    fn rule(&self, rule: usize, event: RuleEvent) {
        self.add(Batch::rule_position(rule, event));
    }

    fn global(&self, event: GlobalEvent) {
        self.add(Batch::global_position(event));
    }

    fn delayed(&self, rule: usize, delay: Nanos) {
        let ms = ceil_millis(delay);
        self.add(Batch::rule_position(rule, RuleEvent::Delayed));
        self.add_n(Batch::rule_position(rule, RuleEvent::DelayedMs), ms);
        // A histogram sample is one host call, made only for held requests.
        let _ = hostcalls::record_metric(self.delay_histogram, ms);
    }
}

/// Everything a request needs, replaced as a whole on reconfiguration.
struct Runtime {
    plan: Plan,
    hasher: SlotHasher,
    metrics: Metrics,
}

struct Root {
    /// This root's context id: the shared calls it makes are its own.
    id: u32,
    runtime: Option<Rc<Runtime>>,
    /// Whether the flush timer is set.
    ticking: bool,
    /// When this root last ticked, and last flushed its metrics.
    last_tick: Nanos,
    last_flush: Nanos,
}

impl Root {
    fn new(id: u32) -> Root {
        ROOTS.with(|r| r.set(r.get().saturating_add(1)));
        Root {
            id,
            runtime: None,
            ticking: false,
            last_tick: 0,
            last_flush: 0,
        }
    }
}

/// Resumes the held requests due at `now` (every one when `now` is
/// `Nanos::MAX`); returns whether some still wait.
fn resume_due(now: Nanos) -> bool {
    let (due, waiting) = WAITING.with(|q| {
        let mut q = q.borrow_mut();
        (q.take_due(now), !q.is_empty())
    });
    for context in due {
        // A context gone meanwhile has left the queue in on_done; an error
        // here means the host no longer knows it.
        if hostcalls::set_effective_context(context).is_ok() {
            let _ = hostcalls::resume_http_request();
        }
    }
    waiting
}

fn now() -> Nanos {
    hostcalls::get_current_time()
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .and_then(|d| u64::try_from(d.as_nanos()).ok())
        .unwrap_or(0)
}

impl Context for Root {
    fn on_done(&mut self) -> bool {
        let last = ROOTS.with(|r| {
            r.set(r.get().saturating_sub(1));
            r.get() == 0
        });
        if last {
            resume_due(Nanos::MAX);
        }
        coalesced::root_closing(self.id, last);
        true
    }

    fn on_http_call_response(
        &mut self,
        token: u32,
        _headers: usize,
        body_size: usize,
        _trailers: usize,
    ) {
        let answer = call_answer(body_size);
        if let (Err(failure), Some(runtime)) = (&answer, &self.runtime) {
            call_failed(runtime, *failure);
        }
        coalesced::answered(self.id, token, answer.ok().as_deref());
    }
}

impl RootContext for Root {
    fn on_tick(&mut self) {
        let now = now();
        coalesced::call_ready(self.id);
        let waiting = resume_due(now) || GROUPS.with(|g| g.borrow().any_ready());
        // The period follows the queue whoever set it last (an HTTP context
        // of this root starts the fine ticks): a gap shorter than half the
        // flush period means fine ticks.
        let fine = now.saturating_sub(self.last_tick) < nanos(FLUSH_PERIOD) / 2;
        self.last_tick = now;
        if waiting != fine {
            let period = if waiting { HOLD_TICK } else { FLUSH_PERIOD };
            let _ = hostcalls::set_tick_period(period);
        }
        // Every slow tick flushes, as do fine ticks a flush period apart.
        if !fine || now.saturating_sub(self.last_flush) >= nanos(FLUSH_PERIOD) {
            self.last_flush = now;
            if let Some(runtime) = &self.runtime {
                runtime.metrics.flush();
            }
        }
    }

    fn on_configure(&mut self, size: usize) -> bool {
        if !self.ticking {
            // Each worker's VM flushes its own counts.
            let _ = hostcalls::set_tick_period(FLUSH_PERIOD);
            self.ticking = true;
        }
        let bytes = hostcalls::get_buffer(BufferType::PluginConfiguration, 0, size)
            .ok()
            .flatten()
            .unwrap_or_default();
        let plan = match config::parse(&bytes) {
            Ok(plan) => plan,
            Err(e) => {
                log::error!("sluice: invalid configuration: {e}");
                config_error();
                return false;
            }
        };
        let candidate = SlotHasher::new_seed(now());
        let hasher = local::load_or_create(&HostStore, &plan.seed_key, &candidate)
            .ok()
            .and_then(|seed| SlotHasher::from_seed(&seed));
        let Some(hasher) = hasher else {
            log::error!(
                "sluice: cannot read or create the seed at {}",
                plan.seed_key
            );
            config_error();
            return false;
        };
        let metrics = Metrics::define(&plan.rules);
        log::info!(
            "sluice: configured domain {:?} with {} rule(s)",
            plan.domain,
            plan.rules.len()
        );
        self.runtime = Some(Rc::new(Runtime {
            plan,
            hasher,
            metrics,
        }));
        true
    }

    fn create_http_context(&self, context_id: u32) -> Option<Box<dyn HttpContext>> {
        Some(Box::new(Filter {
            context_id,
            runtime: self.runtime.clone(),
            pending: None,
            tokens: Vec::new(),
            admitted: None,
            held: None,
            group: None,
            carrying: None,
            reply: None,
            called_at: 0,
        }))
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}

/// The request as the host shows it.
struct HostRequest;

impl RequestView for HostRequest {
    fn header(&self, name: &str) -> Option<String> {
        hostcalls::get_map_value(MapType::HttpRequestHeaders, name)
            .ok()
            .flatten()
    }

    fn source_address(&self) -> Option<String> {
        let bytes = hostcalls::get_property(vec!["source", "address"])
            .ok()
            .flatten()?;
        String::from_utf8(bytes).ok()
    }
}

struct Filter {
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
    carrying: Option<(coalesced::SharedCall, Verdict)>,
    /// What the rate limit service asked for in its answer.
    reply: Option<Reply>,
    /// When this request's limiter calls were made.
    called_at: Nanos,
}

impl Filter {
    /// Carries out a final verdict; returns whether the request continues.
    fn apply(&mut self, runtime: &Runtime, verdict: Verdict) -> Action {
        match verdict {
            Verdict::Allow(admitted) => {
                if admitted.report.is_some() || !admitted.shadow_denied.is_empty() {
                    self.admitted = Some(admitted);
                }
                self.add_request_headers();
                Action::Continue
            }
            Verdict::Delay(delayed) => {
                if let Ok(held) = hold(self.context_id, runtime, delayed) {
                    self.admitted = Some(held.admitted());
                    self.held = Some(held);
                    self.add_request_headers();
                }
                Action::Pause
            }
            Verdict::Deny(denied) => {
                send_denial(&runtime.plan, &denied, self.reply.as_ref());
                Action::Pause
            }
            Verdict::Check(pending) => self.check(runtime, pending),
        }
    }

    /// Asks the limiter: in a coalescing group's next call, or alone.
    fn check(&mut self, runtime: &Runtime, pending: PendingCheck) -> Action {
        let (Some(signature), Some(shared)) = (pending.coalescable(), self.runtime.as_ref()) else {
            return self.call_limiter(runtime, pending);
        };
        let signature = signature.to_vec();
        let member = Member {
            runtime: Rc::clone(shared),
            pending,
        };
        let joined = GROUPS.with(|g| {
            g.borrow_mut()
                .join(&signature, self.context_id, member, coalesced::MAX_BATCH)
        });
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

    /// Adds the request headers a rate limit service asked for to the
    /// admitted request.
    fn add_request_headers(&self) {
        for (name, value) in self.reply.iter().flat_map(|r| &r.request_headers) {
            let _ = hostcalls::add_map_value(MapType::HttpRequestHeaders, name, value);
        }
    }

    /// Adds the response headers a rate limit service asked for to the
    /// admitted request's response, in place of Sluice's of the same name.
    fn add_service_response_headers(&self, plan: &Plan) {
        let always = plan
            .limiter
            .as_ref()
            .is_some_and(|l| l.service_headers == ServiceHeaders::Always);
        let Some(reply) = self.reply.as_ref().filter(|_| always) else {
            return;
        };
        for (i, (name, value)) in reply.response_headers.iter().enumerate() {
            let repeated = reply.response_headers[..i].iter().any(|(n, _)| n == name);
            let _ = if repeated {
                hostcalls::add_map_value(MapType::HttpResponseHeaders, name, value)
            } else {
                hostcalls::set_map_value(MapType::HttpResponseHeaders, name, Some(value))
            };
        }
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
        self.take_handoff();
        if !self.tokens.is_empty() {
            // Its call is dropped with it: the group calls again.
            self.own_call_ended();
        }
        if let Some((shared, _)) = self.carrying.take() {
            // So is the call it carried: its requests get the failure mode.
            coalesced::carried(shared, None);
        }
        let member = GROUPS.with(|g| g.borrow_mut().leave(self.context_id));
        if let Some(member) = member {
            let runtime = &member.runtime;
            member
                .pending
                .abandon(&runtime.plan, &HostStore, &runtime.metrics);
        }
        let waited = WAITING.with(|q| q.borrow_mut().remove(self.context_id));
        let held = self.held.take();
        if let (true, Some(held), Some(runtime)) = (waited, held, self.runtime.as_ref()) {
            held.give_back(&runtime.plan, &HostStore, &runtime.metrics, now());
        }
    }

    /// Takes what the root decided for this request, if anything.
    fn take_handoff(&mut self) {
        let handoff = HANDOFF.with(|h| {
            let mut h = h.borrow_mut();
            let at = h.iter().position(|(c, _)| *c == self.context_id)?;
            Some(h.swap_remove(at).1)
        });
        if let Some(handoff) = handoff {
            self.admitted = handoff.admitted.or(self.admitted.take());
            self.held = handoff.held.or(self.held.take());
        }
    }

    /// Sends the check calls; the request waits until all are answered.
    fn call_limiter(&mut self, runtime: &Runtime, mut pending: PendingCheck) -> Action {
        let mut complete = false;
        self.tokens.clear();
        self.called_at = now();
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
            let verdict = engine::finish(&runtime.plan, pending, &HostStore, &runtime.metrics);
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
        let answer = call_answer(body_size);
        if let Err(failure) = answer {
            call_failed(runtime, failure);
        }
        coalesced::carried(shared, answer.ok().as_deref());
        // Handing out the answers moved the effective context.
        let _ = hostcalls::set_effective_context(self.context_id);
        if self.apply(runtime, verdict) == Action::Continue {
            let _ = hostcalls::resume_http_request();
        }
    }
}

/// Queues a delayed request of `context` until it conforms, counting it as
/// held; when its rule's queue is full, denies it instead (`Err`).
fn hold(context: u32, runtime: &Runtime, delayed: Delayed) -> Result<Delayed, ()> {
    let (rule, max_queued) = runtime
        .plan
        .rules
        .get(delayed.rule)
        .map_or(("", 0), |r| (r.name.as_str(), r.max_queued));
    let resume_at = delayed.resume_at();
    if grpc::outlives(delayed.delay, grpc_deadline()) {
        // The client would give up first: deny now, as a full queue does.
        let denied = delayed.refuse(&runtime.plan, &HostStore, &runtime.metrics);
        deny(&runtime.plan, &denied);
        return Err(());
    }
    let queued = WAITING.with(|q| {
        let mut q = q.borrow_mut();
        let was_empty = q.is_empty();
        q.push(context, rule, resume_at, max_queued)
            .map(|()| was_empty)
    });
    match queued {
        Ok(first) => {
            if first {
                // The root ticks finely until the queue is empty again.
                let _ = hostcalls::set_tick_period(HOLD_TICK);
            }
            delayed.accept(&runtime.metrics);
            for_access_log("delayed", rule);
            Ok(delayed)
        }
        Err(_) => {
            let denied = delayed.refuse(&runtime.plan, &HostStore, &runtime.metrics);
            deny(&runtime.plan, &denied);
            Err(())
        }
    }
}

/// The body of the answer to the HTTP call being reported, when its status
/// is 200; else why the call failed.
fn call_answer(body_size: usize) -> Result<Vec<u8>, CallFailure> {
    let header = |name| {
        hostcalls::get_map_value(MapType::HttpCallResponseHeaders, name)
            .ok()
            .flatten()
    };
    let status = header(":status");
    // The limiter's own answers are JSON; Envoy's local replies are not.
    let from_limiter = header("content-type").is_some_and(|c| c.starts_with("application/json"));
    if let Some(failure) = CallFailure::of_http(status.as_deref(), from_limiter) {
        return Err(failure);
    }
    hostcalls::get_buffer(BufferType::HttpCallResponseBody, 0, body_size)
        .ok()
        .flatten()
        .ok_or(CallFailure::Unreadable)
}

/// Counts a failed limiter call under its reason and, at most every
/// [`crate::failure::WARN_PERIOD`] per VM, logs it.
fn call_failed(runtime: &Runtime, failure: CallFailure) {
    runtime.metrics.global(failure.event());
    let Some(limiter) = runtime.plan.limiter.as_ref() else {
        return;
    };
    let Some(quiet) = FAILURE_LOG.with(|t| t.borrow_mut().admit(now())) else {
        return;
    };
    log::warn!(
        "sluice: limiter cluster {:?} failed: {} ({quiet} more failed call(s) not logged since the last warning); failure_mode {:?} decides the request; counted in sluice.limiter_failed_*",
        limiter.cluster,
        failure.reason(),
        limiter.failure_mode,
    );
}

/// Calls the limiter; `None` when the call could not be made.
fn dispatch(runtime: &Runtime, body: &[u8]) -> Option<u32> {
    let limiter = runtime.plan.limiter.as_ref()?;
    let headers = vec![
        (":method", "POST"),
        (":path", "/v1/check"),
        (":authority", limiter.authority.as_str()),
        ("content-type", "application/json"),
    ];
    let timeout = Duration::from_millis(limiter.timeout / MILLISECOND);
    let sent = match limiter.protocol {
        Protocol::Sluice => {
            hostcalls::dispatch_http_call(&limiter.cluster, headers, Some(body), vec![], timeout)
        }
        // Envoy takes a name that is not a GrpcService message as the
        // cluster's name.
        Protocol::Rls => hostcalls::dispatch_grpc_call(
            &limiter.cluster,
            rls::SERVICE,
            rls::METHOD,
            vec![],
            Some(body),
            timeout,
        ),
    };
    sent.ok()
}

fn deny(plan: &Plan, denied: &Denied) {
    send_denial(plan, denied, None);
}

/// Sends the denial, with what a rate limit service asked for in `reply`
/// (its headers in place of Sluice's of the same name, its body).
fn send_denial(plan: &Plan, denied: &Denied, reply: Option<&Reply>) {
    let wait = reply.and_then(|r| r.retry_after);
    let extra = response::denial_headers(
        plan,
        &denied.report,
        &denied.applied,
        &denied.shadow_denied,
        wait,
    );
    let rule = response::rule_name(plan, denied.report.rule);
    for_access_log("denied", rule);
    let configured = plan
        .response
        .headers
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()));
    let extra = extra.iter().map(|(k, v)| (*k, v.as_str()));
    let service = reply
        .filter(|_| plan.limiter.as_ref().map(|l| l.service_headers) != Some(ServiceHeaders::Never))
        .map_or(&[][..], |r| r.response_headers.as_slice());
    let headers = response::with_service_headers(configured.chain(extra), service);
    let sent = if is_grpc_request() {
        // Envoy writes the gRPC content type, status and message.
        let metadata: Vec<(&str, &[u8])> = headers
            .into_iter()
            .filter(|(k, _)| *k != "content-type")
            .map(|(k, v)| (k, v.as_bytes()))
            .collect();
        let message = grpc::denial_message(rule);
        hostcalls::send_grpc_response(GrpcStatusCode::ResourceExhausted, Some(&message), metadata)
    } else {
        let body = reply
            .and_then(|r| r.body.as_deref())
            .unwrap_or(plan.response.body.as_bytes());
        hostcalls::send_http_response(plan.response.status, headers, Some(body))
    };
    if let Err(status) = sent {
        log::warn!("sluice: cannot send the denial: {status:?}");
    }
}

/// Whether the request being decided is a gRPC call.
fn is_grpc_request() -> bool {
    hostcalls::get_map_value(MapType::HttpRequestHeaders, "content-type")
        .ok()
        .flatten()
        .is_some_and(|c| grpc::is_grpc(&c))
}

/// The request's `grpc-timeout`, if it is a gRPC call that has one.
fn grpc_deadline() -> Option<Nanos> {
    if !is_grpc_request() {
        return None;
    }
    hostcalls::get_map_value(MapType::HttpRequestHeaders, "grpc-timeout")
        .ok()
        .flatten()
        .and_then(|t| grpc::parse_timeout(&t))
}

/// Tells Envoy's access log what Sluice did with the request: filter state
/// `wasm.sluice_outcome` (`denied` or `delayed`) and `wasm.sluice_rule`.
fn for_access_log(outcome: &str, rule: &str) {
    let _ = hostcalls::set_property(vec!["sluice_outcome"], Some(outcome.as_bytes()));
    let _ = hostcalls::set_property(vec!["sluice_rule"], Some(rule.as_bytes()));
}

fn add_response_headers(plan: &Plan, admitted: &Admitted) {
    let headers = response::admitted_headers(
        plan,
        admitted.report.as_ref(),
        &admitted.applied,
        &admitted.shadow_denied,
    );
    for (name, value) in headers {
        let _ = hostcalls::add_map_value(MapType::HttpResponseHeaders, name, &value);
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
        if !self.tokens.iter().any(|(t, _)| *t == token) {
            self.carried_answered(&runtime, token, body_size);
            return;
        }
        let answer = call_answer(body_size);
        if let Err(failure) = answer {
            call_failed(&runtime, failure);
        }
        self.answered(&runtime, token, answer.ok());
    }

    fn on_grpc_call_response(&mut self, token: u32, status_code: u32, response_size: usize) {
        let Some(runtime) = self.runtime.clone() else {
            return;
        };
        // gRPC status 0 is OK; any other is a failed call.
        let timeout = runtime.plan.limiter.as_ref().map_or(0, |l| l.timeout);
        let timed_out = failure::timed_out(now().saturating_sub(self.called_at), timeout);
        if let Some(failure) = CallFailure::of_grpc(status_code, timed_out) {
            call_failed(&runtime, failure);
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
        let verdict = engine::finish(&runtime.plan, pending, &HostStore, &runtime.metrics);
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

impl HttpContext for Filter {
    fn on_http_request_headers(&mut self, _num_headers: usize, _end_of_stream: bool) -> Action {
        let Some(runtime) = self.runtime.clone() else {
            return Action::Continue;
        };
        if runtime.plan.rules.is_empty() {
            return Action::Continue;
        }
        let verdict = engine::evaluate(
            &runtime.plan,
            &runtime.hasher,
            &HostRequest,
            &HostStore,
            &runtime.metrics,
            now,
        );
        self.apply(&runtime, verdict)
    }

    fn on_http_response_headers(&mut self, _num_headers: usize, _end_of_stream: bool) -> Action {
        self.take_handoff();
        if let (Some(runtime), Some(admitted)) = (self.runtime.as_ref(), self.admitted.take()) {
            add_response_headers(&runtime.plan, &admitted);
        }
        if let Some(runtime) = self.runtime.as_ref() {
            self.add_service_response_headers(&runtime.plan);
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

fn nanos(d: Duration) -> Nanos {
    u64::try_from(d.as_nanos()).unwrap_or(Nanos::MAX)
}

mod coalesced;
