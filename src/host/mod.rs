//! The Envoy side: proxy-wasm contexts that hand each callback to the
//! worker's [`Worker`] (`sluice_filter::driver`), which owns the request
//! lifecycle, and the host calls it makes through [`proxy::Proxy`]. The
//! only code that calls proxy-wasm; it decides nothing: [`proxy`] (the
//! host calls) → [`metrics`] (counters, defined once per VM and counted
//! in batches) → [`clock`], and [`random`] (the slot seed).
//!
//! One thread-local holds the worker (a wasm VM is one Envoy worker
//! thread) and the host calls' own state. Envoy runs the effects that could
//! call back into the VM (a request resumed, a local reply) after the
//! callback returns, so a callback never finds the worker in use; should
//! one, it is logged and dropped rather than trap the VM.

use proxy_wasm::hostcalls;
use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::{Action, BufferType, ContextType, LogLevel};
use sluice_filter::driver::{self, Answer, Worker};
use std::cell::RefCell;

mod clock;
mod metrics;
mod proxy;
mod random;

use proxy::Proxy;

proxy_wasm::main! {{
    proxy_wasm::set_log_level(LogLevel::Info);
    // A panic traps the VM; make sure the reason reaches Envoy's log.
    std::panic::set_hook(Box::new(|info| {
        let _ = hostcalls::log(LogLevel::Critical, &format!("sluice: panic: {info}"));
    }));
    proxy_wasm::set_root_context(|id| -> Box<dyn RootContext> {
        with_worker((), |w, _| w.root_created(id));
        Box::new(Root { id })
    });
}}

/// The worker and the host's state.
struct Vm {
    worker: Worker<Proxy>,
    proxy: Proxy,
}

thread_local! {
    static VM: RefCell<Vm> = RefCell::new(Vm { worker: Worker::default(), proxy: Proxy::default() });
}

/// Runs `f` on the worker; `busy` if a callback already holds it.
fn with_worker<R>(busy: R, f: impl FnOnce(&mut Worker<Proxy>, &mut Proxy) -> R) -> R {
    VM.with(|vm| match vm.try_borrow_mut() {
        Ok(mut vm) => {
            let Vm { worker, proxy } = &mut *vm;
            f(worker, proxy)
        }
        Err(_) => {
            log::error!("sluice: a callback came while the worker was in use: dropped");
            busy
        }
    })
}

fn action(action: driver::Action) -> Action {
    match action {
        driver::Action::Continue => Action::Continue,
        driver::Action::Pause => Action::Pause,
    }
}

/// A root context: configurations, ticks, wake-ups.
struct Root {
    id: u32,
}

impl Context for Root {
    fn on_done(&mut self) -> bool {
        with_worker((), |w, p| w.root_done(p, self.id));
        true
    }

    fn on_http_call_response(&mut self, token: u32, _: usize, body_size: usize, _: usize) {
        let answer = Answer::Http { body_size };
        with_worker((), |w, p| w.answered(p, self.id, token, answer));
    }

    fn on_grpc_call_response(&mut self, token: u32, status: u32, size: usize) {
        let answer = Answer::Grpc { status, size };
        with_worker((), |w, p| w.answered(p, self.id, token, answer));
    }
}

impl RootContext for Root {
    fn on_tick(&mut self) {
        with_worker((), |w, p| w.tick(p, self.id));
    }

    fn on_configure(&mut self, size: usize) -> bool {
        let json = hostcalls::get_buffer(BufferType::PluginConfiguration, 0, size)
            .ok()
            .flatten()
            .unwrap_or_default();
        let seed = random::seed();
        with_worker(false, |w, p| w.configure(p, self.id, &json, seed))
    }

    fn on_queue_ready(&mut self, queue: u32) {
        with_worker((), |w, p| w.queue_ready(p, self.id, queue));
    }

    fn create_http_context(&self, context: u32) -> Option<Box<dyn HttpContext>> {
        with_worker((), |w, _| w.request_created(self.id, context));
        Some(Box::new(Filter { id: context }))
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}

/// A request's context.
struct Filter {
    id: u32,
}

impl Context for Filter {
    fn on_http_call_response(&mut self, token: u32, _: usize, body_size: usize, _: usize) {
        let answer = Answer::Http { body_size };
        with_worker((), |w, p| w.answered(p, self.id, token, answer));
    }

    fn on_grpc_call_response(&mut self, token: u32, status: u32, size: usize) {
        let answer = Answer::Grpc { status, size };
        with_worker((), |w, p| w.answered(p, self.id, token, answer));
    }

    fn on_done(&mut self) -> bool {
        with_worker((), |w, p| w.request_done(p, self.id));
        true
    }
}

impl HttpContext for Filter {
    fn on_http_request_headers(&mut self, _: usize, end_of_stream: bool) -> Action {
        let continues = driver::Action::Continue;
        action(with_worker(continues, |w, p| {
            w.request_headers(p, self.id, end_of_stream)
        }))
    }

    fn on_http_request_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        let continues = driver::Action::Continue;
        action(with_worker(continues, |w, p| {
            w.request_body(p, self.id, body_size, end_of_stream)
        }))
    }

    fn on_http_request_trailers(&mut self, _: usize) -> Action {
        let continues = driver::Action::Continue;
        action(with_worker(continues, |w, p| {
            w.request_trailers(p, self.id)
        }))
    }

    fn on_http_response_headers(&mut self, _: usize, _: bool) -> Action {
        with_worker((), |w, p| w.response_headers(p, self.id));
        Action::Continue
    }

    fn on_http_response_body(&mut self, body_size: usize, _: bool) -> Action {
        with_worker((), |w, p| w.response_body(p, self.id, body_size));
        Action::Continue
    }

    fn on_http_response_trailers(&mut self, _: usize) -> Action {
        with_worker((), |w, p| w.response_trailers(p, self.id));
        Action::Continue
    }

    fn on_log(&mut self) {
        with_worker((), |w, p| w.request_done(p, self.id));
    }
}
