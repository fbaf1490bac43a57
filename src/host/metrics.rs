//! Counters and the delay histogram through host calls: defined when a
//! configuration is accepted (each name once per VM), counted in batches,
//! handed to Envoy at each flush.

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

/// The host's id of every metric this VM defined, by name: each
/// configuration reuses them (defining a name again grew Envoy's memory at
/// each configuration push).
pub(super) type MetricIds = std::collections::HashMap<String, u32>;

/// Metric ids, defined when a configuration is accepted, and the counts
/// not yet handed to Envoy.
#[derive(Default)]
pub(super) struct Metrics {
    /// Host metric id per [`Batch`] position.
    ids: Vec<u32>,
    batch: Batch,
    /// Host metric id of [`DELAY_HISTOGRAM`].
    delay_histogram: u32,
    /// Per rule, the id of its permits gauge (rules with a concurrency
    /// limit only).
    permit_gauges: Vec<Option<u32>>,
    /// The key tables of the rules with a local rate limit.
    tables: Vec<TableGauge>,
    /// The blocks of the rules with a local limit in block mode.
    blocks: Vec<BlockGauge>,
}

/// The blocks a worker started for a rule, and its Envoy-wide gauge.
struct BlockGauge {
    /// The batch position of the rule's `blocks_started` counter.
    position: usize,
    /// The id of `sluice.<rule>.blocked_keys`.
    id: u32,
    watch: BlockWatch,
}

/// A rule's key table as this worker sees it, and its Envoy-wide gauge.
struct TableGauge {
    /// The batch position of the rule's `table_full` counter.
    position: usize,
    name: String,
    /// The id of `sluice.<rule>.table_full_workers`.
    id: u32,
    watch: TableWatch,
}

impl Metrics {
    /// Defines every counter of `rules` rules (none before a plan exists).
    pub(super) fn define(known: &mut MetricIds, rules: &[Rule]) -> Metrics {
        let mut ids: Vec<u32> = GlobalEvent::ALL
            .iter()
            .map(|e| define(known, e.metric_name()))
            .collect();
        for rule in rules {
            ids.extend(RuleEvent::ALL.map(|e| {
                if e.applies_to(rule) {
                    define(known, &e.metric_name(&rule.name))
                } else {
                    // Never counted: no stat.
                    u32::MAX
                }
            }));
        }
        let permit_gauges = rules
            .iter()
            .map(|rule| {
                let concurrent = rule.limits.iter().any(|l| l.concurrency().is_some());
                concurrent
                    .then(|| define_as(known, MetricType::Gauge, &permits_gauge(&rule.name)))
                    .flatten()
            })
            .collect();
        let tables = rules
            .iter()
            .enumerate()
            .filter(|(_, rule)| RuleEvent::TableFull.applies_to(rule))
            .filter_map(|(i, rule)| {
                let gauge = format!("sluice.{}.table_full_workers", rule.name);
                Some(TableGauge {
                    position: Batch::rule_position(i, RuleEvent::TableFull),
                    name: rule.name.clone(),
                    id: define_as(known, MetricType::Gauge, &gauge)?,
                    watch: TableWatch::default(),
                })
            })
            .collect();
        let blocks = rules
            .iter()
            .enumerate()
            .filter_map(|(i, rule)| {
                let block = rule.limits.iter().filter_map(|l| l.local_block()).max()?;
                let gauge = format!("sluice.{}.blocked_keys", rule.name);
                Some(BlockGauge {
                    position: Batch::rule_position(i, RuleEvent::BlocksStarted),
                    id: define_as(known, MetricType::Gauge, &gauge)?,
                    watch: BlockWatch::new(block),
                })
            })
            .collect();
        Metrics {
            ids,
            permit_gauges,
            tables,
            blocks,
            batch: Batch::new(rules.len()),
            delay_histogram: define_as(known, MetricType::Histogram, DELAY_HISTOGRAM)
                .unwrap_or(u32::MAX),
        }
    }

    /// Moves rule `rule`'s permits gauge by `weight`, up when `taken`.
    /// Gauges are not batched: Envoy adds every worker's moves into one
    /// value, the permits the Envoy's requests hold.
    fn move_permits(&self, rule: usize, weight: u64, taken: bool) {
        let Some(&Some(id)) = self.permit_gauges.get(rule) else {
            return;
        };
        let weight = i64::try_from(weight).unwrap_or(i64::MAX);
        let _ = hostcalls::increment_metric(id, if taken { weight } else { -weight });
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
            if let (Some(&id), Ok(count)) = (self.ids.get(position), i64::try_from(count)) {
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
                let _ = hostcalls::increment_metric(b.id, moved);
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
                    let _ = hostcalls::increment_metric(t.id, 1);
                    log::warn!(
                        "sluice: rule {}: its local key table is full: keys without room share or evict (local_when_full); raise local_max_keys",
                        t.name
                    );
                }
                Some(TableChange::NoLongerFull) => {
                    let _ = hostcalls::increment_metric(t.id, -1);
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
            let _ = hostcalls::increment_metric(t.id, -1);
        }
        // Its blocks are no longer counted (they live on in shared data).
        for b in &self.blocks {
            let held = i64::try_from(b.watch.held()).unwrap_or(i64::MAX);
            let _ = hostcalls::increment_metric(b.id, -held);
        }
    }
}

/// The name of rule `rule`'s permits gauge.
fn permits_gauge(rule: &str) -> String {
    format!("sluice.{rule}.permits_in_use")
}

fn define(ids: &mut MetricIds, name: &str) -> u32 {
    define_as(ids, MetricType::Counter, name).unwrap_or(u32::MAX)
}

/// The id of metric `name` of type `kind`, defined once per VM: a new
/// configuration finds the ids its predecessors defined.
fn define_as(ids: &mut MetricIds, kind: MetricType, name: &str) -> Option<u32> {
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
