//! Counters and the delay histogram through host calls: the filter-wide
//! ones defined when a configuration is accepted, a rule's at the flush
//! that first hands Envoy a count of theirs (a gauge at its first move),
//! each name once per VM; counted in batches, handed to Envoy at each flush.

use super::clock::now;
use proxy_wasm::hostcalls;
use proxy_wasm::types::MetricType;
use sluice_core::Nanos;
use sluice_filter::config::Rule;
use sluice_filter::driver::WorkerMetrics;
use sluice_filter::local;
use sluice_filter::metrics::{
    ceil_millis, Batch, BlockWatch, GlobalEvent, MetricSink, RuleEvent, TableChange, TableWatch,
    DELAY_HISTOGRAM,
};
use std::cell::{Cell, RefCell};
use std::rc::Rc;

/// The host's id of every metric this VM defined, by name: each
/// configuration reuses them (defining a name again grew Envoy's memory at
/// each configuration push).
pub(super) type MetricIds = Rc<RefCell<std::collections::HashMap<String, u32>>>;

/// A counter's host id: defined at its first count, so that a rule never
/// used costs Envoy no stat (1,000 rules defined at each configuration
/// were most of the plugin's start).
#[derive(Debug, Clone, Copy)]
enum Slot {
    /// The rule never counts this event.
    Never,
    /// Not counted yet.
    Later,
    Defined(u32),
}

/// A gauge defined at its first move.
struct LazyGauge {
    name: String,
    id: Cell<Option<u32>>,
}

impl LazyGauge {
    fn new(name: String) -> LazyGauge {
        LazyGauge {
            name,
            id: Cell::new(None),
        }
    }

    /// Moves the gauge by `delta`, defining it first if needed.
    fn increment(&self, known: &MetricIds, delta: i64) {
        let id = match self.id.get() {
            Some(id) => id,
            None => {
                let Some(id) = define_as(known, MetricType::Gauge, &self.name) else {
                    return;
                };
                self.id.set(Some(id));
                id
            }
        };
        let _ = hostcalls::increment_metric(id, delta);
    }
}

/// Metric ids (a rule's defined at first use) and the counts not yet
/// handed to Envoy.
pub(super) struct Metrics {
    known: MetricIds,
    /// Host metric id per [`Batch`] position.
    ids: Vec<Cell<Slot>>,
    /// The rules' names, by index (for the names of their metrics).
    rules: Vec<String>,
    batch: Batch,
    /// Host metric id of [`DELAY_HISTOGRAM`].
    delay_histogram: u32,
    /// Per rule, its permits gauge (rules with a concurrency limit only).
    permit_gauges: Vec<Option<LazyGauge>>,
    /// The key tables of the rules with a local rate limit.
    tables: Vec<TableGauge>,
    /// The blocks of the rules with a local limit in block mode.
    blocks: Vec<BlockGauge>,
}

/// The blocks a worker started for a rule, and its Envoy-wide gauge.
struct BlockGauge {
    /// The batch position of the rule's `blocks_started` counter.
    position: usize,
    /// `sluice.<rule>.blocked_keys`.
    gauge: LazyGauge,
    watch: BlockWatch,
}

/// A rule's key table as this worker sees it, and its Envoy-wide gauge.
struct TableGauge {
    /// The batch position of the rule's `table_full` counter.
    position: usize,
    name: String,
    /// `sluice.<rule>.table_full_workers`.
    gauge: LazyGauge,
    watch: TableWatch,
}

impl Metrics {
    /// Defines the filter-wide counters; `rules`' metrics wait for their
    /// first use.
    pub(super) fn define(known: MetricIds, rules: &[Rule]) -> Metrics {
        let mut ids: Vec<Cell<Slot>> = GlobalEvent::ALL
            .iter()
            .map(|e| {
                let id = define_as(&known, MetricType::Counter, e.metric_name());
                Cell::new(id.map_or(Slot::Never, Slot::Defined))
            })
            .collect();
        for rule in rules {
            // Events a rule never counts have no stat.
            ids.extend(RuleEvent::ALL.map(|e| {
                Cell::new(if e.applies_to(rule) {
                    Slot::Later
                } else {
                    Slot::Never
                })
            }));
        }
        let permit_gauges = rules
            .iter()
            .map(|rule| {
                let concurrent = rule.limits.iter().any(|l| l.concurrency().is_some());
                concurrent.then(|| LazyGauge::new(permits_gauge(&rule.name)))
            })
            .collect();
        let tables = rules
            .iter()
            .enumerate()
            .filter(|(_, rule)| RuleEvent::TableFull.applies_to(rule))
            .map(|(i, rule)| TableGauge {
                position: Batch::rule_position(i, RuleEvent::TableFull),
                name: rule.name.clone(),
                gauge: LazyGauge::new(format!("sluice.{}.table_full_workers", rule.name)),
                watch: TableWatch::default(),
            })
            .collect();
        let blocks = rules
            .iter()
            .enumerate()
            .filter_map(|(i, rule)| {
                let block = rule.limits.iter().filter_map(|l| l.local_block()).max()?;
                Some(BlockGauge {
                    position: Batch::rule_position(i, RuleEvent::BlocksStarted),
                    gauge: LazyGauge::new(format!("sluice.{}.blocked_keys", rule.name)),
                    watch: BlockWatch::new(block),
                })
            })
            .collect();
        let delay_histogram =
            define_as(&known, MetricType::Histogram, DELAY_HISTOGRAM).unwrap_or(u32::MAX);
        Metrics {
            ids,
            rules: rules.iter().map(|r| r.name.clone()).collect(),
            permit_gauges,
            tables,
            blocks,
            batch: Batch::new(rules.len()),
            delay_histogram,
            known,
        }
    }

    /// The host id of the counter at batch `position`, defined now if this
    /// is its first count.
    fn counter(&self, position: usize) -> Option<u32> {
        let slot = self.ids.get(position)?;
        match slot.get() {
            Slot::Defined(id) => Some(id),
            Slot::Never => None,
            Slot::Later => {
                let (rule, event) = Batch::rule_event_at(position)?;
                let name = event.metric_name(self.rules.get(rule)?);
                let id = define_as(&self.known, MetricType::Counter, &name)?;
                slot.set(Slot::Defined(id));
                Some(id)
            }
        }
    }

    /// Moves rule `rule`'s permits gauge by `weight`, up when `taken`.
    /// Gauges are not batched: Envoy adds every worker's moves into one
    /// value, the permits the Envoy's requests hold.
    fn move_permits(&self, rule: usize, weight: u64, taken: bool) {
        let Some(Some(gauge)) = self.permit_gauges.get(rule) else {
            return;
        };
        let weight = i64::try_from(weight).unwrap_or(i64::MAX);
        gauge.increment(&self.known, if taken { weight } else { -weight });
    }

    fn add(&self, position: usize) {
        self.add_n(position, 1);
    }

    fn add_n(&self, position: usize, n: u64) {
        if self.batch.add_n(position, n) {
            self.flush_batch();
        }
    }

    /// Hands the batched counts to Envoy.
    fn flush_batch(&self) {
        // Retries are tallied per VM by the CAS loop, which has no sink.
        let retries = local::take_cas_retries();
        if retries > 0 {
            self.batch
                .add_n(Batch::global_position(GlobalEvent::CasRetries), retries);
        }
        // Only the tables' own counts are kept for their gauges.
        let full_at = |p: usize| self.tables.iter().any(|t| t.position == p);
        let block_at = |p: usize| self.blocks.iter().any(|b| b.position == p);
        let (mut full, mut started) = (Vec::new(), Vec::new());
        self.batch.drain(|position, count| {
            if let (Some(id), Ok(count)) = (self.counter(position), i64::try_from(count)) {
                let _ = hostcalls::increment_metric(id, count);
            }
            if full_at(position) {
                full.push((position, count));
            }
            if block_at(position) {
                started.push((position, count));
            }
        });
        self.watch_tables(&full);
        self.watch_blocks(&started);
    }

    /// Moves the blocked-keys gauges by the blocks this flush counted
    /// started (`counted`) and those that ended.
    fn watch_blocks(&self, counted: &[(usize, u64)]) {
        if self.blocks.is_empty() {
            return;
        }
        let now = now();
        for b in &self.blocks {
            let started = counted
                .iter()
                .find(|(p, _)| *p == b.position)
                .map_or(0, |&(_, n)| n);
            let moved = b.watch.observe(started, now);
            if moved != 0 {
                b.gauge.increment(&self.known, moved);
            }
        }
    }

    /// Moves the table gauges and logs when this worker starts or stops
    /// seeing a rule's key table full (`counted`: this flush's counts).
    fn watch_tables(&self, counted: &[(usize, u64)]) {
        if self.tables.is_empty() {
            return;
        }
        let now = now();
        for t in &self.tables {
            let full = counted
                .iter()
                .find(|(p, _)| *p == t.position)
                .map_or(0, |&(_, n)| n);
            match t.watch.observe(full, now) {
                Some(TableChange::BecameFull) => {
                    t.gauge.increment(&self.known, 1);
                    log::warn!(
                        "sluice: rule {}: its local key table is full: keys without room share or evict (local_when_full); raise local_max_keys",
                        t.name
                    );
                }
                Some(TableChange::NoLongerFull) => {
                    t.gauge.increment(&self.known, -1);
                    log::info!(
                        "sluice: rule {}: its local key table has room again",
                        t.name
                    );
                }
                None => {}
            }
        }
    }
}

impl Drop for Metrics {
    // A replaced configuration (or a rejected one) still reports what it counted.
    fn drop(&mut self) {
        self.flush_batch();
        // This worker stops counting in the gauges of the tables it saw full.
        for t in self.tables.iter().filter(|t| t.watch.is_full()) {
            t.gauge.increment(&self.known, -1);
        }
        // Its blocks are no longer counted (they live on in shared data).
        for b in self.blocks.iter().filter(|b| b.watch.held() > 0) {
            let held = i64::try_from(b.watch.held()).unwrap_or(i64::MAX);
            b.gauge.increment(&self.known, -held);
        }
    }
}

/// The name of rule `rule`'s permits gauge.
fn permits_gauge(rule: &str) -> String {
    format!("sluice.{rule}.permits_in_use")
}

/// The id of metric `name` of type `kind`, defined once per VM: a new
/// configuration finds the ids its predecessors defined.
fn define_as(ids: &MetricIds, kind: MetricType, name: &str) -> Option<u32> {
    let mut ids = ids.borrow_mut();
    if let Some(id) = ids.get(name) {
        return Some(*id);
    }
    let id = hostcalls::define_metric(kind, name).ok()?;
    ids.insert(name.to_string(), id);
    Some(id)
}

impl MetricSink for Metrics {
    fn rule(&self, rule: usize, event: RuleEvent) {
        self.add(Batch::rule_position(rule, event));
    }

    fn rule_n(&self, rule: usize, event: RuleEvent, n: u64) {
        self.add_n(Batch::rule_position(rule, event), n);
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

impl WorkerMetrics for Metrics {
    fn permits(&self, rule: usize, weight: u64, taken: bool) {
        self.move_permits(rule, weight, taken);
    }

    fn flush(&self) {
        self.flush_batch();
    }
}
