//! A proxy-wasm HTTP filter that reads the request headers' count and passes
//! every request: the baseline cost of running any wasm filter in Envoy.

use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::{Action, ContextType, LogLevel};

proxy_wasm::main! {{
    proxy_wasm::set_log_level(LogLevel::Warn);
    proxy_wasm::set_root_context(|_| -> Box<dyn RootContext> { Box::new(NoopRoot) });
}}

struct NoopRoot;

impl Context for NoopRoot {}

impl RootContext for NoopRoot {
    fn on_configure(&mut self, _: usize) -> bool {
        true
    }

    fn create_http_context(&self, _: u32) -> Option<Box<dyn HttpContext>> {
        Some(Box::new(NoopHttp))
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}

struct NoopHttp;

impl Context for NoopHttp {}

impl HttpContext for NoopHttp {
    fn on_http_request_headers(&mut self, _: usize, _: bool) -> Action {
        Action::Continue
    }
}
