//! A key part from the request's JSON body (`body:model`): the text of the
//! string, or the decimal of the integer, at a field path, so that each
//! model of an LLM API can have its own limit; or a field of a form body
//! (`body:username` of a login form).
//!
//! The body is one the filter already holds whole (a rule reading it makes
//! the request wait for its body, within Envoy's buffer limit). It is read
//! once per part by serde_json, following only the path's keys: every other
//! value is skipped without being kept, so memory is the value found, and
//! nesting is bounded by serde_json's recursion limit.

use crate::cost::extract::FieldPath;
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use std::fmt;

/// The text of the string, or the decimal of the integer, at `path` of the
/// JSON document `body`; `None` when the body is not JSON, or holds no
/// such value there (a fraction, `true`, `null`, an object or an array
/// is none).
pub fn field_text(body: &[u8], path: &FieldPath) -> Option<String> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let found = At { path, level: 0 }.deserialize(&mut de).ok()?;
    de.end().ok()?;
    found
}

/// Whether a request of content type `content_type` sends a form
/// (`application/x-www-form-urlencoded`, any parameters after it).
pub fn is_form(content_type: &str) -> bool {
    let essence = content_type.split(';').next().unwrap_or("").trim();
    essence.eq_ignore_ascii_case("application/x-www-form-urlencoded")
}

/// The first value of field `path` (a path of one name) of the form
/// `body`, decoded (`%XX`, `+` as a space); `None` when it has none, and
/// for a path of several names (a form is flat).
pub fn form_field(body: &[u8], path: &FieldPath) -> Option<String> {
    let mut keys = path.keys();
    let (Some(name), None) = (keys.next(), keys.next()) else {
        return None;
    };
    form_urlencoded::parse(body).find_map(|(k, v)| (k == name).then(|| v.into_owned()))
}

/// What is looked for at `level` of `path` (past the last key: the value).
#[derive(Clone, Copy)]
struct At<'p> {
    path: &'p FieldPath,
    level: usize,
}

impl At<'_> {
    fn is_value(self) -> bool {
        self.level >= self.path.depth()
    }

    /// `text` when this is the value looked for.
    fn leaf<E>(self, text: impl FnOnce() -> String) -> Result<Option<String>, E> {
        Ok(self.is_value().then(text))
    }
}

impl<'de> DeserializeSeed<'de> for At<'_> {
    type Value = Option<String>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for At<'_> {
    type Value = Option<String>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        self.leaf(|| v.to_string())
    }

    fn visit_u64<E>(self, v: u64) -> Result<Self::Value, E> {
        self.leaf(|| itoa::Buffer::new().format(v).to_string())
    }

    fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
        self.leaf(|| itoa::Buffer::new().format(v).to_string())
    }

    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(None)
    }

    /// Follows the path's key (its last occurrence, as serde_json's own
    /// maps keep); skips every other member.
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let key = self.path.keys().nth(self.level);
        let mut found = None;
        while let Some(k) = map.next_key::<KeyText>()? {
            match key {
                Some(key) if k.0 == key => {
                    found = map.next_value_seed(At {
                        path: self.path,
                        level: self.level + 1,
                    })?;
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(found)
    }
}

/// An object's key, unescaped.
struct KeyText(String);

impl<'de> serde::Deserialize<'de> for KeyText {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(KeyText)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(body: &str, path: &str) -> Option<String> {
        field_text(body.as_bytes(), &FieldPath::parse(path).unwrap())
    }

    #[test]
    fn a_string_or_an_integer_is_the_key_text() {
        let body = r#"{"model":"gpt-4o","n":3,"t":-2,"meta":{"tier":{"name":"gold"}},"messages":[{"model":"x"}]}"#;
        assert_eq!(at(body, "model").as_deref(), Some("gpt-4o"));
        assert_eq!(at(body, "n").as_deref(), Some("3"));
        assert_eq!(at(body, "t").as_deref(), Some("-2"));
        assert_eq!(at(body, "meta.tier.name").as_deref(), Some("gold"));
        // Escapes are read; the last of a repeated key counts.
        assert_eq!(
            at(r#"{"m":"a\"b\u00e9"}"#, "m").as_deref(),
            Some("a\"b\u{e9}")
        );
        assert_eq!(at(r#"{"m":"a","m":"b"}"#, "m").as_deref(), Some("b"));
        assert_eq!(at(r#"{"m\u006fdel":"c"}"#, "model").as_deref(), Some("c"));
        assert_eq!(at(r#"{"m":""}"#, "m").as_deref(), Some(""));
    }

    #[test]
    fn anything_else_is_missing() {
        let body = r#"{"f":1.5,"b":true,"z":null,"o":{"a":1},"l":["x"],"meta":{"tier":"gold"}}"#;
        for path in ["model", "f", "b", "z", "o", "l", "meta.tier.name", "o.a.b"] {
            assert_eq!(at(body, path), None, "{path}");
        }
        // Not JSON, not one document, or cut short.
        for body in [
            "",
            "model=gpt",
            r#"{"model":"a"} {}"#,
            r#"{"model":"a""#,
            "[1,2]",
            r#""gpt""#,
        ] {
            assert_eq!(at(body, "model"), None, "{body:?}");
        }
    }

    #[test]
    fn deep_nesting_is_refused_not_followed() {
        let body = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
        assert_eq!(at(&body, "model"), None);
    }
}
