//! Sluice's counters. Envoy shows them in `/stats` under the `wasmcustom.`
//! prefix, e.g. `wasmcustom.sluice.per-ip.denied`.
//!
//! Counting is batched: each worker's VM adds events up in a [`Batch`] and
//! hands them to Envoy on a timer (and whenever [`FLUSH_EVERY`] events are
//! waiting), so that a request costs no metric host call. `/stats` therefore
//! lags the requests by up to the flush period.

use crate::config::AtRequest;
use sluice_core::{Nanos, MILLISECOND};
use std::cell::Cell;
use std::time::Duration;

/// How often a worker hands its batched counts to Envoy.
pub const FLUSH_PERIOD: Duration = Duration::from_millis(500);

/// Waiting events that make a worker flush before the next tick.
pub const FLUSH_EVERY: u64 = 1024;

/// Per-rule counters (`sluice.<rule>.<event>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuleEvent {
    /// The request passed every limit of the rule and was let through.
    Allowed,
    /// The rule (in enforce mode) denied the request.
    Denied,
    /// The rule, in shadow mode, would have denied the request.
    ShadowDenied,
    /// The rule matched but its key could not be built (a key part was missing).
    Skipped,
    /// The rule weighs requests by a header that was missing or not a
    /// non-negative integer; the request weighed 1. For a cost from the
    /// response, its estimate (a request header or body field) was missing
    /// or not a non-negative integer; the request was admitted for 0.
    CostInvalid,
    /// The rule's limit in delay mode held the request (the longest delay
    /// of the request's limits was this rule's).
    Delayed,
    /// The total time, in milliseconds, requests were held for this rule.
    DelayedMs,
    /// An elastic limit of the rule admitted the request beyond its quota,
    /// borrowing from its pool.
    Borrowed,
    /// Units charged after responses said their requests cost more than
    /// their estimates (a cost from the response).
    CostCharged,
    /// Units given back after responses said their requests cost less than
    /// their estimates.
    CostRefunded,
    /// Responses that did not say what their request cost (the estimate
    /// stands).
    CostMissing,
    /// Settlements that left a local limit of the rule in debt.
    CostDebt,
    /// Requests whose key found its local limit's key table full of live
    /// keys: it shared the table's overflow entry, or evicted a key
    /// (`local_when_full`). Raise `local_max_keys` when it counts.
    TableFull,
    /// Requests a limit counted by outcome kept once their stream ended:
    /// the response matched (or the stream ended without one).
    OutcomeCounted,
    /// Requests a limit counted by outcome gave back: the response did not
    /// match.
    OutcomeGivenBack,
    /// A local limit with `on_exceed: block` refused a request over it
    /// and started its key's block (in shadow mode: would have).
    BlocksStarted,
    /// A local limit with `on_exceed: block` refused a request because its
    /// key was blocked (in shadow mode: would have refused it).
    Blocked,
    /// A request's dynamic metadata held something at a limit's
    /// `limit_from_metadata` that is no limit; the configured one applied.
    LimitMetadataInvalid,
}

impl RuleEvent {
    /// Whether `rule` can count this event: a counter exists only for rules
    /// configured to count it (the cost settlement counters for a cost from
    /// the response, `cost_invalid` for a cost read from the request,
    /// `delayed` for a limit in delay mode, `borrowed` for an elastic one,
    /// the key table's for a local limit...): Envoy defines no stat for a
    /// feature the configuration does not use, at each start and push.
    pub fn applies_to(self, rule: &crate::config::Rule) -> bool {
        match self {
            RuleEvent::CostCharged
            | RuleEvent::CostRefunded
            | RuleEvent::CostMissing
            | RuleEvent::CostDebt => matches!(rule.cost, crate::config::Cost::Response(_)),
            RuleEvent::TableFull => rule.limits.iter().any(|l| l.is_local()),
            RuleEvent::OutcomeCounted | RuleEvent::OutcomeGivenBack => {
                rule.limits.iter().any(|l| l.count_when().is_some())
            }
            RuleEvent::BlocksStarted | RuleEvent::Blocked => {
                rule.limits.iter().any(|l| l.local_block().is_some())
            }
            RuleEvent::LimitMetadataInvalid => {
                rule.limits.iter().any(|l| l.from_metadata().is_some())
            }
            RuleEvent::CostInvalid => !matches!(rule.cost.at_request(), AtRequest::Fixed(_)),
            RuleEvent::Delayed | RuleEvent::DelayedMs => rule.limits.iter().any(|l| l.can_delay()),
            RuleEvent::Borrowed => rule.limits.iter().any(|l| l.elastic().is_some()),
            RuleEvent::Allowed
            | RuleEvent::Denied
            | RuleEvent::ShadowDenied
            | RuleEvent::Skipped => true,
        }
    }

    /// Every per-rule event, in the order of their metric ids.
    pub const ALL: [RuleEvent; 18] = [
        RuleEvent::Allowed,
        RuleEvent::Denied,
        RuleEvent::ShadowDenied,
        RuleEvent::Skipped,
        RuleEvent::CostInvalid,
        RuleEvent::Delayed,
        RuleEvent::DelayedMs,
        RuleEvent::Borrowed,
        RuleEvent::CostCharged,
        RuleEvent::CostRefunded,
        RuleEvent::CostMissing,
        RuleEvent::CostDebt,
        RuleEvent::TableFull,
        RuleEvent::OutcomeCounted,
        RuleEvent::OutcomeGivenBack,
        RuleEvent::BlocksStarted,
        RuleEvent::Blocked,
        RuleEvent::LimitMetadataInvalid,
    ];

    /// The metric name's last component.
    pub fn suffix(self) -> &'static str {
        match self {
            RuleEvent::Allowed => "allowed",
            RuleEvent::Denied => "denied",
            RuleEvent::ShadowDenied => "shadow_denied",
            RuleEvent::Skipped => "skipped",
            RuleEvent::CostInvalid => "cost_invalid",
            RuleEvent::Delayed => "delayed",
            RuleEvent::DelayedMs => "delayed_ms",
            RuleEvent::Borrowed => "borrowed",
            RuleEvent::CostCharged => "cost_charged",
            RuleEvent::CostRefunded => "cost_refunded",
            RuleEvent::CostMissing => "cost_missing",
            RuleEvent::CostDebt => "cost_debt",
            RuleEvent::TableFull => "table_full",
            RuleEvent::OutcomeCounted => "outcome_counted",
            RuleEvent::OutcomeGivenBack => "outcome_given_back",
            RuleEvent::BlocksStarted => "blocks_started",
            RuleEvent::Blocked => "blocked",
            RuleEvent::LimitMetadataInvalid => "limit_metadata_invalid",
        }
    }

    /// Position in [`RuleEvent::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    /// The metric name for `rule`.
    pub fn metric_name(self, rule: &str) -> String {
        format!("sluice.{rule}.{}", self.suffix())
    }
}

/// Counters of the whole filter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GlobalEvent {
    /// A local decision gave up after too many compare-and-swap conflicts (and denied).
    CasExhausted,
    /// A configuration was rejected.
    ConfigErrors,
    /// The limiter failed and `failure_mode: allow` let the request through.
    FailureModeAllowed,
    /// The limiter failed and `failure_mode: deny` denied the request.
    LimiterErrors,
    /// A request was decided by a call it shared with others (coalescing).
    Coalesced,
    /// A shared-data write lost a compare-and-swap race and was retried
    /// (divided by requests: the contention on hot keys).
    CasRetries,
    /// A limiter call failed: no connection could be had.
    LimiterUnreachable,
    /// A limiter call failed: no answer within the timeout.
    LimiterTimeout,
    /// A limiter call failed: an error status (HTTP or gRPC).
    LimiterStatus,
    /// A limiter call failed: its answer could not be read.
    LimiterUnreadable,
    /// A lease renewal was started: a call asking for more units of a
    /// lease running low, which no request waits for.
    LeaseRenewals,
}

impl GlobalEvent {
    /// Every global event, in the order of their metric ids.
    pub const ALL: [GlobalEvent; 11] = [
        GlobalEvent::CasExhausted,
        GlobalEvent::ConfigErrors,
        GlobalEvent::FailureModeAllowed,
        GlobalEvent::LimiterErrors,
        GlobalEvent::Coalesced,
        GlobalEvent::CasRetries,
        GlobalEvent::LimiterUnreachable,
        GlobalEvent::LimiterTimeout,
        GlobalEvent::LimiterStatus,
        GlobalEvent::LimiterUnreadable,
        GlobalEvent::LeaseRenewals,
    ];

    /// The metric name.
    pub fn metric_name(self) -> &'static str {
        match self {
            GlobalEvent::CasExhausted => "sluice.cas_exhausted",
            GlobalEvent::ConfigErrors => "sluice.config_errors",
            GlobalEvent::FailureModeAllowed => "sluice.failure_mode_allowed",
            GlobalEvent::LimiterErrors => "sluice.limiter_errors",
            GlobalEvent::Coalesced => "sluice.coalesced",
            GlobalEvent::CasRetries => "sluice.cas_retries",
            GlobalEvent::LimiterUnreachable => "sluice.limiter_failed_unreachable",
            GlobalEvent::LimiterTimeout => "sluice.limiter_failed_timeout",
            GlobalEvent::LimiterStatus => "sluice.limiter_failed_status",
            GlobalEvent::LimiterUnreadable => "sluice.limiter_failed_unreadable",
            GlobalEvent::LeaseRenewals => "sluice.lease_renewals",
        }
    }

    /// Position in [`GlobalEvent::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }
}

/// The histogram of the time delayed requests are held, in milliseconds
/// (its `P100` is the longest hold).
pub const DELAY_HISTOGRAM: &str = "sluice.delay_ms";

/// Where the request path reports what happened.
pub trait MetricSink {
    /// Counts `event` for the rule at index `rule`.
    fn rule(&self, rule: usize, event: RuleEvent);
    /// Counts `n` of `event` (units) for the rule at index `rule`.
    fn rule_n(&self, rule: usize, event: RuleEvent, n: u64);
    /// Counts a filter-wide `event`.
    fn global(&self, event: GlobalEvent);
    /// Counts a request held `delay` for the rule at index `rule`:
    /// [`RuleEvent::Delayed`], [`RuleEvent::DelayedMs`] and
    /// [`DELAY_HISTOGRAM`].
    fn delayed(&self, rule: usize, delay: Nanos);
}

/// `nanos` in whole milliseconds, rounded up (the delay header and metrics).
pub fn ceil_millis(nanos: Nanos) -> u64 {
    nanos.div_ceil(MILLISECOND)
}

/// Counts waiting to be handed to the host, one per counter position.
///
/// Positions are [`GlobalEvent::ALL`] first, then [`RuleEvent::ALL`] for each
/// rule in order (see [`Batch::rule_position`]).
#[derive(Debug, Default)]
pub struct Batch {
    counts: Vec<Cell<u64>>,
    waiting: Cell<u64>,
}

impl Batch {
    /// A batch for a plan of `rules` rules, every count zero.
    pub fn new(rules: usize) -> Batch {
        let len = rules
            .saturating_mul(RuleEvent::ALL.len())
            .saturating_add(GlobalEvent::ALL.len());
        Batch {
            counts: (0..len).map(|_| Cell::new(0)).collect(),
            waiting: Cell::new(0),
        }
    }

    /// The position of `event` of rule `rule`.
    pub fn rule_position(rule: usize, event: RuleEvent) -> usize {
        rule.saturating_mul(RuleEvent::ALL.len())
            .saturating_add(GlobalEvent::ALL.len())
            .saturating_add(event.index())
    }

    /// The position of a filter-wide `event`.
    pub fn global_position(event: GlobalEvent) -> usize {
        event.index()
    }

    /// Counts one event at `position`; returns true when [`FLUSH_EVERY`]
    /// events are waiting. Unknown positions are ignored.
    pub fn add(&self, position: usize) -> bool {
        self.add_n(position, 1)
    }

    /// Adds `n` at `position` (one waiting event); returns true when
    /// [`FLUSH_EVERY`] events are waiting. Unknown positions are ignored.
    pub fn add_n(&self, position: usize, n: u64) -> bool {
        let Some(count) = self.counts.get(position) else {
            return false;
        };
        count.set(count.get().saturating_add(n));
        let waiting = self.waiting.get().saturating_add(1);
        self.waiting.set(waiting);
        waiting >= FLUSH_EVERY
    }

    /// Calls `emit(position, count)` for every non-zero count and zeroes them.
    pub fn drain(&self, mut emit: impl FnMut(usize, u64)) {
        if self.waiting.replace(0) == 0 {
            return;
        }
        for (position, count) in self.counts.iter().enumerate() {
            let n = count.replace(0);
            if n > 0 {
                emit(position, n);
            }
        }
    }
}

/// How long a worker keeps calling a rule's key table full after it last
/// saw a key find no room.
pub const TABLE_FULL_HOLD: Nanos = 10 * sluice_core::SECOND;

/// One worker's view of whether a rule's key table is full: from a flush
/// that counted [`RuleEvent::TableFull`] until [`TABLE_FULL_HOLD`] passes
/// without one. Each worker adds 1 to the rule's Envoy-wide gauge while it
/// sees the table full.
#[derive(Debug, Default)]
pub struct TableWatch {
    last_full: Cell<Option<Nanos>>,
}

/// A change in what a worker sees of a table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableChange {
    /// Keys started finding no room.
    BecameFull,
    /// No key found no room for [`TABLE_FULL_HOLD`].
    NoLongerFull,
}

impl TableWatch {
    /// Notes a flush at `now` that counted `full` table-full events.
    pub fn observe(&self, full: u64, now: Nanos) -> Option<TableChange> {
        match (self.last_full.get(), full > 0) {
            (None, true) => {
                self.last_full.set(Some(now));
                Some(TableChange::BecameFull)
            }
            (Some(_), true) => {
                self.last_full.set(Some(now));
                None
            }
            (Some(last), false) if now.saturating_sub(last) >= TABLE_FULL_HOLD => {
                self.last_full.set(None);
                Some(TableChange::NoLongerFull)
            }
            _ => None,
        }
    }

    /// Whether this worker sees the table full.
    pub fn is_full(&self) -> bool {
        self.last_full.get().is_some()
    }
}

/// The most spans of block ends a [`BlockWatch`] keeps.
pub const BLOCK_SPANS: u64 = 64;

/// One worker's share of a rule's Envoy-wide gauge of keys blocked now:
/// the blocks it started and when they end, at the flush that counted
/// them plus the rule's longest `block_for`, rounded up to a 64th of it
/// (so at most [`BLOCK_SPANS`] + 1 spans are kept, whatever the traffic).
/// A block ends in the gauge up to a flush period and a 64th of
/// `block_for` after it ends in shared data.
#[derive(Debug)]
pub struct BlockWatch {
    block: Nanos,
    /// Blocks still counted, by when they end (in order), each span once.
    ends: std::cell::RefCell<std::collections::VecDeque<(Nanos, u64)>>,
}

impl BlockWatch {
    /// The watch of a rule whose longest local block is `block`.
    pub fn new(block: Nanos) -> BlockWatch {
        BlockWatch {
            block,
            ends: Default::default(),
        }
    }

    /// Notes a flush at `now` that counted `started` blocks; returns the
    /// gauge's move: the blocks started, less the blocks that ended.
    pub fn observe(&self, started: u64, now: Nanos) -> i64 {
        let mut ends = self.ends.borrow_mut();
        let mut ended = 0u64;
        while let Some(&(_, n)) = ends.front().filter(|(end, _)| *end <= now) {
            ended = ended.saturating_add(n);
            ends.pop_front();
        }
        if started > 0 {
            let span = (self.block / BLOCK_SPANS).max(1);
            let end = now
                .saturating_add(self.block)
                .div_ceil(span)
                .saturating_mul(span);
            match ends.back_mut() {
                Some((last, n)) if *last == end => *n = n.saturating_add(started),
                Some(_) | None => ends.push_back((end, started)),
            }
        }
        let delta = i128::from(started) - i128::from(ended);
        i64::try_from(delta).unwrap_or(0)
    }

    /// The blocks this worker still counts.
    pub fn held(&self) -> u64 {
        self.ends.borrow().iter().map(|&(_, n)| n).sum()
    }
}

#[cfg(test)]
pub mod fake;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_is_full_from_its_first_event_until_a_quiet_hold() {
        let w = TableWatch::default();
        assert_eq!(w.observe(0, 0), None);
        assert_eq!(w.observe(3, 1), Some(TableChange::BecameFull));
        assert_eq!(w.observe(1, 2), None);
        assert_eq!(w.observe(0, TABLE_FULL_HOLD), None);
        assert!(w.is_full());
        assert_eq!(
            w.observe(0, TABLE_FULL_HOLD + 2),
            Some(TableChange::NoLongerFull)
        );
        assert!(!w.is_full());
    }

    #[test]
    fn blocks_count_until_they_end_in_bounded_spans() {
        let block = 64 * SECOND_NANOS;
        let w = BlockWatch::new(block);
        assert_eq!(w.observe(2, 0), 2);
        assert_eq!(w.observe(1, SECOND_NANOS / 2), 1);
        assert_eq!(w.held(), 3);
        // Ends rounded up to a second (a 64th of the block).
        assert_eq!(w.observe(0, block), -2);
        assert_eq!(w.observe(0, block + SECOND_NANOS - 1), 0);
        assert_eq!(w.observe(0, block + SECOND_NANOS), -1);
        assert_eq!(w.held(), 0);
        // A flood of starts keeps at most BLOCK_SPANS + 1 spans.
        for t in 0..10_000u64 {
            w.observe(1, 2 * block + t * 10_000_000);
        }
        assert!(w.ends.borrow().len() as u64 <= BLOCK_SPANS + 1);
        // Started from 128 s every 10 ms: those of up to 163 s have ended.
        assert_eq!(w.held(), 6499);
    }

    const SECOND_NANOS: Nanos = 1_000_000_000;

    #[test]
    fn names() {
        assert_eq!(
            RuleEvent::ShadowDenied.metric_name("per-ip"),
            "sluice.per-ip.shadow_denied"
        );
        for (i, e) in RuleEvent::ALL.iter().enumerate() {
            assert_eq!(e.index(), i);
        }
        for (i, e) in GlobalEvent::ALL.iter().enumerate() {
            assert_eq!(e.index(), i);
        }
        assert_eq!(
            GlobalEvent::CasExhausted.metric_name(),
            "sluice.cas_exhausted"
        );
        assert_eq!(GlobalEvent::CasRetries.metric_name(), "sluice.cas_retries");
    }

    #[test]
    fn batch_counts_until_drained() {
        let batch = Batch::new(2);
        let denied = Batch::rule_position(1, RuleEvent::Denied);
        let cas = Batch::global_position(GlobalEvent::CasExhausted);
        assert_ne!(denied, cas);
        assert!(!batch.add(denied));
        assert!(!batch.add(denied));
        assert!(!batch.add(cas));
        assert!(!batch.add(999));
        let mut seen = Vec::new();
        batch.drain(|p, n| seen.push((p, n)));
        seen.sort_unstable();
        assert_eq!(seen, vec![(cas, 1), (denied, 2)]);
        let mut again = 0;
        batch.drain(|_, _| again += 1);
        assert_eq!(again, 0);
    }

    #[test]
    fn batch_adds_amounts() {
        let batch = Batch::new(1);
        let ms = Batch::rule_position(0, RuleEvent::DelayedMs);
        assert!(!batch.add_n(ms, 250));
        assert!(!batch.add_n(ms, 101));
        let mut seen = Vec::new();
        batch.drain(|p, n| seen.push((p, n)));
        assert_eq!(seen, vec![(ms, 351)]);
        assert_eq!(ceil_millis(MILLISECOND + 1), 2);
        assert_eq!(ceil_millis(100 * MILLISECOND), 100);
    }

    #[test]
    fn batch_asks_for_a_flush_at_the_threshold() {
        let batch = Batch::new(1);
        let allowed = Batch::rule_position(0, RuleEvent::Allowed);
        let asked = (0..FLUSH_EVERY).filter(|_| batch.add(allowed)).count();
        assert_eq!(asked, 1);
        let mut total = 0;
        batch.drain(|_, n| total += n);
        assert_eq!(total, FLUSH_EVERY);
        assert!(!batch.add(allowed));
    }
}
