//! The configuration's JSON as one flat list of values in the order written
//! (an object or array first, then what it holds), each with where it sits
//! in the text.
//!
//! serde_json reads the text (so its syntax errors are its own), strings
//! borrowed from the text where they have no escape; one more pass over the
//! text, which serde_json has accepted, finds each value's place.

use super::span::{byte, skip_ws, string_end};
use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use std::borrow::Cow;
use std::fmt;

/// What a value is, as serde_json read it.
pub enum Kind<'t> {
    Null,
    Bool(bool),
    /// A non-negative integer.
    Unsigned(u64),
    /// A negative integer.
    Signed(i64),
    /// Any other number (its text is at its place: it is only ever named
    /// as written).
    Float,
    Str(Cow<'t, str>),
    Array,
    Object,
}

/// One value of the document.
pub struct Item<'t> {
    pub kind: Kind<'t>,
    /// Its key, for a member of an object.
    pub key: Option<Cow<'t, str>>,
    /// The array or object holding it (`usize::MAX` for the document).
    pub parent: usize,
    /// The first value after it and all it holds.
    pub next: usize,
    /// Its first byte.
    pub start: usize,
    /// After its last byte.
    pub end: usize,
    /// For a member, the colon after its key (where serde_json reports a key).
    pub colon: usize,
}

/// The document: its text and its values, the whole document first.
pub struct Doc<'t> {
    pub text: &'t [u8],
    pub items: Vec<Item<'t>>,
}

/// Reads `text` as serde_json does (`from_slice`), errors included.
pub fn read(text: &[u8]) -> Result<Doc<'_>, serde_json::Error> {
    let mut items = Vec::with_capacity(text.len() / 24);
    let mut de = serde_json::Deserializer::from_slice(text);
    Collect {
        items: &mut items,
        parent: usize::MAX,
    }
    .deserialize(&mut de)?;
    de.end()?;
    place(text, &mut items);
    Ok(Doc { text, items })
}

/// Appends the value read, and all it holds, to `items`.
struct Collect<'v, 't> {
    items: &'v mut Vec<Item<'t>>,
    parent: usize,
}

impl<'t> Collect<'_, 't> {
    fn push(&mut self, kind: Kind<'t>) -> usize {
        let at = self.items.len();
        self.items.push(Item {
            kind,
            key: None,
            parent: self.parent,
            next: at + 1,
            start: 0,
            end: 0,
            colon: 0,
        });
        at
    }

    fn close(&mut self, at: usize) {
        let next = self.items.len();
        if let Some(item) = self.items.get_mut(at) {
            item.next = next;
        }
    }
}

impl<'t> DeserializeSeed<'t> for Collect<'_, 't> {
    type Value = ();

    fn deserialize<D: Deserializer<'t>>(self, de: D) -> Result<(), D::Error> {
        de.deserialize_any(self)
    }
}

impl<'t> Visitor<'t> for Collect<'_, 't> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any valid JSON value")
    }

    fn visit_unit<E>(mut self) -> Result<(), E> {
        self.push(Kind::Null);
        Ok(())
    }

    fn visit_bool<E>(mut self, v: bool) -> Result<(), E> {
        self.push(Kind::Bool(v));
        Ok(())
    }

    fn visit_u64<E>(mut self, v: u64) -> Result<(), E> {
        self.push(Kind::Unsigned(v));
        Ok(())
    }

    fn visit_i64<E>(mut self, v: i64) -> Result<(), E> {
        self.push(Kind::Signed(v));
        Ok(())
    }

    fn visit_f64<E>(mut self, _: f64) -> Result<(), E> {
        self.push(Kind::Float);
        Ok(())
    }

    fn visit_borrowed_str<E>(mut self, v: &'t str) -> Result<(), E> {
        self.push(Kind::Str(Cow::Borrowed(v)));
        Ok(())
    }

    fn visit_str<E>(mut self, v: &str) -> Result<(), E> {
        self.push(Kind::Str(Cow::Owned(v.to_string())));
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'t>>(mut self, mut seq: A) -> Result<(), A::Error> {
        let at = self.push(Kind::Array);
        while seq
            .next_element_seed(Collect {
                items: &mut *self.items,
                parent: at,
            })?
            .is_some()
        {}
        self.close(at);
        Ok(())
    }

    fn visit_map<A: MapAccess<'t>>(mut self, mut map: A) -> Result<(), A::Error> {
        let at = self.push(Kind::Object);
        while let Some(key) = map.next_key_seed(Key)? {
            let member = self.items.len();
            map.next_value_seed(Collect {
                items: &mut *self.items,
                parent: at,
            })?;
            if let Some(item) = self.items.get_mut(member) {
                item.key = Some(key);
            }
        }
        self.close(at);
        Ok(())
    }
}

/// An object's key, borrowed from the text where it has no escape.
struct Key;

impl<'t> DeserializeSeed<'t> for Key {
    type Value = Cow<'t, str>;

    fn deserialize<D: Deserializer<'t>>(self, de: D) -> Result<Self::Value, D::Error> {
        de.deserialize_str(self)
    }
}

impl<'t> Visitor<'t> for Key {
    type Value = Cow<'t, str>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string key")
    }

    fn visit_borrowed_str<E>(self, v: &'t str) -> Result<Self::Value, E> {
        Ok(Cow::Borrowed(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Cow::Owned(v.to_string()))
    }
}

/// Sets each value's place in `text` (JSON serde_json has accepted), in one
/// pass: values come in the same order as `items`.
fn place(text: &[u8], items: &mut [Item]) {
    let mut open: Vec<usize> = Vec::new();
    let mut at = skip_ws(text, 0);
    let mut next = 0;
    while let Some(item) = items.get_mut(next) {
        item.start = at;
        next += 1;
        match byte(text, at) {
            b'{' | b'[' => {
                open.push(next - 1);
                let first = skip_ws(text, at + 1);
                if !matches!(byte(text, first), b'}' | b']') {
                    at = member(text, first, items.get_mut(next));
                    continue;
                }
                at = first;
            }
            b'"' => {
                at = string_end(text, at);
                item.end = at;
            }
            _ => {
                while !matches!(
                    byte(text, at),
                    b',' | b'}' | b']' | b' ' | b'\n' | b'\t' | b'\r' | 0
                ) {
                    at += 1;
                }
                item.end = at;
            }
        }
        // A value is complete: close the containers it completes.
        loop {
            at = skip_ws(text, at);
            let Some(&container) = open.last() else {
                return;
            };
            if byte(text, at) == b',' {
                at = member(text, skip_ws(text, at + 1), items.get_mut(next));
                break;
            }
            if at >= text.len() {
                return;
            }
            at += 1;
            if let Some(closed) = items.get_mut(container) {
                closed.end = at;
            }
            open.pop();
        }
    }
}

/// Past the key of the member at `at` (if it is one), setting its colon:
/// where its value starts.
fn member(text: &[u8], at: usize, item: Option<&mut Item>) -> usize {
    let Some(item) = item.filter(|i| i.key.is_some()) else {
        return at;
    };
    item.colon = skip_ws(text, string_end(text, at));
    skip_ws(text, item.colon + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_every_value_in_order() {
        let text = br#" { "a" : [1, "x]" , {"b":null}, []], "c\"d":-2.5e3 ,"e":{}} "#;
        let doc = read(text).unwrap();
        let spans: Vec<&[u8]> = doc.items.iter().map(|i| &text[i.start..i.end]).collect();
        assert_eq!(
            spans,
            [
                &br#"{ "a" : [1, "x]" , {"b":null}, []], "c\"d":-2.5e3 ,"e":{}}"#[..],
                br#"[1, "x]" , {"b":null}, []]"#,
                b"1",
                br#""x]""#,
                br#"{"b":null}"#,
                b"null",
                b"[]",
                b"-2.5e3",
                b"{}",
            ]
        );
        let keys: Vec<Option<&str>> = doc.items.iter().map(|i| i.key.as_deref()).collect();
        assert_eq!(
            keys,
            [
                None,
                Some("a"),
                None,
                None,
                None,
                Some("b"),
                None,
                Some("c\"d"),
                Some("e")
            ]
        );
        let nexts: Vec<usize> = doc.items.iter().map(|i| i.next).collect();
        assert_eq!(nexts, [9, 7, 3, 4, 6, 6, 7, 8, 9]);
        assert_eq!(text[doc.items[1].colon], b':');
        assert_eq!(text[doc.items[7].colon], b':');
        assert_eq!(doc.items[5].parent, 4);
        assert!(matches!(doc.items[5].kind, Kind::Null));
    }

    #[test]
    fn a_scalar_document() {
        let doc = read(b" 5 ").unwrap();
        assert_eq!((doc.items[0].start, doc.items[0].end), (1, 2));
        assert!(read(b"[1,]").is_err());
    }
}
