//! Checking a raw configuration and turning it into a [`Plan`]. Each kind
//! of limit compiles its own part of a limit (see [`crate::engine`]); this
//! file checks the rest and puts the plan together.

use super::checks::{
    field_path, in_range, limit_name, valid_name, validated, window, LimitSite, MAX_NAME_LEN,
};
use super::cost;
use super::duration::parse_duration;
use super::matching;
use super::plan::{
    Cost, DenyResponse, Estimate, LimitKind, LimiterTarget, OverrideLimit, Plan, Quota, Rule,
    RuleLimit,
};
use super::priority;
use super::raw::{
    Mode, Protocol, RawConfig, RawLimit, RawLimiter, RawOverride, RawResponse, RawRule, Scope,
    ServiceHeaders, SyncMode,
};
use crate::client_ip::ClientIpPolicy;
use crate::engine::core::elastic;
use crate::engine::kinds::{
    coalesced, concurrency, global, global_elastic, leased, local, local_elastic, service_held,
};
use crate::layout;
use crate::matcher::RuleIndex;
use crate::table::Shape;
use sluice_core::{FieldError, Limit, MILLISECOND};

/// Largest `local_max_keys`.
pub const MAX_LOCAL_KEYS: u64 = 10_000_000;

/// Largest `max_queued` of a rule.
pub const MAX_QUEUED: u64 = 100_000;

/// Checks `raw` and compiles it.
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
        ipv4_prefix: in_range(raw.client_ip.ipv4_prefix, 0, 32, "client_ip.ipv4_prefix")?,
        ipv6_prefix: in_range(raw.client_ip.ipv6_prefix, 0, 128, "client_ip.ipv6_prefix")?,
    };
    let local_max_keys: u64 = in_range(raw.local_max_keys, 1, MAX_LOCAL_KEYS, "local_max_keys")?;
    let response = compile_response(raw.response)?;
    let limiter = raw.limiter.map(compile_limiter).transpose()?;
    let protocol = limiter.as_ref().map_or(Protocol::Sluice, |l| l.protocol);
    let keys = Shape::for_keys(local_max_keys, raw.local_when_full);
    let rules = compile_rules(&raw.domain, raw.rules, protocol, limiter.is_some(), keys)?;
    let request_body = rules
        .iter()
        .any(|r| matches!(&r.cost, Cost::Response(c) if matches!(c.estimate, Estimate::Body(_))));
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
    })
}

/// Checks `jwt_payload_in_metadata`: a name, as `jwt_authn` takes.
fn checked_jwt_payload(name: String) -> Result<String, FieldError> {
    if name.is_empty() || name.len() > MAX_NAME_LEN {
        return Err(FieldError::at(
            "jwt_payload_in_metadata",
            format!("must be 1 to {MAX_NAME_LEN} bytes, the payload_in_metadata of Envoy's jwt_authn filter"),
        ));
    }
    Ok(name)
}

/// Checks the denial response.
fn compile_response(raw: RawResponse) -> Result<DenyResponse, FieldError> {
    Ok(DenyResponse {
        status: in_range(raw.status, 400, 599, "response.status")?,
        body: raw.body,
        headers: raw
            .headers
            .into_iter()
            .map(|(name, value)| {
                if name.is_empty() {
                    Err(FieldError::at(
                        "response.headers",
                        "header names must not be empty",
                    ))
                } else {
                    Ok((name.to_ascii_lowercase(), value))
                }
            })
            .collect::<Result<_, _>>()?,
    })
}

/// Checks where and how global limits are checked.
fn compile_limiter(l: RawLimiter) -> Result<LimiterTarget, FieldError> {
    if l.cluster.is_empty() {
        return Err(FieldError::at("limiter.cluster", "must not be empty"));
    }
    let authority = match (l.protocol, l.authority) {
        (Protocol::Sluice, Some(a)) if !a.is_empty() => a,
        (Protocol::Sluice, Some(_)) => {
            return Err(FieldError::at("limiter.authority", "must not be empty"));
        }
        (Protocol::Sluice, None) => {
            return Err(FieldError::at("limiter.authority", "required"));
        }
        (Protocol::Rls, None) => String::new(),
        (Protocol::Rls, Some(_)) => {
            return Err(FieldError::at(
                "limiter.authority",
                "not used with protocol rls (the gRPC call names its service)",
            ));
        }
    };
    let timeout = parse_duration(&l.timeout).map_err(|m| FieldError::at("limiter.timeout", m))?;
    if timeout < MILLISECOND {
        return Err(FieldError::at("limiter.timeout", "must be at least 1ms"));
    }
    let service_headers = match (l.protocol, l.service_headers) {
        (Protocol::Rls, headers) => headers.unwrap_or_default(),
        (Protocol::Sluice, None) => ServiceHeaders::Never,
        (Protocol::Sluice, Some(_)) => {
            return Err(FieldError::at(
                "limiter.service_headers",
                "only with protocol rls (sluice-limiter's answers carry no headers)",
            ));
        }
    };
    Ok(LimiterTarget {
        cluster: l.cluster,
        authority,
        protocol: l.protocol,
        timeout,
        failure_mode: l.failure_mode,
        service_headers,
    })
}

/// Checks the rules in order, then what relates them: elastic limits'
/// pools and the limits' names.
fn compile_rules(
    domain: &str,
    raw: Vec<RawRule>,
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
            rules: &raw,
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

/// Every limit's name in the IETF headers (configured, the rule's, or
/// `<rule>.<index>`) is distinct, so that `ratelimit` names one policy.
fn check_limit_names(rules: &[Rule]) -> Result<(), FieldError> {
    let mut seen: Vec<String> = Vec::new();
    for (i, rule) in rules.iter().enumerate() {
        for (j, limit) in rule.limits.iter().enumerate() {
            let name = match &limit.name {
                Some(name) => name.clone(),
                None if rule.limits.len() == 1 => rule.name.clone(),
                None => format!("{}.{j}", rule.name),
            };
            if seen.contains(&name) {
                let field = if limit.name.is_some() {
                    format!("rules[{i}].limits[{j}].name")
                } else {
                    format!("rules[{i}].name")
                };
                let name = limit.name.as_deref().unwrap_or(&rule.name);
                return Err(FieldError::at(
                    field,
                    format!(
                        "{name:?}: another limit already has this name in the rate-limit headers"
                    ),
                ));
            }
            seen.push(name);
        }
    }
    Ok(())
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
    let mut limits = Vec::with_capacity(rule.limits.len());
    for (j, raw_limit) in rule.limits.iter().enumerate() {
        let limit_path = format!("{path}.limits[{j}]");
        let site = LimitSite {
            domain,
            rule: &rule.name,
            rule_index: at.index,
            rules: at.rules,
            mode: rule.mode,
            key: &key,
            index: j,
            path: &limit_path,
            protocol: at.protocol,
            keys: at.keys,
        };
        let kind = compile_kind(&site, raw_limit)?;
        limits.push(RuleLimit {
            name: limit_name(&limit_path, raw_limit)?,
            kind,
        });
    }
    add_overrides(domain, path, &rule.name, &rule.overrides, &mut limits)?;
    let max_queued = in_range(
        rule.max_queued,
        1,
        MAX_QUEUED,
        &field_path(path, "max_queued"),
    )?;
    let cost = cost::compile_for(path, rule, &limits)?;
    let priority = priority::compile(path, rule.priority.as_ref(), &limits, &rule.limits)?;
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

/// Compiles a limit by its kind: one line per kind.
fn compile_kind(site: &LimitSite<'_>, raw: &RawLimit) -> Result<LimitKind, FieldError> {
    if let Some(max) = raw.concurrency {
        return concurrency::compile(site, raw, max);
    }
    if raw.permit_ttl.is_some() {
        return Err(concurrency::stray_ttl(site));
    }
    let sync = raw.sync.as_ref().map_or(SyncMode::PerRequest, |s| s.mode);
    match (raw.scope, site.protocol) {
        (Scope::Global, Protocol::Rls) => service_held::compile(site, raw),
        _ if raw.descriptor.is_some() => Err(FieldError::at(
            site.field("descriptor"),
            "only for global limits with limiter.protocol rls",
        )),
        (Scope::Local, Protocol::Sluice | Protocol::Rls) => match &raw.elastic {
            None => local::compile(site, raw),
            Some(elastic) => local_elastic::compile(site, raw, elastic),
        },
        (Scope::Global, Protocol::Sluice) => match (sync, &raw.elastic) {
            (SyncMode::Lease, _) => leased::compile(site, raw),
            (SyncMode::PerRequest | SyncMode::Coalesce, Some(elastic)) => {
                global_elastic::compile(site, raw, elastic)
            }
            (SyncMode::Coalesce, None) => coalesced::compile(site, raw),
            (SyncMode::PerRequest, None) => global::compile(site, raw),
        },
    }
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

/// The quota of limit `j`, which an override at `path` replaces for a key;
/// an error for a limit that takes no overrides.
fn overridable<'l>(
    path: &str,
    j: usize,
    base: &'l mut RuleLimit,
) -> Result<&'l mut Quota, FieldError> {
    let refused = |why: String| Err(FieldError::at(path, why));
    match &mut base.kind {
        LimitKind::LocalElastic(_) | LimitKind::GlobalElastic(_) => refused(format!(
            "limit {j} is elastic, and elastic limits take no overrides"
        )),
        LimitKind::Local(l) => Ok(&mut l.quota),
        LimitKind::Global(g) | LimitKind::Coalesced(g) => Ok(&mut g.quota),
        LimitKind::Leased(l) => Ok(&mut l.global.quota),
        LimitKind::ServiceHeld(_) => refused(format!(
            "limit {j} is held by the rate limit service: override it there"
        )),
        LimitKind::Concurrency(_) => refused(format!(
            "limit {j} is a concurrency limit, which takes no overrides \
             (give the override a limit index)"
        )),
    }
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
        let quota = overridable(path, j, base)?;
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
                state_key,
            },
        );
    }
    Ok(())
}
