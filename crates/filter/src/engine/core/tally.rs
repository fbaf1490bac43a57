//! What has happened to a request so far: what it reports, which rules
//! admitted it, and what it consumed (its undo log, [`Undo`]), so that a
//! denial refunds it. It knows no kind of limit.

use super::env::Env;
use super::held::{Held, HeldPermit};
use super::renewal::Renewal;
use super::settle::Owed;
use super::undo::Undo;
use crate::config::{HeadersMode, Plan};
use crate::headers::{more_restrictive, Reported};
use crate::local::SharedStore;
use crate::metrics::{GlobalEvent, MetricSink, RuleEvent};
use crate::rls::Descriptor;
use sluice_core::{Decision, Holder, Nanos, SECOND};
use sluice_wire::LimitSpec;

/// What has happened to a request so far.
#[derive(Debug)]
pub(crate) struct Tally {
    pub(crate) now: Nanos,
    /// Who holds the permits the request takes.
    pub(crate) holder: Holder,
    pub(crate) report: Option<Reported>,
    /// Every enforcing limit that admitted, in order (only when `policies`).
    pub(crate) applied: Vec<Reported>,
    /// The headers list every limit's policy: keep `applied`.
    policies: bool,
    /// The enforcing limit with the longest delay, if any delays.
    pub(crate) delayed: Option<Reported>,
    /// Rules that admitted the request (counted `allowed` if it passes).
    pub(crate) admitted: Vec<usize>,
    /// Rules whose elastic limits lent the request their extra allowance
    /// (counted `borrowed` if it passes).
    pub(crate) borrowed: Vec<usize>,
    pub(crate) shadow_denied: Vec<usize>,
    /// What the request consumed, oldest first: undone newest first.
    pub(crate) consumed: Vec<Undo>,
    /// The global permits the limiter granted (local ones are in
    /// `consumed`).
    pub(crate) global_permits: Vec<HeldPermit>,
    /// What rules with a response cost settle once the response says it.
    pub(crate) owed: Vec<Owed>,
    /// The global rate limits the limiter counted the request in, each
    /// with its weight in `hits` (see `finish`).
    pub(crate) taken: Vec<LimitSpec<'static>>,
    /// Leases the request found running low, to renew whatever its fate.
    pub(crate) renewal: Option<Renewal>,
}

impl Tally {
    /// A request decided at `now` (set once a rule applies).
    pub(crate) fn new(plan: &Plan, holder: Holder) -> Tally {
        Tally {
            now: 0,
            holder,
            report: None,
            applied: Vec::new(),
            policies: matches!(plan.headers, HeadersMode::Ietf | HeadersMode::Both),
            delayed: None,
            admitted: Vec::new(),
            borrowed: Vec::new(),
            shadow_denied: Vec::new(),
            consumed: Vec::new(),
            global_permits: Vec::new(),
            owed: Vec::new(),
            taken: Vec::new(),
            renewal: None,
        }
    }

    /// Notes what an enforcing limit that admitted reports.
    pub(crate) fn note(&mut self, reported: Reported) {
        self.report = Some(more_restrictive(self.report, reported));
        if self.policies {
            push_one(&mut self.applied, reported);
        }
    }

    /// Keeps `reported` as the delaying limit if it delays longest so far.
    pub(crate) fn note_delay(&mut self, reported: Reported) {
        let longest = self.delayed.map_or(0, |d| d.decision.delay);
        if reported.decision.delay > longest {
            self.delayed = Some(reported);
        }
    }

    /// Refunds, newest first, what was consumed since `mark`.
    pub(crate) fn refund_since<S, M>(&mut self, mark: usize, env: &Env<'_, S, M>)
    where
        S: SharedStore + ?Sized,
        M: MetricSink + ?Sized,
    {
        let now = self.now;
        self.refund_at(mark, env, now);
    }

    /// Refunds at `now`, newest first, what was consumed since `mark`: a
    /// local limit as admitted when it conformed (the decision time plus
    /// its delay), a lease by giving the units back to it, permits by
    /// releasing them.
    pub(crate) fn refund_at<S, M>(&mut self, mark: usize, env: &Env<'_, S, M>, now: Nanos)
    where
        S: SharedStore + ?Sized,
        M: MetricSink + ?Sized,
    {
        while self.consumed.len() > mark {
            let Some(undo) = self.consumed.pop() else {
                break;
            };
            if undo.undo(env.store, now).is_err() {
                env.metrics.global(GlobalEvent::CasExhausted);
            }
        }
    }

    /// The permits the request holds, taken out: the local ones leave the
    /// log (whoever holds them now gives them back).
    pub(crate) fn take_held(&mut self) -> Held {
        let mut local = Vec::new();
        self.consumed.retain(|undo| match undo {
            Undo::Permit(permit) => {
                local.push(permit.clone());
                false
            }
            Undo::State { .. } | Undo::Lease { .. } => true,
        });
        Held {
            local,
            global: std::mem::take(&mut self.global_permits),
        }
    }

    /// Notes what rule `rule` owes once it admitted the request for
    /// `estimate`: the local limits consumed since `consumed_mark` (a rule
    /// with a response cost has local rate limits only), and the wire forms
    /// of its global limits.
    pub(crate) fn owe(
        &mut self,
        rule: usize,
        estimate: u64,
        consumed_mark: usize,
        global: (Vec<LimitSpec<'static>>, Vec<Descriptor>),
        shadow: bool,
    ) {
        let (global, descriptors) = global;
        let local = self
            .consumed
            .iter()
            .skip(consumed_mark)
            .filter_map(|undo| match undo {
                Undo::State { at, limit, .. } => Some((at.clone(), limit.clone())),
                Undo::Lease { .. } | Undo::Permit(_) => None,
            })
            .collect();
        self.owed.push(Owed {
            rule,
            estimate,
            admitted_at: self.now,
            local,
            global,
            descriptors,
            global_counted: true,
            shadow,
            outcome: None,
        });
    }

    /// Counts the rules that admitted the request, and those that lent it
    /// their extra allowance.
    pub(crate) fn count_allowed<M: MetricSink + ?Sized>(&self, metrics: &M) {
        for &rule in &self.admitted {
            if !self.shadow_denied.contains(&rule) {
                metrics.rule(rule, RuleEvent::Allowed);
            }
        }
        for &rule in &self.borrowed {
            metrics.rule(rule, RuleEvent::Borrowed);
        }
    }
}

/// Why a request is denied: the denying limit's report, and how long the
/// request may wait for a permit instead (a concurrency limit in delay
/// mode; counted `denied` only if it never gets one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Refusal {
    pub(crate) report: Reported,
    pub(crate) wait: Option<Nanos>,
}

impl From<Reported> for Refusal {
    fn from(report: Reported) -> Self {
        Refusal { report, wait: None }
    }
}

/// The decision reported when contention or a failure prevents deciding:
/// deny, and suggest retrying in a second.
pub(crate) fn undecided(requests: u64) -> Decision {
    Decision::over_limit(requests, SECOND)
}

/// Pushes `item` onto `list`, which most requests leave at one item: the
/// first push makes room for one, not four (four undo records or reports
/// are a large chunk for the allocator, taken and freed on every request).
pub(crate) fn push_one<T>(list: &mut Vec<T>, item: T) {
    if list.capacity() == 0 {
        list.reserve_exact(1);
    }
    list.push(item);
}
