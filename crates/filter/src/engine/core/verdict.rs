//! What the engine answers for a request: let it through, hold it, deny it,
//! or ask the limiter first.

use super::env::Env;
use super::held::Held;
use super::pending::PendingCheck;
use super::renewal::Renewal;
use super::settle::Owed;
use super::tally::{Refusal, Tally};
use crate::config::Plan;
use crate::headers::Reported;
use crate::local::SharedStore;
use crate::metrics::{MetricSink, RuleEvent};
use sluice_core::{Decision, Denial, Nanos};
use sluice_wire::LimitSpec;

/// What to do with a request (`F`: what each kind of global limit does
/// with the limiter's answer; see [`crate::engine::Verdict`]).
#[derive(Debug)]
pub enum Verdict<F> {
    /// Let it through.
    Allow(Admitted),
    /// Let it through once it has been held for [`Delayed::delay`].
    /// Boxed, as `Check`: every verdict moves at the size of its largest
    /// variant, and most are `Allow`.
    Delay(Box<Delayed>),
    /// Answer with the denial response.
    Deny(Denied),
    /// Ask the limiter, then call [`finish`](crate::engine::finish).
    Check(Box<PendingCheck<F>>),
}

impl<F> Verdict<F> {
    /// The lease renewal a final verdict carries, taken out: the host sends
    /// it from its root context, whatever becomes of the request, and
    /// settles it with the answer ([`Renewal::settle`]). A
    /// [`Verdict::Check`] keeps its own until [`finish`](crate::engine::finish).
    pub fn take_renewal(&mut self) -> Option<Renewal> {
        match self {
            Verdict::Allow(admitted) => admitted.renewal.take(),
            Verdict::Delay(delayed) => delayed.tally.renewal.take(),
            Verdict::Deny(denied) => denied.renewal.take(),
            Verdict::Check(_) => None,
        }
    }
}

/// An admitted request and what its response reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admitted {
    /// The most restrictive enforcing limit, for the rate-limit headers.
    pub report: Option<Reported>,
    /// Every enforcing limit that counted the request, in order (kept only
    /// for the IETF headers' policies).
    pub applied: Vec<Reported>,
    /// Shadow rules that would have denied.
    pub shadow_denied: Vec<usize>,
    /// The permits of concurrency limits the request holds until its
    /// stream ends.
    pub held: Held,
    /// What rules with a response cost settle once the response says it.
    pub owed: Vec<Owed>,
    /// Leases the request found running low: the host sends their
    /// renewal (see [`Verdict::take_renewal`]).
    pub renewal: Option<Renewal>,
}

/// A denied request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denied {
    /// The denying limit's decision (its rule is `report.rule`).
    pub report: Reported,
    /// Every enforcing limit decided for the request, in order, the denying
    /// one last (kept only for the IETF headers' policies).
    pub applied: Vec<Reported>,
    /// Shadow rules that would have denied.
    pub shadow_denied: Vec<usize>,
    /// Global permits a call took though the request is denied (its other
    /// call, or the failure mode, denied it): the host gives them back at
    /// once. Local ones are given back already.
    pub held: Held,
    /// A concurrency limit in delay mode denied: the request may wait this
    /// long for a permit, decided again at the worker's ticks (counted
    /// `denied` only if it never gets one).
    pub wait: Option<Nanos>,
    /// Leases the request found running low (renewed whatever its fate).
    pub renewal: Option<Renewal>,
    /// The request's key under the denying rule, when a local step denied
    /// it (moved, not copied: for top limited keys and the access log).
    pub key: Option<String>,
}

/// An admitted request that conforms only after a delay.
///
/// Its limits are already consumed as of the time it conforms; the host
/// calls [`accept`](Self::accept) once it holds the request,
/// [`refuse`](Self::refuse) if it cannot hold it, and
/// [`give_back`](Self::give_back) if the client leaves while it waits.
#[derive(Debug)]
pub struct Delayed {
    /// How long to hold the request: the longest delay of its limits.
    pub delay: Nanos,
    /// The rule of the limit with that delay (its `max_queued` bounds the
    /// waiting requests, its metrics count the delay).
    pub rule: usize,
    /// The decision of that limit.
    pub(crate) limit: Reported,
    pub(crate) tally: Tally,
}

impl Delayed {
    /// When the request conforms: the decision time plus its delay (for a
    /// global limit, the filter's clock before the call).
    pub fn resume_at(&self) -> Nanos {
        self.tally.now.saturating_add(self.delay)
    }

    /// What the response reports once the request goes through (the
    /// permits it holds are [`take_held`](Self::take_held)'s).
    pub fn admitted(&self) -> Admitted {
        Admitted {
            report: self.tally.report,
            applied: self.tally.applied.clone(),
            shadow_denied: self.tally.shadow_denied.clone(),
            held: Held::default(),
            owed: Vec::new(),
            renewal: None,
        }
    }

    /// What the request owes once its response says what it cost, taken
    /// out once the host holds it (as [`take_held`](Self::take_held)).
    pub fn take_owed(&mut self) -> Vec<Owed> {
        std::mem::take(&mut self.tally.owed)
    }

    /// The permits the request holds, taken out once the host holds it:
    /// the host gives them back when the stream ends, whether or not it
    /// waited to the end ([`give_back`](Self::give_back) leaves them).
    pub fn take_held(&mut self) -> Held {
        self.tally.take_held()
    }

    /// Counts the request as admitted and delayed, once it is held.
    pub fn accept<M: MetricSink + ?Sized>(&self, metrics: &M) {
        self.tally.count_allowed(metrics);
        metrics.delayed(self.rule, self.delay);
    }

    /// Denies the request instead of holding it (its rule's queue is full):
    /// what it consumed is refunded, and `retry-after` is its delay.
    pub fn refuse<S, M>(self, plan: &Plan, store: &S, metrics: &M) -> Denied
    where
        S: SharedStore + ?Sized,
        M: MetricSink + ?Sized,
    {
        let env = Env::new(plan, store, metrics);
        let mut report = self.limit;
        report.decision = Decision {
            allowed: false,
            remaining: 0,
            retry_after: self.delay,
            delay: 0,
            denial: Some(Denial::OverLimit),
            ..report.decision
        };
        self.tally.denied(report.into(), &env)
    }

    /// Gives back at `now` what the request consumed locally, as admitted at
    /// the time it would have conformed: its client left while it waited.
    /// Returns the global rate limits the limiter counted it in (each with
    /// its weight in `hits`), for the host to refund.
    pub fn give_back<S, M>(
        mut self,
        plan: &Plan,
        store: &S,
        metrics: &M,
        now: Nanos,
    ) -> Vec<LimitSpec<'static>>
    where
        S: SharedStore + ?Sized,
        M: MetricSink + ?Sized,
    {
        let env = Env::new(plan, store, metrics);
        self.tally.refund_at(0, &env, now);
        std::mem::take(&mut self.tally.taken)
    }
}

impl Tally {
    /// Denies the request for `refusal`, refunding everything it consumed.
    pub(crate) fn deny<S, M, F>(self, refusal: Refusal, env: &Env<'_, S, M>) -> Verdict<F>
    where
        S: SharedStore + ?Sized,
        M: MetricSink + ?Sized,
    {
        Verdict::Deny(self.denied(refusal, env))
    }

    /// [`deny`](Self::deny)'s denial.
    pub(crate) fn denied<S, M>(mut self, refusal: Refusal, env: &Env<'_, S, M>) -> Denied
    where
        S: SharedStore + ?Sized,
        M: MetricSink + ?Sized,
    {
        self.refund_since(0, env);
        let report = refusal.report;
        let wait = refusal
            .wait
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
            key: None,
        }
    }

    /// Lets the request through, or holds it when some limit delays it
    /// (counted once the host holds it: [`Delayed::accept`]).
    pub(crate) fn admit<M: MetricSink + ?Sized, F>(mut self, metrics: &M) -> Verdict<F> {
        if let Some(limit) = self.delayed {
            return Verdict::Delay(Box::new(Delayed {
                delay: limit.decision.delay,
                rule: limit.rule,
                limit,
                tally: self,
            }));
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
}
