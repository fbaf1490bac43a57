//! Checking a raw configuration and turning it into a [`Plan`].

use super::duration::parse_duration;
use super::plan::{
    Cost, DenyResponse, Elastic, Entry, EntryValue, LeasePolicy, LimitScope, LimiterTarget,
    OverrideLimit, Plan, Rule, RuleLimit, Sync,
};
use super::raw::{
    Mode, OnExceed, Protocol, RawConfig, RawCost, RawElastic, RawLimit, RawMatch, RawOverride,
    RawRule, RawSync, Scope, SyncMode, COST_EXPECTED,
};
use crate::client_ip::ClientIpPolicy;
use crate::key::KeyPart;
use crate::layout;
use crate::matcher::{HeaderCondition, HeaderTest, Matcher, PathMatch};
use sluice_core::{
    Algorithm, FieldError, Limit, Nanos, MAX_REQUESTS, MAX_SOFT_PERCENT, MILLISECOND,
};
use std::collections::BTreeSet;

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
    let response = DenyResponse {
        status: in_range(raw.response.status, 400, 599, "response.status")?,
        body: raw.response.body,
        headers: raw
            .response
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
    };
    let limiter = match raw.limiter {
        None => None,
        Some(l) => {
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
            let timeout =
                parse_duration(&l.timeout).map_err(|m| FieldError::at("limiter.timeout", m))?;
            if timeout < MILLISECOND {
                return Err(FieldError::at("limiter.timeout", "must be at least 1ms"));
            }
            Some(LimiterTarget {
                cluster: l.cluster,
                authority,
                protocol: l.protocol,
                timeout,
                failure_mode: l.failure_mode,
            })
        }
    };

    // Rules named as an elastic limit's pool (collected by insertion: a
    // collected set would sort, which costs the wasm a sort routine).
    let mut pool_names = BTreeSet::new();
    for r in &raw.rules {
        for e in r.limits.iter().filter_map(|l| l.elastic.as_ref()) {
            pool_names.insert(e.pool.clone());
        }
    }
    let mut names = BTreeSet::new();
    let mut rules = Vec::with_capacity(raw.rules.len());
    for (i, rule) in raw.rules.into_iter().enumerate() {
        let path = format!("rules[{i}]");
        if !names.insert(rule.name.clone()) {
            return Err(FieldError::at(
                format!("{path}.name"),
                format!("duplicate rule name {:?}", rule.name),
            ));
        }
        let pool = pool_names.contains(&rule.name);
        if pool {
            check_pool_rule(&path, &rule)?;
        }
        let protocol = limiter.as_ref().map_or(Protocol::Sluice, |l| l.protocol);
        let mut compiled = compile_rule(&raw.domain, &path, rule, protocol)?;
        compiled.pool = pool;
        if limiter.is_none() {
            let global = |l: &RuleLimit| matches!(l.scope, LimitScope::Global { .. });
            if let Some(j) = compiled.limits.iter().position(global) {
                return Err(FieldError::at(
                    "limiter",
                    format!("required because {path}.limits[{j}] has scope global"),
                ));
            }
        }
        rules.push(compiled);
    }
    resolve_pools(&mut rules)?;
    check_limit_names(&rules)?;

    Ok(Plan {
        seed_key: layout::seed_key(&raw.domain),
        domain: raw.domain,
        headers: raw.headers,
        client_ip,
        limiter,
        local_max_keys,
        response,
        rules,
    })
}

/// A limit's configured IETF name, checked as a name.
fn limit_name(limit_path: &str, raw: &RawLimit) -> Result<Option<String>, FieldError> {
    match &raw.name {
        Some(name) if !valid_name(name) => Err(FieldError::at(
            format!("{limit_path}.name"),
            format!("{name:?} must be 1 to {MAX_NAME_LEN} bytes of A-Z, a-z, 0-9, '_', '.', '-'"),
        )),
        name => Ok(name.clone()),
    }
}

/// Every limit's name in the IETF headers (configured, the rule's, or
/// `<rule>.<index>`) is distinct, so that `ratelimit` names one policy.
fn check_limit_names(rules: &[Rule]) -> Result<(), FieldError> {
    let mut seen = BTreeSet::new();
    for (i, rule) in rules.iter().enumerate() {
        for (j, limit) in rule.limits.iter().enumerate() {
            let name = match &limit.name {
                Some(name) => name.clone(),
                None if rule.limits.len() == 1 => rule.name.clone(),
                None => format!("{}.{j}", rule.name),
            };
            if !seen.insert(name) {
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
        }
    }
    Ok(())
}

fn in_range<T: TryFrom<u64>>(value: u64, min: u64, max: u64, path: &str) -> Result<T, FieldError> {
    if value < min || value > max {
        return Err(FieldError::at(
            path,
            format!("must be between {min} and {max}, got {value}"),
        ));
    }
    T::try_from(value).map_err(|_| FieldError::at(path, format!("out of range: {value}")))
}

/// Longest domain or rule name: the limiter's longest domain.
pub const MAX_NAME_LEN: usize = sluice_wire::MAX_DOMAIN_BYTES;

/// Domains and rule names follow the limiter's rule for domains (a rule name
/// is part of every limiter key).
fn valid_name(name: &str) -> bool {
    sluice_wire::valid_domain(name)
}

fn compile_rule(
    domain: &str,
    path: &str,
    rule: RawRule,
    protocol: Protocol,
) -> Result<Rule, FieldError> {
    if !valid_name(&rule.name) || rule.name.contains('.') {
        // No '.': a rule name is one segment of its stat names
        // (`sluice.<rule>.<event>`) and of its IETF limit names (`<rule>.<n>`).
        return Err(FieldError::at(
            format!("{path}.name"),
            format!(
                "{:?} must be 1 to {MAX_NAME_LEN} bytes of A-Z, a-z, 0-9, '_', '-' (no '.': it is one segment of the rule's stat names)",
                rule.name
            ),
        ));
    }
    let matcher = compile_match(&format!("{path}.match"), rule.matcher)?;
    if rule.key.is_empty() {
        return Err(FieldError::at(
            format!("{path}.key"),
            "must list at least one part",
        ));
    }
    let key = rule
        .key
        .iter()
        .enumerate()
        .map(|(j, part)| {
            KeyPart::parse(part).map_err(|m| FieldError::at(format!("{path}.key[{j}]"), m))
        })
        .collect::<Result<Vec<_>, _>>()?;
    if rule.limits.is_empty() {
        return Err(FieldError::at(
            format!("{path}.limits"),
            "must list at least one limit",
        ));
    }
    let mut limits = Vec::with_capacity(rule.limits.len());
    for (j, raw_limit) in rule.limits.iter().enumerate() {
        let limit_path = format!("{path}.limits[{j}]");
        if raw_limit.scope == Scope::Global && protocol == Protocol::Rls {
            let descriptor = compile_descriptor(&limit_path, raw_limit, &rule.name, &key)?;
            limits.push(RuleLimit {
                name: limit_name(&limit_path, raw_limit)?,
                limit: service_held(),
                scope: LimitScope::Global {
                    deny_prefix: layout::deny_prefix(domain, &rule.name, j),
                },
                overrides: Vec::new(),
                elastic: None,
                sync: Sync::PerRequest,
                descriptor: Some(descriptor),
            });
            continue;
        }
        if raw_limit.descriptor.is_some() {
            return Err(FieldError::at(
                format!("{limit_path}.descriptor"),
                "only for global limits with limiter.protocol rls",
            ));
        }
        let limit = compile_limit(&limit_path, raw_limit)?;
        let scope = match raw_limit.scope {
            Scope::Local => LimitScope::Local {
                state_prefix: layout::limit_prefix(domain, &rule.name, j, &limit),
            },
            Scope::Global => LimitScope::Global {
                deny_prefix: layout::deny_prefix(domain, &rule.name, j),
            },
        };
        let elastic = match &raw_limit.elastic {
            None => None,
            Some(raw_elastic) => {
                let elastic_path = format!("{limit_path}.elastic");
                if rule.mode == Mode::Shadow {
                    return Err(FieldError::at(
                        elastic_path,
                        "not available in a rule with mode shadow",
                    ));
                }
                if raw_limit.on_exceed == OnExceed::Delay {
                    return Err(FieldError::at(
                        elastic_path,
                        "cannot be combined with on_exceed: delay",
                    ));
                }
                let extra = extra_allowance(&elastic_path, &limit, raw_elastic)?;
                let label = layout::elastic_label(&rule.name);
                let place = match raw_limit.scope {
                    Scope::Local => layout::limit_prefix(domain, &label, j, &extra),
                    Scope::Global => label,
                };
                // The pool's index is set once every rule is known.
                Some(Elastic {
                    extra,
                    pool: usize::MAX,
                    pool_name: raw_elastic.pool.clone(),
                    place,
                })
            }
        };
        let sync = match &raw_limit.sync {
            None => Sync::PerRequest,
            Some(raw_sync) => {
                let place = (domain, rule.name.as_str(), j);
                compile_sync(
                    &format!("{limit_path}.sync"),
                    raw_sync,
                    raw_limit,
                    rule.mode,
                    &limit,
                    place,
                )?
            }
        };
        limits.push(RuleLimit {
            name: limit_name(&limit_path, raw_limit)?,
            limit,
            scope,
            overrides: Vec::new(),
            elastic,
            sync,
            descriptor: None,
        });
    }
    let mut override_keys = BTreeSet::new();
    for (k, raw_override) in rule.overrides.iter().enumerate() {
        let override_path = format!("{path}.overrides[{k}]");
        if !override_keys.insert(raw_override.key.as_str()) {
            return Err(FieldError::at(
                format!("{override_path}.key"),
                format!("duplicate override key {:?}", raw_override.key),
            ));
        }
        add_override(
            domain,
            &rule.name,
            &override_path,
            raw_override,
            &mut limits,
        )?;
    }
    let max_queued = in_range(
        rule.max_queued,
        1,
        MAX_QUEUED,
        &format!("{path}.max_queued"),
    )?;
    let cost = compile_cost(&format!("{path}.cost"), &rule.cost)?;
    if let Cost::Fixed(weight) = cost {
        check_capacity(path, &rule.overrides, &limits, weight)?;
    }
    Ok(Rule {
        name: rule.name,
        matcher,
        key,
        limits,
        shadow: rule.mode == Mode::Shadow,
        max_queued,
        cost,
        pool: false,
    })
}

/// The stand-in limit of a global limit the rate limit service holds: it
/// never refuses a weight (the service decides), and a decision made without
/// the service reports no quota (`requests` unknown: see [`crate::headers`]).
fn service_held() -> Limit {
    Limit {
        algorithm: Algorithm::FixedWindow,
        requests: MAX_REQUESTS,
        window: sluice_core::SECOND,
        burst: MAX_REQUESTS,
        precision: 1,
        soft_percent: 0,
        max_delay: None,
    }
}

/// Checks a global limit of `protocol: rls`: only `scope` and `descriptor`
/// may be set (the service holds the limit). Without `descriptor`, it is
/// `generic_key: <rule>` followed by one entry per key part of the rule
/// (see [`default_entry_key`]).
fn compile_descriptor(
    path: &str,
    raw: &RawLimit,
    rule: &str,
    key: &[KeyPart],
) -> Result<Vec<Entry>, FieldError> {
    let set = [
        ("algorithm", raw.algorithm.is_some()),
        ("requests", raw.requests.is_some()),
        ("window", raw.window.is_some()),
        ("burst", raw.burst.is_some()),
        ("precision", raw.precision.is_some()),
        ("soft_percent", raw.soft_percent != 0),
        ("on_exceed", raw.on_exceed != OnExceed::Deny),
        ("max_delay", raw.max_delay.is_some()),
        ("elastic", raw.elastic.is_some()),
        ("sync", raw.sync.is_some()),
    ];
    if let Some((field, _)) = set.iter().find(|(_, set)| *set) {
        return Err(FieldError::at(
            format!("{path}.{field}"),
            "not with limiter.protocol rls: the rate limit service's configuration holds the limit",
        ));
    }
    let Some(entries) = &raw.descriptor else {
        let mut entries = vec![Entry {
            key: "generic_key".to_string(),
            value: EntryValue::Fixed(rule.to_string()),
        }];
        entries.extend(key.iter().map(|part| Entry {
            key: default_entry_key(part),
            value: EntryValue::Part(part.clone()),
        }));
        return Ok(entries);
    };
    if entries.is_empty() {
        return Err(FieldError::at(
            format!("{path}.descriptor"),
            "must list at least one entry",
        ));
    }
    entries
        .iter()
        .enumerate()
        .map(|(k, e)| {
            let at = format!("{path}.descriptor[{k}]");
            if e.key.is_empty() {
                return Err(FieldError::at(format!("{at}.key"), "must not be empty"));
            }
            let value = match (&e.value, &e.from) {
                (Some(v), None) => EntryValue::Fixed(v.clone()),
                (None, Some(from)) => {
                    let part = KeyPart::parse(from)
                        .map_err(|m| FieldError::at(format!("{at}.from"), m))?;
                    if !key.contains(&part) {
                        return Err(FieldError::at(
                            format!("{at}.from"),
                            format!("{from:?} is not a key part of the rule"),
                        ));
                    }
                    EntryValue::Part(part)
                }
                _ => return Err(FieldError::at(at, "set exactly one of value and from")),
            };
            Ok(Entry {
                key: e.key.clone(),
                value,
            })
        })
        .collect()
}

/// The descriptor key a key part gets by default: Envoy's own action names
/// where there is one (`remote_address`, `generic_key`), else the part's
/// name (`path`, `method`, `authority`) or its header or query name.
fn default_entry_key(part: &KeyPart) -> String {
    match part {
        KeyPart::ClientIp => "remote_address".to_string(),
        KeyPart::Header(name) | KeyPart::Query(name) => name.clone(),
        KeyPart::Path => "path".to_string(),
        KeyPart::Method => "method".to_string(),
        KeyPart::Authority => "authority".to_string(),
        KeyPart::Const(_) => "generic_key".to_string(),
    }
}

/// How long a lease may be spent, unless `ttl` says otherwise.
pub const DEFAULT_LEASE_TTL: Nanos = sluice_core::SECOND;

/// Checks a global limit's `sync`; `place` is (domain, rule name, limit
/// index), naming its lease slots.
fn compile_sync(
    path: &str,
    raw: &RawSync,
    raw_limit: &RawLimit,
    rule_mode: Mode,
    limit: &Limit,
    place: (&str, &str, usize),
) -> Result<Sync, FieldError> {
    if raw_limit.scope == Scope::Local {
        return Err(FieldError::at(
            path,
            "only applies to limits with scope global",
        ));
    }
    if raw.mode != SyncMode::Lease {
        if raw.max_share.is_some() || raw.ttl.is_some() {
            return Err(FieldError::at(
                path,
                "max_share and ttl only apply with mode lease",
            ));
        }
        return Ok(if raw.mode == SyncMode::Coalesce {
            Sync::Coalesce
        } else {
            Sync::PerRequest
        });
    }
    let conflict = if rule_mode == Mode::Shadow {
        Some("a shadow rule's limits are checked per request")
    } else if raw_limit.on_exceed == OnExceed::Delay {
        Some("cannot be combined with on_exceed: delay")
    } else if raw_limit.elastic.is_some() {
        Some("cannot be combined with elastic")
    } else {
        None
    };
    if let Some(conflict) = conflict {
        return Err(FieldError::at(format!("{path}.mode"), conflict));
    }
    let share_path = format!("{path}.max_share");
    let text = raw
        .max_share
        .as_deref()
        .ok_or_else(|| FieldError::at(&share_path, "required with mode lease"))?;
    let share_ppm = parse_share(text).map_err(|m| FieldError::at(&share_path, m))?;
    let ttl = match raw.ttl.as_deref() {
        None => DEFAULT_LEASE_TTL,
        Some(text) => {
            let field = format!("{path}.ttl");
            let ttl = parse_duration(text).map_err(|m| FieldError::at(&field, m))?;
            if ttl < MILLISECOND {
                return Err(FieldError::at(field, "must be at least 1ms"));
            }
            ttl
        }
    };
    let (domain, rule_name, index) = place;
    let policy = LeasePolicy {
        share_ppm,
        ttl,
        prefix: layout::lease_prefix(domain, rule_name, index),
    };
    if policy.max_units(limit) == 0 {
        return Err(FieldError::at(
            share_path,
            format!(
                "{text} of {} requests is less than one unit",
                limit.requests
            ),
        ));
    }
    Ok(Sync::Lease(policy))
}

/// Reads a share such as `"1%"` or `"0.25%"` into millionths.
fn parse_share(text: &str) -> Result<u64, String> {
    let expected = || {
        format!("must be a percentage above 0% and at most 100% with up to 4 decimals, such as \"1%\", got {text:?}")
    };
    let number = text.strip_suffix('%').ok_or_else(expected)?;
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(whole) || (!fraction.is_empty() && !digits(fraction)) || fraction.len() > 4 {
        return Err(expected());
    }
    let whole: u64 = whole.parse().map_err(|_| expected())?;
    let fraction: u64 = format!("{fraction:0<4}").parse().map_err(|_| expected())?;
    let ppm = whole.saturating_mul(10_000).saturating_add(fraction);
    if ppm == 0 || ppm > 1_000_000 {
        return Err(expected());
    }
    Ok(ppm)
}

/// The extra allowance of an elastic limit: `ceiling - requests` per window,
/// the burst scaled by the same ratio (at least 1).
fn extra_allowance(path: &str, limit: &Limit, raw: &RawElastic) -> Result<Limit, FieldError> {
    let field = format!("{path}.ceiling");
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
fn check_pool_rule(path: &str, rule: &RawRule) -> Result<(), FieldError> {
    let m = &rule.matcher;
    if m.path_prefix.is_some() || m.path.is_some() || !m.methods.is_empty() || !m.headers.is_empty()
    {
        return Err(FieldError::at(
            format!("{path}.match"),
            "a pool rule is consulted only by elastic limits, never matched on its own: remove match",
        ));
    }
    if rule.cost != RawCost::default() {
        return Err(FieldError::at(
            format!("{path}.cost"),
            "a pool rule is consumed with the borrowing request's weight: remove cost",
        ));
    }
    if rule.mode == Mode::Shadow {
        return Err(FieldError::at(
            format!("{path}.mode"),
            "a pool rule cannot be in shadow mode",
        ));
    }
    Ok(())
}

/// Points every elastic limit at its pool rule, and checks the pool: it
/// exists, is another rule, has no elastic limits and no delay mode, and
/// its limits are decided where the elastic limit is (all local or all
/// global).
fn resolve_pools(rules: &mut [Rule]) -> Result<(), FieldError> {
    let mut resolved = Vec::new();
    for (i, rule) in rules.iter().enumerate() {
        for (j, rule_limit) in rule.limits.iter().enumerate() {
            let Some(elastic) = &rule_limit.elastic else {
                continue;
            };
            let field = format!("rules[{i}].limits[{j}].elastic.pool");
            let name = &elastic.pool_name;
            let p = rules
                .iter()
                .position(|r| &r.name == name)
                .ok_or_else(|| FieldError::at(&field, format!("no rule is named {name:?}")))?;
            let pool = rules
                .get(p)
                .ok_or_else(|| FieldError::at(&field, "no such rule"))?;
            if p == i {
                return Err(FieldError::at(field, "a rule cannot be its own pool"));
            }
            let local = matches!(rule_limit.scope, LimitScope::Local { .. });
            for (k, pool_limit) in pool.limits.iter().enumerate() {
                let problem = if pool_limit.elastic.is_some() {
                    Some("is itself elastic; a pool cannot be".to_string())
                } else if pool_limit.limit.max_delay.is_some() {
                    Some("is in delay mode; a pool cannot be".to_string())
                } else if matches!(pool_limit.scope, LimitScope::Local { .. }) != local {
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
            resolved.push((i, j, p));
        }
    }
    for (i, j, p) in resolved {
        if let Some(elastic) = rules
            .get_mut(i)
            .and_then(|r| r.limits.get_mut(j))
            .and_then(|l| l.elastic.as_mut())
        {
            elastic.pool = p;
        }
    }
    Ok(())
}

/// Checks a rule's `cost`: an integer from 1 to the largest `requests`, or
/// `header:NAME`.
fn compile_cost(path: &str, raw: &RawCost) -> Result<Cost, FieldError> {
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
    }
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
        let culprit = if over(&rule_limit.limit) {
            Some((format!("{path}.limits[{j}]"), rule_limit.limit.soft_burst()))
        } else {
            rule_limit
                .overrides
                .iter()
                .find(|o| over(&o.limit))
                .map(|o| {
                    let k = overrides
                        .iter()
                        .position(|r| r.key == o.key)
                        .unwrap_or_default();
                    (format!("{path}.overrides[{k}]"), o.limit.soft_burst())
                })
        };
        if let Some((at, capacity)) = culprit {
            return Err(FieldError::at(
                format!("{path}.cost"),
                format!(
                    "{weight} is more than {at} can ever admit ({capacity}: its burst with the soft allowance)"
                ),
            ));
        }
    }
    Ok(())
}

fn compile_match(path: &str, raw: RawMatch) -> Result<Matcher, FieldError> {
    let path_match = match (raw.path_prefix, raw.path) {
        (Some(_), Some(_)) => {
            return Err(FieldError::at(
                path,
                "set at most one of path_prefix and path",
            ));
        }
        (Some(prefix), None) => PathMatch::Prefix(prefix),
        (None, Some(exact)) => PathMatch::Exact(exact),
        (None, None) => PathMatch::Any,
    };
    let mut methods = Vec::with_capacity(raw.methods.len());
    for (j, method) in raw.methods.into_iter().enumerate() {
        if method.is_empty() {
            return Err(FieldError::at(
                format!("{path}.methods[{j}]"),
                "must not be empty",
            ));
        }
        methods.push(method.to_ascii_uppercase());
    }
    let mut headers = Vec::with_capacity(raw.headers.len());
    for (j, h) in raw.headers.into_iter().enumerate() {
        let header_path = format!("{path}.headers[{j}]");
        if h.name.is_empty() {
            return Err(FieldError::at(
                format!("{header_path}.name"),
                "must not be empty",
            ));
        }
        let test = match (h.exact, h.present) {
            (Some(value), None) => HeaderTest::Exact(value),
            (None, Some(true)) => HeaderTest::Present,
            (None, Some(false)) => HeaderTest::Absent,
            _ => {
                return Err(FieldError::at(
                    header_path,
                    "set exactly one of exact and present",
                ));
            }
        };
        headers.push(HeaderCondition {
            name: h.name.to_ascii_lowercase(),
            test,
        });
    }
    Ok(Matcher {
        path: path_match,
        methods,
        headers,
    })
}

fn window(path: &str, text: &str) -> Result<Nanos, FieldError> {
    let window = parse_duration(text).map_err(|m| FieldError::at(path, m))?;
    if window < MILLISECOND {
        return Err(FieldError::at(path, "must be at least 1ms"));
    }
    Ok(window)
}

fn validated(path: &str, limit: Limit) -> Result<Limit, FieldError> {
    limit.validate().map_err(|e| e.under(path))?;
    Ok(limit)
}

fn compile_limit(path: &str, raw: &RawLimit) -> Result<Limit, FieldError> {
    let required = |field: &str| FieldError::at(format!("{path}.{field}"), "required");
    let algorithm = raw
        .algorithm
        .as_deref()
        .ok_or_else(|| required("algorithm"))?
        .parse::<Algorithm>()
        .map_err(|e| FieldError::at(format!("{path}.algorithm"), e.to_string()))?;
    let requests = raw.requests.ok_or_else(|| required("requests"))?;
    let window = window(
        &format!("{path}.window"),
        raw.window.as_deref().ok_or_else(|| required("window"))?,
    )?;
    let precision = match raw.precision {
        None => 1,
        Some(_) if algorithm != Algorithm::SlidingWindow => {
            return Err(FieldError::at(
                format!("{path}.precision"),
                "only applies to the sliding_window algorithm",
            ));
        }
        Some(p) => u32::try_from(p).map_err(|_| {
            FieldError::at(format!("{path}.precision"), format!("out of range: {p}"))
        })?,
    };
    let soft_percent = in_range(
        raw.soft_percent,
        0,
        u64::from(MAX_SOFT_PERCENT),
        &format!("{path}.soft_percent"),
    )?;
    validated(
        path,
        Limit {
            algorithm,
            requests,
            window,
            burst: raw.burst.unwrap_or(requests),
            precision,
            soft_percent,
            max_delay: max_delay(path, raw, algorithm)?,
        },
    )
}

/// The hold bound of a limit in delay mode; `None` in deny mode.
fn max_delay(
    path: &str,
    raw: &RawLimit,
    algorithm: Algorithm,
) -> Result<Option<Nanos>, FieldError> {
    match (raw.on_exceed, raw.max_delay.as_deref()) {
        (OnExceed::Deny, None) => Ok(None),
        (OnExceed::Deny, Some(_)) => Err(FieldError::at(
            format!("{path}.max_delay"),
            "only applies with on_exceed: delay",
        )),
        (OnExceed::Delay, None) => Err(FieldError::at(
            format!("{path}.max_delay"),
            "required with on_exceed: delay",
        )),
        (OnExceed::Delay, Some(_))
            if !matches!(algorithm, Algorithm::Gcra | Algorithm::LeakyBucket) =>
        {
            Err(FieldError::at(
                format!("{path}.on_exceed"),
                format!("delay is for gcra and leaky_bucket only, not {algorithm}"),
            ))
        }
        (OnExceed::Delay, Some(text)) => {
            let field = format!("{path}.max_delay");
            let delay = parse_duration(text).map_err(|m| FieldError::at(&field, m))?;
            if delay < MILLISECOND {
                return Err(FieldError::at(field, "must be at least 1ms"));
            }
            Ok(Some(delay))
        }
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
                        format!("{path}.limit"),
                        format!("no limit {index} in this rule (it has {})", limits.len()),
                    )
                })?;
            Some(index)
        }
    };
    let window = raw
        .window
        .as_deref()
        .map(|w| window(&format!("{path}.window"), w))
        .transpose()?;
    for (j, base) in limits.iter_mut().enumerate() {
        if only.is_some_and(|o| o != j) {
            continue;
        }
        if base.elastic.is_some() {
            return Err(FieldError::at(
                path,
                format!("limit {j} is elastic, and elastic limits take no overrides"),
            ));
        }
        if base.descriptor.is_some() {
            return Err(FieldError::at(
                path,
                format!("limit {j} is held by the rate limit service: override it there"),
            ));
        }
        let limit = validated(
            path,
            Limit {
                requests: raw.requests,
                window: window.unwrap_or(base.limit.window),
                burst: raw.burst.unwrap_or(raw.requests),
                ..base.limit.clone()
            },
        )?;
        let state_key = match base.scope {
            LimitScope::Local { .. } => layout::override_key(domain, rule, j, &limit, &raw.key),
            LimitScope::Global { .. } => String::new(),
        };
        // Kept sorted by key for the lookup.
        let at = base.overrides.partition_point(|o| o.key < raw.key);
        base.overrides.insert(
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
