//! The limiter's metrics, kept and exposed with the Prometheus project's
//! Rust client (`prometheus-client`) as OpenMetrics text.
//!
//! Counters are registered without their `_total` suffix, which the
//! exposition adds: `sluice_limiter_checks` is served as
//! `sluice_limiter_checks_total`. Label sets that clients choose (domains,
//! descriptors) are bounded: past the bound, new values count as `_other`,
//! so a client sending random values cannot grow the metrics without end.

mod connections;
mod labels;
mod rlqs;
mod rls_config;
mod scrape;

pub use connections::Ending;
use labels::{
    descriptor_labels, reload_label, result_label, Bounded, Counters, DescriptorResult,
    DomainLabel, DomainResult, ReasonLabel, ResultLabel,
};
pub use labels::{Listener, STORE_ERROR_REASONS};
use prometheus_client::encoding::text::{encode_eof, encode_registry};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram;
use prometheus_client::registry::Registry;
pub use rlqs::StreamGuard;
pub use scrape::StoreGauges;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::RwLock;
use std::time::Duration;

/// The content type of the exposition.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Upper bounds of the duration histograms, in seconds.
const BUCKETS: [f64; 12] = [
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
];

/// Distinct domains of `sluice_limiter_decisions_total`; further ones count
/// as `_other`.
const MAX_DOMAINS: usize = 256;

/// Distinct label sets of each other labelled counter; further ones count
/// under `_other` (the result label kept, so totals by result add up).
const MAX_SERIES: usize = 10_000;

/// A histogram of durations over the limiter's buckets. Clones share one
/// state.
#[derive(Debug, Clone)]
pub struct Histogram(histogram::Histogram);

impl Default for Histogram {
    fn default() -> Self {
        Histogram(histogram::Histogram::new(BUCKETS))
    }
}

impl Histogram {
    /// Records one duration.
    pub fn observe(&self, d: Duration) {
        self.0.observe(d.as_secs_f64());
    }
}

/// The service's metrics.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    checks: Counter,
    decisions: Counters<DomainResult>,
    /// Each domain's (allowed, denied) series of `decisions`, looked up
    /// without allocating on the request path.
    domains: RwLock<HashMap<String, (Counter, Counter)>>,
    store_errors: Counter,
    store_error_reasons: Bounded<ReasonLabel>,
    capacity_denials: Counter,
    blocks_started: Counter,
    blocked: Counter,
    delayed: Counter,
    /// Waits summed in nanoseconds, exposed in seconds.
    delay_ns: AtomicU64,
    batches: Counter,
    batched: Counters<ResultLabel>,
    leased_units: Counter,
    returned_units: Counter,
    lease_renewals: Counter,
    permits_calls: Counter,
    permits_released: Counter,
    permits_renewed: Counter,
    charge_calls: Counter,
    charged_units: Counter,
    refunded_units: Counter,
    durations: Histogram,
    rls_calls: Bounded<DomainResult>,
    rls_descriptors: Bounded<DescriptorResult>,
    rls_reloads: Counters<ResultLabel>,
    rls_config: rls_config::RlsConfig,
    rls_global_shadow: Bounded<DomainLabel>,
    connections: connections::Connections,
    tls_loads: Counters<ResultLabel>,
    rlqs: rlqs::Rlqs,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut m = Metrics {
            registry: Registry::default(),
            checks: Counter::default(),
            decisions: Family::default(),
            domains: RwLock::new(HashMap::new()),
            store_errors: Counter::default(),
            store_error_reasons: Bounded::new(MAX_SERIES, |_| ReasonLabel {
                reason: "_other".into(),
            }),
            capacity_denials: Counter::default(),
            blocks_started: Counter::default(),
            blocked: Counter::default(),
            delayed: Counter::default(),
            delay_ns: AtomicU64::new(0),
            batches: Counter::default(),
            batched: Family::default(),
            leased_units: Counter::default(),
            returned_units: Counter::default(),
            lease_renewals: Counter::default(),
            permits_calls: Counter::default(),
            permits_released: Counter::default(),
            permits_renewed: Counter::default(),
            charge_calls: Counter::default(),
            charged_units: Counter::default(),
            refunded_units: Counter::default(),
            durations: Histogram::default(),
            rls_calls: Bounded::new(MAX_SERIES, |l| DomainResult {
                domain: "_other".into(),
                ..l
            }),
            rls_descriptors: Bounded::new(MAX_SERIES, |l| DescriptorResult {
                domain: "_other".into(),
                descriptor: "_other".into(),
                ..l
            }),
            rls_reloads: Family::default(),
            rls_config: rls_config::RlsConfig::default(),
            rls_global_shadow: Bounded::new(MAX_SERIES, |_| DomainLabel {
                domain: "_other".into(),
            }),
            connections: connections::Connections::default(),
            tls_loads: Family::default(),
            rlqs: rlqs::Rlqs::default(),
        };
        m.register();
        m
    }
}

impl Metrics {
    /// The counters without labels: name (after `sluice_limiter_`), help,
    /// counter.
    fn plain_counters(&self) -> [(&'static str, &'static str, &Counter); 16] {
        [
            ("checks", "Calls to /v1/check", &self.checks),
            (
                "store_errors",
                "Store operations that failed",
                &self.store_errors,
            ),
            (
                "capacity_denials",
                "Checks denied because the memory store held its maximum of keys",
                &self.capacity_denials,
            ),
            (
                "blocks_started",
                "Penalty boxes started: a limit with block_ms refused its key over the limit",
                &self.blocks_started,
            ),
            (
                "blocked",
                "Limits of checks refused because a penalty box held their key",
                &self.blocked,
            ),
            (
                "delayed",
                "Requests admitted in delay mode with a wait",
                &self.delayed,
            ),
            (
                "batches",
                "Decided checks carrying several coalesced requests (batch)",
                &self.batches,
            ),
            (
                "leased_units",
                "Units granted to callers as leases",
                &self.leased_units,
            ),
            (
                "returned_units",
                "Units callers gave back (returned), as sent",
                &self.returned_units,
            ),
            (
                "lease_renewals",
                "Checks that only asked for lease units (every limit weighing 0): renewals no request waited for, not counted in decisions",
                &self.lease_renewals,
            ),
            ("permits_calls", "Calls to /v1/permits", &self.permits_calls),
            (
                "permits_released",
                "Keys where a holder gave permits back (POST /v1/permits release)",
                &self.permits_released,
            ),
            (
                "permits_renewed",
                "Keys where a holder's permits were renewed (POST /v1/permits renew)",
                &self.permits_renewed,
            ),
            ("charge_calls", "Calls to /v1/charge", &self.charge_calls),
            (
                "charged_units",
                "Units charged after the response (POST /v1/charge charge), as applied",
                &self.charged_units,
            ),
            (
                "refunded_units",
                "Units refunded after the response (POST /v1/charge refund), as sent",
                &self.refunded_units,
            ),
        ]
    }

    /// Registers every metric, in the order of the exposition.
    fn register(&mut self) {
        let plain = self
            .plain_counters()
            .map(|(name, help, c)| (name, help, c.clone()));
        let r = &mut self.registry;
        let p = |name: &str| format!("sluice_limiter_{name}");
        for (name, help, counter) in plain {
            r.register(p(name), help, counter);
        }
        r.register(
            p("decisions"),
            "Decided checks by domain and result",
            self.decisions.clone(),
        );
        r.register(
            p("store_errors_by_reason"),
            "Store operations that failed, by reason (timeout, unavailable, auth, protocol)",
            self.store_error_reasons.family.clone(),
        );
        r.register(
            p("batched_requests"),
            "Requests carried by batches, by result",
            self.batched.clone(),
        );
        r.register(
            p("check_duration_seconds"),
            "Time to answer /v1/check",
            self.durations.0.clone(),
        );
        for result in ["admitted", "refused"] {
            self.batched.get_or_create(&result_label(result)).inc_by(0);
        }
        self.register_rls_and_connections();
        self.rlqs.register(&mut self.registry);
        self.rls_config.register(&mut self.registry);
    }

    /// Registers the RLS and connection metrics, their series shown from
    /// the start at zero.
    fn register_rls_and_connections(&mut self) {
        let r = &mut self.registry;
        let p = |name: &str| format!("sluice_limiter_{name}");
        r.register(
            p("rls_calls"),
            "RLS ShouldRateLimit calls by domain and result",
            self.rls_calls.family.clone(),
        );
        r.register(
            p("rls_descriptors"),
            "RLS descriptors by domain, descriptor and result",
            self.rls_descriptors.family.clone(),
        );
        r.register(
            p("rls_global_shadow_mode"),
            "RLS calls over the limit answered OK by --shadow-mode, by domain",
            self.rls_global_shadow.family.clone(),
        );
        r.register(
            p("rls_config_loads"),
            "Loads of the descriptor configuration by result (error: refused, the previous one stays)",
            self.rls_reloads.clone(),
        );
        r.register(
            p("tls_config_loads"),
            "Loads of the TLS certificate, key and client CA by result (error: refused, the previous ones stay)",
            self.tls_loads.clone(),
        );
        self.connections.register(r);
        // Every series an alert reads exists from the start, at zero: a
        // counter first seen at 1 has no increase to alert on.
        for ok in [true, false] {
            self.rls_reloads.get_or_create(&reload_label(ok)).inc_by(0);
            self.tls_loads.get_or_create(&reload_label(ok)).inc_by(0);
        }
        for reason in STORE_ERROR_REASONS {
            let labels = ReasonLabel {
                reason: reason.to_string(),
            };
            self.store_error_reasons
                .family
                .get_or_create(&labels)
                .inc_by(0);
        }
    }

    /// Counts one `/v1/check` call (valid or not).
    pub fn inc_checks(&self) {
        self.checks.inc();
    }

    /// Counts one failed store operation.
    pub fn inc_store_errors(&self) {
        self.store_errors.inc();
    }

    /// Counts one failed store operation and its reason (one of
    /// [`STORE_ERROR_REASONS`]).
    pub fn record_store_error(&self, reason: &str) {
        self.inc_store_errors();
        let labels = ReasonLabel {
            reason: reason.to_string(),
        };
        self.store_error_reasons.inc(labels);
    }

    /// Counts the penalty boxes of one decided check's `decisions`: blocks
    /// started, and limits refused because their key was blocked.
    pub fn record_blocks(&self, decisions: &[sluice_core::Decision]) {
        use sluice_core::Denial;
        for d in decisions {
            let counter = match d.denial {
                Some(Denial::Blocked { started: true }) => &self.blocks_started,
                Some(Denial::Blocked { started: false }) => &self.blocked,
                Some(Denial::OverLimit | Denial::CostExceedsCapacity | Denial::DelayTooLong)
                | None => continue,
            };
            counter.inc();
        }
    }

    /// Counts checks denied because the memory store was full.
    pub fn inc_capacity_denials(&self) {
        self.capacity_denials.inc();
    }

    /// Counts one decided check carrying `batch` (coalesced requests):
    /// `requests` requests, of which `admitted` were admitted.
    pub fn record_batch(&self, requests: u32, admitted: u32) {
        self.batches.inc();
        let refused = requests.saturating_sub(admitted);
        for (result, n) in [("admitted", admitted), ("refused", refused)] {
            self.batched
                .get_or_create(&result_label(result))
                .inc_by(u64::from(n));
        }
    }

    /// Counts the units of one decided check's leases: `leased` granted,
    /// `returned` given back (as sent).
    pub fn record_leases(&self, leased: u64, returned: u64) {
        self.leased_units.inc_by(leased);
        self.returned_units.inc_by(returned);
    }

    /// Counts one decided lease renewal: a check whose limits all weigh 0.
    pub fn inc_lease_renewals(&self) {
        self.lease_renewals.inc();
    }

    /// Counts one `/v1/permits` call (valid or not).
    pub fn inc_permits_calls(&self) {
        self.permits_calls.inc();
    }

    /// Counts one decided `/v1/permits` call: the keys where permits were
    /// given back and the keys where they were renewed.
    pub fn record_permits(&self, released: usize, renewed: usize) {
        let n = |k: usize| u64::try_from(k).unwrap_or(u64::MAX);
        self.permits_released.inc_by(n(released));
        self.permits_renewed.inc_by(n(renewed));
    }

    /// Counts one `/v1/charge` call (valid or not).
    pub fn inc_charge_calls(&self) {
        self.charge_calls.inc();
    }

    /// Counts the units of one applied `/v1/charge` call.
    pub fn record_charge(&self, charged: u64, refunded: u64) {
        self.charged_units.inc_by(charged);
        self.refunded_units.inc_by(refunded);
    }

    /// Counts one request admitted in delay mode, to be held for `delay`
    /// nanoseconds (more than zero) before it conforms.
    pub fn record_delay(&self, delay: u64) {
        self.delayed.inc();
        self.delay_ns.fetch_add(delay, Ordering::Relaxed);
    }

    /// Counts one decided check for `domain`.
    pub fn record_decision(&self, domain: &str, allowed: bool) {
        let bump = |(a, d): &(Counter, Counter)| if allowed { a.inc() } else { d.inc() };
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

    /// The series of a domain not seen yet (`_other` past [`MAX_DOMAINS`]).
    fn domain_counters(&self, domain: &str) -> (Counter, Counter) {
        let mut map = self.domains.write().unwrap_or_else(|e| e.into_inner());
        let domain = if map.len() >= MAX_DOMAINS && !map.contains_key(domain) {
            "_other"
        } else {
            domain
        };
        let series = |result: &str| {
            self.decisions.get_or_create_owned(&DomainResult {
                domain: domain.to_string(),
                result: result.to_string(),
            })
        };
        map.entry(domain.to_string())
            .or_insert_with(|| (series("allowed"), series("denied")))
            .clone()
    }

    /// Records how long one check took.
    pub fn observe_duration(&self, d: Duration) {
        self.durations.observe(d);
    }

    /// Counts one RLS call for `domain` (`_unknown` when not configured) by
    /// its result: `ok`, `over_limit`, `error` or `invalid`.
    pub fn record_rls_call(&self, domain: &str, result: &str) {
        let labels = DomainResult {
            domain: domain.to_string(),
            result: result.to_string(),
        };
        self.rls_calls.inc(labels);
    }

    /// Counts one descriptor of an RLS call by `domain`, `descriptor` (the
    /// configuration's path, or the request's values with
    /// `detailed_metric`) and `result`: `ok`, `over_limit`,
    /// `shadow_over_limit`, `unlimited`, `replaced` or `no_match`.
    pub fn record_rls_descriptor(&self, domain: &str, descriptor: &str, result: &str) {
        let labels = descriptor_labels(domain, descriptor, result);
        self.rls_descriptors.inc(labels);
    }

    /// Counts one RLS call over the limit that `--shadow-mode` answered OK.
    pub fn record_rls_global_shadow(&self, domain: &str) {
        self.rls_global_shadow.inc(DomainLabel {
            domain: domain.to_string(),
        });
    }

    /// The calls `--shadow-mode` answered OK for `domain` (tests).
    pub fn rls_global_shadow_count(&self, domain: &str) -> u64 {
        self.rls_global_shadow.get(&DomainLabel {
            domain: domain.to_string(),
        })
    }

    /// Counts one load of the descriptor configuration: `ok` or `error`
    /// (refused; the previous configuration stays in force).
    pub fn record_rls_reload(&self, ok: bool) {
        self.rls_reloads.get_or_create(&reload_label(ok)).inc();
    }

    /// The value of an RLS descriptor counter (tests).
    pub fn rls_descriptor_count(&self, domain: &str, descriptor: &str, result: &str) -> u64 {
        let labels = descriptor_labels(domain, descriptor, result);
        self.rls_descriptors.get(&labels)
    }

    /// The value of an RLS config load counter, `ok` or `error` (tests).
    pub fn rls_reload_count(&self, ok: bool) -> u64 {
        self.rls_reloads
            .get(&reload_label(ok))
            .map_or(0, |c| c.get())
    }

    /// Counts an RLQS stream open until the guard is dropped.
    pub fn rlqs_stream_opened(&self) -> StreamGuard {
        self.rlqs.stream_opened()
    }

    /// Counts `n` RLQS bucket usage reports.
    pub fn rlqs_reports_received(&self, n: usize) {
        self.rlqs.reports(n);
    }

    /// Counts one RLQS bucket action sent, by kind.
    pub fn rlqs_assignment_sent(&self, kind: &str) {
        self.rlqs.assignment(kind);
    }

    /// RLQS bucket actions sent so far of `kind`.
    pub fn rlqs_assignments(&self, kind: &'static str) -> u64 {
        self.rlqs.assignments(kind)
    }

    /// Counts a connection accepted on `listener`.
    pub fn connection_opened(&self, listener: Listener) {
        self.connections.open(listener).inc();
    }

    /// Counts a connection of `listener` closed (for any reason).
    pub fn connection_closed(&self, listener: Listener) {
        self.connections.open(listener).dec();
    }

    /// Counts a connection of `listener` that ended early as `ending` says.
    pub fn connection_ended(&self, listener: Listener, ending: Ending) {
        self.connections.ended(listener, ending);
    }

    /// Connections of `listener` that ended as `ending` says (tests).
    pub fn connection_endings(&self, listener: Listener, ending: Ending) -> u64 {
        self.connections.ends(listener, ending)
    }

    /// Counts one load of the TLS files: `ok` or `error` (refused; the
    /// material in force stays).
    pub fn record_tls_load(&self, ok: bool) {
        self.tls_loads.get_or_create(&reload_label(ok)).inc();
    }

    /// The value of a TLS load counter, `ok` or `error` (tests).
    pub fn tls_load_count(&self, ok: bool) -> u64 {
        self.tls_loads.get(&reload_label(ok)).map_or(0, |c| c.get())
    }

    /// Connections open now on `listener`.
    pub fn open_connections(&self, listener: Listener) -> u64 {
        u64::try_from(self.connections.open(listener).get()).unwrap_or(0)
    }

    /// The number of `/v1/check` calls so far.
    pub fn checks(&self) -> u64 {
        self.checks.get()
    }

    /// The exposition of every metric.
    pub fn render(&self) -> String {
        self.render_with(None)
    }

    /// The exposition of every metric and, when given, of the store's
    /// gauges and the build information.
    pub fn render_with(&self, store: Option<&StoreGauges<'_>>) -> String {
        let mut scraped = Registry::default();
        // Summed in nanoseconds, so the seconds are exact to the nanosecond.
        let delay_ns = self.delay_ns.load(Ordering::Relaxed);
        scraped.register(
            "sluice_limiter_delay_seconds",
            "Waits given to delayed requests, summed",
            ConstCounter::new(Duration::from_nanos(delay_ns).as_secs_f64()),
        );
        if let Some(g) = store {
            scrape::register_store(&mut scraped, g);
        }
        let mut out = String::with_capacity(4096);
        // Writing to a String does not fail.
        let _ = encode_registry(&mut out, &self.registry);
        let _ = encode_registry(&mut out, &scraped);
        let _ = encode_eof(&mut out);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_series_an_alert_reads_is_shown_at_zero_from_the_start() {
        let text = Metrics::default().render();
        for series in [
            "sluice_limiter_rls_config_loads_total{result=\"error\"} 0\n",
            "sluice_limiter_rls_config_loads_total{result=\"ok\"} 0\n",
            "sluice_limiter_tls_config_loads_total{result=\"error\"} 0\n",
            "sluice_limiter_store_errors_by_reason_total{reason=\"auth\"} 0\n",
            "sluice_limiter_tls_handshake_failures_total{listener=\"grpc\"} 0\n",
            "sluice_limiter_tls_closed_before_hello_total{listener=\"http\"} 0\n",
            "sluice_limiter_connections_refused_total{listener=\"rlqs\"} 0\n",
        ] {
            assert!(text.contains(series), "{series} missing from:\n{text}");
        }
    }
}
