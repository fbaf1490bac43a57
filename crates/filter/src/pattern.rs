//! Regular expressions of the configuration: matches on paths, headers and
//! key parts, and captures in key parts.
//!
//! A small engine of its own (a few KB of the wasm where `regex-lite` took
//! about 80): [`parse`] reads RE2's syntax, less what a pattern matched
//! against a whole value does not need, into a tree; [`compile`] turns the
//! tree into a program, bounded in size; [`vm`] runs the program over a
//! value in one pass (a Pike VM). Matches and captures are those of
//! `regex-lite`, which the tests and the `pattern` fuzz target compare it
//! with.
//!
//! The syntax: literals (any character), `.` (any but `\n`), `\d \D \w \W
//! \s \S` (ASCII), `\` before punctuation, `\t \n \r \f \v \a`, classes
//! `[a-z_]` and `[^...]` with those escapes, groups `(...)` and `(?:...)`,
//! `|`, `* + ? {n} {n,} {n,m}` and their lazy forms (`*?`), `^` and `$`,
//! and the flag `i` (`(?i)`, `(?i:...)`, `(?-i)`: ASCII letters in either
//! case). Anything else is refused, naming what.

mod class;
mod compile;
mod parse;
mod vm;

use compile::Program;

/// Longest regular expression, in bytes.
pub const MAX_PATTERN_LEN: usize = 1024;

/// Most instructions a compiled regular expression may take.
pub const MAX_PROGRAM_LEN: usize = compile::MAX_INSTS;

/// Deepest nesting of a regular expression.
pub const MAX_NESTING: u32 = parse::NEST_LIMIT;

/// A regular expression that must match a whole value (RE2's syntax, see
/// the module; matched in time linear in the value).
#[derive(Clone)]
pub struct Pattern {
    text: String,
    program: std::sync::Arc<Program>,
}

impl Pattern {
    /// Compiles `text`, anchored at both ends; an error says why not.
    pub fn new(text: &str) -> Result<Pattern, String> {
        if text.len() > MAX_PATTERN_LEN {
            return Err(format!("longer than {MAX_PATTERN_LEN} bytes"));
        }
        let program = parse::parse(text).and_then(compile::compile).map_err(|e| {
            let mut message = String::from("not a regular expression: ");
            message.push_str(e);
            message
        })?;
        Ok(Pattern {
            text: text.to_string(),
            program: std::sync::Arc::new(program),
        })
    }

    /// Whether the whole of `value` matches.
    pub fn matches(&self, value: &str) -> bool {
        vm::run(&self.program, value, false).is_some()
    }

    /// The text of the first group of a whole match of `value`, or of the
    /// whole match when the pattern has no group (or the group took no
    /// part in the match).
    pub fn capture<'v>(&self, value: &'v str) -> Option<&'v str> {
        let [start, end] = vm::run(&self.program, value, true)?;
        Some(value.get(start..end).unwrap_or(value))
    }
}

impl std::fmt::Debug for Pattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Pattern").field(&self.text).finish()
    }
}

impl PartialEq for Pattern {
    fn eq(&self, other: &Pattern) -> bool {
        self.text == other.text
    }
}

impl Eq for Pattern {}

#[cfg(test)]
mod tests;
