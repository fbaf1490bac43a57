//! The JSON Schema of the filter configuration, generated from the raw
//! configuration types (`src/config/raw.rs`) with `schemars`.
//!
//! Only built with the `schema` feature (the `sluice` command line enables
//! it); the wasm filter does not carry it. The schema describes the shape of
//! the configuration (fields, types, enumerations, defaults) for editors and
//! linters; ranges and the rules between fields are checked by
//! [`config::parse`](crate::config::parse), which `sluice check-config` runs.

use super::RawConfig;
use crate::cost::extract::{MAX_KEYS, MAX_KEY_LEN};
use crate::key::context::MAX_PATH;
use crate::key::{Argument, Source};
use schemars::generate::SchemaSettings;
use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
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
/// `header:NAME`, or the object of a cost known from the response
/// (`Response`, `RawResponseCost`, in place).
pub(crate) fn cost<Response: JsonSchema>(generator: &mut SchemaGenerator) -> Schema {
    let response = Response::json_schema(generator);
    json_schema!({
        "oneOf": [
            { "type": "integer", "minimum": 1 },
            { "type": "string", "pattern": "^(header:.+|metadata:.+:[^:]+)$" },
            response
        ]
    })
}

/// A response cost's `estimate` (see `RawEstimate`).
pub(crate) fn estimate(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "oneOf": [
            { "type": "integer", "minimum": 0 },
            { "type": "string", "pattern": "^(header|body):.+$" }
        ]
    })
}

/// Where a response says its request's cost: one place or 1 to 4, each
/// as text or weighted (`Priced`, `RawPricedPlace`, in place).
pub(crate) fn response_places<Priced: JsonSchema>(generator: &mut SchemaGenerator) -> Schema {
    let place = response_place(generator);
    let priced = Priced::json_schema(generator);
    json_schema!({
        "oneOf": [
            place,
            { "type": "array", "minItems": 1, "maxItems": 4, "items": { "oneOf": [place, priced] } }
        ]
    })
}

/// One place a response says a count.
pub(crate) fn response_place(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "string", "pattern": "^(header|trailer|body|metadata):.+$" })
}

/// A price (`times`): a non-negative number, or a string of one.
pub(crate) fn times(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "oneOf": [
            { "type": "number", "minimum": 0, "maximum": crate::cost::price::MAX_TIMES },
            { "type": "string", "pattern": "^[0-9]+(\\.[0-9]{1,3})?$" }
        ]
    })
}

/// A rule's `key`: key parts as text, or objects narrowing a part with a
/// regular expression or giving it a default (`Refined`, `RawRefinedPart`,
/// in place).
pub(crate) fn key_parts<Refined: JsonSchema>(generator: &mut SchemaGenerator) -> Schema {
    let part = key_part(generator);
    let refined = Refined::json_schema(generator);
    json_schema!({
        "type": "array",
        "minItems": 1,
        "items": { "oneOf": [part, refined] }
    })
}

/// A key part as text (`match.parts[].part`, `priority.from`).
pub(crate) fn key_part(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "string",
        "pattern": key_part_pattern(),
        "description": key_part_description(),
    })
}

/// A key part as text, or `null` (a descriptor entry's `from`).
pub(crate) fn opt_part(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": ["string", "null"],
        "pattern": key_part_pattern(),
        "description": key_part_description(),
    })
}

/// The pattern (ECMA 262, as JSON Schema's `pattern`) of the key parts
/// [`KeyPart::parse`](crate::key::KeyPart::parse) accepts, built from the
/// table it parses with ([`Source::ALL`]).
pub fn key_part_pattern() -> String {
    let sources: Vec<String> = Source::ALL
        .into_iter()
        .map(|s| format!("{}{}", s.name(), argument_pattern(s.argument())))
        .collect();
    format!("^(?:{})$", sources.join("|"))
}

/// What follows a source's name. `[\s\S]` is any character: `.` stops at
/// line breaks, which a key part may hold.
fn argument_pattern(argument: Argument) -> String {
    let names = |name: &str| format!("{name}(?:\\.{name}){{0,{}}}", MAX_PATH - 1);
    match argument {
        Argument::Bare => String::new(),
        Argument::Text(_) => ":[\\s\\S]+".to_string(),
        Argument::AnyText(_) => ":[\\s\\S]*".to_string(),
        Argument::Names(_) => format!(":{}", names("[^.]+")),
        Argument::NamespaceNames => format!(":[\\s\\S]+:{}", names("[^.:]+")),
        Argument::OneOf(words) => format!(":(?:{})", words.join("|")),
        Argument::Fields(_) => {
            let key = format!("[A-Za-z0-9_-]{{1,{MAX_KEY_LEN}}}");
            format!(":{key}(?:\\.{key}){{0,{}}}", MAX_KEYS - 1)
        }
    }
}

/// The description of a key part: its forms, from [`Source::ALL`].
fn key_part_description() -> String {
    let forms: Vec<String> = Source::ALL
        .into_iter()
        .flat_map(Source::forms)
        .map(|f| format!("`{f}`"))
        .collect();
    format!(
        "A key part: {}. `NAME` and `NAMESPACE` are one or more characters, `TEXT` any (none included), `CLAIM` and `PATH` 1 to {MAX_PATH} non-empty names separated by `.` (a `PATH` is after the last `:`).",
        forms.join(", ")
    )
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
