//! What a response says its request cost, read as the response streams:
//! the header, trailer and body fields the rules the request owes name
//! ([`super::settle`]), the settlement once the stream ends, and the
//! `POST /v1/charge` bodies of the global settlements.

use super::call::CacheSlot;
use super::deny_cache;
use super::settle::{sources, Adjustment, Owed};
use crate::config::{CostSource, Outcome, Plan, PricedSource};
use crate::cost::extract::{scanner, BodyScanner, Found};
use crate::cost::{metadata, price};
use crate::layout;
use crate::local::{Contended, SharedStore};
use crate::metrics::{GlobalEvent, MetricSink, RuleEvent};
use sluice_core::{Adjust, Nanos, MILLISECOND, SECOND};
use sluice_wire::{charge_json, LimitSpec, MAX_LIMITS};

/// One owed rule and what its response said so far.
#[derive(Debug)]
struct Reading {
    owed: Owed,
    /// Per source: the value read, `None` until read (or when missing).
    values: Vec<Option<u64>>,
    /// A source was there but not a non-negative integer.
    malformed: bool,
    /// The body fields of the rule's sources, and the source each feeds.
    body: Option<(BodyScanner, Vec<usize>)>,
    /// What the response showed of its outcome (for a limit counted by
    /// outcome).
    outcome: Outcome,
}

/// What a request's response says it cost, for each rule it owes.
#[derive(Debug)]
pub struct CostReader {
    readings: Vec<Reading>,
}

/// A global settlement for the host to send: the limits, what to do to
/// them, and when their estimate was counted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GlobalSettlement {
    /// The rate limit service's descriptors, charged by a call of their
    /// own (a refund has no call: the service keeps the estimate).
    pub descriptors: Vec<crate::rls::Descriptor>,
    /// Its global limits, as checked.
    pub limits: Vec<sluice_wire::LimitSpec<'static>>,
    /// The charge or refund.
    pub adjustment: Adjustment,
    /// When the estimate was counted (a refund gives back as of then).
    pub admitted_at: Nanos,
    /// Where the service's over-limit answer to this charge is cached (a
    /// limit counted by outcome held by a rate limit service).
    pub(crate) cache: Option<CacheSlot>,
}

impl CostReader {
    /// A reader of what the request owes; `None` when it owes nothing.
    pub fn new(owed: Vec<Owed>) -> Option<CostReader> {
        if owed.is_empty() {
            return None;
        }
        let readings = owed
            .into_iter()
            .map(|owed| Reading {
                owed,
                values: Vec::new(),
                malformed: false,
                body: None,
                outcome: Outcome::default(),
            })
            .collect();
        Some(CostReader { readings })
    }

    /// Reads the response headers (`header` gives one by lowercase name)
    /// and prepares for the body, of `content_type`.
    pub fn on_headers(&mut self, plan: &Plan, header: impl Fn(&str) -> Option<String>) {
        let content_type = header("content-type");
        for r in &mut self.readings {
            let sources = sources(plan, &r.owed);
            r.values = vec![None; sources.len()];
            let mut paths = Vec::new();
            let mut feeds = Vec::new();
            for (i, priced) in sources.iter().enumerate() {
                match &priced.source {
                    CostSource::Header(name) => read_number(r, i, header(name)),
                    CostSource::Body(path) => {
                        paths.push(path.clone());
                        feeds.push(i);
                    }
                    CostSource::Trailer(_) | CostSource::Metadata(_) => {}
                }
            }
            if !paths.is_empty() {
                r.body = Some((scanner(content_type.as_deref(), &paths), feeds));
            }
        }
    }

    /// Whether some limit is counted by the response's outcome.
    pub fn reads_outcome(&self) -> bool {
        self.readings.iter().any(|r| r.owed.outcome.is_some())
    }

    /// Reads the response's outcome: its `status` (`None` for a response
    /// Envoy made itself, e.g. after an upstream reset), and the headers
    /// the conditions name (`header` gives one by lowercase name).
    pub fn on_outcome(&mut self, status: Option<u16>, header: impl Fn(&str) -> Option<String>) {
        for r in &mut self.readings {
            let Some(owed) = &r.owed.outcome else {
                continue;
            };
            r.outcome.status = status;
            if status.is_none() {
                continue;
            }
            if let Some(name) = owed.when.header() {
                r.outcome.header = header(name);
            }
            if owed.when.reads_grpc() {
                r.outcome.grpc_status = header("grpc-status").and_then(|v| v.trim().parse().ok());
            }
        }
    }

    /// Whether some rule reads the body.
    pub fn reads_body(&self) -> bool {
        self.readings.iter().any(|r| r.body.is_some())
    }

    /// Reads a chunk of the response body.
    pub fn on_body(&mut self, chunk: &[u8]) {
        for r in &mut self.readings {
            if let Some((scanner, _)) = r.body.as_mut() {
                scanner.feed(chunk);
            }
        }
    }

    /// Reads the response trailers.
    pub fn on_trailers(&mut self, plan: &Plan, trailer: impl Fn(&str) -> Option<String>) {
        for r in &mut self.readings {
            if let Some(owed) = &r.owed.outcome {
                if owed.when.reads_grpc() && r.outcome.grpc_status.is_none() {
                    r.outcome.grpc_status =
                        trailer("grpc-status").and_then(|v| v.trim().parse().ok());
                }
                continue;
            }
            for (i, priced) in sources(plan, &r.owed).iter().enumerate() {
                if let CostSource::Trailer(name) = &priced.source {
                    read_number(r, i, trailer(name));
                }
            }
        }
    }

    /// Reads the dynamic metadata the rules' sources name (`property`
    /// gives a property's value), the stream having ended: the filters of
    /// the response path have written it by then.
    pub fn on_end(&mut self, plan: &Plan, property: impl Fn(&[&str]) -> Option<Vec<u8>>) {
        for r in &mut self.readings {
            if r.owed.outcome.is_some() {
                continue;
            }
            for (i, priced) in sources(plan, &r.owed).iter().enumerate() {
                let CostSource::Metadata(place) = &priced.source else {
                    continue;
                };
                match property(&place.property()).map(|v| metadata::count(&v)) {
                    Some(Some(count)) => set(&mut r.values, i, count),
                    Some(None) => r.malformed = true,
                    None => {}
                }
            }
        }
    }

    /// Settles every rule at `now`, the stream having ended: local limits
    /// here; the global settlements are returned for the host to send.
    /// A rule whose response did not say what it cost keeps its estimate
    /// (counted `cost_missing`).
    pub fn settle<S, M>(
        self,
        plan: &Plan,
        store: &S,
        metrics: &M,
        now: Nanos,
    ) -> Vec<GlobalSettlement>
    where
        S: SharedStore + ?Sized,
        M: MetricSink + ?Sized,
    {
        let mut global = Vec::new();
        for mut r in self.readings {
            if let Some((mut scanner, feeds)) = r.body.take() {
                for (found, &i) in scanner.finish().iter().zip(&feeds) {
                    match found {
                        Found::Value(v) => set(&mut r.values, i, *v),
                        Found::Malformed => r.malformed = true,
                        Found::Missing => {}
                    }
                }
            }
            let actual = actual_cost(&r, sources(plan, &r.owed), metrics);
            match r.owed.settle_local(store, actual, now) {
                Ok(true) => metrics.rule(r.owed.rule, RuleEvent::CostDebt),
                Ok(false) => {}
                Err(Contended) => metrics.global(GlobalEvent::CasExhausted),
            }
            if let Some(adjustment) = r.owed.adjustment(actual) {
                global.push(GlobalSettlement {
                    descriptors: r.owed.descriptors,
                    limits: r.owed.global,
                    adjustment,
                    admitted_at: r.owed.admitted_at,
                    cache: r.owed.outcome.and_then(|o| o.cache),
                });
            }
        }
        global
    }
}

/// What reading `r` says its request cost: for a limit counted by outcome,
/// its weight when the response counts, else 0; for a cost from the
/// response, the priced sum of its `sources` (the estimate when one did
/// not say).
fn actual_cost<M: MetricSink + ?Sized>(r: &Reading, sources: &[PricedSource], metrics: &M) -> u64 {
    let rule = r.owed.rule;
    if let Some(owed) = &r.owed.outcome {
        if owed.when.counts(&r.outcome) {
            metrics.rule(rule, RuleEvent::OutcomeCounted);
            return r.owed.estimate;
        }
        metrics.rule(rule, RuleEvent::OutcomeGivenBack);
        return 0;
    }
    let actual = match total(&r.values, sources) {
        Some(actual) if !r.malformed => actual,
        _ => {
            metrics.rule(rule, RuleEvent::CostMissing);
            r.owed.estimate
        }
    };
    match Adjustment::between(r.owed.estimate, actual) {
        Some(Adjustment::Charge(n)) => metrics.rule_n(rule, RuleEvent::CostCharged, n),
        Some(Adjustment::Refund(n)) => metrics.rule_n(rule, RuleEvent::CostRefunded, n),
        None => {}
    }
    actual
}

/// Remembers in the over-limit cache `cache` a rate limit service's
/// `answer` to a stream-end charge: an `OVER_LIMIT` until the reset it
/// gives (a second when it gives none); an `OK` that leaves nothing (its
/// status, or its `x-ratelimit-remaining` header, says 0 remain) until the
/// reset it gives.
pub(crate) fn remember_over_limit<S: SharedStore + ?Sized>(
    store: &S,
    cache: &CacheSlot,
    answer: Option<&[u8]>,
    now: Nanos,
) {
    let Some(read) = answer.and_then(|a| crate::rls::decode_response(a, 1)) else {
        return;
    };
    let wait = if read.check.allowed {
        exhausted(&read)
    } else {
        match read.check.limits.first().map_or(0, |l| l.retry_after_ms) {
            0 => Some(SECOND),
            ms => Some(ms.saturating_mul(MILLISECOND)),
        }
    };
    let Some(wait) = wait.filter(|w| *w > 0) else {
        return;
    };
    let mut key = String::new();
    layout::slot_key(&mut key, &cache.prefix, cache.slot);
    // Rate limit services answer no penalty box.
    let denied = deny_cache::Denied {
        until: now.saturating_add(wait),
        blocked: false,
    };
    deny_cache::remember(store, &key, cache.owner, denied);
}

/// How long until the reset of an admitted answer that leaves nothing:
/// from its status when it has one, else from its `x-ratelimit-remaining`
/// and `x-ratelimit-reset` headers (as Limitador sends them).
fn exhausted(read: &crate::rls::Read) -> Option<Nanos> {
    if let Some(status) = read.check.limits.first().filter(|l| l.limit > 0) {
        return (status.remaining == 0).then(|| status.reset_ms.saturating_mul(MILLISECOND));
    }
    let header = |name: &str| {
        let headers = &read.reply.response_headers;
        headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.trim())
    };
    // `0` or `0, 5;w=60`: the first figure is what remains.
    let remaining = header("x-ratelimit-remaining")?.split(',').next()?.trim();
    if remaining != "0" {
        return None;
    }
    let reset: u64 = header("x-ratelimit-reset")?.parse().ok()?;
    Some(reset.saturating_mul(SECOND))
}

/// Notes source `i` of `r` from a header or trailer value.
fn read_number(r: &mut Reading, i: usize, value: Option<String>) {
    let Some(value) = value else {
        return;
    };
    let digits = value.trim_matches(|c: char| c == ' ' || c == '\t');
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        r.malformed = true;
        return;
    }
    set(&mut r.values, i, digits.parse().unwrap_or(u64::MAX));
}

fn set(values: &mut [Option<u64>], i: usize, v: u64) {
    if let Some(slot) = values.get_mut(i) {
        *slot = Some(v);
    }
}

/// The sum of every source times its price, rounded up (see
/// [`price::total`]), when each said (none said before the response's
/// headers came).
fn total(values: &[Option<u64>], sources: &[PricedSource]) -> Option<u64> {
    if values.is_empty() || values.iter().any(Option::is_none) {
        return None;
    }
    let priced = values
        .iter()
        .zip(sources)
        .map(|(v, s)| (v.unwrap_or_default(), s.price));
    Some(price::total(priced))
}

/// The bodies carrying `settlements` of `domain` at `now`, each with at
/// most [`MAX_LIMITS`] limits: a charge as is, a refund as consumed when
/// its request was admitted.
///
/// The limiter refuses a body that names one limit's state twice (and
/// would lose every settlement in it), and streams of one key often end
/// together: charges of one state are summed into one, and a refund of a
/// state a body already names goes into another body.
pub fn charge_bodies(domain: &str, settlements: &[GlobalSettlement], now: Nanos) -> Vec<Vec<u8>> {
    let mut bodies: Vec<Vec<(&LimitSpec<'static>, Adjust)>> = Vec::new();
    for s in settlements {
        let adjust = match s.adjustment {
            Adjustment::Charge(cost) => Adjust::Charge(cost),
            Adjustment::Refund(cost) => Adjust::Refund {
                cost,
                age: now.saturating_sub(s.admitted_at),
            },
        };
        for spec in &s.limits {
            place(&mut bodies, spec, adjust);
        }
    }
    bodies
        .iter()
        .map(|items| charge_json(domain, items))
        .collect()
}

/// Adds `spec`'s `adjust` to the first body that can take it: summed with a
/// charge of the same state, or beside other states in a body not full.
fn place<'s>(
    bodies: &mut Vec<Vec<(&'s LimitSpec<'static>, Adjust)>>,
    spec: &'s LimitSpec<'static>,
    adjust: Adjust,
) {
    for body in bodies.iter_mut() {
        let full = body.len() >= MAX_LIMITS;
        match body.iter_mut().find(|(s, _)| same_state(s, spec)) {
            Some((_, Adjust::Charge(sum))) => {
                if let Adjust::Charge(more) = adjust {
                    *sum = sum.saturating_add(more);
                    return;
                }
            }
            Some(_) => {}
            None if !full => return body.push((spec, adjust)),
            None => {}
        }
    }
    bodies.push(vec![(spec, adjust)]);
}

/// Whether `a` and `b` are one state at the limiter: the same key and limit
/// (their weights aside).
fn same_state(a: &LimitSpec<'_>, b: &LimitSpec<'_>) -> bool {
    a.key == b.key
        && a.algorithm == b.algorithm
        && (
            a.requests,
            a.window_ms,
            a.burst,
            a.precision,
            a.soft_percent,
        ) == (
            b.requests,
            b.window_ms,
            b.burst,
            b.precision,
            b.soft_percent,
        )
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::{Algorithm, Limit, SECOND};

    fn settlement(
        spec: &LimitSpec<'static>,
        adjustment: Adjustment,
        at: Nanos,
    ) -> GlobalSettlement {
        GlobalSettlement {
            descriptors: Vec::new(),
            limits: vec![spec.clone()],
            adjustment,
            admitted_at: at,
            cache: None,
        }
    }

    fn limits(body: &[u8]) -> Vec<serde_json::Value> {
        let v: serde_json::Value = serde_json::from_slice(body).unwrap();
        v["limits"].as_array().unwrap().clone()
    }

    #[test]
    fn a_refund_is_aged_from_the_admission_and_bodies_hold_at_most_max_limits() {
        let limit = Limit::new(Algorithm::Gcra, 100, 60 * SECOND).unwrap();
        let specs: Vec<LimitSpec<'static>> = (0..=MAX_LIMITS)
            .map(|i| LimitSpec::new(format!("tokens/0/{i}"), &limit))
            .collect();
        let mut settlements: Vec<GlobalSettlement> = specs
            .iter()
            .map(|s| settlement(s, Adjustment::Charge(5), 0))
            .collect();
        settlements.push(settlement(&specs[0], Adjustment::Refund(3), 10 * SECOND));
        let bodies = charge_bodies("d", &settlements, 12 * SECOND);
        assert_eq!(bodies.len(), 2);
        let (first, last) = (limits(&bodies[0]), limits(&bodies[1]));
        assert_eq!(first.len(), MAX_LIMITS);
        assert_eq!(first[63]["charge"], 5);
        // The 65th key, then the refund of a key the first body names.
        assert_eq!(last.len(), 2);
        assert_eq!(last[1]["key"], "tokens/0/0");
        assert_eq!(last[1]["refund"], 3);
        assert_eq!(last[1]["refund_age_ms"], 2000);
    }

    #[test]
    fn no_body_names_a_state_twice_and_charges_of_one_state_are_summed() {
        let limit = Limit::new(Algorithm::FixedWindow, 400, 3600 * SECOND).unwrap();
        let other = Limit::new(Algorithm::FixedWindow, 400, 60 * SECOND).unwrap();
        let a = LimitSpec::new("tokens/0/a".to_string(), &limit);
        let a_per_minute = LimitSpec::new("tokens/0/a".to_string(), &other);
        let settlements = vec![
            settlement(&a, Adjustment::Charge(30), 0),
            settlement(&a, Adjustment::Charge(30), 0),
            settlement(&a_per_minute, Adjustment::Charge(30), 0),
            settlement(&a, Adjustment::Refund(4), 0),
            settlement(&a, Adjustment::Charge(30), 0),
            settlement(&a, Adjustment::Refund(5), 0),
        ];
        let bodies: Vec<Vec<serde_json::Value>> = charge_bodies("d", &settlements, SECOND)
            .iter()
            .map(|b| limits(b))
            .collect();
        assert_eq!(bodies.len(), 3, "{bodies:?}");
        assert_eq!(bodies[0].len(), 2);
        assert_eq!(bodies[0][0]["charge"], 90, "three charges of one state");
        assert_eq!(
            bodies[0][1]["window_ms"], 60_000,
            "another state of the key"
        );
        assert_eq!(bodies[1][0]["refund"], 4);
        assert_eq!(bodies[2][0]["refund"], 5);
        // Each body is one the limiter accepts.
        for body in charge_bodies("d", &settlements, SECOND) {
            assert!(sluice_wire::parse_charge(&body).is_ok());
        }
    }
}
