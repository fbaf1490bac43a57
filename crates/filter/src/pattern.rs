//! Regular expressions of the configuration: matches on paths, headers and
//! key parts, and captures in key parts.

use regex_lite::{Regex, RegexBuilder};

/// Longest regular expression, in bytes.
pub const MAX_PATTERN_LEN: usize = 1024;

/// Most bytes a compiled regular expression may take.
const PATTERN_SIZE_LIMIT: usize = 256 * 1024;

/// Deepest nesting of groups and repetitions in a regular expression.
const PATTERN_NEST_LIMIT: u32 = 32;

/// A regular expression that must match a whole value (RE2's syntax, as
/// `regex-lite` reads it: no look-around, no backreferences; matched in
/// time linear in the value).
#[derive(Debug, Clone)]
pub struct Pattern {
    text: String,
    regex: Regex,
}

impl Pattern {
    /// Compiles `text`, anchored at both ends; an error says why not.
    pub fn new(text: &str) -> Result<Pattern, String> {
        if text.len() > MAX_PATTERN_LEN {
            return Err(format!("longer than {MAX_PATTERN_LEN} bytes"));
        }
        let regex = RegexBuilder::new(&format!("^(?:{text})$"))
            .size_limit(PATTERN_SIZE_LIMIT)
            .nest_limit(PATTERN_NEST_LIMIT)
            .build()
            .map_err(|e| format!("not a regular expression: {e}"))?;
        Ok(Pattern {
            text: text.to_string(),
            regex,
        })
    }

    /// Whether the whole of `value` matches.
    pub fn matches(&self, value: &str) -> bool {
        self.regex.is_match(value)
    }

    /// The text of the first group of a whole match of `value`, or of the
    /// whole match when the pattern has no group.
    pub fn capture<'v>(&self, value: &'v str) -> Option<&'v str> {
        let caps = self.regex.captures(value)?;
        caps.get(1).or_else(|| caps.get(0)).map(|m| m.as_str())
    }
}

impl PartialEq for Pattern {
    fn eq(&self, other: &Pattern) -> bool {
        self.text == other.text
    }
}

impl Eq for Pattern {}
