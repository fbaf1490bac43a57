//! The plan put together where the kinds are registered: the rules in
//! order, each limit compiled by its kind ([`super::compile`]), what the
//! kinds allow of their rule's cost and priority classes
//! ([`super::check_priority`], [`charged_after_response`]), the overrides,
//! and the settings no kind takes part in (`crate::config::compile`).
//! `config::parse` reaches it through [`Plan::compile`].

use super as kinds;
use crate::client_ip::ClientIpPolicy;
use crate::config::checks::{
    field_path, in_range, limit_name, valid_name, validated, window, LimitSite, MAX_NAME_LEN,
};
use crate::config::compile::{
    check_limit_names, checked_jwt_payload, checked_quota_path, checked_top_keys, compile_limiter,
    compile_response, MAX_LOCAL_KEYS, MAX_QUEUED,
};
use crate::config::cost::{self, RESPONSE_ONLY, SOFT_BURST};
use crate::config::matching;
use crate::config::plan::{Cost, Estimate, OverrideLimit, Plan, RequestBody, Rule, RuleLimit};
use crate::config::priority;
use crate::config::raw::{Mode, Protocol, RawConfig, RawOverride, RawRule};
use crate::engine::core::elastic;
use crate::key::KeyPart;
use crate::layout;
use crate::matcher::RuleIndex;
use crate::table::Shape;
use sluice_core::{FieldError, Limit};

impl Plan {
    /// Checks `raw` and compiles it (see [`crate::config::parse`]).
    pub fn compile(raw: RawConfig) -> Result<Plan, FieldError> {
        if !valid_name(&raw.domain) {
            return Err(FieldError::at(
                "domain",
                format!(
                    "{:?} must be 1 to {MAX_NAME_LEN} bytes of A-Z, a-z, 0-9, '_', '.', '-'",
                    raw.domain
                ),
            ));
        }
        let client_ip = ClientIpPolicy {
            trusted_hops: in_range(
                raw.client_ip.xff_trusted_hops,
                0,
                64,
                "client_ip.xff_trusted_hops",
            )?,
            envoy_xff: raw.client_ip.envoy_xff,
            ipv4_prefix: in_range(raw.client_ip.ipv4_prefix, 0, 32, "client_ip.ipv4_prefix")?,
            ipv6_prefix: in_range(raw.client_ip.ipv6_prefix, 0, 128, "client_ip.ipv6_prefix")?,
        };
        let local_max_keys: u64 =
            in_range(raw.local_max_keys, 1, MAX_LOCAL_KEYS, "local_max_keys")?;
        let response = compile_response(raw.response)?;
        let limiter = raw.limiter.map(compile_limiter).transpose()?;
        let protocol = limiter.as_ref().map_or(Protocol::Sluice, |l| l.protocol);
        let keys = Shape::for_keys(local_max_keys, raw.local_when_full);
        let rules = compile_rules(&raw.domain, &raw.rules, protocol, limiter.is_some(), keys)?;
        let reads_body = rules.iter().any(|r| {
            matches!(&r.cost, Cost::Response(c) if matches!(c.estimate, Estimate::Body(_)))
                || r.key.iter().any(KeyPart::reads_body)
        });
        let request_body = if reads_body {
            RequestBody::Read(raw.headers_while_reading_body)
        } else {
            RequestBody::Unread
        };
        Ok(Plan {
            request_body,
            seed_key: layout::seed_key(&raw.domain),
            domain: raw.domain,
            headers: raw.headers,
            client_ip,
            limiter,
            local_max_keys,
            local_keys: keys,
            jwt_payload: checked_jwt_payload(raw.jwt_payload_in_metadata)?,
            response,
            rule_index: RuleIndex::new(&rules, |r| (!r.pool).then_some(&r.matcher)),
            rules,
            quota_endpoint: raw.quota_endpoint.map(checked_quota_path).transpose()?,
            top_limited_keys: raw.top_limited_keys.map(checked_top_keys).transpose()?,
            access_log_key: raw.access_log_key,
        })
    }
}

/// Checks the rules in order, then what relates them: elastic limits'
/// pools and the limits' names.
fn compile_rules(
    domain: &str,
    raw: &[RawRule],
    protocol: Protocol,
    has_limiter: bool,
    keys: Shape,
) -> Result<Vec<Rule>, FieldError> {
    // Rules named as an elastic limit's pool. Rules are few: plain lists
    // searched in order cost the wasm less than a set's tree code.
    let pool_names: Vec<&str> = raw
        .iter()
        .flat_map(|r| r.limits.iter().filter_map(|l| l.elastic.as_ref()))
        .map(|e| e.pool.as_str())
        .collect();
    let pool_flags: Vec<bool> = raw
        .iter()
        .map(|r| pool_names.contains(&r.name.as_str()))
        .collect();
    let mut names: Vec<String> = Vec::with_capacity(raw.len());
    let mut rules = Vec::with_capacity(raw.len());
    for (i, (rule, pool)) in raw.iter().zip(pool_flags).enumerate() {
        let path = format!("rules[{i}]");
        if names.contains(&rule.name) {
            return Err(FieldError::at(
                field_path(&path, "name"),
                format!("duplicate rule name {:?}", rule.name),
            ));
        }
        names.push(rule.name.clone());
        if pool {
            elastic::check_pool_rule(&path, rule)?;
        }
        let at = RuleAt {
            domain,
            path: &path,
            index: i,
            rules: raw,
            protocol,
            keys,
        };
        let compiled = compile_rule(&at, rule, pool)?;
        if !has_limiter {
            if let Some(j) = compiled.limits.iter().position(|l| !l.is_local()) {
                return Err(FieldError::at(
                    "limiter",
                    format!("required because {path}.limits[{j}] has scope global"),
                ));
            }
        }
        rules.push(compiled);
    }
    check_limit_names(&rules)?;
    Ok(rules)
}

/// Where a rule stands in the configuration.
struct RuleAt<'a> {
    domain: &'a str,
    /// Its JSON path (`rules[i]`).
    path: &'a str,
    index: usize,
    /// Every rule as configured.
    rules: &'a [RawRule],
    protocol: Protocol,
    keys: Shape,
}

/// Compiles a rule; `pool`: some elastic limit borrows from it.
fn compile_rule(at: &RuleAt<'_>, rule: &RawRule, pool: bool) -> Result<Rule, FieldError> {
    let (domain, path) = (at.domain, at.path);
    if !valid_name(&rule.name) || rule.name.contains('.') {
        // No '.': a rule name is one segment of its stat names
        // (`sluice.<rule>.<event>`) and of its IETF limit names (`<rule>.<n>`).
        return Err(FieldError::at(
            field_path(path, "name"),
            format!(
                "{:?} must be 1 to {MAX_NAME_LEN} bytes of A-Z, a-z, 0-9, '_', '-' (no '.': it is one segment of the rule's stat names)",
                rule.name
            ),
        ));
    }
    let matcher = matching::compile(&field_path(path, "match"), &rule.matcher)?;
    if rule.key.is_empty() {
        return Err(FieldError::at(
            field_path(path, "key"),
            "must list at least one part",
        ));
    }
    let key = rule
        .key
        .iter()
        .enumerate()
        .map(|(j, part)| matching::key_part(&format!("{path}.key[{j}]"), part))
        .collect::<Result<Vec<_>, _>>()?;
    if rule.limits.is_empty() {
        return Err(FieldError::at(
            field_path(path, "limits"),
            "must list at least one limit",
        ));
    }
    let mut limits = compile_limits(at, rule, &key)?;
    add_overrides(domain, path, &rule.name, &rule.overrides, &mut limits)?;
    let max_queued = in_range(
        rule.max_queued,
        1,
        MAX_QUEUED,
        &field_path(path, "max_queued"),
    )?;
    let cost = cost::compile(&field_path(path, "cost"), &rule.cost)?;
    check_cost(path, rule, &limits, &cost)?;
    if rule.priority.is_some() {
        kinds::check_priority(&field_path(path, "priority"), &limits, &rule.limits)?;
    }
    let priority = priority::compile(path, rule.priority.as_ref())?;
    Ok(Rule {
        name: rule.name.clone(),
        matcher,
        key,
        limits,
        shadow: rule.mode == Mode::Shadow,
        max_queued,
        cost,
        pool,
        priority,
    })
}

/// Compiles the limits of `rule` (whose key parts are `key`), each by its
/// kind.
fn compile_limits(
    at: &RuleAt<'_>,
    rule: &RawRule,
    key: &[KeyPart],
) -> Result<Vec<RuleLimit>, FieldError> {
    let (domain, path) = (at.domain, at.path);
    let mut limits = Vec::with_capacity(rule.limits.len());
    for (j, raw_limit) in rule.limits.iter().enumerate() {
        let limit_path = format!("{path}.limits[{j}]");
        let site = LimitSite {
            domain,
            rule: &rule.name,
            rule_index: at.index,
            rules: at.rules,
            mode: rule.mode,
            key,
            index: j,
            path: &limit_path,
            protocol: at.protocol,
            keys: at.keys,
        };
        let kind = kinds::compile(&site, raw_limit)?;
        limits.push(RuleLimit {
            name: limit_name(&limit_path, raw_limit)?,
            kind,
        });
    }
    Ok(limits)
}

/// Adds the rule's overrides to the limits they replace.
fn add_overrides(
    domain: &str,
    path: &str,
    rule: &str,
    overrides: &[RawOverride],
    limits: &mut [RuleLimit],
) -> Result<(), FieldError> {
    for (k, raw_override) in overrides.iter().enumerate() {
        let override_path = format!("{path}.overrides[{k}]");
        if overrides.iter().take(k).any(|o| o.key == raw_override.key) {
            return Err(FieldError::at(
                field_path(&override_path, "key"),
                format!("duplicate override key {:?}", raw_override.key),
            ));
        }
        add_override(domain, rule, &override_path, raw_override, limits)?;
    }
    Ok(())
}

/// Adds `raw` to the overrides of the limits it replaces.
fn add_override(
    domain: &str,
    rule: &str,
    path: &str,
    raw: &RawOverride,
    limits: &mut [RuleLimit],
) -> Result<(), FieldError> {
    let only = match raw.limit {
        None => None,
        Some(index) => {
            let index = usize::try_from(index)
                .ok()
                .filter(|&i| i < limits.len())
                .ok_or_else(|| {
                    FieldError::at(
                        field_path(path, "limit"),
                        format!("no limit {index} in this rule (it has {})", limits.len()),
                    )
                })?;
            Some(index)
        }
    };
    let window = raw
        .window
        .as_deref()
        .map(|w| window(&field_path(path, "window"), w))
        .transpose()?;
    for (j, base) in limits.iter_mut().enumerate() {
        if only.is_some_and(|o| o != j) {
            continue;
        }
        let local = base.is_local();
        let quota =
            kinds::overridable(j, &mut base.kind).map_err(|why| FieldError::at(path, why))?;
        let limit = validated(
            path,
            Limit {
                requests: raw.requests,
                window: window.unwrap_or(quota.limit.window),
                burst: raw.burst.unwrap_or(raw.requests),
                ..quota.limit.clone()
            },
        )?;
        let state_key = if local {
            layout::override_key(domain, rule, j, &limit, &raw.key)
        } else {
            String::new()
        };
        // Kept sorted by key for the lookup.
        let at = quota.overrides.partition_point(|o| o.key < raw.key);
        quota.overrides.insert(
            at,
            OverrideLimit {
                key: raw.key.clone(),
                limit,
                state_key: state_key.into(),
            },
        );
    }
    Ok(())
}

/// Checks the `cost` of `rule` at `path` against its compiled `limits`: a
/// fixed weight (or estimate) they can all admit, and limits that can be
/// charged after the response for a cost from the response.
fn check_cost(
    path: &str,
    rule: &RawRule,
    limits: &[RuleLimit],
    cost: &Cost,
) -> Result<(), FieldError> {
    match cost {
        Cost::Fixed(weight) => check_capacity(path, &rule.overrides, limits, *weight),
        Cost::Response(response) => {
            check_charged(path, limits)?;
            match response.estimate {
                Estimate::Fixed(weight) => check_capacity(path, &rule.overrides, limits, weight),
                Estimate::Header(_) | Estimate::Body(_) => Ok(()),
            }
        }
        Cost::Header(_) | Cost::Metadata(_) => Ok(()),
    }
}

/// Checks that every limit of a rule whose cost comes from the response
/// can be charged after it: its kind allows it (see
/// [`charged_after_response`]), and a rate limit of an algorithm that
/// carries debt, without delay.
fn check_charged(path: &str, limits: &[RuleLimit]) -> Result<(), FieldError> {
    for (j, rule_limit) in limits.iter().enumerate() {
        let at = |field: &str| format!("{path}.limits[{j}].{field}");
        let limit = match kinds::charged_after_response(&rule_limit.kind) {
            Ok(Some(limit)) => limit,
            Ok(None) => continue,
            Err((field, why)) => return Err(FieldError::at(at(field), why)),
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
