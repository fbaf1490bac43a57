//! A cursor over the configuration's parsed JSON (`doc.rs`): a value, whose
//! path (`rules[2].limits[0].window`) is found only for a message.
//!
//! Its messages are serde's (written in `message.rs`), with serde_json's
//! `at line L column C`, so an error reads as it did when serde derive read
//! the raw types, at no cost per type in the wasm: objects are read member by member in the order
//! written, an unknown or repeated key is refused at its colon, a missing
//! field after the object's closing brace.

use super::doc::{Doc, Item, Kind};
use super::{message, span};
use sluice_core::FieldError;
use std::fmt::Display;

/// What a member of an object does with its value.
pub type OnMember<'f> = dyn FnMut(&str, &Node<'_>) -> Result<(), FieldError> + 'f;

/// A value of the configuration: its path is found from the document only
/// when a message names it.
#[derive(Clone, Copy)]
pub struct Node<'a> {
    doc: &'a Doc<'a>,
    at: usize,
}

/// Stands in for a value the document does not have (never, once read).
const NONE: Item<'static> = Item {
    kind: Kind::Null,
    key: None,
    parent: usize::MAX,
    next: usize::MAX,
    start: 0,
    end: 0,
    colon: 0,
};

impl<'a> Node<'a> {
    /// The whole document.
    pub fn root(doc: &'a Doc<'a>) -> Node<'a> {
        Node { doc, at: 0 }
    }

    fn item(&self) -> &'a Item<'a> {
        self.doc.items.get(self.at).unwrap_or(&NONE)
    }

    fn at(&self, at: usize) -> Node<'a> {
        Node { doc: self.doc, at }
    }

    /// The path naming this value (`rules[2].limits[0]`, "" for the
    /// document).
    fn path(&self) -> String {
        let mut path = String::new();
        self.write_path(&mut path);
        path
    }

    fn write_path(&self, out: &mut String) {
        let item = self.item();
        let Some(parent) = self.doc.items.get(item.parent) else {
            return;
        };
        self.at(item.parent).write_path(out);
        match &item.key {
            Some(key) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(key);
            }
            None => {
                // Its place among the array's elements.
                let mut index = 0usize;
                let mut sibling = item.parent + 1;
                while sibling < self.at && sibling < parent.next {
                    sibling = self.at(sibling).item().next;
                    index += 1;
                }
                out.push('[');
                out.push_str(itoa::Buffer::new().format(index));
                out.push(']');
            }
        }
    }

    fn fail(&self, path: &str, offset: usize, message: impl Display) -> FieldError {
        let (line, column) = span::line_column(self.doc.text, offset);
        FieldError::at(path, format!("{message} at line {line} column {column}"))
    }

    fn end(&self) -> usize {
        self.item().end
    }

    /// `message` about this value, placed after it.
    pub fn error(&self, message: impl Display) -> FieldError {
        self.fail(&self.path(), self.end(), message)
    }

    /// serde's "invalid type" for this value: after a scalar, at the bracket
    /// of an array or object (where serde_json stops reading).
    pub fn invalid_type(&self, expected: &str) -> FieldError {
        let item = self.item();
        let at = match item.kind {
            Kind::Array | Kind::Object => item.start,
            _ => item.end,
        };
        self.fail(&self.path(), at, self.invalid_type_message(expected))
    }

    /// "invalid type" as a self-describing read (`deserialize_any`) reports
    /// it: an array or object is read up to its first element or past its
    /// closing bracket.
    pub fn invalid_type_any(&self, expected: &str) -> FieldError {
        let item = self.item();
        let message = self.invalid_type_message(expected);
        let at = match item.kind {
            Kind::Array | Kind::Object => {
                let first = span::skip_ws(self.doc.text, item.start + 1);
                match self.doc.text.get(first) {
                    Some(b']' | b'}') => first + 1,
                    _ => first,
                }
            }
            _ => item.end,
        };
        self.fail(&self.path(), at, message)
    }

    fn invalid_type_message(&self, expected: &str) -> String {
        message::invalid_type(&message::found(self.kind(), self.written()), expected)
    }

    /// The value as written in the text.
    pub fn written(&self) -> &'a str {
        let item = self.item();
        let bytes = self.doc.text.get(item.start..item.end);
        std::str::from_utf8(bytes.unwrap_or_default()).unwrap_or_default()
    }

    /// What the value is.
    pub fn kind(&self) -> &'a Kind<'a> {
        &self.item().kind
    }

    /// A string.
    pub fn string(&self) -> Result<String, FieldError> {
        match self.kind() {
            Kind::Str(s) => Ok(s.to_string()),
            _ => Err(self.invalid_type("a string")),
        }
    }

    /// `true` or `false`.
    pub fn boolean(&self) -> Result<bool, FieldError> {
        match self.kind() {
            Kind::Bool(b) => Ok(*b),
            _ => Err(self.invalid_type("a boolean")),
        }
    }

    /// A non-negative integer.
    pub fn u64(&self) -> Result<u64, FieldError> {
        match self.kind() {
            Kind::Unsigned(v) => Ok(*v),
            Kind::Signed(_) => {
                let found = message::found(self.kind(), self.written());
                Err(self.error(message::invalid_value(&found, "u64")))
            }
            _ => Err(self.invalid_type("u64")),
        }
    }

    /// `null` as `None`, anything else read by `read`.
    pub fn optional<T>(
        &self,
        read: impl FnOnce(&Node<'a>) -> Result<T, FieldError>,
    ) -> Result<Option<T>, FieldError> {
        match self.kind() {
            Kind::Null => Ok(None),
            _ => read(self).map(Some),
        }
    }

    /// The values an array or object holds, in the order written.
    fn children(&self) -> impl Iterator<Item = Node<'a>> + 'a {
        let node = *self;
        let end = self.item().next;
        std::iter::successors(Some(self.at + 1), move |&at| Some(node.at(at).item().next))
            .take_while(move |&at| at < end)
            .map(move |at| node.at(at))
    }

    /// An array, each element read by `read`.
    pub fn list<T>(
        &self,
        read: impl Fn(&Node<'a>) -> Result<T, FieldError>,
    ) -> Result<Vec<T>, FieldError> {
        let Kind::Array = self.kind() else {
            return Err(self.invalid_type("a sequence"));
        };
        // A loop rather than `collect`: less code for each element type.
        let mut out = Vec::new();
        for element in self.children() {
            out.push(read(&element)?);
        }
        Ok(out)
    }

    /// One of the unit variants `names` (a string), as the matching entry of
    /// `values` (as many as `names`).
    pub fn choice<T: Copy>(
        &self,
        names: &'static [&'static str],
        values: &[T],
    ) -> Result<T, FieldError> {
        let at = self.variant(names)?;
        values
            .get(at)
            .copied()
            .ok_or_else(|| self.unknown_variant(names))
    }

    /// The place in `names` of the variant this value names; out of line,
    /// so that each enum's reader is only its table.
    #[inline(never)]
    fn variant(&self, names: &'static [&'static str]) -> Result<usize, FieldError> {
        let item = self.item();
        let Kind::Str(s) = &item.kind else {
            // serde_json reads an enum from a string (or a one-member
            // object, which the configuration does not use): anything else
            // is not a value to it, reported one byte past where it looked.
            let looked = match item.kind {
                Kind::Object => span::skip_ws(self.doc.text, item.start + 1),
                _ => item.start,
            };
            let at = (looked + 1).min(self.doc.text.len());
            return Err(self.fail(&self.path(), at, "expected value"));
        };
        names
            .iter()
            .position(|n| n == s)
            .ok_or_else(|| self.unknown_variant(names))
    }

    fn unknown_variant(&self, names: &'static [&'static str]) -> FieldError {
        let found = match self.kind() {
            Kind::Str(s) => s,
            _ => "",
        };
        self.error(message::unknown_variant(found, names))
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
        match value {
            Some(value) => Ok(value),
            None => Err(self.missing(field)),
        }
    }

    /// serde's "missing field", after the object's closing brace.
    #[inline(never)]
    fn missing(&self, field: &'static str) -> FieldError {
        self.error(message::missing_field(field))
    }

    fn members(
        &self,
        expected: &str,
        fields: Option<&'static [&'static str]>,
        each: &mut OnMember<'_>,
    ) -> Result<(), FieldError> {
        let Kind::Object = self.kind() else {
            return Err(self.invalid_type(expected));
        };
        // The fields met so far, one bit each (no object has 64).
        let mut seen = 0u64;
        for member in self.children() {
            let item = member.item();
            let key = item.key.as_deref().unwrap_or_default();
            if let Some(fields) = fields {
                let Some(field) = fields.iter().position(|f| *f == key) else {
                    let message = message::unknown_field(key, fields);
                    return Err(member.fail(&member.path(), item.colon, message));
                };
                let bit = 1u64 << (field % 64);
                if seen & bit != 0 {
                    let message = message::duplicate_field(fields.get(field).unwrap_or(&""));
                    return Err(self.fail(&self.path(), item.colon, message));
                }
                seen |= bit;
            }
            each(key, &member)?;
        }
        Ok(())
    }
}
