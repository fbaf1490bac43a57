//! The parts of a configuration that no kind of limit takes part in: the
//! denial response, the limiter, the JWT payload's name, and the limits'
//! names in the headers. The plan is put together where the kinds are
//! registered (`Plan::compile`, in the engine's registry).

use super::checks::{in_range, MAX_NAME_LEN};
use super::duration::parse_duration;
use super::plan::{DenyResponse, LimiterTarget, Rule, TopLimitedKeys};
use super::raw::{
    Protocol, RawLimiter, RawQuotaEndpoint, RawResponse, RawTopLimitedKeys, ServiceHeaders,
};
use sluice_core::{FieldError, MILLISECOND};

/// Largest `local_max_keys`.
pub const MAX_LOCAL_KEYS: u64 = 10_000_000;

/// Largest `max_queued` of a rule.
pub const MAX_QUEUED: u64 = 100_000;

/// Checks `jwt_payload_in_metadata`: a name, as `jwt_authn` takes.
pub(crate) fn checked_jwt_payload(name: String) -> Result<String, FieldError> {
    if name.is_empty() || name.len() > MAX_NAME_LEN {
        return Err(FieldError::at(
            "jwt_payload_in_metadata",
            format!("must be 1 to {MAX_NAME_LEN} bytes, the payload_in_metadata of Envoy's jwt_authn filter"),
        ));
    }
    Ok(name)
}

/// Checks the quota endpoint's path: absolute, without a query, at most
/// 1024 bytes.
pub(crate) fn checked_quota_path(raw: RawQuotaEndpoint) -> Result<String, FieldError> {
    checked_path(raw.path, "quota_endpoint.path")
}

/// Checks a path the filter answers (field `field`).
fn checked_path(path: String, field: &str) -> Result<String, FieldError> {
    if !path.starts_with('/') || path.len() > 1024 || path.contains(['?', '#']) {
        return Err(FieldError::at(
            field,
            format!("{path:?} must start with '/', hold no '?' or '#', and be at most 1024 bytes"),
        ));
    }
    Ok(path)
}

/// Most entries `top_limited_keys` keeps per rule.
pub(crate) const MAX_TOP_ENTRIES: u64 = 256;

/// Checks `top_limited_keys`.
pub(crate) fn checked_top_keys(raw: RawTopLimitedKeys) -> Result<TopLimitedKeys, FieldError> {
    let entries = in_range(raw.entries, 1, MAX_TOP_ENTRIES, "top_limited_keys.entries")?;
    let path = raw
        .path
        .map(|p| checked_path(p, "top_limited_keys.path"))
        .transpose()?;
    Ok(TopLimitedKeys {
        entries,
        keys: raw.keys,
        path,
    })
}

/// Checks the denial response.
pub(crate) fn compile_response(raw: RawResponse) -> Result<DenyResponse, FieldError> {
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
pub(crate) fn compile_limiter(l: RawLimiter) -> Result<LimiterTarget, FieldError> {
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

/// Every limit's name in the IETF headers (configured, the rule's, or
/// `<rule>.<index>`) is distinct, so that `ratelimit` names one policy.
pub(crate) fn check_limit_names(rules: &[Rule]) -> Result<(), FieldError> {
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
