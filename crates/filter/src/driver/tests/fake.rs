//! A fake proxy and a fake limiter for the driver's tests: the proxy
//! records what the driver does and serves a manual clock; the limiter
//! counts what each key has consumed and which permits each holder holds,
//! exactly, so that a test can tell what was lost or counted twice.

use crate::config::Rule;
use crate::driver::{Buffer, Host, LocalReply, Map, Outgoing, WorkerMetrics};
use crate::local::fake::MemoryStore;
use crate::local::{SetError, SharedStore};
use crate::metrics::fake::{Defined, RecordingSink};
use crate::metrics::{GlobalEvent, MetricSink, RuleEvent};
use sluice_core::{Nanos, SECOND};
use sluice_wire::{CheckRequest, CheckResponse, LimitResult};
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

/// The clock the tests start at.
pub(super) const START: Nanos = 1_700_000_000 * SECOND;

/// What the driver did through the proxy, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Effect {
    Resume(u32),
    /// A local reply: its status (8 for a gRPC denial), headers and body.
    Reply {
        context: u32,
        status: u32,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    },
    Header {
        context: u32,
        map: Map,
        name: String,
        value: String,
    },
    State {
        context: u32,
        name: String,
        value: String,
    },
}

/// A call made and not yet answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Call {
    pub(super) token: u32,
    /// The context that made it (its answer comes there).
    pub(super) from: u32,
    pub(super) path: String,
    pub(super) body: Vec<u8>,
}

/// What a request shows the proxy.
#[derive(Debug, Default, Clone)]
pub(super) struct Stream {
    pub(super) request_headers: Vec<(String, String)>,
    pub(super) request_body: Vec<u8>,
    pub(super) response_headers: Vec<(String, String)>,
    pub(super) response_body: Vec<u8>,
    /// Envoy's `response.code_details` (`via_upstream` for the upstream's
    /// own response), when set.
    pub(super) code_details: Option<String>,
    /// Dynamic metadata other filters wrote: namespace, key, value.
    pub(super) metadata: Vec<(String, String, Vec<u8>)>,
}

/// Every configuration's metrics, recorded together, and the permits
/// gauges per rule.
#[derive(Debug, Default)]
pub(super) struct Recorded {
    pub(super) sink: RecordingSink,
    pub(super) permits: RefCell<HashMap<usize, i64>>,
}

/// The metrics of one configuration: into the shared record, each count
/// checked against the counters the configuration's rules have.
#[derive(Debug, Clone)]
pub(super) struct TestMetrics(pub(super) Rc<Recorded>, Rc<Defined>);

impl MetricSink for TestMetrics {
    fn rule(&self, rule: usize, event: RuleEvent) {
        self.1.check(rule, event);
        self.0.sink.rule(rule, event);
    }
    fn rule_n(&self, rule: usize, event: RuleEvent, n: u64) {
        self.1.check(rule, event);
        self.0.sink.rule_n(rule, event, n);
    }
    fn global(&self, event: GlobalEvent) {
        self.0.sink.global(event);
    }
    fn delayed(&self, rule: usize, delay: Nanos) {
        self.1.check(rule, RuleEvent::Delayed);
        self.1.check(rule, RuleEvent::DelayedMs);
        self.0.sink.delayed(rule, delay);
    }
}

impl WorkerMetrics for TestMetrics {
    fn permits(&self, rule: usize, weight: u64, taken: bool) {
        let weight = i64::try_from(weight).unwrap_or(i64::MAX);
        *self.0.permits.borrow_mut().entry(rule).or_default() +=
            if taken { weight } else { -weight };
    }
    fn flush(&self) {}
}

/// The fake proxy.
pub(super) struct FakeHost {
    /// Shared data; workers of one Envoy share it.
    pub(super) store: Rc<MemoryStore>,
    pub(super) now: Nanos,
    pub(super) focused: u32,
    pub(super) streams: HashMap<u32, Stream>,
    /// The answer being reported: status, content type, body.
    pub(super) answer: (String, String, Vec<u8>),
    pub(super) calls: Vec<Call>,
    next_token: u32,
    /// Calls cannot be made (the cluster is unknown, say).
    pub(super) unreachable: bool,
    pub(super) effects: Vec<Effect>,
    pub(super) recorded: Rc<Recorded>,
    /// Wake-ups waiting in the shared queue.
    pub(super) queued: usize,
    /// The context that registered the shared queue last: its wake-ups go
    /// there.
    pub(super) listener: u32,
    /// Calls the driver tried to make while the limiter was unreachable.
    pub(super) refused: Vec<Call>,
    pub(super) tick_period: Nanos,
    /// Every host call made, by name, in order.
    pub(super) made: RefCell<Vec<&'static str>>,
    /// The root contexts: permits and charges are given from them only (a
    /// request's calls end with it).
    pub(super) roots: Vec<u32>,
}

impl Default for FakeHost {
    fn default() -> Self {
        FakeHost {
            store: Rc::default(),
            now: START,
            focused: 0,
            streams: HashMap::new(),
            answer: Default::default(),
            calls: Vec::new(),
            next_token: 100,
            unreachable: false,
            effects: Vec::new(),
            recorded: Rc::default(),
            queued: 0,
            listener: 0,
            refused: Vec::new(),
            tick_period: 0,
            made: RefCell::default(),
            roots: Vec::new(),
        }
    }
}

impl FakeHost {
    fn note(&self, call: &'static str) {
        self.made.borrow_mut().push(call);
    }

    fn stream(&self) -> Option<&Stream> {
        self.streams.get(&self.focused)
    }
}

impl SharedStore for FakeHost {
    fn get(&self, key: &str) -> (Option<Vec<u8>>, Option<u32>) {
        self.note("get");
        self.store.get(key)
    }
    fn set(&self, key: &str, value: &[u8], cas: Option<u32>) -> Result<(), SetError> {
        self.note("set");
        self.store.set(key, value, cas)
    }
    fn clock(&self) -> Option<Nanos> {
        self.note("clock");
        Some(self.now)
    }
}

fn find(headers: &[(String, String)], name: &str) -> Option<String> {
    headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.clone())
}

impl Host for FakeHost {
    type Metrics = TestMetrics;

    fn now(&self) -> Nanos {
        self.note("now");
        self.now
    }
    fn define_metrics(&mut self, rules: &[Rule]) -> TestMetrics {
        self.note("define_metrics");
        TestMetrics(
            Rc::clone(&self.recorded),
            Rc::new(Defined::for_rules(rules)),
        )
    }
    fn config_error(&mut self) {
        self.note("config_error");
        self.recorded.sink.global(GlobalEvent::ConfigErrors);
    }
    fn focus(&mut self, context: u32) -> bool {
        self.note("focus");
        // Envoy keeps a context until the end of the loop iteration that
        // ended it: the driver must not count on a refusal.
        self.focused = context;
        true
    }
    fn header(&self, map: Map, name: &str) -> Option<String> {
        self.note("header");
        match map {
            Map::RequestHeaders => find(&self.stream()?.request_headers, name),
            Map::ResponseHeaders => find(&self.stream()?.response_headers, name),
            Map::ResponseTrailers => None,
            Map::CallAnswerHeaders => match name {
                ":status" => Some(self.answer.0.clone()),
                "content-type" => Some(self.answer.1.clone()),
                _ => None,
            },
        }
    }
    fn request_headers(&self) -> Vec<(String, String)> {
        self.note("request_headers");
        self.stream()
            .map(|s| s.request_headers.clone())
            .unwrap_or_default()
    }
    fn property(&self, path: &[&str]) -> Option<Vec<u8>> {
        self.note("property");
        match path {
            ["source", "address"] => Some(b"10.0.0.1:5555".to_vec()),
            ["response", "code_details"] => {
                self.stream()?.code_details.clone().map(String::into_bytes)
            }
            ["metadata", "filter_metadata", namespace, key] => self
                .stream()?
                .metadata
                .iter()
                .find(|(n, k, _)| n == namespace && k == key)
                .map(|(_, _, v)| v.clone()),
            _ => None,
        }
    }
    fn buffer(&self, buffer: Buffer, size: usize) -> Option<Vec<u8>> {
        self.note("buffer");
        let bytes = match buffer {
            Buffer::RequestBody => self.stream()?.request_body.clone(),
            Buffer::ResponseBody => self.stream()?.response_body.clone(),
            Buffer::CallAnswerBody | Buffer::GrpcAnswer => self.answer.2.clone(),
        };
        Some(bytes.into_iter().take(size).collect())
    }
    fn resume(&mut self) {
        self.note("resume");
        self.effects.push(Effect::Resume(self.focused));
    }
    fn reply(&mut self, reply: LocalReply<'_>) -> bool {
        self.note("reply");
        let (status, headers, body) = match reply {
            LocalReply::Http {
                status,
                headers,
                body,
            } => (status, headers, body.to_vec()),
            LocalReply::Grpc { message, metadata } => {
                let headers = metadata
                    .into_iter()
                    .map(|(k, v)| (k, std::str::from_utf8(v).unwrap_or("")))
                    .collect();
                (8, headers, message.as_bytes().to_vec())
            }
        };
        let headers = headers
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let context = self.focused;
        self.effects.push(Effect::Reply {
            context,
            status,
            headers,
            body,
        });
        true
    }
    fn add_header(&mut self, map: Map, name: &str, value: &str, _replace: bool) {
        self.note("add_header");
        self.effects.push(Effect::Header {
            context: self.focused,
            map,
            name: name.to_string(),
            value: value.to_string(),
        });
    }
    fn set_state(&mut self, name: &str, value: &str) {
        self.note("set_state");
        self.effects.push(Effect::State {
            context: self.focused,
            name: name.to_string(),
            value: value.to_string(),
        });
    }
    fn dispatch(&mut self, call: Outgoing<'_>) -> Option<u32> {
        self.note("dispatch");
        let (path, body) = match call {
            Outgoing::Http { path, body, .. } => (path.to_string(), body.to_vec()),
            Outgoing::Grpc { method, body, .. } => (method.to_string(), body.to_vec()),
        };
        if matches!(path.as_str(), "/v1/permits" | "/v1/charge") {
            assert!(
                self.roots.contains(&self.focused),
                "{path} made from request {}",
                self.focused
            );
        }
        let call = Call {
            token: self.next_token + 1,
            from: self.focused,
            path,
            body,
        };
        if self.unreachable {
            self.refused.push(call);
            return None;
        }
        self.next_token += 1;
        self.calls.push(call);
        Some(self.next_token)
    }
    fn set_tick_period(&mut self, period: Nanos) {
        self.note("set_tick_period");
        self.tick_period = period;
    }
    fn register_queue(&mut self, _name: &str) -> Option<u32> {
        self.note("register_queue");
        self.listener = self.focused;
        Some(1)
    }
    fn enqueue(&mut self, _queue: u32) -> bool {
        self.note("enqueue");
        self.queued += 1;
        true
    }
    fn dequeue(&mut self, _queue: u32) -> bool {
        self.note("dequeue");
        let some = self.queued > 0;
        self.queued = self.queued.saturating_sub(1);
        some
    }
}

/// A limiter that never forgets: each key's units consumed (every window
/// is long enough for a test), each holder's permits, each charge.
#[derive(Debug, Default)]
pub(super) struct FakeLimiter {
    /// Units consumed per key.
    pub(super) used: HashMap<String, u64>,
    /// Permits held per (key, holder).
    pub(super) permits: HashMap<(String, u64), u64>,
    /// Checks decided, and how many were admitted.
    pub(super) checks: usize,
    pub(super) admitted: usize,
    /// Charges and refunds applied, in units.
    pub(super) charged: u64,
    pub(super) refunded: u64,
    /// Keys a penalty box holds (blocks never end here).
    pub(super) blocked: std::collections::HashSet<String>,
}

impl FakeLimiter {
    /// The answer to `call`: status and body.
    pub(super) fn serve(&mut self, call: &Call) -> (u16, Vec<u8>) {
        match call.path.as_str() {
            "/v1/check" => self.check(&call.body),
            "/v1/permits" => self.permits(&call.body),
            "/v1/charge" => self.charge(&call.body),
            _ => (404, Vec::new()),
        }
    }

    /// Permits held on `key` by every holder.
    pub(super) fn permits_on(&self, key: &str) -> u64 {
        self.permits
            .iter()
            .filter(|((k, _), _)| k == key)
            .map(|(_, n)| n)
            .sum()
    }

    /// Permits held on every key.
    pub(super) fn permits_held(&self) -> u64 {
        self.permits.values().sum()
    }

    fn check(&mut self, body: &[u8]) -> (u16, Vec<u8>) {
        let Ok(check) = serde_json::from_slice::<CheckRequest>(body) else {
            return (400, Vec::new());
        };
        // The limiter refuses a check naming a key twice (one state each).
        let mut seen = std::collections::HashSet::new();
        for spec in &check.limits {
            assert!(
                seen.insert(spec.key.to_string()),
                "a check names {} twice",
                spec.key
            );
        }
        let requests = check.batch.unwrap_or(1);
        let mut admitted = 0;
        let mut last = Vec::new();
        for _ in 0..requests {
            let (allowed, results) = self.decide(&check);
            last = results;
            if !allowed {
                break;
            }
            admitted += 1;
        }
        self.checks += 1;
        self.admitted += admitted as usize;
        let answer = CheckResponse {
            allowed: admitted == requests,
            limits: last,
            admitted: check.batch.map(|_| admitted),
            delays_ms: Vec::new(),
        };
        (200, serde_json::to_vec(&answer).unwrap_or_default())
    }

    /// One request of `check`, all or nothing.
    fn decide(&mut self, check: &CheckRequest) -> (bool, Vec<LimitResult>) {
        let holder = check.holder.unwrap_or(0);
        // Units of a lease given back count no more.
        for spec in &check.limits {
            if let Some(returned) = spec.returned {
                let used = self.used.entry(spec.key.to_string()).or_default();
                *used = used.saturating_sub(returned);
            }
        }
        let mut results = Vec::new();
        for spec in &check.limits {
            let hits = spec.hits.unwrap_or(check.hits);
            let cap = spec.burst.unwrap_or(spec.requests);
            let used = if spec.algorithm == sluice_wire::CONCURRENCY {
                self.permits_on(&spec.key)
            } else {
                self.used.get(spec.key.as_ref()).copied().unwrap_or(0)
            };
            // A block holds the key; a refusal of weight 1 or more over
            // a limit with a block starts one (a read of weight 0 never).
            let held = spec.block_ms.is_some() && self.blocked.contains(spec.key.as_ref());
            let allowed = !held && used.saturating_add(hits) <= cap;
            let starts = !allowed && hits > 0 && spec.block_ms.is_some();
            if starts {
                self.blocked.insert(spec.key.to_string());
            }
            results.push(LimitResult {
                allowed,
                limit: spec.requests,
                remaining: match held {
                    true => 0,
                    false => cap.saturating_sub(used.saturating_add(hits)),
                },
                reset_ms: 60_000,
                // A penalty box's refusal waits the block out.
                retry_after_ms: match (allowed, spec.block_ms) {
                    (true, _) => 0,
                    (false, block) => block.unwrap_or(1000),
                },
                delay_ms: 0,
                leased: 0,
                blocked: held || starts,
            });
        }
        let allowed = results.iter().all(|r| r.allowed);
        if allowed {
            for (spec, result) in check.limits.iter().zip(results.iter_mut()) {
                let hits = spec.hits.unwrap_or(check.hits);
                if spec.algorithm == sluice_wire::CONCURRENCY {
                    *self
                        .permits
                        .entry((spec.key.to_string(), holder))
                        .or_default() += hits;
                    continue;
                }
                let used = self.used.entry(spec.key.to_string()).or_default();
                *used += hits;
                // A lease: the most that fits, debited at once.
                let cap = spec.burst.unwrap_or(spec.requests);
                let granted = spec.lease.unwrap_or(0).min(cap.saturating_sub(*used));
                *used += granted;
                result.leased = granted;
                result.remaining = cap.saturating_sub(*used);
            }
        }
        (allowed, results)
    }

    fn permits(&mut self, body: &[u8]) -> (u16, Vec<u8>) {
        let Ok(request) = serde_json::from_slice::<sluice_wire::PermitsRequest>(body) else {
            return (400, Vec::new());
        };
        for release in &request.release {
            let held = self
                .permits
                .entry((release.key.to_string(), request.holder))
                .or_default();
            // More than held is a client's error the limiter refuses.
            assert!(
                *held >= release.hits,
                "released more than held: {release:?}"
            );
            *held -= release.hits;
        }
        (200, br#"{"released":0,"renewed":0}"#.to_vec())
    }

    fn charge(&mut self, body: &[u8]) -> (u16, Vec<u8>) {
        let Ok(request) = serde_json::from_slice::<serde_json::Value>(body) else {
            return (400, Vec::new());
        };
        let limits = request["limits"].as_array().cloned().unwrap_or_default();
        let mut seen = std::collections::HashSet::new();
        for limit in &limits {
            let key = limit["key"].as_str().unwrap_or("").to_string();
            assert!(seen.insert(key.clone()), "a charge names {key} twice");
            let used = self.used.entry(key).or_default();
            if let Some(units) = limit["charge"].as_u64() {
                *used += units;
                self.charged += units;
            }
            if let Some(units) = limit["refund"].as_u64() {
                *used = used.saturating_sub(units);
                self.refunded += units;
            }
        }
        (200, b"{}".to_vec())
    }
}
