//! What a response says its request cost, read as the response streams:
//! the header, trailer and body fields the rules the request owes name
//! ([`super::settle`]), the settlement once the stream ends, and the
//! `POST /v1/charge` bodies of the global settlements.

use super::settle::{sources, Adjustment, Owed};
use crate::config::{CostSource, Plan};
use crate::cost::extract::{scanner, BodyScanner, Found};
use crate::local::{Contended, SharedStore};
use crate::metrics::{GlobalEvent, MetricSink, RuleEvent};
use sluice_core::{Adjust, Nanos};
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
            for (i, source) in sources.iter().enumerate() {
                match source {
                    CostSource::Header(name) => read_number(r, i, header(name)),
                    CostSource::Body(path) => {
                        paths.push(path.clone());
                        feeds.push(i);
                    }
                    CostSource::Trailer(_) => {}
                }
            }
            if !paths.is_empty() {
                r.body = Some((scanner(content_type.as_deref(), &paths), feeds));
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
            for (i, source) in sources(plan, &r.owed).iter().enumerate() {
                if let CostSource::Trailer(name) = source {
                    read_number(r, i, trailer(name));
                }
            }
        }
    }

    /// Settles every rule at `now`, the stream having ended: local limits
    /// here; the global settlements are returned for the host to send.
    /// A rule whose response did not say what it cost keeps its estimate
    /// (counted `cost_missing`).
    pub fn settle<S, M>(self, store: &S, metrics: &M, now: Nanos) -> Vec<GlobalSettlement>
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
            let rule = r.owed.rule;
            let actual = match total(&r.values) {
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
            match r.owed.settle_local(store, actual, now) {
                Ok(true) => metrics.rule(rule, RuleEvent::CostDebt),
                Ok(false) => {}
                Err(Contended) => metrics.global(GlobalEvent::CasExhausted),
            }
            if let Some(adjustment) = r.owed.adjustment(actual) {
                global.push(GlobalSettlement {
                    descriptors: r.owed.descriptors,
                    limits: r.owed.global,
                    adjustment,
                    admitted_at: r.owed.admitted_at,
                });
            }
        }
        global
    }
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

/// The sum of every source, when each said (none said before the
/// response's headers came).
fn total(values: &[Option<u64>]) -> Option<u64> {
    if values.is_empty() {
        return None;
    }
    values
        .iter()
        .try_fold(0u64, |sum, v| v.map(|v| sum.saturating_add(v)))
}

/// The bodies carrying `settlements` of `domain` at `now`, each with at
/// most [`MAX_LIMITS`] limits: a charge as is, a refund as consumed when
/// its request was admitted.
pub fn charge_bodies(domain: &str, settlements: &[GlobalSettlement], now: Nanos) -> Vec<Vec<u8>> {
    let items: Vec<(&LimitSpec<'static>, Adjust)> = settlements
        .iter()
        .flat_map(|s| {
            let adjust = match s.adjustment {
                Adjustment::Charge(cost) => Adjust::Charge(cost),
                Adjustment::Refund(cost) => Adjust::Refund {
                    cost,
                    age: now.saturating_sub(s.admitted_at),
                },
            };
            s.limits.iter().map(move |spec| (spec, adjust))
        })
        .collect();
    items
        .chunks(MAX_LIMITS)
        .map(|chunk| charge_json(domain, chunk))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::{Algorithm, Limit, SECOND};

    #[test]
    fn a_refund_is_aged_from_the_admission_and_bodies_hold_at_most_max_limits() {
        let limit = Limit::new(Algorithm::Gcra, 100, 60 * SECOND).unwrap();
        let spec = LimitSpec::new("tokens/0/a".to_string(), &limit);
        let settlements = vec![
            GlobalSettlement {
                descriptors: Vec::new(),
                limits: vec![spec.clone(); MAX_LIMITS],
                adjustment: Adjustment::Charge(5),
                admitted_at: 0,
            },
            GlobalSettlement {
                descriptors: Vec::new(),
                limits: vec![spec],
                adjustment: Adjustment::Refund(3),
                admitted_at: 10 * SECOND,
            },
        ];
        let bodies = charge_bodies("d", &settlements, 12 * SECOND);
        assert_eq!(bodies.len(), 2);
        let last: serde_json::Value = serde_json::from_slice(&bodies[1]).unwrap();
        assert_eq!(last["limits"][0]["refund"], 3);
        assert_eq!(last["limits"][0]["refund_age_ms"], 2000);
        let first: serde_json::Value = serde_json::from_slice(&bodies[0]).unwrap();
        assert_eq!(first["limits"][63]["charge"], 5);
    }
}
