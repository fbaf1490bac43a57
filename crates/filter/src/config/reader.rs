//! A cursor over the configuration's parsed JSON: a value, the path that
//! names it in messages (`rules[2].limits[0].window`) and where it starts in
//! the text.
//!
//! Its messages are serde's own, with serde_json's `at line L column C`, so
//! an error reads as it did when serde derive read the raw types, at no cost
//! per type in the wasm: objects are read member by member in the order
//! written, an unknown or repeated key is refused at its colon, a missing
//! field after the object's closing brace.

use super::span;
use serde::de::{Error as _, Unexpected};
use serde_json::Value;
use sluice_core::FieldError;
use std::fmt::Display;

/// serde_json's messages ("invalid type: ..., expected ..."), built without
/// a position (and so displayed without one).
type Message = serde_json::Error;

/// What a member of an object does with its value.
pub type OnMember<'f> = dyn FnMut(&str, &Node<'_>) -> Result<(), FieldError> + 'f;

/// A value of the configuration, its path and where it is written.
pub struct Node<'a> {
    value: &'a Value,
    text: &'a [u8],
    start: usize,
    path: String,
}

impl<'a> Node<'a> {
    /// The whole document: `value` parsed from `text`.
    pub fn root(text: &'a [u8], value: &'a Value) -> Node<'a> {
        Node {
            value,
            text,
            start: span::skip_ws(text, 0),
            path: String::new(),
        }
    }

    fn child(&self, value: &'a Value, start: usize, path: String) -> Node<'a> {
        Node {
            value,
            text: self.text,
            start,
            path,
        }
    }

    fn fail(&self, path: &str, offset: usize, message: impl Display) -> FieldError {
        let (line, column) = span::line_column(self.text, offset);
        FieldError::at(path, format!("{message} at line {line} column {column}"))
    }

    fn end(&self) -> usize {
        span::value_end(self.text, self.start)
    }

    /// `message` about this value, placed after it.
    pub fn error(&self, message: impl Display) -> FieldError {
        self.fail(&self.path, self.end(), message)
    }

    /// serde's "invalid type" for this value: after a scalar, at the bracket
    /// of an array or object (where serde_json stops reading).
    pub fn invalid_type(&self, expected: &str) -> FieldError {
        let at = match self.value {
            Value::Array(_) | Value::Object(_) => self.start,
            _ => self.end(),
        };
        let message = Message::invalid_type(unexpected(self.value), &expected);
        self.fail(&self.path, at, message)
    }

    /// "invalid type" as a self-describing read (`deserialize_any`) reports
    /// it: an array or object is read up to its first element or past its
    /// closing bracket.
    pub fn invalid_type_any(&self, expected: &str) -> FieldError {
        let message = Message::invalid_type(unexpected(self.value), &expected);
        let at = match self.value {
            Value::Array(_) | Value::Object(_) => {
                let first = span::skip_ws(self.text, self.start + 1);
                match self.text.get(first) {
                    Some(b']' | b'}') => first + 1,
                    _ => first,
                }
            }
            _ => self.end(),
        };
        self.fail(&self.path, at, message)
    }

    /// The value itself.
    pub fn value(&self) -> &'a Value {
        self.value
    }

    /// A string.
    pub fn string(&self) -> Result<String, FieldError> {
        match self.value {
            Value::String(s) => Ok(s.clone()),
            _ => Err(self.invalid_type("a string")),
        }
    }

    /// `true` or `false`.
    pub fn boolean(&self) -> Result<bool, FieldError> {
        match self.value {
            Value::Bool(b) => Ok(*b),
            _ => Err(self.invalid_type("a boolean")),
        }
    }

    /// A non-negative integer.
    pub fn u64(&self) -> Result<u64, FieldError> {
        let Value::Number(n) = self.value else {
            return Err(self.invalid_type("u64"));
        };
        match (n.as_u64(), n.as_i64()) {
            (Some(v), _) => Ok(v),
            (None, Some(v)) => {
                Err(self.error(Message::invalid_value(Unexpected::Signed(v), &"u64")))
            }
            (None, None) => Err(self.invalid_type("u64")),
        }
    }

    /// `null` as `None`, anything else read by `read`.
    pub fn optional<T>(
        &self,
        read: impl FnOnce(&Node<'a>) -> Result<T, FieldError>,
    ) -> Result<Option<T>, FieldError> {
        match self.value {
            Value::Null => Ok(None),
            _ => read(self).map(Some),
        }
    }

    /// An array, each element read by `read`.
    pub fn list<T>(
        &self,
        read: impl Fn(&Node<'a>) -> Result<T, FieldError>,
    ) -> Result<Vec<T>, FieldError> {
        let Value::Array(items) = self.value else {
            return Err(self.invalid_type("a sequence"));
        };
        let starts = span::elements(self.text, self.start);
        items
            .iter()
            .zip(starts)
            .enumerate()
            .map(|(i, (value, start))| {
                read(&self.child(value, start, format!("{}[{i}]", self.path)))
            })
            .collect()
    }

    /// One of the unit variants `names` (a string), as the matching entry of
    /// `values`.
    pub fn choice<T: Copy>(
        &self,
        names: &'static [&'static str],
        values: &[T],
    ) -> Result<T, FieldError> {
        let Value::String(s) = self.value else {
            // serde_json reads an enum from a string (or a one-member
            // object, which the configuration does not use): anything else
            // is not a value to it, reported one byte past where it looked.
            let looked = match self.value {
                Value::Object(_) => span::skip_ws(self.text, self.start + 1),
                _ => self.start,
            };
            let at = (looked + 1).min(self.text.len());
            return Err(self.fail(&self.path, at, "expected value"));
        };
        names
            .iter()
            .position(|n| n == s)
            .and_then(|i| values.get(i).copied())
            .ok_or_else(|| self.error(Message::unknown_variant(s, names)))
    }

    /// An object of strings as pairs sorted by key; a repeated key keeps
    /// its last value (a map's reading, without a map's code in the wasm).
    pub fn string_map(&self) -> Result<Vec<(String, String)>, FieldError> {
        let mut map: Vec<(String, String)> = Vec::new();
        self.members("a map", None, &mut |key, value| {
            let value = value.string()?;
            match map.binary_search_by(|(k, _)| k.as_str().cmp(key)) {
                Ok(at) => {
                    if let Some(pair) = map.get_mut(at) {
                        pair.1 = value;
                    }
                }
                Err(at) => map.insert(at, (key.to_string(), value)),
            }
            Ok(())
        })?;
        Ok(map)
    }

    /// The object `expected` names (`struct RawRule`), whose members must be
    /// among `fields`, each given to `each` in the order written.
    pub fn object(
        &self,
        expected: &str,
        fields: &'static [&'static str],
        each: &mut OnMember<'_>,
    ) -> Result<(), FieldError> {
        self.members(expected, Some(fields), each)
    }

    /// `value` of a field this object must have.
    pub fn required<T>(&self, value: Option<T>, field: &'static str) -> Result<T, FieldError> {
        value.ok_or_else(|| self.error(Message::missing_field(field)))
    }

    fn members(
        &self,
        expected: &str,
        fields: Option<&'static [&'static str]>,
        each: &mut OnMember<'_>,
    ) -> Result<(), FieldError> {
        let Value::Object(map) = self.value else {
            return Err(self.invalid_type(expected));
        };
        let members = span::members(self.text, self.start);
        let keys = members
            .iter()
            .map(|m| decode_key(self.text, m.key))
            .collect::<Vec<_>>();
        for (i, (m, key)) in members.iter().zip(&keys).enumerate() {
            let path = if self.path.is_empty() {
                key.clone()
            } else {
                format!("{}.{key}", self.path)
            };
            if let Some(fields) = fields {
                let Some(field) = fields.iter().find(|f| *f == key) else {
                    return Err(self.fail(&path, m.colon, Message::unknown_field(key, fields)));
                };
                if keys[..i].contains(key) {
                    let message = Message::duplicate_field(field);
                    return Err(self.fail(&self.path, m.colon, message));
                }
            }
            // A key written again: this occurrence's value is only in the text.
            let reparsed;
            let value = if keys[i + 1..].contains(key) {
                let end = span::value_end(self.text, m.value);
                let bytes = self.text.get(m.value..end).unwrap_or_default();
                reparsed = serde_json::from_slice(bytes).unwrap_or(Value::Null);
                &reparsed
            } else {
                map.get(key.as_str()).unwrap_or(&Value::Null)
            };
            each(key, &self.child(value, m.value, path))?;
        }
        Ok(())
    }
}

/// The key whose quotes span `(start, end)`, unescaped.
fn decode_key(text: &[u8], (start, end): (usize, usize)) -> String {
    let inner = text
        .get(start + 1..end.saturating_sub(1))
        .unwrap_or_default();
    if !inner.contains(&b'\\') {
        if let Ok(key) = std::str::from_utf8(inner) {
            return key.to_string();
        }
    }
    let quoted = text.get(start..end).unwrap_or_default();
    match serde_json::from_slice(quoted) {
        Ok(Value::String(key)) => key,
        _ => String::new(),
    }
}

/// How serde names what it found instead of what it expected.
fn unexpected(value: &Value) -> Unexpected<'_> {
    match value {
        Value::Null => Unexpected::Unit,
        Value::Bool(b) => Unexpected::Bool(*b),
        Value::Number(n) => match (n.as_u64(), n.as_i64()) {
            (Some(v), _) => Unexpected::Unsigned(v),
            (None, Some(v)) => Unexpected::Signed(v),
            (None, None) => Unexpected::Float(n.as_f64().unwrap_or_default()),
        },
        Value::String(s) => Unexpected::Str(s),
        Value::Array(_) => Unexpected::Seq,
        Value::Object(_) => Unexpected::Map,
    }
}
