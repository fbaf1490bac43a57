//! A rule's `cost`: a fixed weight, a request header, or a cost known from
//! the response (admitted for an estimate, settled when the response says
//! what the request cost), and what the rule's limits must be for the last.

use super::checks::field_path;
use super::plan::{CostSource, Estimate, LimitKind, ResponseCost, RuleLimit, MAX_COST_SOURCES};
use super::raw::{RawCost, RawEstimate, RawOverride, RawResponseCost, RawRule, COST_EXPECTED};
use super::{Cost, FieldError};
use crate::cost::extract::FieldPath;
use sluice_core::{Limit, MAX_REQUESTS};

/// Checks the `cost` of rule `raw` at `path` against its compiled `limits`:
/// a fixed weight (or estimate) they can all admit, and limits that can be
/// charged after the response for a cost from the response.
pub(super) fn compile_for(
    path: &str,
    raw: &RawRule,
    limits: &[RuleLimit],
) -> Result<Cost, FieldError> {
    let cost = compile(&field_path(path, "cost"), &raw.cost)?;
    match &cost {
        Cost::Fixed(weight) => check_capacity(path, &raw.overrides, limits, *weight)?,
        Cost::Response(response) => {
            check_limits(path, limits)?;
            if let Estimate::Fixed(weight) = response.estimate {
                check_capacity(path, &raw.overrides, limits, weight)?;
            }
        }
        Cost::Header(_) => {}
    }
    Ok(cost)
}

/// Checks a rule's `cost`: an integer from 1 to the largest `requests`,
/// `header:NAME`, or `{"estimate", "response"}`.
fn compile(path: &str, raw: &RawCost) -> Result<Cost, FieldError> {
    match raw {
        RawCost::Fixed(n) if (1..=MAX_REQUESTS).contains(n) => Ok(Cost::Fixed(*n)),
        RawCost::Fixed(n) => Err(FieldError::at(
            path,
            format!("must be between 1 and {MAX_REQUESTS}, got {n}"),
        )),
        RawCost::Text(text) => match text.split_once(':') {
            Some(("header", name)) if !name.is_empty() => {
                Ok(Cost::Header(name.to_ascii_lowercase()))
            }
            _ => Err(FieldError::at(
                path,
                format!("{COST_EXPECTED}, got {text:?}"),
            )),
        },
        RawCost::Response(raw) => response(path, raw).map(Cost::Response),
    }
}

fn response(path: &str, raw: &RawResponseCost) -> Result<ResponseCost, FieldError> {
    let estimate_path = field_path(path, "estimate");
    let estimate = match &raw.estimate {
        RawEstimate::Fixed(n) if *n <= MAX_REQUESTS => Estimate::Fixed(*n),
        RawEstimate::Fixed(n) => {
            return Err(FieldError::at(
                estimate_path,
                format!("must be between 0 and {MAX_REQUESTS}, got {n}"),
            ))
        }
        RawEstimate::Text(text) => match text.split_once(':') {
            Some(("header", name)) if !name.is_empty() => {
                Estimate::Header(name.to_ascii_lowercase())
            }
            Some(("body", field)) => Estimate::Body(body_path(&estimate_path, field)?),
            _ => {
                return Err(FieldError::at(
                    estimate_path,
                    format!("must be an integer, \"header:NAME\" or \"body:PATH\", got {text:?}"),
                ))
            }
        },
    };
    let response_path = field_path(path, "response");
    if raw.response.is_empty() || raw.response.len() > MAX_COST_SOURCES {
        return Err(FieldError::at(
            response_path,
            format!("must name 1 to {MAX_COST_SOURCES} places"),
        ));
    }
    let sources = raw
        .response
        .iter()
        .enumerate()
        .map(|(i, text)| {
            let at = if raw.response.len() == 1 {
                response_path.clone()
            } else {
                format!("{response_path}[{i}]")
            };
            source(&at, text)
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(ResponseCost { estimate, sources })
}

fn source(path: &str, text: &str) -> Result<CostSource, FieldError> {
    match text.split_once(':') {
        Some(("header", name)) if header_name(name) => {
            Ok(CostSource::Header(name.to_ascii_lowercase()))
        }
        Some(("trailer", name)) if header_name(name) => {
            Ok(CostSource::Trailer(name.to_ascii_lowercase()))
        }
        Some(("body", field)) => body_path(path, field).map(CostSource::Body),
        _ => Err(FieldError::at(
            path,
            format!("must be \"header:NAME\", \"trailer:NAME\" or \"body:PATH\", got {text:?}"),
        )),
    }
}

fn header_name(name: &str) -> bool {
    !name.is_empty() && !name.starts_with(':') && name.bytes().all(|b| b.is_ascii_graphic())
}

/// A body field's path (see [`FieldPath::parse`]).
fn body_path(path: &str, field: &str) -> Result<FieldPath, FieldError> {
    FieldPath::parse(field).map_err(|e| FieldError::at(path, format!("body:{field}: {e}")))
}

/// Checks that every limit of a rule whose cost comes from the response
/// can be charged after it: a rate limit of an algorithm that carries debt,
/// decided per request, without delay, borrowing or leases.
fn check_limits(path: &str, limits: &[RuleLimit]) -> Result<(), FieldError> {
    for (j, rule_limit) in limits.iter().enumerate() {
        let at = |field: &str| format!("{path}.limits[{j}].{field}");
        let limit = match &rule_limit.kind {
            LimitKind::LocalElastic(_) | LimitKind::GlobalElastic(_) => {
                return Err(FieldError::at(at("elastic"), RESPONSE_ONLY))
            }
            LimitKind::Local(local) => &local.quota.limit,
            LimitKind::Global(global) => &global.quota.limit,
            LimitKind::Coalesced(_) | LimitKind::Leased(_) => {
                return Err(FieldError::at(at("sync"), RESPONSE_ONLY))
            }
            // Charged by a second call, with the difference as its hits.
            LimitKind::ServiceHeld(_) => continue,
            LimitKind::Concurrency(_) => {
                return Err(FieldError::at(
                    at("concurrency"),
                    "a rule whose cost comes from the response takes rate limits only: \
                     put the concurrency limit in a rule of its own",
                ))
            }
        };
        if !limit.algorithm.carries_debt() {
            return Err(FieldError::at(
                at("algorithm"),
                format!(
                    "{} cannot go into debt: a rule whose cost comes from the response needs another algorithm",
                    limit.algorithm.name()
                ),
            ));
        }
        if limit.max_delay.is_some() {
            return Err(FieldError::at(at("on_exceed"), RESPONSE_ONLY));
        }
    }
    Ok(())
}

/// Why a limit's setting is refused in a rule whose cost comes from the
/// response.
const RESPONSE_ONLY: &str = "not with a cost from the response: each request is admitted \
     for its estimate and charged the rest after its response, on its own";

/// What a rate limit admits at most at once, in `check_capacity`'s message.
const SOFT_BURST: &str = "its burst with the soft allowance";

/// Refuses a fixed `weight` that some limit of the rule (or an override of
/// one) can never admit: every request would be denied.
fn check_capacity(
    path: &str,
    overrides: &[RawOverride],
    limits: &[RuleLimit],
    weight: u64,
) -> Result<(), FieldError> {
    for (j, rule_limit) in limits.iter().enumerate() {
        let over = |limit: &Limit| weight > limit.soft_burst();
        let culprit = if let Some(c) = rule_limit.concurrency() {
            (weight > c.permits.max).then(|| {
                let at = format!("{path}.limits[{j}]");
                (at, c.permits.max, "its permits")
            })
        } else if over(rule_limit.limit()) {
            Some((
                format!("{path}.limits[{j}]"),
                rule_limit.limit().soft_burst(),
                SOFT_BURST,
            ))
        } else {
            rule_limit
                .overrides()
                .iter()
                .find(|o| over(&o.limit))
                .map(|o| {
                    let k = overrides
                        .iter()
                        .position(|r| r.key == o.key)
                        .unwrap_or_default();
                    let at = format!("{path}.overrides[{k}]");
                    (at, o.limit.soft_burst(), SOFT_BURST)
                })
        };
        if let Some((at, capacity, what)) = culprit {
            return Err(FieldError::at(
                field_path(path, "cost"),
                format!("{weight} is more than {at} can ever admit ({capacity}: {what})"),
            ));
        }
    }
    Ok(())
}
