//! Lease renewals no request waits for: the request that brings a lease
//! below half of its grant spends from it and starts a renewal (see
//! [`crate::lease`]); the host sends it as a call of its own, from its root
//! context, and hands the answer to [`Renewal::settle`]. A renewal carries
//! where each lease lives ([`LeaseSlot`]), so settling it needs no plan.

use super::call::borrowed;
use super::env::Env;
use crate::config::Plan;
use crate::layout;
use crate::lease;
use crate::local::{Contended, SharedStore};
use crate::metrics::{GlobalEvent, MetricSink};
use sluice_core::{Algorithm, Limit, Nanos, MILLISECOND};
use sluice_wire::{check_json, CheckResponse, LimitResult, LimitSpec};

/// A `POST /v1/check` asking for more units of leases running low: each
/// leased limit weighs nothing (its request was served from the lease) and
/// asks for its units. Until it is settled, the leases it asks for wait for
/// it (no other request asks for them, up to the limiter's timeout). The
/// worker's root sends the renewals its requests started as one call
/// ([`Renewal::absorb`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Renewal {
    /// When the units were asked for (the filter's clock), for the leases
    /// pushed from now on.
    asked_at: Nanos,
    /// Each lease asked for.
    leases: Vec<Asked>,
}

/// One lease's ask in a [`Renewal`].
#[derive(Debug, Clone, PartialEq, Eq)]
struct Asked {
    slot: LeaseSlot,
    /// The wire form of its limit, with the units asked for.
    spec: LimitSpec<'static>,
    /// When it was asked for (the filter's clock).
    asked_at: Nanos,
}

/// A key's lease in shared data: where it lives and what a grant to it is
/// spendable under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LeaseSlot {
    /// The shared-data key of the lease's slot.
    pub(crate) key: String,
    /// The key's fingerprint (its entry in the slot).
    pub(crate) fingerprint: u64,
    /// The leased limit.
    pub(crate) limit: Limit,
    /// How long a grant may be spent.
    pub(crate) ttl: Nanos,
}

impl Renewal {
    pub(crate) fn new(asked_at: Nanos) -> Self {
        Renewal {
            asked_at,
            leases: Vec::new(),
        }
    }

    /// Adds the ask for `ask` units of the lease at `slot`, running low,
    /// whose limit is checked under limiter key `key`.
    pub(crate) fn push(&mut self, slot: LeaseSlot, key: String, ask: u64) {
        // No priority classes with leases: no reserve.
        let spec = LimitSpec {
            lease: Some(ask),
            ..LimitSpec::new(key, &slot.limit)
        };
        self.leases.push(Asked {
            slot,
            spec,
            asked_at: self.asked_at,
        });
    }

    /// How many leases it asks for.
    pub fn len(&self) -> usize {
        self.leases.len()
    }

    /// Whether it asks for no lease.
    pub fn is_empty(&self) -> bool {
        self.leases.is_empty()
    }

    /// Takes the asks of `other` (of the same configuration) into this
    /// renewal, so that one call carries both. An ask for a limiter key
    /// already asked for replaces the older one: the limiter takes each key
    /// once per check, and only the newer ask is awaited.
    pub fn absorb(&mut self, other: Renewal) {
        for asked in other.leases {
            let same = self
                .leases
                .iter_mut()
                .find(|a| a.spec.key == asked.spec.key);
            match same {
                Some(older) => *older = asked,
                None => self.leases.push(asked),
            }
        }
    }

    /// The body of the call, for the limiter of `domain`.
    pub fn body(&self, domain: &str) -> Vec<u8> {
        let limits: Vec<LimitSpec<'_>> = self.leases.iter().map(|a| borrowed(&a.spec)).collect();
        check_json(domain, 0, &limits, None, None)
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
        for (i, asked) in self.leases.iter().enumerate() {
            let granted = answers.and_then(|a| a.get(i));
            install_grant(&env, &asked.slot, granted, asked.asked_at);
        }
    }
}

/// The shared-data key of the lease slot `slot` under `prefix`.
pub(crate) fn slot_key(prefix: &str, slot: u64) -> String {
    let mut key = String::new();
    layout::slot_key(&mut key, prefix, slot);
    key
}

/// Ends the ask for units of the lease at `slot`, made at `asked_at`:
/// installs what `answer` granted (nothing when there is none or it
/// denied). Returns the units this Envoy now holds for the key.
pub(crate) fn install_grant<S, M>(
    env: &Env<'_, S, M>,
    slot: &LeaseSlot,
    answer: Option<&LimitResult>,
    asked_at: Nanos,
) -> u64
where
    S: SharedStore + ?Sized,
    M: MetricSink + ?Sized,
{
    let (units, remaining, reset) = answer.filter(|a| a.allowed).map_or((0, 0, 0), |a| {
        (
            a.leased,
            a.remaining,
            a.reset_ms.saturating_mul(MILLISECOND),
        )
    });
    let grant = lease::Grant {
        asked_at,
        units,
        expires_at: lease_expiry(&slot.limit, slot.ttl, asked_at),
        remaining,
        reset_at: asked_at.saturating_add(reset),
    };
    let granted = lease::grant(env.store, &slot.key, slot.fingerprint, &grant);
    granted.unwrap_or_else(|Contended| {
        env.metrics.global(GlobalEvent::CasExhausted);
        0
    })
}

/// When a lease granted at `now` under `limit` stops being spendable: after
/// `ttl`, and never past the end of the current window for the algorithms
/// that count per window.
pub(crate) fn lease_expiry(limit: &Limit, ttl: Nanos, now: Nanos) -> Nanos {
    let expiry = now.saturating_add(ttl);
    match limit.algorithm {
        Algorithm::FixedWindow | Algorithm::SlidingWindow | Algorithm::SlidingLog => {
            let window = limit.window.max(1);
            let end = (now / window).saturating_add(1).saturating_mul(window);
            expiry.min(end)
        }
        Algorithm::TokenBucket | Algorithm::Gcra | Algorithm::LeakyBucket => expiry,
    }
}
