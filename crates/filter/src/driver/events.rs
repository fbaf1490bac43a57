//! The driver's entry points: one per proxy callback. A request's callbacks
//! take it out of the worker's table for their work ([`super::stream`]);
//! a root's do the work requests left it and tick.

use super::coalesced;
use super::cost;
use super::host::{Action, Host};
use super::limiter::{call_failed, grpc_answer, http_answer, Answer};
use super::parts::Runtime;
use super::permits;
use super::renewal;
use super::request::Request;
use super::rooted;
use super::stream;
use super::waiting;
use super::wake;
use super::worker::{RootState, Worker};
use super::HOLD_TICK;
use crate::config;
use crate::engine::concurrency;
use crate::failure::CallFailure;
use crate::local;
use crate::metrics::FLUSH_PERIOD;
use crate::slots::{SlotHasher, SEED_LEN};
use sluice_core::Nanos;
use std::rc::Rc;

/// The flush period in nanoseconds.
fn flush_period() -> Nanos {
    u64::try_from(FLUSH_PERIOD.as_nanos()).unwrap_or(Nanos::MAX)
}

impl<H: Host> Worker<H> {
    /// A root context was created.
    pub fn root_created(&mut self, root: u32) {
        self.roots.push(RootState {
            id: root,
            runtime: None,
            ticking: false,
            last_tick: 0,
            last_flush: 0,
        });
    }

    /// Root `root` is given configuration `json`; `seed` is a fresh slot
    /// seed from the host's random source, if it gave one. Returns whether
    /// the configuration is accepted (a refused one leaves the root's
    /// previous one in force).
    pub fn configure(
        &mut self,
        host: &mut H,
        root: u32,
        json: &[u8],
        seed: Option<[u8; SEED_LEN]>,
    ) -> bool {
        let Some(at) = self.roots.iter().position(|r| r.id == root) else {
            return false;
        };
        if !self.roots[at].ticking {
            // Each worker flushes its own counts.
            host.set_tick_period(flush_period());
            self.roots[at].ticking = true;
        }
        let Some(runtime) = runtime(host, json, seed) else {
            host.config_error();
            return false;
        };
        wake::listen(self, host, root, &runtime);
        if let Some(state) = self.roots.get_mut(at) {
            state.runtime = Some(Rc::new(runtime));
        }
        true
    }

    /// Root `root` goes away (a configuration replaced, or the worker
    /// closing): its calls will not be answered. The worker's last root
    /// ends what waits.
    pub fn root_done(&mut self, host: &mut H, root: u32) {
        self.roots.retain(|r| r.id != root);
        let last = self.roots.is_empty();
        if last {
            resume_due(self, host, Nanos::MAX);
            waiting::end_all(self, host, root);
        }
        cost::root_closing(self, root);
        rooted::root_closing(self, host, root, last);
        wake::root_closing(self, root);
        coalesced::root_closing(self, host, root, last);
        renewal::root_closing(self, host, root, last);
    }

    /// Root `root` ticks: it flushes metrics, renews permits, resumes the
    /// held requests that are due and decides waiting ones again.
    pub fn tick(&mut self, host: &mut H, root: u32) {
        let now = host.now();
        let runtime = self.runtime_of(root);
        // A wake-up lost costs at most one tick.
        wake::woken(self, host, None);
        wake::listen_if_unheard(self, host, root, runtime.as_deref());
        self.do_left_work(host, root);
        let waiting = resume_due(self, host, now) | waiting::retry(self, host, root)
            || self.groups.any_ready();
        let Some(at) = self.roots.iter().position(|r| r.id == root) else {
            return;
        };
        let state = &mut self.roots[at];
        // The period follows the queue whoever set it last (a request of
        // this root starts the fine ticks): a gap shorter than half the
        // flush period means fine ticks.
        let fine = now.saturating_sub(state.last_tick) < flush_period() / 2;
        state.last_tick = now;
        if waiting != fine {
            host.set_tick_period(if waiting { HOLD_TICK } else { flush_period() });
        }
        // Every slow tick flushes, as do fine ticks a flush period apart.
        if !fine || now.saturating_sub(state.last_flush) >= flush_period() {
            state.last_flush = now;
            // Resuming requests moved the focus: the renewals are the
            // root's calls.
            host.focus(root);
            permits::renew_due(self, host, runtime.as_ref());
            if let Some(runtime) = &runtime {
                super::host::WorkerMetrics::flush(&runtime.metrics);
                super::topkeys::fold(&*host, runtime, now);
            }
        }
    }

    /// Root `root` was woken through `queue`.
    pub fn queue_ready(&mut self, host: &mut H, root: u32, queue: u32) {
        wake::woken(self, host, Some(queue));
        self.do_left_work(host, root);
    }

    /// A request context was created under root `root`.
    pub fn request_created(&mut self, root: u32, context: u32) {
        // Without a configuration, the request passes untouched.
        if let Some(runtime) = self.runtime_of(root) {
            self.requests
                .insert(context, Box::new(Request::new(runtime)));
        }
    }

    /// The request's headers are in.
    pub fn request_headers(&mut self, host: &mut H, context: u32, end_of_stream: bool) -> Action {
        self.with_request(context, Action::Continue, |w, req| {
            stream::headers(w, host, context, req, end_of_stream)
        })
    }

    /// A chunk of the request's body is in.
    pub fn request_body(
        &mut self,
        host: &mut H,
        context: u32,
        body_size: usize,
        end_of_stream: bool,
    ) -> Action {
        self.with_request(context, Action::Continue, |w, req| {
            stream::body(w, host, context, req, body_size, end_of_stream)
        })
    }

    /// The request's trailers are in.
    pub fn request_trailers(&mut self, host: &mut H, context: u32) -> Action {
        self.with_request(context, Action::Continue, |w, req| {
            stream::trailers(w, host, context, req)
        })
    }

    /// The response's headers are in (the response's callbacks need only
    /// the request: it stays in the table).
    pub fn response_headers(&mut self, host: &mut H, context: u32) {
        if let Some(req) = self.requests.get_mut(&context) {
            stream::response_headers(host, req);
        }
    }

    /// A chunk of the response body is in.
    pub fn response_body(&mut self, host: &mut H, context: u32, body_size: usize) {
        if let Some(req) = self.requests.get_mut(&context) {
            stream::response_body(host, req, body_size);
        }
    }

    /// The response's trailers are in.
    pub fn response_trailers(&mut self, host: &mut H, context: u32) {
        if let Some(req) = self.requests.get_mut(&context) {
            stream::response_trailers(host, req);
        }
    }

    /// The request's stream ended (its log or its end, whichever comes
    /// first: the second finds nothing).
    pub fn request_done(&mut self, host: &mut H, context: u32) {
        if let Some(req) = self.requests.remove(&context) {
            stream::leave(self, host, context, *req);
        }
    }

    /// The answer to call `token` came to `context` (a root or a request).
    pub fn answered(&mut self, host: &mut H, context: u32, token: u32, answer: Answer) {
        if self.requests.contains_key(&context) {
            return self.with_request(context, (), |w, req| {
                stream::answered(w, host, context, req, token, answer)
            });
        }
        if self.roots.iter().any(|r| r.id == context) {
            self.root_answered(host, context, token, answer);
        }
    }

    fn root_answered(&mut self, host: &mut H, root: u32, token: u32, answer: Answer) {
        let runtime = self.runtime_of(root);
        let body = match answer {
            Answer::Http { body_size } => http_answer(self, host, runtime.as_deref(), body_size),
            Answer::Grpc { status, size } => {
                if let (Some(runtime), Some(failure)) =
                    (runtime.as_deref(), CallFailure::of_grpc(status, false))
                {
                    call_failed(self, host, runtime, failure);
                }
                grpc_answer(host, status, size)
            }
        };
        let body = body.as_deref();
        if cost::answered(self, token) {
            // Checks that waited for those charges go now.
            rooted::send_queued(self, host, root);
        } else {
            let _ = cost::service_answered(self, host, token, body)
                || renewal::answered(self, host, token, body)
                || rooted::answered(self, host, root, token, body)
                || coalesced::answered(self, host, root, token, body);
        }
        // The root is running: renewals left for it meanwhile need not
        // wait for its wake-up (its calls, so the focus comes back first).
        if !self.renewals_queued.is_empty() {
            host.focus(root);
            renewal::send_queued(self, host, root);
        }
    }

    /// Does the work requests left root `root`: the calls they wait for
    /// first.
    fn do_left_work(&mut self, host: &mut H, root: u32) {
        coalesced::call_ready(self, host, root);
        rooted::send_queued(self, host, root);
        // Carrying out requests' outcomes moved the focus, and the calls
        // made next must be the root's.
        host.focus(root);
        renewal::send_queued(self, host, root);
        permits::send_releases(self, host);
        cost::send_charges(self, host, root);
    }

    /// The configuration in force at root `root`.
    fn runtime_of(&self, root: u32) -> Option<Rc<Runtime<H::Metrics>>> {
        self.roots
            .iter()
            .find(|r| r.id == root)
            .and_then(|r| r.runtime.clone())
    }

    /// Runs `f` on the request of `context` taken out of the table (put back
    /// after); `absent` when the worker does not know it.
    fn with_request<R>(
        &mut self,
        context: u32,
        absent: R,
        f: impl FnOnce(&mut Self, &mut Request<H>) -> R,
    ) -> R {
        let Some(mut req) = self.requests.remove(&context) else {
            return absent;
        };
        let out = f(self, &mut req);
        self.requests.insert(context, req);
        out
    }
}

/// Resumes the held requests due at `now` (every one when `now` is
/// `Nanos::MAX`); returns whether some still wait.
fn resume_due<H: Host>(w: &mut Worker<H>, host: &mut H, now: Nanos) -> bool {
    for context in w.queue.take_due(now) {
        // A request gone meanwhile has left the queue when its stream ended.
        if host.focus(context) {
            host.resume();
        }
    }
    !w.queue.is_empty()
}

/// The runtime of configuration `json`, or why not (logged).
fn runtime<H: Host>(
    host: &mut H,
    json: &[u8],
    seed: Option<[u8; SEED_LEN]>,
) -> Option<Runtime<H::Metrics>> {
    let plan = match config::parse(json) {
        Ok(plan) => plan,
        Err(e) => {
            log::error!("sluice: invalid configuration: {e}");
            return None;
        }
    };
    let candidate = seed.unwrap_or_else(|| {
        log::warn!("sluice: the host gave no random bytes: the slot seed comes from the clock");
        SlotHasher::new_seed(host.now())
    });
    let hasher = local::load_or_create(&*host, &plan.seed_key, &candidate)
        .ok()
        .and_then(|seed| SlotHasher::from_seed(&seed));
    let Some(hasher) = hasher else {
        log::error!(
            "sluice: cannot read or create the seed at {}",
            plan.seed_key
        );
        return None;
    };
    let Ok(holder) = concurrency::new_holder(&*host, &plan.domain, &hasher) else {
        log::error!("sluice: cannot number this configuration's permit holder");
        return None;
    };
    let metrics = host.define_metrics(&plan.rules);
    log::info!(
        "sluice: configured domain {:?} with {} rule(s)",
        plan.domain,
        plan.rules.len()
    );
    Some(Runtime {
        top: crate::topkeys::Counts::new(
            plan.rules.len(),
            plan.top_limited_keys.as_ref().map(|t| t.entries),
        ),
        plan,
        hasher,
        metrics,
        holder,
    })
}
