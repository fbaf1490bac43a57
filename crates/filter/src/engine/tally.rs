//! What has happened to a request so far: what it reports, which rules
//! admitted it, and what it consumed, so that a denial refunds it. The
//! refund of every kind of consumption is here, once.

use super::concurrency::{self, Held, HeldPermit};
use super::renewal::Renewal;
use super::settle::{LocalState, Owed};
use super::verdict::{Admitted, Delayed, Denied, Verdict};
use crate::config::{HeadersMode, Plan, RuleLimit};
use crate::headers::{more_restrictive, Reported};
use crate::lease;
use crate::local::{Contended, SharedStore};
use crate::metrics::{GlobalEvent, MetricSink, RuleEvent};
use sluice_core::{Decision, Denial, Holder, Limit, Nanos, SECOND};
use sluice_wire::LimitSpec;

/// The plan, shared data and metrics a request is decided with.
pub(super) struct Env<'a, S: ?Sized, M: ?Sized> {
    pub(super) plan: &'a Plan,
    pub(super) store: &'a S,
    pub(super) metrics: &'a M,
}

impl<'a, S: ?Sized, M: ?Sized> Env<'a, S, M> {
    pub(super) fn new(plan: &'a Plan, store: &'a S, metrics: &'a M) -> Self {
        Env {
            plan,
            store,
            metrics,
        }
    }

    /// Limit `limit` of rule `rule`.
    pub(super) fn rule_limit(&self, rule: usize, limit: usize) -> Option<&'a RuleLimit> {
        self.plan.rules.get(rule).and_then(|r| r.limits.get(limit))
    }
}

/// What has happened to a request so far.
#[derive(Debug)]
pub(super) struct Tally {
    pub(super) now: Nanos,
    /// Who holds the permits the request takes.
    pub(super) holder: Holder,
    pub(super) report: Option<Reported>,
    /// Every enforcing limit that admitted, in order (only when `policies`).
    pub(super) applied: Vec<Reported>,
    /// The headers list every limit's policy: keep `applied`.
    pub(super) policies: bool,
    /// The enforcing limit with the longest delay, if any delays.
    pub(super) delayed: Option<Reported>,
    /// Rules that admitted the request (counted `allowed` if it passes).
    pub(super) admitted: Vec<usize>,
    /// Rules whose elastic limits lent the request their extra allowance
    /// (counted `borrowed` if it passes).
    pub(super) borrowed: Vec<usize>,
    pub(super) shadow_denied: Vec<usize>,
    /// What the request consumed, oldest first: undone newest first.
    pub(super) consumed: Vec<Undo>,
    /// The global permits the limiter granted (local ones are in
    /// `consumed`).
    pub(super) global_permits: Vec<HeldPermit>,
    /// What rules with a response cost settle once the response says it.
    pub(super) owed: Vec<Owed>,
    /// The global rate limits the limiter counted the request in, each
    /// with its weight in `hits` (see `finish`).
    pub(super) taken: Vec<LimitSpec<'static>>,
    /// Leases the request found running low, to renew whatever its fate.
    pub(super) renewal: Option<Renewal>,
}

/// Something this request consumed, to give back if it is denied: plain
/// data, undone without the plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Undo {
    /// `weight` units of `limit` consumed in local state `at`, counted as
    /// admitted at `admitted_at` (the decision time plus its delay).
    State {
        at: LocalState,
        limit: Limit,
        admitted_at: Nanos,
        weight: u64,
    },
    /// `weight` units spent from this Envoy's lease in the slot at `key`:
    /// the grant made at `granted_at` for the key of `fingerprint`.
    Lease {
        key: String,
        fingerprint: u64,
        granted_at: Nanos,
        weight: u64,
    },
    /// Local permits taken.
    Permit(HeldPermit),
}

impl Undo {
    /// Gives back at `now` what this consumed.
    fn undo<S: SharedStore + ?Sized>(self, store: &S, now: Nanos) -> Result<(), Contended> {
        match self {
            Undo::State {
                at,
                limit,
                admitted_at,
                weight,
            } => at.refund(store, &limit, admitted_at, now, weight),
            Undo::Lease {
                key,
                fingerprint,
                granted_at,
                weight,
            } => lease::give_back(store, &key, fingerprint, granted_at, weight),
            Undo::Permit(permit) => concurrency::release_local(store, &permit, now),
        }
    }
}

impl Tally {
    /// A request decided at `now` (set once a rule applies).
    pub(super) fn new(plan: &Plan, holder: Holder) -> Tally {
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
    pub(super) fn note(&mut self, reported: Reported) {
        self.report = Some(more_restrictive(self.report, reported));
        if self.policies {
            self.applied.push(reported);
        }
    }

    /// Keeps `reported` as the delaying limit if it delays longest so far.
    pub(super) fn note_delay(&mut self, reported: Reported) {
        let longest = self.delayed.map_or(0, |d| d.decision.delay);
        if reported.decision.delay > longest {
            self.delayed = Some(reported);
        }
    }

    /// Refunds, newest first, what was consumed since `mark`.
    pub(super) fn refund_since<S, M>(&mut self, mark: usize, env: &Env<'_, S, M>)
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
    pub(super) fn refund_at<S, M>(&mut self, mark: usize, env: &Env<'_, S, M>, now: Nanos)
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
    pub(super) fn take_held(&mut self) -> Held {
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

    /// Denies the request for `report`, refunding everything it consumed.
    pub(super) fn deny<S, M>(self, report: Reported, env: &Env<'_, S, M>) -> Verdict
    where
        S: SharedStore + ?Sized,
        M: MetricSink + ?Sized,
    {
        Verdict::Deny(self.denied(report, env))
    }

    /// [`deny`](Self::deny)'s denial.
    pub(super) fn denied<S, M>(mut self, report: Reported, env: &Env<'_, S, M>) -> Denied
    where
        S: SharedStore + ?Sized,
        M: MetricSink + ?Sized,
    {
        self.refund_since(0, env);
        let wait = env
            .rule_limit(report.rule, report.limit)
            .and_then(|l| l.concurrency())
            .and_then(|c| c.max_wait)
            .filter(|_| report.decision.denial == Some(Denial::OverLimit));
        if wait.is_none() {
            // A request that may wait for a permit is counted when it ends.
            env.metrics.rule(report.rule, RuleEvent::Denied);
        }
        let mut applied = std::mem::take(&mut self.applied);
        applied.push(report);
        Denied {
            report,
            applied,
            held: self.take_held(),
            shadow_denied: self.shadow_denied,
            wait,
            renewal: self.renewal,
        }
    }

    /// Lets the request through, or holds it when some limit delays it
    /// (counted once the host holds it: [`Delayed::accept`]).
    pub(super) fn admit<M: MetricSink + ?Sized>(mut self, metrics: &M) -> Verdict {
        if let Some(limit) = self.delayed {
            return Verdict::Delay(Delayed {
                delay: limit.decision.delay,
                rule: limit.rule,
                limit,
                tally: self,
            });
        }
        self.count_allowed(metrics);
        Verdict::Allow(Admitted {
            held: self.take_held(),
            report: self.report,
            applied: self.applied,
            shadow_denied: self.shadow_denied,
            owed: self.owed,
            renewal: self.renewal,
        })
    }

    /// Counts the rules that admitted the request, and those that lent it
    /// their extra allowance.
    pub(super) fn count_allowed<M: MetricSink + ?Sized>(&self, metrics: &M) {
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

/// The decision reported when contention or a failure prevents deciding:
/// deny, and suggest retrying in a second.
pub(super) fn undecided(requests: u64) -> Decision {
    Decision::over_limit(requests, SECOND)
}
