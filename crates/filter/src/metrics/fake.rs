//! A metric sink that remembers every event, for tests.

use super::{GlobalEvent, MetricSink, RuleEvent};
use crate::config::Rule;
use sluice_core::Nanos;

/// A sink that remembers every event, for tests. Made
/// [`for_rules`](Self::for_rules), it also fails the test when a rule counts
/// an event it has no counter for (one [`RuleEvent::applies_to`] denies):
/// the host would lose that count.
#[derive(Debug, Default)]
pub struct RecordingSink {
    /// The counters each rule has (none known: not checked).
    pub defined: Defined,
    /// Per-rule events in order.
    pub rules: std::cell::RefCell<Vec<(usize, RuleEvent)>>,
    /// Global events in order.
    pub globals: std::cell::RefCell<Vec<GlobalEvent>>,
    /// Delays in order: (rule, delay).
    pub delays: std::cell::RefCell<Vec<(usize, Nanos)>>,
}

/// Per rule, the events it has counters for, as the host defines them.
#[derive(Debug, Default)]
pub struct Defined(Vec<[bool; RuleEvent::ALL.len()]>);

impl Defined {
    /// The counters of `rules`, by [`RuleEvent::applies_to`].
    pub fn for_rules(rules: &[Rule]) -> Defined {
        Defined(
            rules
                .iter()
                .map(|rule| RuleEvent::ALL.map(|e| e.applies_to(rule)))
                .collect(),
        )
    }

    /// Fails the test when rule `rule` has no counter for `event` (a rule
    /// not known is not checked).
    pub fn check(&self, rule: usize, event: RuleEvent) {
        if let Some(defined) = self.0.get(rule) {
            assert!(
                defined[event.index()],
                "rule {rule} counted {event:?}, for which it has no counter"
            );
        }
    }
}

impl RecordingSink {
    /// A sink checking every count against the counters `rules` have.
    pub fn for_rules(rules: &[Rule]) -> RecordingSink {
        RecordingSink {
            defined: Defined::for_rules(rules),
            ..RecordingSink::default()
        }
    }

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
        self.defined.check(rule, event);
        self.rules.borrow_mut().push((rule, event));
    }

    fn rule_n(&self, rule: usize, event: RuleEvent, n: u64) {
        self.defined.check(rule, event);
        for _ in 0..n.min(1000) {
            self.rules.borrow_mut().push((rule, event));
        }
    }

    fn global(&self, event: GlobalEvent) {
        self.globals.borrow_mut().push(event);
    }

    fn delayed(&self, rule: usize, delay: Nanos) {
        self.defined.check(rule, RuleEvent::Delayed);
        self.defined.check(rule, RuleEvent::DelayedMs);
        self.delays.borrow_mut().push((rule, delay));
    }
}
