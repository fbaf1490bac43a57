//! Reference proxy-wasm filters for the benchmark, chosen by the plugin
//! configuration's `mode`. None of them limits anything; each measures a
//! floor that Sluice's rows are compared with.
//!
//! - `{}` or `{"mode":"noop"}`: passes every request. What any wasm filter
//!   pays for being there at all.
//! - `{"mode":"host_calls"}`: makes, per request, the host calls Sluice makes
//!   for an admitted request with a `client_ip` key behind one trusted proxy
//!   and `ietf` headers (`x-forwarded-for`, the `source.address` property,
//!   shared-data read of one key, clock, compare-and-swap write of a value of
//!   a key-table bucket's size, two response headers), in that order,
//!   without any of Sluice's logic. The best any filter that keeps an exact
//!   shared count per client can do.
//! - `{"mode":"deny"}`: the host calls Sluice makes for a denied request
//!   (clock, `x-forwarded-for`, shared-data read) and the same local reply:
//!   429 with `content-type`, `retry-after`, the two `RateLimit` headers,
//!   `x-sluice-rule` and a 13-byte body. The best any filter answering a
//!   flood from a shared count can do.
//! - `{"mode":"call_out","cluster":C,"authority":A}`: one `POST /v1/check`
//!   to cluster `C` per request, with a fixed body; the request continues
//!   when the answer arrives, whatever it says. The best any filter that asks
//!   a remote limiter per request can do.
//! - `{"mode":"grpc_call_out","cluster":C}`: one gRPC `ShouldRateLimit` call
//!   to cluster `C` per request (Envoy's rate limit service protocol, a
//!   fixed one-descriptor request); the request continues when the answer
//!   arrives. The best any wasm filter calling a rate limit service per
//!   request can do, beside Envoy's own ratelimit filter making the same call.
//! - `{"mode":"global_calls","cluster":C,"authority":A}`: the host calls
//!   Sluice makes for an admitted request checked by the limiter (a global
//!   limit keyed by `client_ip` behind a trusted proxy, `ietf` headers): the
//!   peer address, `x-forwarded-for`, the clock, the over-limit cache's
//!   shared-data read and the call on the request; the answer's `:status`
//!   and body; two response headers. Fixed values, no logic: with
//!   `call_out`, what Sluice's global path costs in host calls, and beside
//!   Sluice's row, what its own code costs. `"leave_out"` lists calls not to
//!   make, to price each one: `peer`, `xff`, `clock`, `cache`, `call` (then
//!   the request goes on at once, and `status` and `body` are not read),
//!   `status`, `body`, `headers`.
//! - `{"mode":"pause"}`: pauses every request on its headers, and the root
//!   context of its worker resumes it on its next tick (every millisecond):
//!   `set_effective_context` then `resume_http_request` for each request
//!   paused since the last tick. The cost Envoy pays to pause a request and
//!   resume it from another context, which every request held or waiting for
//!   a shared call pays, and nothing else.
//! - `{"mode":"lease_calls","cluster":C,"authority":A,"every":N}`: the
//!   `host_calls` mode's calls per request, and every `N` requests (50
//!   unless told: a 100-unit lease renewed at half) what a lease renewal
//!   adds to them: the request wakes its worker's root through a shared
//!   queue (once until the root runs), and the root sends one `POST
//!   /v1/check` to `C`, reads the answer's `:status` and body and writes a
//!   bucket's size to shared data by compare-and-swap. No request waits for
//!   it. The floor of a leased limit whose renewals come that often.
//! - With the cargo feature `footprint`, `{"mode":"repeat"|"spread"|"touch","n":N}`:
//!   the `host_calls` mode's calls and work of a known size (see
//!   [`footprint`]), for `make bench-footprint`.

#[cfg_attr(not(feature = "footprint"), allow(dead_code))]
mod footprint;

use proxy_wasm::hostcalls;
use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::{Action, BufferType, ContextType, LogLevel, MapType};
use serde::Deserialize;
use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

proxy_wasm::main! {{
    proxy_wasm::set_log_level(LogLevel::Warn);
    proxy_wasm::set_root_context(|_| -> Box<dyn RootContext> {
        Box::new(Root { mode: Rc::new(Mode::Noop) })
    });
}}

/// The plugin configuration.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct Config {
    #[serde(default)]
    mode: Option<String>,
    #[serde(default)]
    cluster: Option<String>,
    #[serde(default)]
    authority: Option<String>,
    #[serde(default)]
    leave_out: Vec<String>,
    #[serde(default)]
    every: Option<u32>,
    #[cfg(feature = "footprint")]
    #[serde(default)]
    n: Option<u32>,
}

/// The host calls of the `global_calls` mode, by the names `leave_out` uses.
const GLOBAL_CALLS: [&str; 8] = [
    "peer", "xff", "clock", "cache", "call", "status", "body", "headers",
];

/// The calls of the `global_calls` mode to make: bit `i` for
/// `GLOBAL_CALLS[i]`.
#[derive(Clone, Copy)]
struct Calls(u8);

impl Calls {
    fn without(names: &[String]) -> Result<Calls, String> {
        names.iter().try_fold(Calls(u8::MAX), |calls, name| {
            let bit = GLOBAL_CALLS
                .iter()
                .position(|c| c == name)
                .ok_or_else(|| format!("unknown call {name:?} in leave_out"))?;
            Ok(Calls(calls.0 & !(1 << bit)))
        })
    }

    fn make(self, name: &str) -> bool {
        GLOBAL_CALLS
            .iter()
            .position(|c| *c == name)
            .is_some_and(|bit| self.0 & (1 << bit) != 0)
    }
}

enum Mode {
    Noop,
    HostCalls,
    Deny,
    CallOut {
        cluster: String,
        authority: String,
    },
    GrpcCallOut {
        cluster: String,
    },
    GlobalCalls {
        cluster: String,
        authority: String,
        calls: Calls,
    },
    Pause,
    LeaseCalls {
        cluster: String,
        authority: String,
        every: u32,
    },
    #[cfg(feature = "footprint")]
    Footprint {
        work: Work,
        n: u32,
    },
}

/// The work of a `footprint` mode.
#[cfg(feature = "footprint")]
#[derive(Clone, Copy)]
enum Work {
    Repeat,
    Spread,
    Touch,
}

/// Requests per renewal of the `lease_calls` mode unless `every` says.
const LEASE_EVERY: u32 = 50;

/// How often the root context of the `pause` mode resumes what was paused.
const RESUME_TICK: Duration = Duration::from_millis(1);

thread_local! {
    /// The `lease_calls` mode's queue, registered by the worker's root.
    static QUEUE: std::cell::Cell<Option<u32>> = const { std::cell::Cell::new(None) };
    /// Requests seen by the `lease_calls` mode, and whether its root was
    /// woken since it last ran.
    static SEEN: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
    static WOKEN: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// The requests paused by the `pause` mode since the last tick (one
    /// worker, one VM, one list).
    static PAUSED: RefCell<Vec<u32>> = const { RefCell::new(Vec::new()) };
}

/// Resumes every request of `PAUSED`, each from its own context.
fn resume_paused() {
    let paused = PAUSED.with(|p| std::mem::take(&mut *p.borrow_mut()));
    for context in paused {
        // An error means the client left meanwhile.
        if hostcalls::set_effective_context(context).is_ok() {
            let _ = hostcalls::resume_http_request();
        }
    }
}

fn mode_of(bytes: &[u8]) -> Result<Mode, String> {
    let config: Config = if bytes.iter().all(u8::is_ascii_whitespace) {
        Config::default()
    } else {
        serde_json::from_slice(bytes).map_err(|e| e.to_string())?
    };
    match config.mode.as_deref().unwrap_or("noop") {
        "noop" => Ok(Mode::Noop),
        "host_calls" => Ok(Mode::HostCalls),
        "deny" => Ok(Mode::Deny),
        "call_out" => Ok(Mode::CallOut {
            cluster: config.cluster.ok_or("call_out needs \"cluster\"")?,
            authority: config.authority.ok_or("call_out needs \"authority\"")?,
        }),
        "grpc_call_out" => Ok(Mode::GrpcCallOut {
            cluster: config.cluster.ok_or("grpc_call_out needs \"cluster\"")?,
        }),
        "global_calls" => Ok(Mode::GlobalCalls {
            cluster: config.cluster.ok_or("global_calls needs \"cluster\"")?,
            authority: config.authority.ok_or("global_calls needs \"authority\"")?,
            calls: Calls::without(&config.leave_out)?,
        }),
        "pause" => Ok(Mode::Pause),
        "lease_calls" => Ok(Mode::LeaseCalls {
            cluster: config.cluster.ok_or("lease_calls needs \"cluster\"")?,
            authority: config.authority.ok_or("lease_calls needs \"authority\"")?,
            every: config.every.unwrap_or(LEASE_EVERY).max(1),
        }),
        #[cfg(feature = "footprint")]
        mode @ ("repeat" | "spread" | "touch") => Ok(Mode::Footprint {
            work: match mode {
                "repeat" => Work::Repeat,
                "spread" => Work::Spread,
                _ => Work::Touch,
            },
            n: config.n.unwrap_or(256),
        }),
        other => Err(format!("unknown mode {other:?}")),
    }
}

struct Root {
    mode: Rc<Mode>,
}

impl Context for Root {
    fn on_http_call_response(&mut self, _: u32, _: usize, body_size: usize, _: usize) {
        settle(body_size);
    }
}

/// What the answer to a renewal costs: its `:status` and body read, and
/// the lease's compare-and-swap in shared data.
fn settle(body_size: usize) {
    let _ = hostcalls::get_map_value(MapType::HttpCallResponseHeaders, ":status");
    let _ = hostcalls::get_buffer(BufferType::HttpCallResponseBody, 0, body_size);
    let (_, cas) = hostcalls::get_shared_data(LEASE_KEY).unwrap_or((None, None));
    let _ = hostcalls::set_shared_data(LEASE_KEY, Some(&BUCKET), cas.or(Some(u32::MAX)));
}

/// The shared-data key the `lease_calls` mode's answers write.
const LEASE_KEY: &str = "sluice-bench/lease";

impl RootContext for Root {
    fn on_tick(&mut self) {
        resume_paused();
    }

    fn on_queue_ready(&mut self, queue: u32) {
        while let Ok(Some(_)) = hostcalls::dequeue_shared_queue(queue) {}
        WOKEN.with(|w| w.set(false));
        if let Mode::LeaseCalls {
            cluster, authority, ..
        } = self.mode.as_ref()
        {
            let _ = call_out(cluster, authority);
        }
    }

    fn on_configure(&mut self, size: usize) -> bool {
        let bytes = hostcalls::get_buffer(BufferType::PluginConfiguration, 0, size)
            .ok()
            .flatten()
            .unwrap_or_default();
        match mode_of(&bytes) {
            Ok(mode) => {
                if let Mode::Pause = mode {
                    let _ = hostcalls::set_tick_period(RESUME_TICK);
                }
                if let Mode::LeaseCalls { .. } = mode {
                    let nanos = hostcalls::get_current_time()
                        .ok()
                        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                        .map_or(0, |d| d.as_nanos());
                    let name = format!("sluice-bench.wake.{nanos}");
                    QUEUE.with(|q| q.set(hostcalls::register_shared_queue(&name).ok()));
                }
                self.mode = Rc::new(mode);
                true
            }
            Err(e) => {
                log::error!("bench filter: {e}");
                false
            }
        }
    }

    fn create_http_context(&self, context_id: u32) -> Option<Box<dyn HttpContext>> {
        Some(Box::new(Http {
            mode: Rc::clone(&self.mode),
            context_id,
        }))
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}

struct Http {
    mode: Rc<Mode>,
    context_id: u32,
}

/// The host calls of the `host_calls` mode on a request's headers.
fn local_calls() {
    let _ = hostcalls::get_map_value(MapType::HttpRequestHeaders, "x-forwarded-for");
    let _ = hostcalls::get_property(vec!["source", "address"]);
    let (_, cas) = hostcalls::get_shared_data(KEY).unwrap_or((None, None));
    let _ = hostcalls::get_current_time();
    let _ = hostcalls::set_shared_data(KEY, Some(&BUCKET), cas.or(Some(u32::MAX)));
}

/// The shared-data key of the `host_calls` mode, and a value of the size of
/// a key-table bucket holding one GCRA key (tag, fingerprint, rest time,
/// length, state).
const KEY: &str = "sluice-bench/host-calls";
const BUCKET: [u8; 39] = [1; 39];

/// The body of every `call_out` check: one GCRA key that never runs out.
const CHECK: &[u8] = br#"{"domain":"bench","hits":1,"limits":[{"key":"bench/10.0.0.1","algorithm":"gcra","requests":1000,"window_ms":10}]}"#;

/// The message of every `grpc_call_out` call, a `RateLimitRequest` of domain
/// `bench` with one descriptor: `generic_key: per-ip`, `remote_address:
/// 10.0.0.1`.
const RLS_REQUEST: &[u8] = b"\x0a\x05bench\x12\x33\x0a\x15\x0a\x0bgeneric_key\x12\x06per-ip\x0a\x1a\x0a\x0eremote_address\x12\x0810.0.0.1";

/// Sends the `grpc_call_out` call; whether the request waits for its answer.
fn grpc_call_out(cluster: &str) -> Action {
    let timeout = Duration::from_millis(50);
    let sent = hostcalls::dispatch_grpc_call(
        cluster,
        "envoy.service.ratelimit.v3.RateLimitService",
        "ShouldRateLimit",
        vec![],
        Some(RLS_REQUEST),
        timeout,
    );
    match sent {
        Ok(_) => Action::Pause,
        Err(_) => Action::Continue,
    }
}

/// The shared-data key the `global_calls` mode reads (never written: the
/// over-limit cache of a key never denied).
const DENY_KEY: &str = "sluice-bench/deny-cache";

/// Sends the `call_out` check; whether the request waits for its answer.
fn call_out(cluster: &str, authority: &str) -> Action {
    let headers = vec![
        (":method", "POST"),
        (":path", "/v1/check"),
        (":authority", authority),
        ("content-type", "application/json"),
    ];
    let timeout = Duration::from_millis(50);
    match hostcalls::dispatch_http_call(cluster, headers, Some(CHECK), vec![], timeout) {
        Ok(_) => Action::Pause,
        Err(_) => Action::Continue,
    }
}

impl Context for Http {
    fn on_grpc_call_response(&mut self, _: u32, _: u32, _: usize) {
        let _ = hostcalls::resume_http_request();
    }

    fn on_http_call_response(&mut self, _: u32, _: usize, body_size: usize, _: usize) {
        if let Mode::GlobalCalls { calls, .. } = self.mode.as_ref() {
            if calls.make("status") {
                let _ = hostcalls::get_map_value(MapType::HttpCallResponseHeaders, ":status");
            }
            if calls.make("body") {
                let _ = hostcalls::get_buffer(BufferType::HttpCallResponseBody, 0, body_size);
            }
        }
        let _ = hostcalls::resume_http_request();
    }
}

impl HttpContext for Http {
    fn on_http_request_headers(&mut self, _: usize, _: bool) -> Action {
        match self.mode.as_ref() {
            Mode::Noop => Action::Continue,
            Mode::HostCalls => {
                local_calls();
                Action::Continue
            }
            #[cfg(feature = "footprint")]
            Mode::Footprint { work, n } => {
                local_calls();
                let seed = u64::from(self.context_id);
                match work {
                    Work::Repeat => drop(std::hint::black_box(footprint::repeat(*n, seed))),
                    Work::Spread => drop(std::hint::black_box(footprint::spread(*n, seed))),
                    Work::Touch => footprint::touch(*n, self.context_id as u8),
                }
                Action::Continue
            }
            Mode::LeaseCalls { every, .. } => {
                local_calls();
                let seen = SEEN.with(|s| {
                    s.set(s.get().wrapping_add(1));
                    s.get()
                });
                // Once until the root runs, as Sluice wakes it.
                if seen % every == 0 && !WOKEN.with(|w| w.replace(true)) {
                    if let Some(queue) = QUEUE.with(|q| q.get()) {
                        let _ = hostcalls::enqueue_shared_queue(queue, Some(b"w"));
                    }
                }
                Action::Continue
            }
            Mode::Deny => {
                let _ = hostcalls::get_current_time();
                let _ = hostcalls::get_map_value(MapType::HttpRequestHeaders, "x-forwarded-for");
                let _ = hostcalls::get_shared_data(KEY);
                let headers = vec![
                    ("content-type", "text/plain"),
                    ("retry-after", "1"),
                    ("ratelimit-policy", "\"per-ip\";q=100;w=1"),
                    ("ratelimit", "\"per-ip\";r=0;t=1"),
                    ("x-sluice-rule", "per-ip"),
                ];
                let _ = hostcalls::send_http_response(429, headers, Some(b"rate limited\n"));
                Action::Pause
            }
            Mode::CallOut { cluster, authority } => call_out(cluster, authority),
            Mode::GrpcCallOut { cluster } => grpc_call_out(cluster),
            Mode::GlobalCalls {
                cluster,
                authority,
                calls,
            } => {
                if calls.make("peer") {
                    let _ = hostcalls::get_property(vec!["source", "address"]);
                }
                if calls.make("xff") {
                    let _ =
                        hostcalls::get_map_value(MapType::HttpRequestHeaders, "x-forwarded-for");
                }
                if calls.make("clock") {
                    let _ = hostcalls::get_current_time();
                }
                if calls.make("cache") {
                    let _ = hostcalls::get_shared_data(DENY_KEY);
                }
                if !calls.make("call") {
                    return Action::Continue;
                }
                call_out(cluster, authority)
            }
            Mode::Pause => {
                PAUSED.with(|p| p.borrow_mut().push(self.context_id));
                Action::Pause
            }
        }
    }

    fn on_http_response_headers(&mut self, _: usize, _: bool) -> Action {
        let headers = match self.mode.as_ref() {
            Mode::HostCalls | Mode::LeaseCalls { .. } => true,
            #[cfg(feature = "footprint")]
            Mode::Footprint { .. } => true,
            Mode::GlobalCalls { calls, .. } => calls.make("headers"),
            _ => false,
        };
        if headers {
            let headers = [
                ("ratelimit-policy", "\"per-ip\";q=1000;w=1"),
                ("ratelimit", "\"per-ip\";r=999;t=1"),
            ];
            for (name, value) in headers {
                let _ = hostcalls::add_map_value(MapType::HttpResponseHeaders, name, value);
            }
        }
        Action::Continue
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_from_configuration() {
        assert!(matches!(mode_of(b"").unwrap(), Mode::Noop));
        assert!(matches!(mode_of(b"{}").unwrap(), Mode::Noop));
        assert!(matches!(
            mode_of(br#"{"mode":"host_calls"}"#).unwrap(),
            Mode::HostCalls
        ));
        assert!(matches!(
            mode_of(br#"{"mode":"deny"}"#).unwrap(),
            Mode::Deny
        ));
        match mode_of(br#"{"mode":"call_out","cluster":"c","authority":"a"}"#).unwrap() {
            Mode::CallOut { cluster, authority } => {
                assert_eq!((cluster, authority), ("c".into(), "a".into()))
            }
            _ => panic!("not call_out"),
        }
        assert!(matches!(
            mode_of(br#"{"mode":"global_calls","cluster":"c","authority":"a"}"#).unwrap(),
            Mode::GlobalCalls { .. }
        ));
        assert!(mode_of(br#"{"mode":"global_calls"}"#).is_err());
        match mode_of(
            br#"{"mode":"global_calls","cluster":"c","authority":"a","leave_out":["peer","call"]}"#,
        )
        .unwrap()
        {
            Mode::GlobalCalls { calls, .. } => {
                assert!(!calls.make("peer") && !calls.make("call"));
                assert!(GLOBAL_CALLS[1..4].iter().all(|c| calls.make(c)));
            }
            _ => panic!("not global_calls"),
        }
        assert!(mode_of(
            br#"{"mode":"global_calls","cluster":"c","authority":"a","leave_out":["x"]}"#
        )
        .is_err());
        assert!(matches!(
            mode_of(br#"{"mode":"pause"}"#).unwrap(),
            Mode::Pause
        ));
        match mode_of(br#"{"mode":"lease_calls","cluster":"c","authority":"a"}"#).unwrap() {
            Mode::LeaseCalls { every, .. } => assert_eq!(every, LEASE_EVERY),
            _ => panic!("not lease_calls"),
        }
        assert!(matches!(
            mode_of(br#"{"mode":"lease_calls","cluster":"c","authority":"a","every":0}"#).unwrap(),
            Mode::LeaseCalls { every: 1, .. }
        ));
        assert!(mode_of(br#"{"mode":"lease_calls","cluster":"c"}"#).is_err());
        assert!(mode_of(br#"{"mode":"call_out"}"#).is_err());
        assert!(mode_of(br#"{"mode":"other"}"#).is_err());
        assert!(mode_of(br#"{"mdoe":"noop"}"#).is_err());
    }
}
