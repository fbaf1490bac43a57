//! Elastic borrowing, shared by the two elastic kinds (local elastic and
//! global elastic, in [`crate::engine::kinds`]): a request its own
//! quota denies passes if the key's extra allowance (`ceiling - requests`
//! per window) and every limit of the pool rule admit it; it then consumes
//! both instead of the limit (all or nothing), and reports the limit with
//! nothing remaining.

use crate::config::checks::{field_path, LimitSite};
use crate::config::raw::{Mode, OnExceed, RawCost, RawElastic, RawLimit, RawRule, Scope};
use crate::config::Elastic;
use crate::layout;
use sluice_core::{Decision, FieldError, Limit, MAX_REQUESTS};

/// Compiles the `elastic` of a limit compiled to `limit`, decided here
/// (`local`) or by the limiter; its pool is found among the rules.
pub(crate) fn compile(
    site: &LimitSite<'_>,
    raw: &RawLimit,
    raw_elastic: &RawElastic,
    limit: &Limit,
    local: bool,
) -> Result<Elastic, FieldError> {
    let elastic_path = site.field("elastic");
    if site.mode == Mode::Shadow {
        return Err(FieldError::at(
            elastic_path,
            "not available in a rule with mode shadow",
        ));
    }
    if raw.on_exceed == OnExceed::Delay {
        return Err(FieldError::at(
            elastic_path,
            "cannot be combined with on_exceed: delay",
        ));
    }
    let extra = extra_allowance(&elastic_path, limit, raw_elastic)?;
    let label = layout::elastic_label(site.rule);
    let place = if local {
        layout::limit_prefix(site.domain, &label, site.index, &extra)
    } else {
        label
    };
    let pool = pool_of(
        site,
        &field_path(&elastic_path, "pool"),
        &raw_elastic.pool,
        local,
    )?;
    Ok(Elastic {
        extra,
        pool,
        place: place.into(),
    })
}

/// The extra allowance of an elastic limit: `ceiling - requests` per window,
/// the burst scaled by the same ratio (at least 1).
fn extra_allowance(path: &str, limit: &Limit, raw: &RawElastic) -> Result<Limit, FieldError> {
    let field = field_path(path, "ceiling");
    if raw.ceiling <= limit.requests || raw.ceiling > MAX_REQUESTS {
        return Err(FieldError::at(
            field,
            format!(
                "must be above the limit's requests ({}) and at most {MAX_REQUESTS}, got {}",
                limit.requests, raw.ceiling
            ),
        ));
    }
    let requests = raw.ceiling - limit.requests;
    let scaled = u128::from(limit.burst) * u128::from(requests) / u128::from(limit.requests);
    let extra = Limit {
        requests,
        burst: u64::try_from(scaled).unwrap_or(u64::MAX).max(1),
        soft_percent: 0,
        max_delay: None,
        ..limit.clone()
    };
    extra
        .validate()
        .map_err(|e| FieldError::at(field, format!("the extra allowance {}", e.message)))?;
    Ok(extra)
}

/// Refuses settings of a pool rule that would have no effect: a pool is
/// consulted only by elastic limits, with the borrowing request's weight.
pub(crate) fn check_pool_rule(path: &str, rule: &RawRule) -> Result<(), FieldError> {
    let m = &rule.matcher;
    if m.path_prefix.is_some() || m.path.is_some() || !m.methods.is_empty() || !m.headers.is_empty()
    {
        return Err(FieldError::at(
            field_path(path, "match"),
            "a pool rule is consulted only by elastic limits, never matched on its own: remove match",
        ));
    }
    if rule.cost != RawCost::default() {
        return Err(FieldError::at(
            field_path(path, "cost"),
            "a pool rule is consumed with the borrowing request's weight: remove cost",
        ));
    }
    if rule.mode == Mode::Shadow {
        return Err(FieldError::at(
            field_path(path, "mode"),
            "a pool rule cannot be in shadow mode",
        ));
    }
    Ok(())
}

/// The index of the pool rule `name` of an elastic limit at `site`, decided
/// here (`local`) or by the limiter: it exists, is another rule, has no
/// concurrency limits, no elastic limits and no delay mode, and its limits
/// are decided where the elastic limit is (all local or all global).
fn pool_of(
    site: &LimitSite<'_>,
    field: &str,
    name: &str,
    local: bool,
) -> Result<usize, FieldError> {
    let p = site
        .rules
        .iter()
        .position(|r| r.name == name)
        .ok_or_else(|| FieldError::at(field, format!("no rule is named {name:?}")))?;
    let pool = site
        .rules
        .get(p)
        .ok_or_else(|| FieldError::at(field, "no such rule"))?;
    if p == site.rule_index {
        return Err(FieldError::at(field, "a rule cannot be its own pool"));
    }
    for (k, pool_limit) in pool.limits.iter().enumerate() {
        let pool_local = pool_limit.scope == Scope::Local;
        let problem = if pool_limit.concurrency.is_some() {
            Some("is a concurrency limit; a pool cannot be".to_string())
        } else if pool_limit.elastic.is_some() {
            Some("is itself elastic; a pool cannot be".to_string())
        } else if pool_limit.on_exceed == OnExceed::Delay {
            Some("is in delay mode; a pool cannot be".to_string())
        } else if pool_limit.on_exceed == OnExceed::Block {
            Some("is in block mode; a pool cannot be".to_string())
        } else if pool_local != local {
            let (this, that) = if local {
                ("local", "global")
            } else {
                ("global", "local")
            };
            Some(format!(
                "is {that}; a {this} elastic limit needs a {this} pool"
            ))
        } else {
            None
        };
        if let Some(problem) = problem {
            return Err(FieldError::at(
                field,
                format!("rule {name:?}: its limits[{k}] {problem}"),
            ));
        }
    }
    Ok(p)
}

/// What an elastic limit that denied with `denial` reports once it lent the
/// request its extra allowance: admitted, with nothing of its own quota
/// remaining.
pub(crate) fn lent(denial: Decision) -> Decision {
    Decision {
        allowed: true,
        remaining: 0,
        retry_after: 0,
        delay: 0,
        denial: None,
        ..denial
    }
}
