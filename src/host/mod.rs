//! The Envoy side: proxy-wasm contexts that adapt host calls to the pure
//! request path in [`sluice_filter::engine`]. The only code that calls proxy-wasm.
//!
//! Imports go one way, from the contexts down to the host calls:
//! [`root`] (the root context) → [`filter`] (a request's context) →
//! [`coalesced`] (shared calls of coalescing groups), [`rooted`] (checks
//! that take global permits, made by the root for their request) →
//! [`waiting`] (requests waiting for a permit, decided again from the
//! root) → [`outcome`] (hold,
//! deny, response headers), [`limiter`] (call-outs), [`permits`] (the
//! permits of concurrency limits: kept, given back, renewed), [`cost`]
//! (costs known from the response: read, settled), [`renewal`] (lease
//! renewals, queued by requests and sent by the root) → [`wake`] (wakes
//! the root for the work requests leave it, through a shared queue) →
//! [`state`] (the VM's
//! thread-locals, owned there alone), [`shared_data`], [`request`],
//! [`clock`], [`random`], [`metrics`], [`runtime`].
//!
//! Requests held in delay mode wait in one queue per VM (a worker thread),
//! shared by the root context and the HTTP contexts of that thread. Every
//! root context ticks at [`sluice_filter::metrics::FLUSH_PERIOD`] to flush metrics,
//! and at [`clock::HOLD_TICK`] while requests wait, resuming those that are
//! due; any root of the VM serves the queue, so requests held under a
//! replaced configuration are still resumed.
//!
//! Global checks that coalesce wait in one group per check and VM; their
//! shared calls are made by the root context ([`coalesced`]), which hands
//! each request its outcome.
//!
//! Calls whose answer must be read whether or not their request is still
//! there (lease renewals, global settlements and permits given back, checks
//! that take global permits) and the next calls of coalescing groups are
//! made by the root, woken at once ([`wake`]): a call belongs to the
//! context that makes it, and Envoy cancels a request's calls when it ends.

use proxy_wasm::hostcalls;
use proxy_wasm::traits::RootContext;
use proxy_wasm::types::LogLevel;

proxy_wasm::main! {{
    proxy_wasm::set_log_level(LogLevel::Info);
    // A panic traps the VM; make sure the reason reaches Envoy's log.
    std::panic::set_hook(Box::new(|info| {
        let _ = hostcalls::log(LogLevel::Critical, &format!("sluice: panic: {info}"));
    }));
    proxy_wasm::set_root_context(|id| -> Box<dyn RootContext> { Box::new(root::Root::new(id)) });
}}

mod clock;
mod coalesced;
mod cost;
mod filter;
mod limiter;
mod metrics;
mod outcome;
mod permits;
mod random;
mod renewal;
mod request;
mod root;
mod rooted;
mod runtime;
mod shared_data;
mod state;
mod waiting;
mod wake;
