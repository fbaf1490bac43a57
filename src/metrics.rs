//! Sluice's counters. Envoy shows them in `/stats` under the `wasmcustom.`
//! prefix, e.g. `wasmcustom.sluice.per-ip.denied`.

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
}

impl RuleEvent {
    /// Every per-rule event, in the order of their metric ids.
    pub const ALL: [RuleEvent; 4] = [
        RuleEvent::Allowed,
        RuleEvent::Denied,
        RuleEvent::ShadowDenied,
        RuleEvent::Skipped,
    ];

    /// The metric name's last component.
    pub fn suffix(self) -> &'static str {
        match self {
            RuleEvent::Allowed => "allowed",
            RuleEvent::Denied => "denied",
            RuleEvent::ShadowDenied => "shadow_denied",
            RuleEvent::Skipped => "skipped",
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
}

impl GlobalEvent {
    /// Every global event, in the order of their metric ids.
    pub const ALL: [GlobalEvent; 4] = [
        GlobalEvent::CasExhausted,
        GlobalEvent::ConfigErrors,
        GlobalEvent::FailureModeAllowed,
        GlobalEvent::LimiterErrors,
    ];

    /// The metric name.
    pub fn metric_name(self) -> &'static str {
        match self {
            GlobalEvent::CasExhausted => "sluice.cas_exhausted",
            GlobalEvent::ConfigErrors => "sluice.config_errors",
            GlobalEvent::FailureModeAllowed => "sluice.failure_mode_allowed",
            GlobalEvent::LimiterErrors => "sluice.limiter_errors",
        }
    }

    /// Position in [`GlobalEvent::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }
}

/// Where the request path reports what happened.
pub trait MetricSink {
    /// Counts `event` for the rule at index `rule`.
    fn rule(&self, rule: usize, event: RuleEvent);
    /// Counts a filter-wide `event`.
    fn global(&self, event: GlobalEvent);
}

/// A sink that remembers every event, for tests.
#[cfg(test)]
#[derive(Debug, Default)]
pub struct RecordingSink {
    /// Per-rule events in order.
    pub rules: std::cell::RefCell<Vec<(usize, RuleEvent)>>,
    /// Global events in order.
    pub globals: std::cell::RefCell<Vec<GlobalEvent>>,
}

#[cfg(test)]
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

#[cfg(test)]
impl MetricSink for RecordingSink {
    fn rule(&self, rule: usize, event: RuleEvent) {
        self.rules.borrow_mut().push((rule, event));
    }

    fn global(&self, event: GlobalEvent) {
        self.globals.borrow_mut().push(event);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    }
}
