//! Lease renewals no request waits for: the request that brings a lease
//! below half of its grant spends from it and starts a renewal (see
//! [`crate::lease`]); the host sends it as a call of its own, from its root
//! context, and hands the answer to [`Renewal::settle`].

use super::leased::install_grant;
use super::tally::Env;
use super::walk::Applied;
use crate::config::Plan;
use crate::local::SharedStore;
use crate::metrics::MetricSink;
use sluice_core::{Limit, Nanos};
use sluice_wire::{check_json, limiter_key, CheckResponse, LimitSpec};

/// A `POST /v1/check` asking for more units of leases running low: each
/// leased limit weighs nothing (its request was served from the lease) and
/// asks for its units. Until it is settled, the leases it asks for wait for
/// it (no other request asks for them, up to the limiter's timeout).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Renewal {
    /// When the units were asked for (the filter's clock).
    asked_at: Nanos,
    leases: Vec<Renewing>,
    /// The wire form of each lease's limit, in the same order.
    limits: Vec<LimitSpec<'static>>,
}

/// One lease a renewal asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Renewing {
    rule: usize,
    limit: usize,
    slot: u64,
    fingerprint: u64,
}

impl Renewal {
    pub(super) fn new(asked_at: Nanos) -> Self {
        Renewal {
            asked_at,
            leases: Vec::new(),
            limits: Vec::new(),
        }
    }

    /// Adds the ask for `ask` units of the lease of limit `l` (`limit`) of
    /// `applied`, running low.
    pub(super) fn push(&mut self, applied: &Applied<'_, '_>, l: usize, limit: &Limit, ask: u64) {
        let key = limiter_key(&applied.rule.name, l, applied.key);
        // No priority classes with leases: no reserve.
        let spec = LimitSpec {
            lease: Some(ask),
            ..LimitSpec::new(key, limit)
        };
        self.leases.push(Renewing {
            rule: applied.index,
            limit: l,
            slot: applied.slot,
            fingerprint: applied.fingerprint,
        });
        self.limits.push(spec);
    }

    /// The body of the call, for the limiter of `domain`.
    pub fn body(&self, domain: &str) -> Vec<u8> {
        check_json(domain, 0, &self.limits, None, None)
    }

    /// Ends the renewal with the answer `body` of its call (`None`: it
    /// failed or was never made): each lease gets the units granted (none
    /// when the call failed or the limiter denied) and stops waiting.
    pub fn settle<S, M>(self, plan: &Plan, store: &S, metrics: &M, body: Option<&[u8]>)
    where
        S: SharedStore + ?Sized,
        M: MetricSink + ?Sized,
    {
        let env = Env::new(plan, store, metrics);
        let answer = body.and_then(|b| CheckResponse::parse(b, self.leases.len()));
        let answers = answer.as_ref().map(|a| a.limits.as_slice());
        for (i, lease) in self.leases.iter().enumerate() {
            let granted = answers.and_then(|a| a.get(i));
            install_grant(
                &env,
                lease.rule,
                lease.limit,
                lease.slot,
                lease.fingerprint,
                granted,
                self.asked_at,
            );
        }
    }
}
