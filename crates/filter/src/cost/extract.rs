//! What a response says its request cost: the counts an upstream reports
//! in its body, read as the body streams through the filter, chunk by
//! chunk, without buffering it.
//!
//! An LLM API reports the tokens a request used in a `usage` object: in the
//! JSON body (`{"id": .., "choices": [..], "usage": {"prompt_tokens": 12,
//! "completion_tokens": 30, "total_tokens": 42}}`), or, streamed
//! (`content-type: text/event-stream`), in the last `data:` event that
//! carries one. A [`FieldPath`] names such a count (`usage.total_tokens`);
//! [`scanner`] picks the reader for the response's `content-type`
//! ([`JsonScanner`] or [`SseScanner`], behind [`BodyScanner`]), which is fed
//! the body's chunks, however they are cut (inside a key, a number, a UTF-8
//! sequence or a `\r\n`: everything is read a byte at a time), and finally
//! tells per path a [`Found`]. Adding counts up (prompt + completion) is
//! the caller's.
//!
//! # Memory
//!
//! State is fixed, whatever the body: a scanner holds at most 320 bytes
//! (on a 64-bit target, less on wasm32: `JsonScanner` ≤ 208, `SseScanner`
//! and `BodyScanner` ≤ 320; a test keeps these true) plus its paths, at
//! most [`MAX_PATHS`] copied when it is made, each at most 1,031 bytes of
//! text (8 keys of 128 bytes) and 64 of bookkeeping: 4.3 KiB in all at
//! worst. The stack of open containers is a bit per level and a byte of
//! path masks per level for [`MAX_DEPTH`] levels (deeper levels are only
//! counted), keys are compared with the paths' as they stream and never
//! stored, and an event's payload goes to its JSON reader as it arrives,
//! never buffered. Feeding allocates nothing and costs a constant per byte.

mod json;
mod sse;

pub use json::JsonScanner;
pub use sse::SseScanner;

use std::ops::Deref;

/// Most keys in a [`FieldPath`].
pub const MAX_KEYS: usize = 8;
/// Longest key of a [`FieldPath`], in bytes.
pub const MAX_KEY_LEN: usize = 128;
/// Most paths one scanner looks for.
pub const MAX_PATHS: usize = 4;
/// Deepest nesting of a JSON document that is followed; deeper containers
/// are skipped (bracket-counted).
pub const MAX_DEPTH: usize = 64;
/// Longest line of an event stream that is read, in bytes without its end.
pub const MAX_LINE: usize = 256 * 1024;
/// Largest payload (its `data` lines joined) of an event that is read.
pub const MAX_EVENT_DATA: usize = 256 * 1024;

/// A path of object keys to a count in a JSON document, as
/// `usage.total_tokens`: 1 to [`MAX_KEYS`] keys separated by `.`, each 1 to
/// [`MAX_KEY_LEN`] bytes of ASCII letters, digits, `_` and `-`. Only
/// objects are followed: a path never goes through an array.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldPath {
    text: String,
    /// Each key's start and end in `text`.
    spans: [(u16, u16); MAX_KEYS],
    keys: u8,
}

impl FieldPath {
    /// Reads a path as written in the configuration; the error says what
    /// is wrong with it.
    pub fn parse(text: &str) -> Result<FieldPath, String> {
        if text.is_empty() {
            return Err(
                "a field path is empty: expected keys separated by `.`, as `usage.total_tokens`"
                    .into(),
            );
        }
        let mut spans = [(0, 0); MAX_KEYS];
        let mut start = 0;
        for (n, key) in text.split('.').enumerate() {
            let Some(span) = spans.get_mut(n) else {
                return Err(format!("field path `{text}` has more than {MAX_KEYS} keys"));
            };
            if key.is_empty() {
                return Err(format!(
                    "field path `{text}` has an empty key: keys are separated by single dots, with none at either end"
                ));
            }
            if key.len() > MAX_KEY_LEN {
                return Err(format!(
                    "field path `{text}` has a key of {} bytes: at most {MAX_KEY_LEN}",
                    key.len()
                ));
            }
            if let Some(c) = key.chars().find(|c| !is_key_char(*c)) {
                return Err(format!(
                    "field path `{text}` has {c:?} in a key: keys are ASCII letters, digits, `_` and `-`"
                ));
            }
            let end = start + key.len();
            // At most 8 × 128 + 7 bytes: both fit.
            *span = (start as u16, end as u16);
            start = end + 1;
        }
        Ok(FieldPath {
            text: text.to_string(),
            spans,
            keys: text.split('.').count() as u8,
        })
    }

    /// The path as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// How many keys it has (the depth of the object holding its value).
    pub fn depth(&self) -> usize {
        usize::from(self.keys)
    }

    /// Its keys, outermost first.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.text.split('.')
    }

    /// Key `level` (0 for the outermost); empty past the last.
    fn key(&self, level: usize) -> &[u8] {
        match self.spans.get(level) {
            Some(&(start, end)) if level < self.depth() => self
                .text
                .as_bytes()
                .get(usize::from(start)..usize::from(end))
                .unwrap_or_default(),
            _ => &[],
        }
    }
}

fn is_key_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

/// What a body held at one path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Found {
    /// A non-negative integer (one over `u64::MAX` is `u64::MAX`).
    Value(u64),
    /// Nothing there.
    Missing,
    /// Something there that is no count: a negative number, a fraction or
    /// an exponent, a string, `true`, `false`, `null`, an object, an array.
    Malformed,
}

/// What a scanner found, one [`Found`] per path in the order the paths were
/// given (a slice through `Deref`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Findings {
    found: [Found; MAX_PATHS],
    len: usize,
}

impl Findings {
    fn new(found: &[Found]) -> Findings {
        let mut all = [Found::Missing; MAX_PATHS];
        for (to, from) in all.iter_mut().zip(found) {
            *to = *from;
        }
        Findings {
            found: all,
            len: found.len().min(MAX_PATHS),
        }
    }
}

impl Deref for Findings {
    type Target = [Found];

    fn deref(&self) -> &[Found] {
        self.found.get(..self.len).unwrap_or_default()
    }
}

/// How a response body is read, by its `content-type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyKind {
    /// One JSON document.
    Json,
    /// Server-sent events (`text/event-stream`), each carrying JSON.
    EventStream,
}

impl BodyKind {
    /// `text/event-stream` (any case, with or without parameters) is an
    /// event stream; anything else, or no `content-type`, is read as JSON.
    pub fn of(content_type: Option<&str>) -> BodyKind {
        let media = content_type
            .and_then(|v| v.split(';').next())
            .map(|m| m.trim_matches(|c| c == ' ' || c == '\t'));
        match media {
            Some(m) if m.eq_ignore_ascii_case("text/event-stream") => BodyKind::EventStream,
            _ => BodyKind::Json,
        }
    }
}

/// A response body's scanner, for either kind of body.
#[derive(Clone, Debug)]
pub enum BodyScanner {
    Json(JsonScanner),
    EventStream(SseScanner),
}

/// The scanner for a response with this `content-type` (see
/// [`BodyKind::of`]), looking for the first [`MAX_PATHS`] of `paths`.
pub fn scanner(content_type: Option<&str>, paths: &[FieldPath]) -> BodyScanner {
    BodyScanner::new(BodyKind::of(content_type), paths)
}

impl BodyScanner {
    /// A scanner of a `kind` body, looking for the first [`MAX_PATHS`] of
    /// `paths`.
    pub fn new(kind: BodyKind, paths: &[FieldPath]) -> BodyScanner {
        match kind {
            BodyKind::Json => BodyScanner::Json(JsonScanner::new(paths)),
            BodyKind::EventStream => BodyScanner::EventStream(SseScanner::new(paths)),
        }
    }

    pub fn kind(&self) -> BodyKind {
        match self {
            BodyScanner::Json(_) => BodyKind::Json,
            BodyScanner::EventStream(_) => BodyKind::EventStream,
        }
    }

    /// Reads the body's next chunk.
    pub fn feed(&mut self, chunk: &[u8]) {
        match self {
            BodyScanner::Json(s) => s.feed(chunk),
            BodyScanner::EventStream(s) => s.feed(chunk),
        }
    }

    /// What was found, at the end of the body (or when it was cut short).
    pub fn finish(&mut self) -> Findings {
        match self {
            BodyScanner::Json(s) => s.finish(),
            BodyScanner::EventStream(s) => s.finish(),
        }
    }
}

#[cfg(test)]
mod tests;
