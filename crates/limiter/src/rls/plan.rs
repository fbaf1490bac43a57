//! What each descriptor of a `ShouldRateLimit` call comes to, before the
//! store is asked: matched against the configuration (or Envoy's own limit
//! for it), with `replaces` applied across the call, and the store items
//! of the enforcing check and of the shadow checks built as it goes.

use super::config::{push_escaped, Action, Domain, Found, Unit};
use crate::store::{state_id, StoreItem};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::RateLimit as PbRateLimit;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use sluice_core::{Algorithm, Limit, Nanos};
use std::collections::HashSet;

/// What a limit reports in `current_limit`.
#[derive(Debug, Clone)]
pub(super) struct Report {
    requests_per_unit: u32,
    unit: Option<Unit>,
    name: String,
    /// The window (a blocked descriptor's reset is the rest of it).
    pub(super) window: Nanos,
}

impl Report {
    pub(super) fn current_limit(&self) -> PbRateLimit {
        PbRateLimit {
            name: self.name.clone(),
            requests_per_unit: self.requests_per_unit,
            unit: self.unit.map_or(0, Unit::code),
        }
    }
}

/// What one descriptor of a call comes to.
#[derive(Debug)]
pub(super) enum Plan {
    /// No limit applies.
    NoMatch,
    /// `unlimited: true`.
    Unlimited,
    /// Its limit is replaced by another limit of the call.
    Replaced,
    /// `requests_per_unit: 0`.
    Block { report: Report, shadow: bool },
    /// Decided in the store: the enforcing check's item `index`, or the
    /// shadow check `index`.
    Check {
        report: Report,
        shadow: bool,
        index: usize,
        /// On a counter shared with other descriptors of the call: the hits
        /// of this descriptor and of those before it, and of those after it.
        prefix: u64,
        later: u64,
    },
}

/// A call planned: one plan and metric name per descriptor, in order, and
/// the items to decide.
#[derive(Debug, Default)]
pub(super) struct Planned {
    pub(super) plans: Vec<(Plan, String)>,
    /// Decided together: all pass or the call is over the limit.
    pub(super) enforcing: Vec<StoreItem>,
    /// Decided each on its own once the call is admitted.
    pub(super) shadows: Vec<StoreItem>,
}

impl Planned {
    /// Whether a blocking (`requests_per_unit: 0`) limit refuses the call.
    pub(super) fn blocked(&self) -> bool {
        self.plans
            .iter()
            .any(|(p, _)| matches!(p, Plan::Block { shadow: false, .. }))
    }
}

/// Plans every descriptor of `req` against `domain` (`None`: a domain not
/// configured). An error is an invalid argument, named by its field.
pub(super) fn plan_call(
    req: &RateLimitRequest,
    domain: Option<&Domain>,
) -> Result<Planned, String> {
    let default_hits = u64::from(req.hits_addend.max(1));
    // Match every descriptor first: `replaces` looks across them all.
    let found: Vec<Option<Found<'_>>> = req
        .descriptors
        .iter()
        .map(|d| match domain {
            Some(dom) if d.limit.is_none() && !d.is_negative_hits => {
                dom.lookup(d.entries.iter().map(|e| (e.key.as_str(), e.value.as_str())))
            }
            _ => None,
        })
        .collect();
    let replacing: HashSet<&str> = found
        .iter()
        .flatten()
        .flat_map(|f| f.rate_limit.replaces.iter().map(String::as_str))
        .collect();
    let scope = rls_scope(&req.domain);
    let mut out = Planned {
        plans: Vec::with_capacity(req.descriptors.len()),
        ..Planned::default()
    };
    for (i, (d, f)) in req.descriptors.iter().zip(&found).enumerate() {
        let hits = d.hits_addend.map_or(default_hits, |h| h.value);
        let planned = if let (Some(_), Some(_), false) = (d.limit, domain, d.is_negative_hits) {
            (
                plan_override(&mut out, &scope, d, hits, i)?,
                "_override".to_string(),
            )
        } else if let Some(f) = f {
            (
                plan_found(&mut out, &scope, f, &replacing, hits),
                f.metric.clone(),
            )
        } else {
            (Plan::NoMatch, "_none".to_string())
        };
        out.plans.push(planned);
    }
    count_later_hits(&mut out);
    Ok(out)
}

/// Sets each enforcing check's `later`: the hits that descriptors after it
/// add to its counter (its item weighs every descriptor's).
fn count_later_hits(out: &mut Planned) {
    for (plan, _) in &mut out.plans {
        if let Plan::Check {
            shadow: false,
            index,
            prefix,
            later,
            ..
        } = plan
        {
            let total = out.enforcing.get(*index).map_or(*prefix, StoreItem::hits);
            *later = total.saturating_sub(*prefix);
        }
    }
}

/// Envoy's own limit for descriptor `i` (enforcing, fixed window).
fn plan_override(
    out: &mut Planned,
    scope: &str,
    d: &RateLimitDescriptor,
    hits: u64,
    i: usize,
) -> Result<Plan, String> {
    let Some(over) = d.limit else {
        return Ok(Plan::NoMatch);
    };
    let Some(unit) = Unit::from_code(over.unit) else {
        return Err(format!(
            "descriptors[{i}].limit.unit: unknown unit {}",
            over.unit
        ));
    };
    let report = Report {
        requests_per_unit: over.requests_per_unit,
        unit: Some(unit),
        name: String::new(),
        window: unit.window(),
    };
    if over.requests_per_unit == 0 {
        return Ok(Plan::Block {
            report,
            shadow: false,
        });
    }
    let limit = Limit::new(
        Algorithm::FixedWindow,
        u64::from(over.requests_per_unit),
        unit.window(),
    )
    .map_err(|e| format!("descriptors[{i}].limit: {e}"))?;
    let id = state_id(scope, &override_key(d), &limit);
    let (index, prefix) = add_item(&mut out.enforcing, id, limit, hits);
    Ok(Plan::Check {
        report,
        shadow: false,
        index,
        prefix,
        later: 0,
    })
}

/// A descriptor matched in the configuration.
fn plan_found(
    out: &mut Planned,
    scope: &str,
    f: &Found<'_>,
    replacing: &HashSet<&str>,
    hits: u64,
) -> Plan {
    let rl = f.rate_limit;
    let replaced = !rl.name.is_empty() && replacing.contains(rl.name.as_str());
    let report = Report {
        requests_per_unit: rl.requests_per_unit,
        unit: rl.unit,
        name: rl.name.clone(),
        window: rl.window,
    };
    let shadow = f.node.shadow;
    match &rl.action {
        // Unlimited even when replaced, as envoyproxy/ratelimit answers it.
        Action::Unlimited => Plan::Unlimited,
        _ if replaced => Plan::Replaced,
        Action::Block => Plan::Block { report, shadow },
        Action::Limit(limit) => {
            let id = state_id(scope, &f.key, limit);
            let (index, prefix) = if shadow {
                out.shadows.push(StoreItem::new(id, limit.clone(), hits));
                (out.shadows.len() - 1, hits)
            } else {
                add_item(&mut out.enforcing, id, limit.clone(), hits)
            };
            Plan::Check {
                report,
                shadow,
                index,
                prefix,
                later: 0,
            }
        }
    }
}

/// The scope of an RLS domain's state identities: `rls:` (no HTTP API
/// domain has a colon), then the domain escaped.
pub(crate) fn rls_scope(domain: &str) -> String {
    let mut scope = String::with_capacity(domain.len() + 4);
    scope.push_str("rls:");
    push_escaped(&mut scope, domain);
    scope
}

/// The key of a descriptor Envoy sent its own limit with: every entry's
/// key and value.
fn override_key(d: &RateLimitDescriptor) -> String {
    let mut key = String::new();
    for (i, e) in d.entries.iter().enumerate() {
        if i > 0 {
            key.push('/');
        }
        push_escaped(&mut key, &e.key);
        key.push('=');
        push_escaped(&mut key, &e.value);
    }
    key
}

/// Adds an item to the enforcing check, or its hits to the item with the
/// same identity (two descriptors of one call on one counter weigh both);
/// returns its index and its hits so far, this descriptor's included.
fn add_item(items: &mut Vec<StoreItem>, id: String, limit: Limit, hits: u64) -> (usize, u64) {
    if let Some(i) = items.iter().position(|it| it.id() == id) {
        if let Some(StoreItem::Rate(it)) = items.get_mut(i) {
            it.hits = it.hits.saturating_add(hits);
            return (i, it.hits);
        }
    }
    items.push(StoreItem::new(id, limit, hits));
    (items.len() - 1, hits)
}
