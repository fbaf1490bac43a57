//! A `RateLimitConfig` resource read as the YAML file it stands for: the
//! same fields under the same names, compiled by the same parser, so a
//! resource is validated exactly as a file is and its errors name the
//! field the same way (`descriptors[0].rate_limit.unit`).

use super::proto::{RateLimitConfig, RateLimitDescriptor, RateLimitPolicy};
use crate::rls::config::{ConfigError, Descriptors, SameDomain, Unit};
use serde_json::{json, Map, Value};
use std::path::PathBuf;

/// The name a resource's errors and duplicates are reported under.
pub fn source_of(config: &RateLimitConfig) -> PathBuf {
    PathBuf::from(format!("xds:{}", config.name))
}

/// Compiles the resources of one response into the configuration they
/// stand for, a domain in several resources as `same` says.
pub fn compile(configs: &[RateLimitConfig], same: SameDomain) -> Result<Descriptors, ConfigError> {
    let mut out = Descriptors::default();
    for config in configs {
        let text = yaml_of(config).map_err(|m| ConfigError::at(&source_of(config), "", m))?;
        // A position in the YAML written here would mean nothing to the server.
        out.add_as(&text, &source_of(config), same)
            .map_err(|e| ConfigError {
                position: None,
                ..e
            })?;
    }
    Ok(out)
}

/// The YAML file `config` stands for.
pub fn yaml_of(config: &RateLimitConfig) -> Result<String, String> {
    let root = json!({
        "domain": config.domain,
        "descriptors": config.descriptors.iter().map(descriptor).collect::<Vec<_>>(),
    });
    serde_yaml_ng::to_string(&root).map_err(|e| format!("cannot be written as YAML: {e}"))
}

fn descriptor(d: &RateLimitDescriptor) -> Value {
    let mut out = Map::new();
    out.insert("key".into(), json!(d.key));
    if !d.value.is_empty() {
        out.insert("value".into(), json!(d.value));
    }
    if let Some(limit) = &d.rate_limit {
        out.insert("rate_limit".into(), policy(limit));
    }
    if !d.descriptors.is_empty() {
        let nested: Vec<Value> = d.descriptors.iter().map(descriptor).collect();
        out.insert("descriptors".into(), Value::Array(nested));
    }
    for (name, set) in [
        ("shadow_mode", d.shadow_mode),
        ("detailed_metric", d.detailed_metric),
        ("quota_mode", d.quota_mode),
    ] {
        if set {
            out.insert(name.into(), json!(true));
        }
    }
    Value::Object(out)
}

/// A policy as the peer writes it: `UNKNOWN` (refused by the parser
/// unless the limit is unlimited, where no unit is written).
fn policy(p: &RateLimitPolicy) -> Value {
    let mut out = Map::new();
    match Unit::from_code(p.unit) {
        Some(unit) => {
            out.insert("unit".into(), json!(unit.name()));
        }
        None if p.unlimited => {}
        None => {
            out.insert("unit".into(), json!(format!("UNKNOWN({})", p.unit)));
        }
    }
    if !p.unlimited || p.requests_per_unit != 0 {
        out.insert("requests_per_unit".into(), json!(p.requests_per_unit));
    }
    if p.unlimited {
        out.insert("unlimited".into(), json!(true));
    }
    if !p.name.is_empty() {
        out.insert("name".into(), json!(p.name));
    }
    if !p.replaces.is_empty() {
        let replaces: Vec<Value> = p.replaces.iter().map(|r| json!({"name": r.name})).collect();
        out.insert("replaces".into(), Value::Array(replaces));
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::super::proto::RateLimitReplace;
    use super::*;

    fn limit(unit: i32, rpu: u32) -> Option<RateLimitPolicy> {
        Some(RateLimitPolicy {
            unit,
            requests_per_unit: rpu,
            ..Default::default()
        })
    }

    /// A route's rule as Envoy Gateway translates it: a route descriptor
    /// holding a rule's match descriptor with the limit.
    fn gateway_like(unit: i32) -> RateLimitConfig {
        RateLimitConfig {
            name: "default/eg/http".into(),
            domain: "default/eg/http".into(),
            descriptors: vec![RateLimitDescriptor {
                key: "httproute/default/backend/rule/0/match/-1".into(),
                value: "httproute/default/backend/rule/0/match/-1".into(),
                descriptors: vec![RateLimitDescriptor {
                    key: "rule-0-match-0".into(),
                    value: "rule-0-match-0".into(),
                    rate_limit: limit(unit, 3),
                    ..Default::default()
                }],
                ..Default::default()
            }],
        }
    }

    #[test]
    fn a_resource_compiles_as_its_file_would() {
        let d = compile(&[gateway_like(3)], SameDomain::Refuse).unwrap();
        let domain = &d.domains["default/eg/http"];
        let found = domain
            .lookup(
                [
                    (
                        "httproute/default/backend/rule/0/match/-1",
                        "httproute/default/backend/rule/0/match/-1",
                    ),
                    ("rule-0-match-0", "rule-0-match-0"),
                ]
                .into_iter(),
            )
            .expect("the rule's descriptor matches");
        let shown = format!("{:?}", found);
        assert!(shown.contains("3"), "{shown}");
        assert_eq!(domain.source, PathBuf::from("xds:default/eg/http"));
    }

    #[test]
    fn every_field_is_written_under_its_yaml_name() {
        let config = RateLimitConfig {
            name: "n".into(),
            domain: "d".into(),
            descriptors: vec![RateLimitDescriptor {
                key: "k".into(),
                rate_limit: Some(RateLimitPolicy {
                    unit: 7,
                    requests_per_unit: 9,
                    name: "weekly".into(),
                    replaces: vec![RateLimitReplace {
                        name: "other".into(),
                    }],
                    ..Default::default()
                }),
                shadow_mode: true,
                detailed_metric: true,
                quota_mode: true,
                ..Default::default()
            }],
        };
        let yaml: serde_yaml_ng::Value =
            serde_yaml_ng::from_str(&yaml_of(&config).unwrap()).unwrap();
        let expected: serde_yaml_ng::Value = serde_yaml_ng::from_str(
            "domain: d\ndescriptors:\n- key: k\n  rate_limit: {unit: WEEK, requests_per_unit: 9, name: weekly, replaces: [{name: other}]}\n  shadow_mode: true\n  detailed_metric: true\n  quota_mode: true\n",
        )
        .unwrap();
        assert_eq!(yaml, expected);
    }

    #[test]
    fn an_unknown_unit_is_refused_naming_the_field_and_the_resource() {
        let e = compile(&[gateway_like(0)], SameDomain::Refuse).unwrap_err();
        assert_eq!(e.file, PathBuf::from("xds:default/eg/http"));
        assert_eq!(e.field, "descriptors[0].descriptors[0].rate_limit.unit");
        assert!(e.message.contains("UNKNOWN(0)"), "{e}");
    }

    #[test]
    fn unlimited_takes_no_unit() {
        let mut config = gateway_like(0);
        config.descriptors[0].descriptors[0].rate_limit = Some(RateLimitPolicy {
            unlimited: true,
            ..Default::default()
        });
        compile(&[config.clone()], SameDomain::Refuse).unwrap();
        // The peer refuses a unit on an unlimited limit; so does Sluice.
        config.descriptors[0].descriptors[0].rate_limit = Some(RateLimitPolicy {
            unlimited: true,
            unit: 1,
            ..Default::default()
        });
        let e = compile(&[config], SameDomain::Refuse).unwrap_err();
        assert!(e.to_string().contains("unlimited"), "{e}");
    }

    #[test]
    fn a_domain_in_two_resources_follows_same_domain() {
        let mut second = gateway_like(3);
        second.name = "second".into();
        second.descriptors[0].key = "other".into();
        second.descriptors[0].value = "other".into();
        let both = [gateway_like(3), second];
        let e = compile(&both, SameDomain::Refuse).unwrap_err();
        assert!(e.to_string().contains("duplicate domain"), "{e}");
        let merged = compile(&both, SameDomain::Merge).unwrap();
        assert_eq!(merged.domains.len(), 1);
    }
}
