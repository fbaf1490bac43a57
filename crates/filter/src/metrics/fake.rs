//! A metric sink that remembers every event, for tests.

use super::{GlobalEvent, MetricSink, RuleEvent};
use sluice_core::Nanos;

/// A sink that remembers every event, for tests.
#[derive(Debug, Default)]
pub struct RecordingSink {
    /// Per-rule events in order.
    pub rules: std::cell::RefCell<Vec<(usize, RuleEvent)>>,
    /// Global events in order.
    pub globals: std::cell::RefCell<Vec<GlobalEvent>>,
    /// Delays in order: (rule, delay).
    pub delays: std::cell::RefCell<Vec<(usize, Nanos)>>,
}

impl RecordingSink {
    /// How many times `event` was counted for `rule`.
    pub fn count(&self, rule: usize, event: RuleEvent) -> usize {
        self.rules
            .borrow()
            .iter()
            .filter(|e| **e == (rule, event))
            .count()
    }

    /// How many times `event` was counted.
    pub fn count_global(&self, event: GlobalEvent) -> usize {
        self.globals
            .borrow()
            .iter()
            .filter(|e| **e == event)
            .count()
    }
}

impl MetricSink for RecordingSink {
    fn rule(&self, rule: usize, event: RuleEvent) {
        self.rules.borrow_mut().push((rule, event));
    }

    fn rule_n(&self, rule: usize, event: RuleEvent, n: u64) {
        for _ in 0..n.min(1000) {
            self.rules.borrow_mut().push((rule, event));
        }
    }

    fn global(&self, event: GlobalEvent) {
        self.globals.borrow_mut().push(event);
    }

    fn delayed(&self, rule: usize, delay: Nanos) {
        self.delays.borrow_mut().push((rule, delay));
    }
}
