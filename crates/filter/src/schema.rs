//! The JSON Schema of the filter configuration, generated from the raw
//! configuration types (`src/config/raw.rs`) with `schemars`.
//!
//! Only built with the `schema` feature (the `sluice` command line enables
//! it); the wasm filter does not carry it. The schema describes the shape of
//! the configuration (fields, types, enumerations, defaults) for editors and
//! linters; ranges and the rules between fields are checked by
//! [`config::parse`](crate::config::parse), which `sluice check-config` runs.

use crate::config::RawConfig;
use schemars::generate::SchemaSettings;
use schemars::{json_schema, Schema, SchemaGenerator};
use serde_json::{Map, Value};

/// The title of the schema.
pub const TITLE: &str = "Sluice filter configuration";

/// The schema of the whole configuration (JSON Schema draft-07, the draft
/// editors support most widely), with its keys sorted so that the text is
/// the same whatever order the generator used.
pub fn schema() -> Value {
    let generator = SchemaSettings::draft07().into_generator();
    let mut root = generator.into_root_schema_for::<RawConfig>();
    root.insert("title".into(), Value::from(TITLE));
    root.insert(
        "description".into(),
        Value::from(
            "The `configuration` of the Sluice proxy-wasm filter (Istio `pluginConfig`, \
             Envoy Gateway `config`). The reference of every field is \
             docs/reference/configuration.md in Sluice's repository; `sluice check-config FILE` runs the filter's \
             own checks (ranges, durations, rules between fields).",
        ),
    );
    sorted(root.to_value())
}

/// The schema as the text committed in `schema/sluice.schema.json`.
pub fn schema_text() -> String {
    let mut text = serde_json::to_string_pretty(&schema()).unwrap_or_default();
    text.push('\n');
    text
}

/// A rule's `cost`, read by hand (see `RawCost`): an integer,
/// `header:NAME`, or `{"estimate", "response"}` for a cost known from the
/// response.
pub(crate) fn cost(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "oneOf": [
            { "type": "integer", "minimum": 1 },
            { "type": "string", "pattern": "^header:.+$" },
            {
                "type": "object",
                "description": "A cost known from the response: each request is admitted for `estimate`, then charged or refunded the difference with what `response` says it cost.",
                "additionalProperties": false,
                "required": ["response"],
                "properties": {
                    "estimate": {
                        "description": "What a request is admitted for: an integer (0 by default), `header:NAME` or `body:PATH` of the request.",
                        "default": 0,
                        "oneOf": [
                            { "type": "integer", "minimum": 0 },
                            { "type": "string", "pattern": "^(header|body):.+$" }
                        ]
                    },
                    "response": {
                        "description": "Where the response says what the request cost: `header:NAME`, `trailer:NAME` or `body:PATH`, or a list of 1 to 4 of them, summed.",
                        "oneOf": [
                            { "type": "string", "pattern": "^(header|trailer|body):.+$" },
                            {
                                "type": "array",
                                "minItems": 1,
                                "maxItems": 4,
                                "items": { "type": "string", "pattern": "^(header|trailer|body):.+$" }
                            }
                        ]
                    }
                }
            }
        ]
    })
}

/// A rule's `key`: key parts as text, or objects narrowing a part with a
/// regular expression or giving it a default (see `RawKeyPart`).
pub(crate) fn key_parts(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "minItems": 1,
        "items": {
            "oneOf": [
                { "type": "string", "minLength": 1 },
                {
                    "type": "object",
                    "description": "A key part whose value is narrowed by `regex` (its first group, or its whole match; a value it does not match is missing) or replaced by `default` when missing.",
                    "additionalProperties": false,
                    "required": ["part"],
                    "properties": {
                        "part": { "type": "string", "minLength": 1 },
                        "regex": { "type": "string" },
                        "default": { "type": "string" }
                    }
                }
            ]
        }
    })
}

fn sorted(value: Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(String, Value)> = map.into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            let mut out = Map::new();
            for (k, v) in entries {
                out.insert(k, sorted(v));
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.into_iter().map(sorted).collect()),
        other => other,
    }
}
