//! The schema and the reader, both made from the one description of each
//! type in `raw.rs`, agree: a document setting every property of every
//! object is accepted, giving any one property another value changes what
//! is read, and a property the schema gives a default reads, when absent,
//! as that default written.

use super::super::from_json::raw_config;
use crate::config::schema::schema;
use serde_json::{json, Value};

/// A value `schema` allows; `other` gives a second, different one (the
/// last variant, `null` where allowed, an empty object or array).
fn example(schema: &Value, defs: &Value, other: bool) -> Value {
    example_in(schema, defs, other, &mut Vec::new())
}

/// [`example`] within the definitions `open` (an object holding itself,
/// `match.not`, is empty inside itself).
fn example_in(schema: &Value, defs: &Value, other: bool, open: &mut Vec<String>) -> Value {
    let example = |s: &Value, other: bool, open: &mut Vec<String>| example_in(s, defs, other, open);
    if let Some(name) = schema["$ref"].as_str() {
        let name = name.trim_start_matches("#/definitions/").to_string();
        if open.contains(&name) {
            return json!({});
        }
        open.push(name.clone());
        let value = example(&defs[&name], other, open);
        open.pop();
        return value;
    }
    if let Some(all) = schema["allOf"].as_array() {
        return example(&all[0], other, open);
    }
    if let Some(any) = schema["anyOf"].as_array() {
        let null = json!({"type": "null"});
        if other && any.contains(&null) {
            return Value::Null;
        }
        let value = any.iter().find(|s| **s != null).unwrap();
        return example(value, false, open);
    }
    if let Some(one) = schema["oneOf"].as_array() {
        let variant = if other { one.last() } else { one.first() }.unwrap();
        return match variant.get("const") {
            Some(name) => name.clone(),
            None => example(variant, false, open),
        };
    }
    // `["string", "null"]`: `null` is the other value.
    let kind = match &schema["type"] {
        Value::Array(_) if other => return Value::Null,
        Value::Array(kinds) => kinds[0].as_str().unwrap(),
        kind => kind.as_str().unwrap(),
    };
    match (kind, other) {
        ("object", true) => json!({}),
        ("array", true) => json!([]),
        ("object", false) => match schema["properties"].as_object() {
            Some(properties) => properties
                .iter()
                .map(|(k, s)| (k.clone(), example(s, false, open)))
                .collect(),
            None => json!({"x": example(&schema["additionalProperties"], false, open)}),
        },
        ("array", false) => json!([example(&schema["items"], false, open)]),
        ("string", other) => json!(if other { "y" } else { "x" }),
        ("integer", other) => json!(if other { 2 } else { 1 }),
        ("boolean", other) => json!(!other),
        (kind, _) => panic!("no example for type {kind}"),
    }
}

/// The object schema `schema` names, through references and `null`.
fn object_schema<'a>(schema: &'a Value, defs: &'a Value) -> &'a Value {
    if let Some(name) = schema["$ref"].as_str() {
        return object_schema(&defs[name.trim_start_matches("#/definitions/")], defs);
    }
    if let Some(all) = schema["allOf"].as_array() {
        return object_schema(&all[0], defs);
    }
    if let Some(any) = schema["anyOf"].as_array() {
        let value = any.iter().find(|s| s["type"] != "null").unwrap();
        return object_schema(value, defs);
    }
    if schema["type"] == "array" || schema["type"][0] == "array" {
        return object_schema(&schema["items"], defs);
    }
    schema
}

fn read(doc: &Value) -> String {
    format!("{:?}", raw_config(doc.to_string().as_bytes()))
}

/// Checks that the property `name` of the object at `pointer` in `full`,
/// absent, reads as `default` written.
fn check_default(full: &Value, pointer: &str, name: &str, default: &Value) {
    let mut absent = full.clone();
    let object = absent
        .pointer_mut(pointer)
        .unwrap()
        .as_object_mut()
        .unwrap();
    object.remove(name).unwrap();
    let mut given = full.clone();
    *given.pointer_mut(&format!("{pointer}/{name}")).unwrap() = default.clone();
    assert_eq!(
        read(&absent),
        read(&given),
        "{pointer}/{name}: absent is not {default}"
    );
}

/// Checks each property of the object at `pointer` in `full` (and its
/// default, counted in `defaults`), then the objects inside it; the count
/// of properties checked.
fn check_object(
    full: &Value,
    pointer: &str,
    schema: &Value,
    defs: &Value,
    defaults: &mut usize,
) -> usize {
    let schema = object_schema(schema, defs);
    let Some(properties) = schema["properties"].as_object() else {
        return 0;
    };
    let mut checked = 0;
    for (name, property) in properties {
        let at = format!("{pointer}/{name}");
        let mut changed = full.clone();
        *changed.pointer_mut(&at).unwrap() = example(property, defs, true);
        assert_ne!(read(full), read(&changed), "{at} is not read");
        if let Some(default) = property.get("default") {
            check_default(full, pointer, name, default);
            *defaults += 1;
        }
        // An array's objects are checked through its first element; an
        // object holding itself (empty inside itself) once.
        let inner = match full.pointer(&at) {
            Some(Value::Array(_)) => format!("{at}/0"),
            Some(Value::Object(o)) if o.is_empty() => {
                checked += 1;
                continue;
            }
            _ => at,
        };
        checked += 1 + check_object(full, &inner, property, defs, defaults);
    }
    checked
}

#[test]
fn the_reader_reads_every_field_of_the_schema() {
    let schema = schema();
    let defs = &schema["definitions"];
    let full = example(&schema, defs, false);
    let read_full = raw_config(full.to_string().as_bytes());
    assert!(read_full.is_ok(), "{full}: {:?}", read_full.err());
    let mut defaults = 0;
    let checked = check_object(&full, "", &schema, defs, &mut defaults);
    // Every property of every object type, each met once in `full`.
    let properties = || {
        std::iter::once(&schema)
            .chain(defs.as_object().unwrap().values())
            .filter_map(|s| s["properties"].as_object())
            .flat_map(|p| p.values())
    };
    assert_eq!(checked, properties().count());
    assert_eq!(checked, 97);
    let with_default = properties().filter(|p| p.get("default").is_some());
    assert_eq!(defaults, with_default.count());
    assert_eq!(defaults, 47);
}
