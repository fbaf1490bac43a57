//! What has happened to a request so far: what it reports, which rules
//! admitted it, and what it consumed, so that a denial refunds it. The
//! refund of every kind of consumption is here, once.

use super::concurrency::{self, Held};
use super::renewal::Renewal;
use super::settle::Owed;
use super::verdict::{Admitted, Delayed, Denied, Verdict};
use crate::config::{HeadersMode, LeasePolicy, LimitKind, LocalLimit, Plan, RuleLimit, Sync};
use crate::headers::{more_restrictive, Reported};
use crate::layout;
use crate::lease;
use crate::local::{self, Contended, SharedStore};
use crate::metrics::{GlobalEvent, MetricSink, RuleEvent};
use crate::table::{self, Spot};
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

    /// The lease policy of limit `limit` of rule `rule`, if it is leased.
    pub(super) fn lease_policy(&self, rule: usize, limit: usize) -> Option<&'a LeasePolicy> {
        match self.rule_limit(rule, limit)?.sync()? {
            Sync::Lease(policy) => Some(policy),
            _ => None,
        }
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
    pub(super) consumed: Vec<Consumed>,
    /// The permits taken: one local entry per [`Target::Permit`] consumed,
    /// in the same order; global ones once the limiter granted them.
    pub(super) held: Held,
    /// What rules with a response cost settle once the response says it.
    pub(super) owed: Vec<Owed>,
    /// The global rate limits the limiter counted the request in, each
    /// with its weight in `hits` (see `finish`).
    pub(super) taken: Vec<LimitSpec<'static>>,
    /// Leases the request found running low, to renew whatever its fate.
    pub(super) renewal: Option<Renewal>,
}

/// Something this request consumed, to refund if the request is denied.
#[derive(Debug, Clone, Copy)]
pub(super) struct Consumed {
    pub(super) rule: usize,
    pub(super) limit: usize,
    pub(super) target: Target,
    /// The units consumed.
    pub(super) weight: u64,
    /// When the limit decided (see [`crate::local::decided_at`]).
    pub(super) at: Nanos,
    /// The limit's delay: the request counts as admitted this long after
    /// the decision.
    pub(super) delay: Nanos,
}

/// Where a consumed limit's state lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Target {
    /// The entry of a local limit's key table where the key of
    /// `fingerprint` was decided.
    Entry { spot: Spot, fingerprint: u64 },
    /// The dedicated key of the local limit's override at this position.
    Override(usize),
    /// The extra allowance of an elastic local limit: an entry of its table.
    Extra(Spot),
    /// Permits of a local concurrency limit: the last of the tally's
    /// `held.local`.
    Permit,
    /// This Envoy's lease of a global limit, in this slot: the grant made
    /// at `granted_at` for the key of `fingerprint`.
    Lease {
        slot: u64,
        fingerprint: u64,
        granted_at: Nanos,
    },
}

/// Where a local limit's state is in shared data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum StateAt<'a> {
    /// A key of its own (an override's).
    Key(&'a str),
    /// An entry of the key table under this prefix.
    Entry(&'a str, Spot),
}

impl StateAt<'_> {
    /// Gives back, at `now`, `cost` consumed at `admitted_at`.
    pub(super) fn refund<S: SharedStore + ?Sized>(
        self,
        store: &S,
        limit: &Limit,
        admitted_at: Nanos,
        now: Nanos,
        cost: u64,
    ) -> Result<(), Contended> {
        match self {
            StateAt::Key(key) => local::refund_at(store, key, limit, admitted_at, now, cost),
            StateAt::Entry(prefix, spot) => {
                table::refund(store, prefix, spot, limit, admitted_at, now, cost)
            }
        }
    }
}

impl Target {
    /// The limit deciding `local` at this target, and where its state is;
    /// `None` for a lease or a permit.
    pub(super) fn locate(self, local: &LocalLimit) -> Option<(&Limit, StateAt<'_>)> {
        match self {
            Target::Entry { spot, .. } => Some((
                &local.quota.limit,
                StateAt::Entry(&local.state_prefix, spot),
            )),
            Target::Override(i) => {
                let o = local.quota.overrides.get(i)?;
                Some((&o.limit, StateAt::Key(&o.state_key)))
            }
            Target::Extra(spot) => {
                let elastic = local.elastic.as_ref()?;
                Some((&elastic.extra, StateAt::Entry(&elastic.place, spot)))
            }
            Target::Lease { .. } | Target::Permit => None,
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
            held: Held::default(),
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
    /// its delay), a lease by giving the units back to it.
    pub(super) fn refund_at<S, M>(&mut self, mark: usize, env: &Env<'_, S, M>, now: Nanos)
    where
        S: SharedStore + ?Sized,
        M: MetricSink + ?Sized,
    {
        let mut key = String::new();
        while self.consumed.len() > mark {
            let Some(c) = self.consumed.pop() else { break };
            let refunded = match c.target {
                Target::Lease {
                    slot,
                    fingerprint,
                    granted_at,
                } => {
                    let Some(policy) = env.lease_policy(c.rule, c.limit) else {
                        continue;
                    };
                    layout::slot_key(&mut key, &policy.prefix, slot);
                    lease::give_back(env.store, &key, fingerprint, granted_at, c.weight)
                }
                Target::Permit => match self.held.local.pop() {
                    Some(permit) => concurrency::release_local(env.store, &permit, now),
                    None => continue,
                },
                target => {
                    let located = match env.rule_limit(c.rule, c.limit).map(|l| &l.kind) {
                        Some(LimitKind::Local(local)) => target.locate(local),
                        _ => None,
                    };
                    let Some((limit, at)) = located else {
                        continue;
                    };
                    let admitted_at = c.at.saturating_add(c.delay);
                    at.refund(env.store, limit, admitted_at, now, c.weight)
                }
            };
            if refunded.is_err() {
                env.metrics.global(GlobalEvent::CasExhausted);
            }
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
            shadow_denied: self.shadow_denied,
            held: self.held,
            wait,
            renewal: self.renewal,
        }
    }

    /// Lets the request through, or holds it when some limit delays it
    /// (counted once the host holds it: [`Delayed::accept`]).
    pub(super) fn admit<M: MetricSink + ?Sized>(self, metrics: &M) -> Verdict {
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
            report: self.report,
            applied: self.applied,
            shadow_denied: self.shadow_denied,
            held: self.held,
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
