//! The raw form of a rule's key parts (described as the other raw types
//! are: see [`super`]); `RawKeyPart` is read by hand in
//! [`from_json`](crate::config::from_json).

use crate::config::describe::{raw_struct, read_names};
use crate::key::Case;

read_names!(Case {
    AsSent = "as_sent",
    Lower = "lower",
});

/// A key part as written: its text, or an object narrowing its value with
/// a regular expression or giving it a default (read as a
/// [`RawRefinedPart`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RawKeyPart {
    /// `client_ip`, `header:NAME`, `jwt:CLAIM` ...
    Text(String),
    /// `{"part": ..., "regex": ..., "default": ...}`.
    Refined {
        /// The part, as in the text form.
        part: String,
        /// The key text is the value's first group (or whole match); a
        /// value it does not match is missing.
        regex: Option<String>,
        /// The key text when the value is missing.
        default: Option<String>,
        /// How the value's text is cased.
        case: Case,
    },
}

raw_struct! {
/// A key part whose value is narrowed by `regex` (its first group, or its whole match; a value it does not match is missing) or replaced by `default` when missing.
#[derive(Debug)]
pub struct RawRefinedPart {
    // The fields mean what `RawKeyPart::Refined`'s do; without docs of
    // their own, `part` keeps the key part's description in the schema.
    #[schema(schemars(schema_with = "crate::config::schema::key_part"))]
    pub part: String,
    #[default]
    pub regex: Option<String>,
    #[default]
    pub default: Option<String>,
    #[default]
    #[schema(schemars(extend("default" = "as_sent")))]
    pub case: Case,
}
}
