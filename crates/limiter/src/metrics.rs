//! Prometheus counters kept in atomics and rendered as text by hand.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

/// Upper bounds of the check-duration histogram, in seconds.
const BUCKETS: [f64; 12] = [
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
];

/// A histogram of durations over [`BUCKETS`], in atomics.
#[derive(Debug)]
pub struct Histogram {
    counts: [AtomicU64; BUCKETS.len()],
    count: AtomicU64,
    sum_ns: AtomicU64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: std::array::from_fn(|_| AtomicU64::new(0)),
            count: AtomicU64::new(0),
            sum_ns: AtomicU64::new(0),
        }
    }
}

impl Histogram {
    /// Records one duration.
    pub fn observe(&self, d: Duration) {
        let secs = d.as_secs_f64();
        if let Some(i) = BUCKETS.iter().position(|b| secs <= *b) {
            if let Some(c) = self.counts.get(i) {
                c.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.sum_ns.fetch_add(ns, Ordering::Relaxed);
    }

    /// How many durations were recorded.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// Writes the histogram `name` with its help and type lines.
    pub fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        let mut cumulative = 0u64;
        for (bound, count) in BUCKETS.iter().zip(&self.counts) {
            cumulative = cumulative.saturating_add(count.load(Ordering::Relaxed));
            let _ = writeln!(out, "{name}_bucket{{le=\"{bound}\"}} {cumulative}");
        }
        let count = self.count();
        let sum = Duration::from_nanos(self.sum_ns.load(Ordering::Relaxed)).as_secs_f64();
        let _ = writeln!(
            out,
            "{name}_bucket{{le=\"+Inf\"}} {count}\n{name}_sum {sum}\n{name}_count {count}"
        );
    }
}

/// What `/metrics` says about the store and the build besides the counters.
#[derive(Debug, Clone, Copy)]
pub struct StoreGauges<'a> {
    /// `memory`, `redis`, `redis_cluster` or `redis_sentinel`.
    pub kind: &'a str,
    /// Last known state of the store.
    pub up: bool,
    /// Memory store: keys held and `--max-keys`.
    pub keys: Option<(usize, usize)>,
    /// Redis: round-trip times of the decision calls.
    pub round_trips: Option<&'a Histogram>,
}

/// Writes the build information and the store's gauges.
pub fn render_store(out: &mut String, g: &StoreGauges<'_>) {
    let _ = writeln!(
        out,
        "# HELP sluice_limiter_build_info The limiter's version and store kind (always 1).\n# TYPE sluice_limiter_build_info gauge\nsluice_limiter_build_info{{version=\"{}\",store=\"{}\"}} 1",
        env!("CARGO_PKG_VERSION"),
        g.kind
    );
    let _ = writeln!(
        out,
        "# HELP sluice_limiter_store_up Whether the store answered its last call or probe (1) or not (0).\n# TYPE sluice_limiter_store_up gauge\nsluice_limiter_store_up {}",
        u8::from(g.up)
    );
    if let Some((held, max)) = g.keys {
        let _ = writeln!(
            out,
            "# HELP sluice_limiter_store_keys Keys the memory store holds.\n# TYPE sluice_limiter_store_keys gauge\nsluice_limiter_store_keys {held}\n# HELP sluice_limiter_store_max_keys Most keys the memory store holds (--max-keys).\n# TYPE sluice_limiter_store_max_keys gauge\nsluice_limiter_store_max_keys {max}"
        );
    }
    if let Some(h) = g.round_trips {
        h.render(
            out,
            "sluice_limiter_redis_round_trip_seconds",
            "Time from sending a decision call to Redis to its answer.",
        );
    }
}

/// Distinct domains labelled separately; further ones count as `_other`, so a
/// client sending random domains cannot grow the metrics without bound.
const MAX_DOMAINS: usize = 256;

#[derive(Debug, Default)]
struct DomainCounters {
    allowed: AtomicU64,
    denied: AtomicU64,
}

/// Distinct label sets of the RLS counters; further ones count under
/// `_other`, so `detailed_metric` descriptors cannot grow the metrics
/// without bound.
const MAX_SERIES: usize = 10_000;

/// Counters keyed by a set of label values (joined by NUL), bounded by
/// [`MAX_SERIES`].
#[derive(Debug, Default)]
struct Labelled {
    series: RwLock<HashMap<String, Arc<AtomicU64>>>,
}

impl Labelled {
    fn add(&self, labels: &[&str]) {
        let mut key = labels.join("\0");
        {
            let map = self.series.read().unwrap_or_else(|e| e.into_inner());
            if let Some(c) = map.get(&key) {
                c.fetch_add(1, Ordering::Relaxed);
                return;
            }
        }
        let mut map = self.series.write().unwrap_or_else(|e| e.into_inner());
        if map.len() >= MAX_SERIES && !map.contains_key(&key) {
            // Keep the last label (the result) so totals by result still add up.
            let mut other: Vec<&str> = vec!["_other"; labels.len().saturating_sub(1)];
            other.extend(labels.last());
            key = other.join("\0");
        }
        map.entry(key).or_default().fetch_add(1, Ordering::Relaxed);
    }

    fn get(&self, labels: &[&str]) -> u64 {
        let map = self.series.read().unwrap_or_else(|e| e.into_inner());
        map.get(&labels.join("\0"))
            .map_or(0, |c| c.load(Ordering::Relaxed))
    }

    fn render(&self, out: &mut String, name: &str, label_names: &[&str]) {
        let map = self.series.read().unwrap_or_else(|e| e.into_inner());
        let mut rows: Vec<(&String, u64)> = map
            .iter()
            .map(|(k, c)| (k, c.load(Ordering::Relaxed)))
            .collect();
        rows.sort();
        for (labels, v) in rows {
            let body: Vec<String> = label_names
                .iter()
                .zip(labels.split('\0'))
                .map(|(n, v)| format!("{n}=\"{}\"", escape_label(v)))
                .collect();
            let _ = writeln!(out, "{name}{{{}}} {v}", body.join(","));
        }
    }
}

/// A Prometheus label value: backslash, quote and newline escaped.
fn escape_label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The service's metrics.
#[derive(Debug)]
pub struct Metrics {
    rls_calls: Labelled,
    rls_descriptors: Labelled,
    rls_reloads: Labelled,
    checks: AtomicU64,
    store_errors: AtomicU64,
    store_error_reasons: Labelled,
    capacity_denials: AtomicU64,
    delayed: AtomicU64,
    delay_sum_ns: AtomicU64,
    batches: AtomicU64,
    batched: AtomicU64,
    batched_admitted: AtomicU64,
    leased_units: AtomicU64,
    returned_units: AtomicU64,
    domains: RwLock<HashMap<String, Arc<DomainCounters>>>,
    other: Arc<DomainCounters>,
    durations: Histogram,
    connections: [ConnectionCounters; 2],
}

/// A listener of the limiter, as its connection metrics label it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listener {
    /// `--listen`: the HTTP API.
    Http,
    /// `--grpc-listen`: the rate limit service.
    Grpc,
}

impl Listener {
    /// The `listener` label's value.
    pub fn label(self) -> &'static str {
        match self {
            Listener::Http => "http",
            Listener::Grpc => "grpc",
        }
    }
}

/// One listener's connection counts.
#[derive(Debug, Default)]
struct ConnectionCounters {
    opened: AtomicU64,
    closed: AtomicU64,
    refused: AtomicU64,
    idle_closed: AtomicU64,
    request_timeouts: AtomicU64,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            rls_calls: Labelled::default(),
            rls_descriptors: Labelled::default(),
            rls_reloads: Labelled::default(),
            checks: AtomicU64::new(0),
            store_errors: AtomicU64::new(0),
            store_error_reasons: Labelled::default(),
            capacity_denials: AtomicU64::new(0),
            delayed: AtomicU64::new(0),
            delay_sum_ns: AtomicU64::new(0),
            batches: AtomicU64::new(0),
            batched: AtomicU64::new(0),
            batched_admitted: AtomicU64::new(0),
            leased_units: AtomicU64::new(0),
            returned_units: AtomicU64::new(0),
            domains: RwLock::new(HashMap::new()),
            other: Arc::new(DomainCounters::default()),
            durations: Histogram::default(),
            connections: Default::default(),
        }
    }
}

impl Metrics {
    /// Counts one `/v1/check` call (valid or not).
    pub fn inc_checks(&self) {
        self.checks.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one failed store operation.
    pub fn inc_store_errors(&self) {
        self.store_errors.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one failed store operation and its reason
    /// ([`StoreError::reason`](crate::store::StoreError::reason)).
    pub fn record_store_error(&self, reason: &str) {
        self.inc_store_errors();
        self.store_error_reasons.add(&[reason]);
    }

    /// Counts checks denied because the memory store was full.
    pub fn inc_capacity_denials(&self) {
        self.capacity_denials.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one decided check carrying `batch` (coalesced requests):
    /// `requests` requests, of which `admitted` were admitted.
    pub fn record_batch(&self, requests: u32, admitted: u32) {
        self.batches.fetch_add(1, Ordering::Relaxed);
        self.batched
            .fetch_add(u64::from(requests), Ordering::Relaxed);
        self.batched_admitted
            .fetch_add(u64::from(admitted), Ordering::Relaxed);
    }

    /// Counts the units of one decided check's leases: `leased` granted,
    /// `returned` given back (as sent).
    pub fn record_leases(&self, leased: u64, returned: u64) {
        if leased > 0 {
            self.leased_units.fetch_add(leased, Ordering::Relaxed);
        }
        if returned > 0 {
            self.returned_units.fetch_add(returned, Ordering::Relaxed);
        }
    }

    /// Counts one request admitted in delay mode, to be held for `delay`
    /// (more than zero) before it conforms.
    pub fn record_delay(&self, delay: u64) {
        self.delayed.fetch_add(1, Ordering::Relaxed);
        self.delay_sum_ns.fetch_add(delay, Ordering::Relaxed);
    }

    /// Counts one decided check for `domain`.
    pub fn record_decision(&self, domain: &str, allowed: bool) {
        let bump = |c: &DomainCounters| {
            let n = if allowed { &c.allowed } else { &c.denied };
            n.fetch_add(1, Ordering::Relaxed);
        };
        {
            // The common case: a known domain, counted under the read lock.
            let map = self.domains.read().unwrap_or_else(|e| e.into_inner());
            if let Some(c) = map.get(domain) {
                bump(c);
                return;
            }
        }
        bump(&self.domain_counters(domain));
    }

    /// Records how long one check took.
    pub fn observe_duration(&self, d: Duration) {
        self.durations.observe(d);
    }

    /// Counts one RLS call for `domain` (`_unknown` when not configured) by
    /// its result: `ok`, `over_limit`, `error` or `invalid`.
    pub fn record_rls_call(&self, domain: &str, result: &str) {
        self.rls_calls.add(&[domain, result]);
    }

    /// Counts one descriptor of an RLS call by `domain`, `descriptor` (the
    /// configuration's path, or the request's values with
    /// `detailed_metric`) and `result`: `ok`, `over_limit`,
    /// `shadow_over_limit`, `unlimited`, `replaced` or `no_match`.
    pub fn record_rls_descriptor(&self, domain: &str, descriptor: &str, result: &str) {
        self.rls_descriptors.add(&[domain, descriptor, result]);
    }

    /// Counts one load of the descriptor configuration: `ok` or `error`
    /// (refused; the previous configuration stays in force).
    pub fn record_rls_reload(&self, ok: bool) {
        self.rls_reloads.add(&[if ok { "ok" } else { "error" }]);
    }

    /// The value of an RLS descriptor counter (tests).
    pub fn rls_descriptor_count(&self, domain: &str, descriptor: &str, result: &str) -> u64 {
        self.rls_descriptors.get(&[domain, descriptor, result])
    }

    /// The value of an RLS config load counter, `ok` or `error` (tests).
    pub fn rls_reload_count(&self, ok: bool) -> u64 {
        self.rls_reloads.get(&[if ok { "ok" } else { "error" }])
    }

    fn conns(&self, listener: Listener) -> &ConnectionCounters {
        let [http, grpc] = &self.connections;
        match listener {
            Listener::Http => http,
            Listener::Grpc => grpc,
        }
    }

    /// Counts a connection accepted on `listener`.
    pub fn connection_opened(&self, listener: Listener) {
        self.conns(listener).opened.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a connection of `listener` closed (for any reason).
    pub fn connection_closed(&self, listener: Listener) {
        self.conns(listener).closed.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a connection closed on arrival: `listener` was at its cap.
    pub fn connection_refused(&self, listener: Listener) {
        self.conns(listener).refused.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a connection closed for being idle past its timeout.
    pub fn connection_idle_closed(&self, listener: Listener) {
        self.conns(listener)
            .idle_closed
            .fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a request not received within the request timeout.
    pub fn request_timed_out(&self, listener: Listener) {
        self.conns(listener)
            .request_timeouts
            .fetch_add(1, Ordering::Relaxed);
    }

    /// Connections open now on `listener`.
    pub fn open_connections(&self, listener: Listener) -> u64 {
        let c = self.conns(listener);
        let opened = c.opened.load(Ordering::Relaxed);
        opened.saturating_sub(c.closed.load(Ordering::Relaxed))
    }

    fn render_connections(&self, out: &mut String) {
        let listeners = [Listener::Http, Listener::Grpc];
        let _ = writeln!(
            out,
            "# HELP sluice_limiter_connections Connections open now, by listener.\n# TYPE sluice_limiter_connections gauge"
        );
        for l in listeners {
            let _ = writeln!(
                out,
                "sluice_limiter_connections{{listener=\"{}\"}} {}",
                l.label(),
                self.open_connections(l)
            );
        }
        type Field = fn(&ConnectionCounters) -> &AtomicU64;
        let counters: [(&str, &str, Field); 3] = [
            (
                "sluice_limiter_connections_refused_total",
                "Connections closed on arrival because the listener was at --max-connections.",
                |c| &c.refused,
            ),
            (
                "sluice_limiter_connections_idle_closed_total",
                "Connections closed after --idle-timeout-ms with no byte read or written.",
                |c| &c.idle_closed,
            ),
            (
                "sluice_limiter_request_timeouts_total",
                "HTTP requests not received within --request-timeout-ms (answered 408).",
                |c| &c.request_timeouts,
            ),
        ];
        for (name, help, field) in counters {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
            for l in listeners {
                let _ = writeln!(
                    out,
                    "{name}{{listener=\"{}\"}} {}",
                    l.label(),
                    field(self.conns(l)).load(Ordering::Relaxed)
                );
            }
        }
    }

    /// The number of `/v1/check` calls so far.
    pub fn checks(&self) -> u64 {
        self.checks.load(Ordering::Relaxed)
    }

    fn domain_counters(&self, domain: &str) -> Arc<DomainCounters> {
        let mut map = self.domains.write().unwrap_or_else(|e| e.into_inner());
        if map.len() >= MAX_DOMAINS && !map.contains_key(domain) {
            return Arc::clone(&self.other);
        }
        Arc::clone(map.entry(domain.to_string()).or_default())
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(2048);
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let _ = writeln!(
            out,
            "# HELP sluice_limiter_checks_total Calls to /v1/check.\n# TYPE sluice_limiter_checks_total counter\nsluice_limiter_checks_total {}",
            load(&self.checks)
        );
        let _ = writeln!(
            out,
            "# HELP sluice_limiter_decisions_total Decided checks by domain and result.\n# TYPE sluice_limiter_decisions_total counter"
        );
        {
            let map = self.domains.read().unwrap_or_else(|e| e.into_inner());
            let mut names: Vec<&String> = map.keys().collect();
            names.sort();
            for name in names {
                if let Some(c) = map.get(name) {
                    write_decisions(&mut out, name, c);
                }
            }
        }
        if load(&self.other.allowed).saturating_add(load(&self.other.denied)) > 0 {
            write_decisions(&mut out, "_other", &self.other);
        }
        let _ = writeln!(
            out,
            "# HELP sluice_limiter_store_errors_total Store operations that failed.\n# TYPE sluice_limiter_store_errors_total counter\nsluice_limiter_store_errors_total {}",
            load(&self.store_errors)
        );
        let _ = writeln!(
            out,
            "# HELP sluice_limiter_store_errors_by_reason_total Store operations that failed, by reason (timeout, unavailable, auth, protocol).\n# TYPE sluice_limiter_store_errors_by_reason_total counter"
        );
        self.store_error_reasons.render(
            &mut out,
            "sluice_limiter_store_errors_by_reason_total",
            &["reason"],
        );
        let _ = writeln!(
            out,
            "# HELP sluice_limiter_capacity_denials_total Checks denied because the memory store held its maximum of keys.\n# TYPE sluice_limiter_capacity_denials_total counter\nsluice_limiter_capacity_denials_total {}",
            load(&self.capacity_denials)
        );
        let _ = writeln!(
            out,
            "# HELP sluice_limiter_delayed_total Requests admitted in delay mode with a wait.\n# TYPE sluice_limiter_delayed_total counter\nsluice_limiter_delayed_total {}",
            load(&self.delayed)
        );
        let _ = writeln!(
            out,
            "# HELP sluice_limiter_delay_seconds_total Waits given to delayed requests, summed.\n# TYPE sluice_limiter_delay_seconds_total counter\nsluice_limiter_delay_seconds_total {}",
            Duration::from_nanos(load(&self.delay_sum_ns)).as_secs_f64()
        );
        let _ = writeln!(
            out,
            "# HELP sluice_limiter_batches_total Decided checks carrying several coalesced requests (batch).\n# TYPE sluice_limiter_batches_total counter\nsluice_limiter_batches_total {}",
            load(&self.batches)
        );
        let _ = writeln!(
            out,
            "# HELP sluice_limiter_batched_requests_total Requests carried by batches, by result.\n# TYPE sluice_limiter_batched_requests_total counter\nsluice_limiter_batched_requests_total{{result=\"admitted\"}} {}\nsluice_limiter_batched_requests_total{{result=\"refused\"}} {}",
            load(&self.batched_admitted),
            load(&self.batched).saturating_sub(load(&self.batched_admitted))
        );
        let _ = writeln!(
            out,
            "# HELP sluice_limiter_leased_units_total Units granted to callers as leases.\n# TYPE sluice_limiter_leased_units_total counter\nsluice_limiter_leased_units_total {}",
            load(&self.leased_units)
        );
        let _ = writeln!(
            out,
            "# HELP sluice_limiter_returned_units_total Units callers gave back (returned), as sent.\n# TYPE sluice_limiter_returned_units_total counter\nsluice_limiter_returned_units_total {}",
            load(&self.returned_units)
        );
        self.durations.render(
            &mut out,
            "sluice_limiter_check_duration_seconds",
            "Time to answer /v1/check.",
        );
        let _ = writeln!(
            out,
            "# HELP sluice_limiter_rls_calls_total RLS ShouldRateLimit calls by domain and result.\n# TYPE sluice_limiter_rls_calls_total counter"
        );
        self.rls_calls.render(
            &mut out,
            "sluice_limiter_rls_calls_total",
            &["domain", "result"],
        );
        let _ = writeln!(
            out,
            "# HELP sluice_limiter_rls_descriptors_total RLS descriptors by domain, descriptor and result.\n# TYPE sluice_limiter_rls_descriptors_total counter"
        );
        self.rls_descriptors.render(
            &mut out,
            "sluice_limiter_rls_descriptors_total",
            &["domain", "descriptor", "result"],
        );
        let _ = writeln!(
            out,
            "# HELP sluice_limiter_rls_config_loads_total Loads of the descriptor configuration by result (error: refused, the previous one stays).\n# TYPE sluice_limiter_rls_config_loads_total counter"
        );
        self.rls_reloads.render(
            &mut out,
            "sluice_limiter_rls_config_loads_total",
            &["result"],
        );
        self.render_connections(&mut out);
        out
    }
}

fn write_decisions(out: &mut String, domain: &str, c: &DomainCounters) {
    // Domains are validated to [A-Za-z0-9_.-], so no label escaping is needed.
    for (result, v) in [("allowed", &c.allowed), ("denied", &c.denied)] {
        let _ = writeln!(
            out,
            "sluice_limiter_decisions_total{{domain=\"{domain}\",result=\"{result}\"}} {}",
            v.load(Ordering::Relaxed)
        );
    }
}
