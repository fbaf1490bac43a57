//! `GET /v1/limits`: the limits of the RLS descriptor configuration, one
//! row per descriptor that has a `rate_limit`, in domain then descriptor
//! order, paginated.

use crate::rls::config::{Action, Descriptors, Level, Unit};
use serde::Serialize;

/// One entry of a descriptor's path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Entry {
    /// The descriptor's key.
    pub key: String,
    /// Its value (a wildcard as written); absent when any value matches.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
}

/// One limit of the configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LimitRow {
    /// The descriptors from the domain's top level down to this one.
    pub descriptors: Vec<Entry>,
    /// Its `name` (empty when it has none).
    pub name: String,
    /// `requests_per_unit` (0 for an unlimited or a blocking limit).
    pub requests_per_unit: u32,
    /// The unit's name; absent for a window that is no unit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unit: Option<&'static str>,
    /// `unlimited: true`.
    pub unlimited: bool,
    /// `shadow_mode: true`.
    pub shadow_mode: bool,
}

/// One domain of a page.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DomainRows {
    /// The domain.
    pub domain: String,
    /// Its limits on this page.
    pub limits: Vec<LimitRow>,
}

/// The answer to `GET /v1/limits`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LimitsPage {
    /// The domains of this page, sorted, each with its limits on it.
    pub domains: Vec<DomainRows>,
    /// The `page_token` of the next page; null on the last.
    pub next_page_token: Option<String>,
}

/// The unit's name as the YAML writes it.
pub fn unit_name(unit: Unit) -> &'static str {
    match unit {
        Unit::Second => "second",
        Unit::Minute => "minute",
        Unit::Hour => "hour",
        Unit::Day => "day",
        Unit::Week => "week",
        Unit::Month => "month",
        Unit::Year => "year",
    }
}

/// Every limit of `level` and below, `path` the descriptors above it.
fn collect(level: &Level, path: &mut Vec<Entry>, out: &mut Vec<LimitRow>) {
    for (key, value, node) in level.each() {
        path.push(Entry {
            key: key.to_string(),
            value: value.map(str::to_string),
        });
        if let Some(rl) = &node.rate_limit {
            out.push(LimitRow {
                descriptors: path.clone(),
                name: rl.name.clone(),
                requests_per_unit: rl.requests_per_unit,
                unit: rl.unit.map(unit_name),
                unlimited: matches!(rl.action, Action::Unlimited),
                shadow_mode: node.shadow,
            });
        }
        collect(&node.children, path, out);
        path.pop();
    }
}

/// The page of `page_size` limits from `start` (a row index across all
/// domains), of `domain` only when given.
pub fn page(config: &Descriptors, domain: Option<&str>, start: usize, size: usize) -> LimitsPage {
    let mut names: Vec<&String> = config
        .domains
        .keys()
        .filter(|d| domain.is_none_or(|want| want == d.as_str()))
        .collect();
    names.sort();
    let mut rows: Vec<(&String, LimitRow)> = Vec::new();
    for name in names {
        if let Some(d) = config.domains.get(name) {
            let mut limits = Vec::new();
            collect(&d.root, &mut Vec::new(), &mut limits);
            rows.extend(limits.into_iter().map(|l| (name, l)));
        }
    }
    let end = start.saturating_add(size).min(rows.len());
    let next_page_token = (end < rows.len()).then(|| end.to_string());
    let mut domains: Vec<DomainRows> = Vec::new();
    for (name, row) in rows.into_iter().take(end).skip(start) {
        match domains.last_mut() {
            Some(last) if &last.domain == name => last.limits.push(row),
            Some(_) | None => domains.push(DomainRows {
                domain: name.clone(),
                limits: vec![row],
            }),
        }
    }
    LimitsPage {
        domains,
        next_page_token,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const YAML: &str = "domain: shop\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: second, requests_per_unit: 10, name: per-ip}\n  - key: path\n    value: /login\n    shadow_mode: true\n    rate_limit: {unit: minute, requests_per_unit: 5}\n    descriptors:\n      - key: user\n        rate_limit: {unlimited: true}\n";

    #[test]
    fn every_limit_is_listed_with_its_descriptors_and_pages_follow() {
        let config = Descriptors::parse(YAML).unwrap();
        let all = page(&config, None, 0, 100);
        let json = serde_json::to_value(&all).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"domains": [{"domain": "shop", "limits": [
                {"descriptors": [{"key": "path", "value": "/login"}], "name": "",
                 "requests_per_unit": 5, "unit": "minute", "unlimited": false, "shadow_mode": true},
                {"descriptors": [{"key": "path", "value": "/login"}, {"key": "user"}], "name": "",
                 "requests_per_unit": 0, "unlimited": true, "shadow_mode": false},
                {"descriptors": [{"key": "remote_address"}], "name": "per-ip",
                 "requests_per_unit": 10, "unit": "second", "unlimited": false, "shadow_mode": false},
            ]}], "next_page_token": null})
        );
        let first = page(&config, Some("shop"), 0, 2);
        assert_eq!(first.next_page_token.as_deref(), Some("2"));
        assert_eq!(first.domains[0].limits.len(), 2);
        let second = page(&config, Some("shop"), 2, 2);
        assert_eq!(second.next_page_token, None);
        assert_eq!(second.domains[0].limits[0].name, "per-ip");
        assert!(page(&config, Some("other"), 0, 2).domains.is_empty());
    }
}
