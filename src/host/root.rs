//! The root context of a VM: it accepts configurations, ticks to flush
//! metrics and resume held requests, does the work requests leave it when
//! woken (the shared calls of coalescing groups, lease renewals, global
//! settlements and permits given back), and creates each request's
//! [`Filter`].

use super::clock::{nanos, now, HOLD_TICK};
use super::coalesced;
use super::cost;
use super::filter::Filter;
use super::limiter::{call_answer, call_failed};
use super::metrics::{config_error, Metrics};
use super::permits;
use super::random;
use super::renewal;
use super::rooted;
use super::runtime::Runtime;
use super::shared_data::HostStore;
use super::state;
use super::waiting;
use super::wake;
use proxy_wasm::hostcalls;
use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::{BufferType, ContextType};
use sluice_core::Nanos;
use sluice_filter::config;
use sluice_filter::engine::concurrency;
use sluice_filter::failure::CallFailure;
use sluice_filter::local;
use sluice_filter::metrics::FLUSH_PERIOD;
use sluice_filter::slots::SlotHasher;
use std::rc::Rc;

pub(super) struct Root {
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
    pub(super) fn new(id: u32) -> Root {
        state::root_opened();
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
    let (due, waiting) = state::queue(|q| (q.take_due(now), !q.is_empty()));
    for context in due {
        // A context gone meanwhile has left the queue in on_done; an error
        // here means the host no longer knows it.
        if hostcalls::set_effective_context(context).is_ok() {
            let _ = hostcalls::resume_http_request();
        }
    }
    waiting
}

/// Does the work requests left root `root`: the calls they wait for first.
fn do_left_work(root: u32) {
    coalesced::call_ready(root);
    rooted::send_queued(root);
    as_root(root);
    renewal::send_queued(root);
    permits::send_releases();
    cost::send_charges(root);
}

/// Makes root `root` the effective context again: carrying out requests'
/// outcomes moved it to them, and the calls made next must be the root's
/// (a request's calls end with it, unanswered).
fn as_root(root: u32) {
    let _ = hostcalls::set_effective_context(root);
}

impl Context for Root {
    fn on_done(&mut self) -> bool {
        let last = state::root_closed();
        if last {
            resume_due(Nanos::MAX);
            waiting::end_all(self.id);
        }
        cost::root_closing(self.id);
        rooted::root_closing(self.id, last);
        wake::root_closing(self.id);
        coalesced::root_closing(self.id, last);
        renewal::root_closing(self.id, last);
        true
    }

    fn on_http_call_response(
        &mut self,
        token: u32,
        _headers: usize,
        body_size: usize,
        _trailers: usize,
    ) {
        let answer = call_answer(self.runtime.as_deref(), body_size);
        let answer = answer.as_deref();
        if cost::answered(token) {
            // Checks that waited for those charges go now.
            rooted::send_queued(self.id);
        } else {
            let ours = renewal::answered(token, answer)
                || rooted::answered(self.id, token, answer)
                || waiting::answered(self.id, token, answer);
            if !ours {
                coalesced::answered(self.id, token, answer);
            }
        }
        // The root is running: what was left for it meanwhile need not
        // wait for its wake-up.
        as_root(self.id);
        renewal::send_queued(self.id);
    }

    fn on_grpc_call_response(&mut self, token: u32, status_code: u32, response_size: usize) {
        // Only checks made for waiting requests come here over gRPC.
        if let (Some(runtime), Some(failure)) = (
            self.runtime.as_deref(),
            CallFailure::of_grpc(status_code, false),
        ) {
            call_failed(runtime, failure);
        }
        let body = (status_code == 0)
            .then(|| hostcalls::get_buffer(BufferType::GrpcReceiveBuffer, 0, response_size))
            .and_then(|b| b.ok().flatten());
        waiting::answered(self.id, token, body.as_deref());
    }
}

impl RootContext for Root {
    fn on_tick(&mut self) {
        let now = now();
        // A wake-up lost costs at most one tick.
        wake::woken(None);
        wake::listen_if_unheard(self.id, self.runtime.as_deref());
        do_left_work(self.id);
        let waiting = resume_due(now) | waiting::retry(self.id) || state::groups(|g| g.any_ready());
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
            permits::renew_due(self.runtime.as_deref());
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
        let candidate = random::seed().unwrap_or_else(|| {
            log::warn!("sluice: the host gave no random bytes: the slot seed comes from the clock");
            SlotHasher::new_seed(now())
        });
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
        let Ok(holder) = concurrency::new_holder(&HostStore, &plan.domain, &hasher) else {
            log::error!("sluice: cannot number this configuration's permit holder");
            config_error();
            return false;
        };
        let metrics = Metrics::define(&plan.rules);
        log::info!(
            "sluice: configured domain {:?} with {} rule(s)",
            plan.domain,
            plan.rules.len()
        );
        let runtime = Runtime {
            plan,
            hasher,
            metrics,
            holder,
        };
        wake::listen(self.id, &runtime);
        self.runtime = Some(Rc::new(runtime));
        true
    }

    fn on_queue_ready(&mut self, queue_id: u32) {
        wake::woken(Some(queue_id));
        do_left_work(self.id);
    }

    fn create_http_context(&self, context_id: u32) -> Option<Box<dyn HttpContext>> {
        Some(Box::new(Filter::new(context_id, self.runtime.clone())))
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}
