//! What each descriptor of a `ShouldRateLimit` call comes to, before the
//! store is asked: matched against the configuration (or Envoy's own limit
//! for it), with `replaces` applied across the call, and the store items
//! of the enforcing check and of the shadow checks built as it goes.

use super::config::{push_escaped, Action, Domain, Found, Unit};
use crate::store::{state_id, AdjustItem, StoreItem};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::RateLimit as PbRateLimit;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use sluice_core::{Adjust, Algorithm, Limit, Nanos};
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

/// How a limit's refusal counts for its call (envoyproxy/ratelimit's
/// `quota_mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) enum Role {
    /// Over its limit, it refuses the call.
    #[default]
    Rate,
    /// Over its limit, it refuses the call only when every quota-mode
    /// descriptor of the call is over its own.
    Quota,
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
    Block {
        report: Report,
        shadow: bool,
        mode: Role,
    },
    /// `is_negative_hits`: its weight given back to its counter, refund
    /// `index` (none for a `requests_per_unit: 0` limit, which has none).
    GiveBack {
        report: Report,
        index: Option<usize>,
    },
    /// Decided in the store: the enforcing check's item `index`, or the
    /// shadow check `index`.
    Check {
        report: Report,
        shadow: bool,
        mode: Role,
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
    /// Hits given back (`is_negative_hits`), before the call is decided.
    pub(super) refunds: Vec<AdjustItem>,
    /// Every descriptor's mode under the global quota mode (`Quota`: a
    /// descriptor without a limit counts as a quota descriptor with room).
    pub(super) global: Role,
}

impl Planned {
    /// Whether a blocking (`requests_per_unit: 0`) limit refuses the call,
    /// or every quota-mode descriptor is spent with the enforcing items
    /// `dropped` (indices) over their limits.
    pub(super) fn refused(&self, dropped: &[usize]) -> bool {
        let (mut quota, mut spent) = (0usize, 0usize);
        for (plan, _) in &self.plans {
            match plan {
                Plan::Block {
                    shadow: false,
                    mode: Role::Rate,
                    ..
                } => return true,
                // A shadow one never refuses: it is never spent.
                Plan::Block {
                    shadow,
                    mode: Role::Quota,
                    ..
                } => {
                    quota += 1;
                    spent += usize::from(!*shadow);
                }
                Plan::Check {
                    shadow,
                    mode: Role::Quota,
                    index,
                    ..
                } => {
                    quota += 1;
                    spent += usize::from(!*shadow && dropped.contains(index));
                }
                Plan::Block {
                    shadow: true,
                    mode: Role::Rate,
                    ..
                }
                | Plan::Check {
                    mode: Role::Rate, ..
                }
                | Plan::GiveBack { .. }
                | Plan::Unlimited => {}
                Plan::NoMatch | Plan::Replaced => match self.global {
                    Role::Rate => {}
                    Role::Quota => quota += 1,
                },
            }
        }
        quota > 0 && spent == quota
    }

    /// Whether enforcing item `index` may be left out of the call's check
    /// when over its limit: only quota-mode descriptors weigh it.
    pub(super) fn droppable(&self, index: usize) -> bool {
        let mut weighed = false;
        for (plan, _) in &self.plans {
            if let Plan::Check {
                shadow: false,
                index: i,
                mode,
                ..
            } = plan
            {
                if *i == index {
                    match mode {
                        Role::Rate => return false,
                        Role::Quota => weighed = true,
                    }
                }
            }
        }
        weighed
    }
}

/// Plans every descriptor of `req` against `domain` (`None`: a domain not
/// configured), each limit in quota mode when `global` is. An error is an
/// invalid argument, named by its field.
pub(super) fn plan_call(
    req: &RateLimitRequest,
    domain: Option<&Domain>,
    global: Role,
) -> Result<Planned, String> {
    let default_hits = u64::from(req.hits_addend.max(1));
    // Match every descriptor first: `replaces` looks across them all.
    let found: Vec<Option<Found<'_>>> = req
        .descriptors
        .iter()
        .map(|d| match domain {
            Some(dom) if d.limit.is_none() => {
                dom.lookup(d.entries.iter().map(|e| (e.key.as_str(), e.value.as_str())))
            }
            _ => None,
        })
        .collect();
    // A descriptor giving hits back replaces nothing.
    let replacing: HashSet<&str> = found
        .iter()
        .zip(&req.descriptors)
        .filter(|(_, d)| !d.is_negative_hits)
        .filter_map(|(f, _)| f.as_ref())
        .flat_map(|f| f.rate_limit.replaces.iter().map(String::as_str))
        .collect();
    let scope = rls_scope(&req.domain);
    let mut out = Planned {
        plans: Vec::with_capacity(req.descriptors.len()),
        global,
        ..Planned::default()
    };
    for (i, (d, f)) in req.descriptors.iter().zip(&found).enumerate() {
        let hits = d.hits_addend.map_or(default_hits, |h| h.value);
        let planned = if d.is_negative_hits {
            let over = d.limit.filter(|_| domain.is_some());
            plan_give_back(&mut out, &scope, (d, over, f.as_ref()), hits, i)?
        } else if let (Some(_), Some(_)) = (d.limit, domain) {
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

/// Envoy's own limit for descriptor `i`: what it reports, and its fixed
/// window (none for `requests_per_unit: 0`).
fn override_limit(over: &RateLimitOverride, i: usize) -> Result<(Report, Option<Limit>), String> {
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
        return Ok((report, None));
    }
    let limit = Limit::new(
        Algorithm::FixedWindow,
        u64::from(over.requests_per_unit),
        unit.window(),
    )
    .map_err(|e| format!("descriptors[{i}].limit: {e}"))?;
    Ok((report, Some(limit)))
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
    let (report, limit) = override_limit(&over, i)?;
    let Some(limit) = limit else {
        return Ok(Plan::Block {
            report,
            shadow: false,
            mode: out.global,
        });
    };
    let id = state_id(scope, &override_key(d), &limit);
    let (index, prefix) = add_item(&mut out.enforcing, id, limit, hits);
    Ok(Plan::Check {
        report,
        shadow: false,
        mode: out.global,
        index,
        prefix,
        later: 0,
    })
}

/// A descriptor giving its `hits` back (`is_negative_hits`) to the counter
/// of Envoy's own limit `over`, else of the limit `found` in the
/// configuration: a refund of hits consumed now (never beyond a whole
/// quota). A sliding log cannot tell which hits to give back: refused.
fn plan_give_back(
    out: &mut Planned,
    scope: &str,
    (d, over, found): (
        &RateLimitDescriptor,
        Option<RateLimitOverride>,
        Option<&Found<'_>>,
    ),
    hits: u64,
    i: usize,
) -> Result<(Plan, String), String> {
    let (report, limit, key, metric) = match (over, found) {
        (Some(over), _) => {
            let (report, limit) = override_limit(&over, i)?;
            (report, limit, override_key(d), "_override".to_string())
        }
        (None, Some(f)) => {
            let limit = match &f.rate_limit.action {
                Action::Unlimited => return Ok((Plan::Unlimited, f.metric.clone())),
                Action::Block => None,
                Action::Limit(limit) => Some(limit.clone()),
            };
            (report_of(f), limit, f.key.clone(), f.metric.clone())
        }
        (None, None) => return Ok((Plan::NoMatch, "_none".to_string())),
    };
    let Some(limit) = limit else {
        return Ok((
            Plan::GiveBack {
                report,
                index: None,
            },
            metric,
        ));
    };
    if limit.algorithm == Algorithm::SlidingLog {
        return Err(format!(
            "descriptors[{i}].is_negative_hits: a sliding_log limit cannot be given hits back"
        ));
    }
    out.refunds.push(AdjustItem {
        id: state_id(scope, &key, &limit),
        limit,
        adjust: Adjust::Refund { cost: hits, age: 0 },
    });
    let index = Some(out.refunds.len() - 1);
    Ok((Plan::GiveBack { report, index }, metric))
}

/// What a configured limit reports.
fn report_of(f: &Found<'_>) -> Report {
    let rl = f.rate_limit;
    Report {
        requests_per_unit: rl.requests_per_unit,
        unit: rl.unit,
        name: rl.name.clone(),
        window: rl.window,
    }
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
    let report = report_of(f);
    let shadow = f.node.shadow;
    let mode = if f.node.quota_mode {
        Role::Quota
    } else {
        out.global
    };
    match &rl.action {
        // Unlimited even when replaced, as envoyproxy/ratelimit answers it.
        Action::Unlimited => Plan::Unlimited,
        _ if replaced => Plan::Replaced,
        Action::Block => Plan::Block {
            report,
            shadow,
            mode,
        },
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
                mode,
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
