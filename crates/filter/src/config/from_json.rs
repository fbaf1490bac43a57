//! The raw configuration read from JSON: the text is parsed once into a
//! flat list of values (`doc.rs`), then each type is read from it with the
//! [`Node`] cursor, one function per type, its fields spelled as in the JSON and
//! listed in the order of `raw.rs` (the order serde's messages list them).
//! [`Node::object`] refuses a key that is not listed before its arm is
//! reached.

use super::doc::{self, Kind};
use super::raw::{
    default_jwt_payload, default_local_max_keys, default_max_queued, default_timeout, FailureMode,
    HeadersMode, Mode, OnExceed, Protocol, RawClientIp, RawConfig, RawCost, RawElastic, RawEntry,
    RawEstimate, RawHeaderMatch, RawKeyPart, RawLimit, RawLimiter, RawMatch, RawOverride,
    RawPartMatch, RawPriority, RawPriorityClass, RawResponse, RawResponseCost, RawRule, RawSync,
    Scope, ServiceHeaders, SyncMode, WhenFull, COST_EXPECTED,
};
use super::reader::Node;
use super::syntax_path::syntax_error_path;
use sluice_core::FieldError;

type Read<T> = Result<T, FieldError>;

/// Reads the configuration's JSON text; a syntax error is serde_json's,
/// at the path where it stopped.
pub fn raw_config(json: &[u8]) -> Read<RawConfig> {
    let doc =
        doc::read(json).map_err(|e| FieldError::at(syntax_error_path(json), e.to_string()))?;
    config(&Node::root(&doc))
}

fn config(n: &Node) -> Read<RawConfig> {
    let (
        mut domain,
        mut headers,
        mut client_ip,
        mut limiter,
        mut max_keys,
        mut when_full,
        mut jwt_payload,
        mut response,
        mut rules,
    ) = Default::default();
    let fields = &[
        "domain",
        "headers",
        "client_ip",
        "limiter",
        "local_max_keys",
        "local_when_full",
        "jwt_payload_in_metadata",
        "response",
        "rules",
    ];
    n.object("struct RawConfig", fields, &mut |k: &str, v: &Node| {
        match k {
            "domain" => domain = Some(v.string()?),
            "headers" => headers = Some(headers_mode(v)?),
            "client_ip" => client_ip = Some(raw_client_ip(v)?),
            "limiter" => limiter = v.optional(raw_limiter)?,
            "local_max_keys" => max_keys = Some(v.u64()?),
            "jwt_payload_in_metadata" => jwt_payload = Some(v.string()?),
            "local_when_full" => {
                when_full =
                    Some(v.choice(&["share", "evict"], &[WhenFull::Share, WhenFull::Evict])?)
            }
            "response" => response = Some(raw_response(v)?),
            "rules" => rules = Some(v.list(raw_rule)?),
            _ => {}
        }
        Ok(())
    })?;
    Ok(RawConfig {
        domain: n.required(domain, "domain")?,
        headers: headers.unwrap_or_default(),
        client_ip: client_ip.unwrap_or_default(),
        limiter,
        local_max_keys: max_keys.unwrap_or_else(default_local_max_keys),
        local_when_full: when_full.unwrap_or_default(),
        jwt_payload_in_metadata: jwt_payload.unwrap_or_else(default_jwt_payload),
        response: response.unwrap_or_default(),
        rules: rules.unwrap_or_default(),
    })
}

fn raw_client_ip(n: &Node) -> Read<RawClientIp> {
    let mut out = RawClientIp::default();
    let fields = &["xff_trusted_hops", "ipv4_prefix", "ipv6_prefix"];
    n.object("struct RawClientIp", fields, &mut |k: &str, v: &Node| {
        match k {
            "xff_trusted_hops" => out.xff_trusted_hops = v.u64()?,
            "ipv4_prefix" => out.ipv4_prefix = v.u64()?,
            "ipv6_prefix" => out.ipv6_prefix = v.u64()?,
            _ => {}
        }
        Ok(())
    })?;
    Ok(out)
}

fn raw_limiter(n: &Node) -> Read<RawLimiter> {
    let (mut cluster, mut authority, mut protocol, mut timeout, mut failure_mode) =
        Default::default();
    let mut service_headers = None;
    let fields = &[
        "cluster",
        "authority",
        "protocol",
        "timeout",
        "failure_mode",
        "service_headers",
    ];
    n.object("struct RawLimiter", fields, &mut |k: &str, v: &Node| {
        match k {
            "cluster" => cluster = Some(v.string()?),
            "authority" => authority = v.optional(Node::string)?,
            "protocol" => {
                protocol = Some(v.choice(&["sluice", "rls"], &[Protocol::Sluice, Protocol::Rls])?)
            }
            "timeout" => timeout = Some(v.string()?),
            "failure_mode" => {
                failure_mode =
                    Some(v.choice(&["allow", "deny"], &[FailureMode::Allow, FailureMode::Deny])?)
            }
            "service_headers" => {
                service_headers = v.optional(|v| {
                    v.choice(
                        &["always", "denied", "never"],
                        &[
                            ServiceHeaders::Always,
                            ServiceHeaders::Denied,
                            ServiceHeaders::Never,
                        ],
                    )
                })?
            }
            _ => {}
        }
        Ok(())
    })?;
    Ok(RawLimiter {
        cluster: n.required(cluster, "cluster")?,
        authority,
        protocol: protocol.unwrap_or_default(),
        timeout: timeout.unwrap_or_else(default_timeout),
        failure_mode: failure_mode.unwrap_or_default(),
        service_headers,
    })
}

fn raw_response(n: &Node) -> Read<RawResponse> {
    let mut out = RawResponse::default();
    n.object(
        "struct RawResponse",
        &["status", "body", "headers"],
        &mut |k: &str, v: &Node| {
            match k {
                "status" => out.status = v.u64()?,
                "body" => out.body = v.string()?,
                "headers" => out.headers = v.string_map()?,
                _ => {}
            }
            Ok(())
        },
    )?;
    Ok(out)
}

fn raw_rule(n: &Node) -> Read<RawRule> {
    let (
        mut name,
        mut matcher,
        mut key,
        mut limits,
        mut overrides,
        mut mode,
        mut cost,
        mut max_queued,
        mut priority,
    ) = Default::default();
    let fields = &[
        "name",
        "match",
        "key",
        "limits",
        "overrides",
        "mode",
        "cost",
        "max_queued",
        "priority",
    ];
    n.object("struct RawRule", fields, &mut |k: &str, v: &Node| {
        match k {
            "name" => name = Some(v.string()?),
            "match" => matcher = Some(raw_match(v)?),
            "key" => key = Some(v.list(raw_key_part)?),
            "limits" => limits = Some(v.list(raw_limit)?),
            "overrides" => overrides = Some(v.list(raw_override)?),
            "mode" => {
                mode = Some(v.choice(&["enforce", "shadow"], &[Mode::Enforce, Mode::Shadow])?)
            }
            "cost" => cost = Some(raw_cost(v)?),
            "max_queued" => max_queued = Some(v.u64()?),
            "priority" => priority = v.optional(raw_priority)?,
            _ => {}
        }
        Ok(())
    })?;
    Ok(RawRule {
        name: n.required(name, "name")?,
        matcher: matcher.unwrap_or_default(),
        key: n.required(key, "key")?,
        limits: n.required(limits, "limits")?,
        overrides: overrides.unwrap_or_default(),
        mode: mode.unwrap_or_default(),
        cost: cost.unwrap_or_default(),
        max_queued: max_queued.unwrap_or_else(default_max_queued),
        priority,
    })
}

/// `5` or `"header:x-cost"`; a negative or fractional number says what is
/// expected.
const KEY_PART_EXPECTED: &str = "a key part: a string or {\"part\", \"regex\", \"default\"}";

fn raw_key_part(n: &Node) -> Read<RawKeyPart> {
    match n.kind() {
        Kind::Str(s) => Ok(RawKeyPart::Text(s.to_string())),
        Kind::Object => {
            let (mut part, mut regex, mut default) = Default::default();
            n.object(
                "struct RawKeyPart",
                &["part", "regex", "default"],
                &mut |k: &str, v: &Node| {
                    match k {
                        "part" => part = Some(v.string()?),
                        "regex" => regex = v.optional(Node::string)?,
                        "default" => default = v.optional(Node::string)?,
                        _ => {}
                    }
                    Ok(())
                },
            )?;
            Ok(RawKeyPart::Refined {
                part: n.required(part, "part")?,
                regex,
                default,
            })
        }
        _ => Err(n.invalid_type_any(KEY_PART_EXPECTED)),
    }
}

fn raw_priority(n: &Node) -> Read<RawPriority> {
    let (mut from, mut classes, mut default) = Default::default();
    n.object(
        "struct RawPriority",
        &["from", "classes", "default"],
        &mut |k: &str, v: &Node| {
            match k {
                "from" => from = Some(v.string()?),
                "classes" => classes = Some(v.list(raw_priority_class)?),
                "default" => default = Some(v.string()?),
                _ => {}
            }
            Ok(())
        },
    )?;
    Ok(RawPriority {
        from: n.required(from, "from")?,
        classes: n.required(classes, "classes")?,
        default: n.required(default, "default")?,
    })
}

fn raw_priority_class(n: &Node) -> Read<RawPriorityClass> {
    let (mut name, mut share) = Default::default();
    n.object(
        "struct RawPriorityClass",
        &["name", "share"],
        &mut |k: &str, v: &Node| {
            match k {
                "name" => name = Some(v.string()?),
                "share" => share = Some(v.u64()?),
                _ => {}
            }
            Ok(())
        },
    )?;
    Ok(RawPriorityClass {
        name: n.required(name, "name")?,
        share: n.required(share, "share")?,
    })
}

fn raw_cost(n: &Node) -> Read<RawCost> {
    match n.kind() {
        Kind::Str(s) => Ok(RawCost::Text(s.to_string())),
        Kind::Unsigned(v) => Ok(RawCost::Fixed(*v)),
        Kind::Object => raw_response_cost(n).map(RawCost::Response),
        Kind::Signed(_) | Kind::Float => {
            Err(n.error(format!("{COST_EXPECTED}, got {}", n.written())))
        }
        _ => Err(n.invalid_type_any(COST_EXPECTED)),
    }
}

fn raw_response_cost(n: &Node) -> Read<RawResponseCost> {
    let mut out = RawResponseCost::default();
    let mut response = None;
    let fields = &["estimate", "response"];
    n.object(
        "struct RawResponseCost",
        fields,
        &mut |k: &str, v: &Node| {
            match k {
                "estimate" => out.estimate = raw_estimate(v)?,
                "response" => {
                    response = Some(match v.kind() {
                        Kind::Str(s) => vec![s.to_string()],
                        _ => v.list(Node::string)?,
                    })
                }
                _ => {}
            }
            Ok(())
        },
    )?;
    out.response = n.required(response, "response")?;
    Ok(out)
}

fn raw_estimate(n: &Node) -> Read<RawEstimate> {
    const EXPECTED: &str = "an integer of at least 0, \"header:NAME\" or \"body:PATH\"";
    match n.kind() {
        Kind::Str(s) => Ok(RawEstimate::Text(s.to_string())),
        Kind::Unsigned(v) => Ok(RawEstimate::Fixed(*v)),
        Kind::Signed(_) | Kind::Float => {
            Err(n.error(format!("must be {EXPECTED}, got {}", n.written())))
        }
        _ => Err(n.invalid_type_any(EXPECTED)),
    }
}

fn raw_match(n: &Node) -> Read<RawMatch> {
    let mut out = RawMatch::default();
    let fields = &[
        "path_prefix",
        "path",
        "path_regex",
        "methods",
        "headers",
        "parts",
        "not",
    ];
    n.object("struct RawMatch", fields, &mut |k: &str, v: &Node| {
        match k {
            "path_prefix" => out.path_prefix = v.optional(Node::string)?,
            "path" => out.path = v.optional(Node::string)?,
            "path_regex" => out.path_regex = v.optional(Node::string)?,
            "methods" => out.methods = v.list(Node::string)?,
            "headers" => out.headers = v.list(raw_header_match)?,
            "parts" => out.parts = v.list(raw_part_match)?,
            "not" => out.not = v.optional(raw_match)?.map(Box::new),
            _ => {}
        }
        Ok(())
    })?;
    Ok(out)
}

/// A condition's subject (`name` of a header, `part` of a key part) and
/// its test.
type Condition = (String, Option<String>, Option<String>, Option<bool>);

/// `fields`: the subject's name, then `exact`, `regex`, `present`.
fn raw_condition(n: &Node, kind: &str, fields: &'static [&'static str]) -> Read<Condition> {
    let (mut who, mut exact, mut regex, mut present) = Default::default();
    n.object(kind, fields, &mut |k: &str, v: &Node| {
        match k {
            "exact" => exact = v.optional(Node::string)?,
            "regex" => regex = v.optional(Node::string)?,
            "present" => present = v.optional(Node::boolean)?,
            _ => who = Some(v.string()?),
        }
        Ok(())
    })?;
    let subject = fields.first().copied().unwrap_or("name");
    Ok((n.required(who, subject)?, exact, regex, present))
}

fn raw_header_match(n: &Node) -> Read<RawHeaderMatch> {
    let (name, exact, regex, present) = raw_condition(
        n,
        "struct RawHeaderMatch",
        &["name", "exact", "regex", "present"],
    )?;
    Ok(RawHeaderMatch {
        name,
        exact,
        regex,
        present,
    })
}

fn raw_part_match(n: &Node) -> Read<RawPartMatch> {
    let (part, exact, regex, present) = raw_condition(
        n,
        "struct RawPartMatch",
        &["part", "exact", "regex", "present"],
    )?;
    Ok(RawPartMatch {
        part,
        exact,
        regex,
        present,
    })
}

const LIMIT_FIELDS: &[&str] = &[
    "name",
    "algorithm",
    "requests",
    "window",
    "burst",
    "scope",
    "precision",
    "soft_percent",
    "on_exceed",
    "max_delay",
    "elastic",
    "sync",
    "descriptor",
    "concurrency",
    "permit_ttl",
];

fn raw_limit(n: &Node) -> Read<RawLimit> {
    let mut out = RawLimit::default();
    n.object("struct RawLimit", LIMIT_FIELDS, &mut |k: &str, v: &Node| {
        match k {
            "name" => out.name = v.optional(Node::string)?,
            "algorithm" => out.algorithm = v.optional(Node::string)?,
            "requests" => out.requests = v.optional(Node::u64)?,
            "window" => out.window = v.optional(Node::string)?,
            "burst" => out.burst = v.optional(Node::u64)?,
            "scope" => {
                out.scope = v.choice(&["local", "global"], &[Scope::Local, Scope::Global])?
            }
            "precision" => out.precision = v.optional(Node::u64)?,
            "soft_percent" => out.soft_percent = v.u64()?,
            "on_exceed" => {
                out.on_exceed = v.choice(&["deny", "delay"], &[OnExceed::Deny, OnExceed::Delay])?
            }
            "max_delay" => out.max_delay = v.optional(Node::string)?,
            "elastic" => out.elastic = v.optional(raw_elastic)?,
            "sync" => out.sync = v.optional(raw_sync)?,
            "descriptor" => out.descriptor = v.optional(|d| d.list(raw_entry))?,
            "concurrency" => out.concurrency = v.optional(Node::u64)?,
            "permit_ttl" => out.permit_ttl = v.optional(Node::string)?,
            _ => {}
        }
        Ok(())
    })?;
    Ok(out)
}

fn raw_entry(n: &Node) -> Read<RawEntry> {
    let (mut key, mut value, mut from) = Default::default();
    n.object(
        "struct RawEntry",
        &["key", "value", "from"],
        &mut |k: &str, v: &Node| {
            match k {
                "key" => key = Some(v.string()?),
                "value" => value = v.optional(Node::string)?,
                "from" => from = v.optional(Node::string)?,
                _ => {}
            }
            Ok(())
        },
    )?;
    Ok(RawEntry {
        key: n.required(key, "key")?,
        value,
        from,
    })
}

fn raw_sync(n: &Node) -> Read<RawSync> {
    let (mut mode, mut max_share, mut ttl) = Default::default();
    n.object(
        "struct RawSync",
        &["mode", "max_share", "ttl"],
        &mut |k: &str, v: &Node| {
            match k {
                "mode" => {
                    let names = &["per_request", "coalesce", "lease"];
                    let modes = &[SyncMode::PerRequest, SyncMode::Coalesce, SyncMode::Lease];
                    mode = Some(v.choice(names, modes)?);
                }
                "max_share" => max_share = v.optional(Node::string)?,
                "ttl" => ttl = v.optional(Node::string)?,
                _ => {}
            }
            Ok(())
        },
    )?;
    Ok(RawSync {
        mode: n.required(mode, "mode")?,
        max_share,
        ttl,
    })
}

fn raw_elastic(n: &Node) -> Read<RawElastic> {
    let (mut ceiling, mut pool) = Default::default();
    n.object(
        "struct RawElastic",
        &["ceiling", "pool"],
        &mut |k: &str, v: &Node| {
            match k {
                "ceiling" => ceiling = Some(v.u64()?),
                "pool" => pool = Some(v.string()?),
                _ => {}
            }
            Ok(())
        },
    )?;
    Ok(RawElastic {
        ceiling: n.required(ceiling, "ceiling")?,
        pool: n.required(pool, "pool")?,
    })
}

fn raw_override(n: &Node) -> Read<RawOverride> {
    let (mut key, mut requests, mut window, mut burst, mut limit) = Default::default();
    let fields = &["key", "requests", "window", "burst", "limit"];
    n.object("struct RawOverride", fields, &mut |k: &str, v: &Node| {
        match k {
            "key" => key = Some(v.string()?),
            "requests" => requests = Some(v.u64()?),
            "window" => window = v.optional(Node::string)?,
            "burst" => burst = v.optional(Node::u64)?,
            "limit" => limit = v.optional(Node::u64)?,
            _ => {}
        }
        Ok(())
    })?;
    Ok(RawOverride {
        key: n.required(key, "key")?,
        requests: n.required(requests, "requests")?,
        window,
        burst,
        limit,
    })
}

fn headers_mode(n: &Node) -> Read<HeadersMode> {
    let names = &["none", "legacy", "ietf", "both"];
    let modes = &[
        HeadersMode::None,
        HeadersMode::Legacy,
        HeadersMode::Ietf,
        HeadersMode::Both,
    ];
    n.choice(names, modes)
}

#[cfg(test)]
mod tests {
    use crate::config::parse;

    /// Each error as serde derive and serde_path_to_error reported it.
    #[test]
    fn errors_read_as_serde_reported_them() {
        let cases = [
            (
                r#"{"domain":"d" ,  "colour" : "blue"}"#,
                r#"colour: unknown field `colour`, expected one of `domain`, `headers`, `client_ip`, `limiter`, `local_max_keys`, `local_when_full`, `jwt_payload_in_metadata`, `response`, `rules` at line 1 column 26"#,
            ),
            (
                r#"{"domain":"d","rules":[{"name":"r","key":["path"]}]}"#,
                r#"rules[0]: missing field `limits` at line 1 column 50"#,
            ),
            (
                r#"{"domain":"d","rules":[{"name":"r","key":["path"],"limits":[{"requests":-1}]}]}"#,
                r#"rules[0].limits[0].requests: invalid value: integer `-1`, expected u64 at line 1 column 74"#,
            ),
            (
                r#"{"domain":"d","headers":"fancy"}"#,
                r#"headers: unknown variant `fancy`, expected one of `none`, `legacy`, `ietf`, `both` at line 1 column 31"#,
            ),
            (
                r#"{"domain":"d","headers":5}"#,
                r#"headers: expected value at line 1 column 25"#,
            ),
            (
                r#"{"domain":"d","headers":{ }}"#,
                r#"headers: expected value at line 1 column 27"#,
            ),
            (
                r#"{"domain":"d","response":{"headers":{"A":5}}}"#,
                r#"response.headers.A: invalid type: integer `5`, expected a string at line 1 column 42"#,
            ),
            (
                r#"{"domain":"d","domain":"e"}"#,
                r#"duplicate field `domain` at line 1 column 22"#,
            ),
            (
                r#"{"domain":5,"domain":"e"}"#,
                r#"domain: invalid type: integer `5`, expected a string at line 1 column 11"#,
            ),
            (
                r#"{"domain":"d","rules":[{"name":"r","key":["path"],"limits":[],"cost":[ 1]}]}"#,
                r#"rules[0].cost: invalid type: sequence, expected must be an integer of at least 1, "header:NAME" or {"estimate", "response"} at line 1 column 71"#,
            ),
            (
                r#"{"domain":"d","rules":[{"name":"r","key":["path"],"limits":[],"cost":{}}]}"#,
                r#"rules[0].cost: missing field `response` at line 1 column 71"#,
            ),
            (
                r#"{"domain":"d","rules":[{"name":"r","key":["path"],"limits":[],"cost":1.5}]}"#,
                r#"rules[0].cost: must be an integer of at least 1, "header:NAME" or {"estimate", "response"}, got 1.5 at line 1 column 72"#,
            ),
            (
                r#"{"domain":"d","rules":[{"name":"r","key":["path"],"limits":[],"cost":-3}]}"#,
                r#"rules[0].cost: must be an integer of at least 1, "header:NAME" or {"estimate", "response"}, got -3 at line 1 column 71"#,
            ),
            (
                r#"{"domain":"d","client_ip":null}"#,
                r#"client_ip: invalid type: null, expected struct RawClientIp at line 1 column 30"#,
            ),
            (
                r#"{"domain":"d","local_max_keys":18446744073709551616}"#,
                r#"local_max_keys: invalid type: floating point `18446744073709551616`, expected u64 at line 1 column 51"#,
            ),
            (
                r#"{"domain":"d","rules":[{"name":"r","key":["path"],"limits":[{"name":"#,
                r#"rules[0].limits[0].name: EOF while parsing a value at line 1 column 68"#,
            ),
            (
                r#"{"domain":"d","rules":[{"name":"r","key":["path"],"limits":[],}]}"#,
                r#"rules[0].?: trailing comma at line 1 column 63"#,
            ),
            (
                r#"{"domain":"d","rules":[{"name":"r","key":["path",],"limits":[]}]}"#,
                r#"rules[0].key: trailing comma at line 1 column 50"#,
            ),
            (
                r#""config""#,
                r#"invalid type: string "config", expected struct RawConfig at line 1 column 8"#,
            ),
            (
                r#"{"domain":"d","rules":[{"name":"r","key":["path"],"limits":[{"window":"1s","scope":"global","sync":{}}]}]}"#,
                r#"rules[0].limits[0].sync: missing field `mode` at line 1 column 101"#,
            ),
            (
                r#"{"domain":"d","rules":[{"name":"r","key":[{}],"limits":[]}]}"#,
                r#"rules[0].key[0]: missing field `part` at line 1 column 44"#,
            ),
            (
                r#"{"domain":"d","rules":[{"name":"r","key":[7],"limits":[]}]}"#,
                r#"rules[0].key[0]: invalid type: integer `7`, expected a key part: a string or {"part", "regex", "default"} at line 1 column 43"#,
            ),
            (
                r#"{"domain":"d","rules":[{"name":"r","key":["path"],"limits":[],"match":{"headers":[{"name":"x","present":"yes"}]}}]}"#,
                r#"rules[0].match.headers[0].present: invalid type: string "yes", expected a boolean at line 1 column 109"#,
            ),
            (
                r#"{
  "domain": "d",
  "rules": [
    { "name": "r", "key": ["path"], "limits": [ { "requests": 1.0 } ] }
  ]
}"#,
                r#"rules[0].limits[0].requests: invalid type: floating point `1.0`, expected u64 at line 4 column 65"#,
            ),
            (
                r#"{"domain":"d","response":{"headers":{"A":"1","A":2}}}"#,
                r#"response.headers.A: invalid type: integer `2`, expected a string at line 1 column 50"#,
            ),
            (r#""#, r#"EOF while parsing a value at line 1 column 0"#),
            (
                r#"{"domain":"d","limiter":{"cluster":"c","protocol":"grpc"}}"#,
                r#"limiter.protocol: unknown variant `grpc`, expected `sluice` or `rls` at line 1 column 56"#,
            ),
            (
                r#"{"domain":"d","rules":[{"name":"r","key":["path"],"limits":[{"descriptor":[{"value":"v"}]}]}]}"#,
                r#"rules[0].limits[0].descriptor[0]: missing field `key` at line 1 column 88"#,
            ),
        ];
        for (json, expected) in cases {
            match parse(json.as_bytes()) {
                Ok(_) => panic!("accepted: {json}"),
                Err(e) => assert_eq!(e.to_string(), expected, "{json}"),
            }
        }
    }

    /// serde derive also read an object from an array of its fields in
    /// order; the contract (and the schema) says object.
    #[test]
    fn an_array_is_not_an_object() {
        let e = parse(br#"{"domain":"d","client_ip":[1,24,48]}"#).unwrap_err();
        assert_eq!(
            e.to_string(),
            "client_ip: invalid type: sequence, expected struct RawClientIp at line 1 column 26"
        );
    }
}
