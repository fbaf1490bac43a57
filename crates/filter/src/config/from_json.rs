//! The raw configuration read from JSON: the text is parsed once into a
//! flat list of values (`doc.rs`), then each raw type reads itself from it
//! with the [`Node`] cursor ([`ReadJson`]; the structs' and enums' readers
//! are made from their one description in `raw.rs`). Here are the forms
//! that are one of several JSON types, read by hand: a key part, a cost, a
//! response cost's estimate, its places and their prices.

use super::describe::ReadJson;
use super::doc::{self, Kind};
use super::raw::{
    RawConfig, RawCost, RawEstimate, RawKeyPart, RawPlace, RawPlaces, RawPricedPlace,
    RawRefinedPart, RawResponseCost, RawTimes, COST_EXPECTED,
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
    RawConfig::read_json(&Node::root(&doc))
}

/// What a key part must be, for error messages.
const KEY_PART_EXPECTED: &str =
    "a key part: a string or {\"part\", \"regex\", \"default\", \"case\"}";

impl ReadJson for RawKeyPart {
    fn read_json(n: &Node<'_>) -> Read<Self> {
        match n.kind() {
            Kind::Str(s) => Ok(RawKeyPart::Text(s.to_string())),
            Kind::Object => {
                let RawRefinedPart {
                    part,
                    regex,
                    default,
                    case,
                } = RawRefinedPart::read_json(n)?;
                Ok(RawKeyPart::Refined {
                    part,
                    regex,
                    default,
                    case,
                })
            }
            _ => Err(n.invalid_type_any(KEY_PART_EXPECTED)),
        }
    }
}

/// `5`, `"header:x-cost"` or `{"estimate", "response"}`; a negative or
/// fractional number says what is expected.
impl ReadJson for RawCost {
    fn read_json(n: &Node<'_>) -> Read<Self> {
        match n.kind() {
            Kind::Str(s) => Ok(RawCost::Text(s.to_string())),
            Kind::Unsigned(v) => Ok(RawCost::Fixed(*v)),
            Kind::Object => RawResponseCost::read_json(n).map(RawCost::Response),
            Kind::Signed(_) | Kind::Float => {
                Err(n.error(format!("{COST_EXPECTED}, got {}", n.written())))
            }
            _ => Err(n.invalid_type_any(COST_EXPECTED)),
        }
    }
}

impl ReadJson for RawEstimate {
    fn read_json(n: &Node<'_>) -> Read<Self> {
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
}

/// What a response cost's place must be, for error messages.
const PLACE_EXPECTED: &str =
    "a place: \"header:NAME\", \"trailer:NAME\", \"body:PATH\" or {\"from\", \"times\"}";

/// A response cost's places: one, or a list.
impl ReadJson for RawPlaces {
    fn read_json(n: &Node<'_>) -> Read<Self> {
        match n.kind() {
            Kind::Str(s) => Ok(RawPlaces(vec![RawPlace::Text(s.to_string())])),
            _ => n.list(RawPlace::read_json).map(RawPlaces),
        }
    }
}

impl ReadJson for RawPlace {
    fn read_json(n: &Node<'_>) -> Read<Self> {
        match n.kind() {
            Kind::Str(s) => Ok(RawPlace::Text(s.to_string())),
            Kind::Object => RawPricedPlace::read_json(n).map(RawPlace::Priced),
            _ => Err(n.invalid_type_any(PLACE_EXPECTED)),
        }
    }
}

/// A price: its text, as written (a number, or a string of one).
impl ReadJson for RawTimes {
    fn read_json(n: &Node<'_>) -> Read<Self> {
        match n.kind() {
            Kind::Str(s) => Ok(RawTimes(s.to_string())),
            Kind::Unsigned(_) | Kind::Signed(_) | Kind::Float => {
                Ok(RawTimes(n.written().to_string()))
            }
            _ => Err(n.invalid_type_any("a number or a string of one")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::raw_config;
    use crate::config::parse;
    use crate::config::raw::{RawClientIp, RawKeyPart, RawLimit, RawMatch, RawResponse};
    use serde_json::{json, Value};

    /// A key part object's `regex` and `default` may be `null`, as every
    /// optional field (the schema says so).
    #[test]
    fn a_key_parts_null_regex_and_default_are_absent() {
        let json = json!({"domain": "d", "rules": [{"name": "r", "limits": [], "key": [
            {"part": "path", "regex": null, "default": null},
            {"part": "method"},
        ]}]});
        let raw = raw_config(json.to_string().as_bytes()).unwrap();
        let refined = |part: &str| RawKeyPart::Refined {
            part: part.to_string(),
            regex: None,
            default: None,
            case: crate::key::Case::AsSent,
        };
        assert_eq!(raw.rules[0].key, [refined("path"), refined("method")]);
    }

    /// A struct's `Default` (made from its fields' defaults) is what an
    /// empty object, or none, reads as.
    #[test]
    fn a_structs_default_is_an_empty_object() {
        let debug = |v: &dyn std::fmt::Debug| format!("{v:?}");
        let read = |json: Value| raw_config(json.to_string().as_bytes()).unwrap();
        let written = read(json!({"domain": "d", "client_ip": {}, "response": {},
            "rules": [{"name": "r", "key": [], "limits": [{}], "match": {}}]}));
        let absent =
            read(json!({"domain": "d", "rules": [{"name": "r", "key": [], "limits": [{}]}]}));
        for raw in [&written, &absent] {
            assert_eq!(debug(&raw.client_ip), debug(&RawClientIp::default()));
            assert_eq!(debug(&raw.response), debug(&RawResponse::default()));
            assert_eq!(debug(&raw.rules[0].matcher), debug(&RawMatch::default()));
            assert_eq!(debug(&raw.rules[0].limits[0]), debug(&RawLimit::default()));
        }
        assert_eq!(
            debug(&RawClientIp::default()),
            "RawClientIp { xff_trusted_hops: 0, envoy_xff: Detect, ipv4_prefix: 32, ipv6_prefix: 64 }"
        );
        assert_eq!(
            debug(&RawResponse::default()),
            "RawResponse { status: 429, body: \"rate limited\\n\", headers: [] }"
        );
    }

    /// Each error as serde derive and serde_path_to_error reported it.
    #[test]
    fn errors_read_as_serde_reported_them() {
        let cases = [
            (
                r#"{"domain":"d" ,  "colour" : "blue"}"#,
                r#"colour: unknown field `colour`, expected one of `domain`, `headers`, `client_ip`, `limiter`, `local_max_keys`, `local_when_full`, `jwt_payload_in_metadata`, `response`, `rules`, `quota_endpoint`, `top_limited_keys`, `access_log_key`, `headers_while_reading_body` at line 1 column 26"#,
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
                r#"rules[0].cost: invalid type: sequence, expected must be an integer of at least 1, "header:NAME", "metadata:NAMESPACE:KEY" or {"estimate", "response"} at line 1 column 71"#,
            ),
            (
                r#"{"domain":"d","rules":[{"name":"r","key":["path"],"limits":[],"cost":{}}]}"#,
                r#"rules[0].cost: missing field `response` at line 1 column 71"#,
            ),
            (
                r#"{"domain":"d","rules":[{"name":"r","key":["path"],"limits":[],"cost":1.5}]}"#,
                r#"rules[0].cost: must be an integer of at least 1, "header:NAME", "metadata:NAMESPACE:KEY" or {"estimate", "response"}, got 1.5 at line 1 column 72"#,
            ),
            (
                r#"{"domain":"d","rules":[{"name":"r","key":["path"],"limits":[],"cost":-3}]}"#,
                r#"rules[0].cost: must be an integer of at least 1, "header:NAME", "metadata:NAMESPACE:KEY" or {"estimate", "response"}, got -3 at line 1 column 71"#,
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
                r#"rules[0].key[0]: invalid type: integer `7`, expected a key part: a string or {"part", "regex", "default", "case"} at line 1 column 43"#,
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
