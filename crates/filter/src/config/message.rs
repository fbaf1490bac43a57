//! serde's messages for a value read wrong, in serde_json's words
//! ("invalid type: integer `5`, expected a string"), written here so that
//! the wasm carries no float formatting: a number that is not an integer is
//! named as written in the configuration (`floating point `1.50``).

use super::doc::Kind;

/// How serde_json names what it found: `written` is the value's text.
pub fn found(kind: &Kind, written: &str) -> String {
    match kind {
        Kind::Null => "null".to_string(),
        Kind::Bool(b) => format!("boolean `{b}`"),
        Kind::Unsigned(v) => format!("integer `{v}`"),
        Kind::Signed(v) => format!("integer `{v}`"),
        Kind::Float => format!("floating point `{written}`"),
        Kind::Str(s) => format!("string {}", debug_str(s)),
        Kind::Array => "sequence".to_string(),
        Kind::Object => "map".to_string(),
    }
}

/// `invalid type: {found}, expected {expected}`.
pub fn invalid_type(found: &str, expected: &str) -> String {
    format!("invalid type: {found}, expected {expected}")
}

/// `invalid value: {found}, expected {expected}`.
pub fn invalid_value(found: &str, expected: &str) -> String {
    format!("invalid value: {found}, expected {expected}")
}

pub fn unknown_field(field: &str, expected: &[&str]) -> String {
    match expected {
        [] => format!("unknown field `{field}`, there are no fields"),
        _ => format!("unknown field `{field}`, expected {}", one_of(expected)),
    }
}

pub fn unknown_variant(variant: &str, expected: &[&str]) -> String {
    match expected {
        [] => format!("unknown variant `{variant}`, there are no variants"),
        _ => format!("unknown variant `{variant}`, expected {}", one_of(expected)),
    }
}

pub fn missing_field(field: &str) -> String {
    format!("missing field `{field}`")
}

pub fn duplicate_field(field: &str) -> String {
    format!("duplicate field `{field}`")
}

/// "`a`", "`a` or `b`", "one of `a`, `b`, `c`".
fn one_of(names: &[&str]) -> String {
    match names {
        [one] => format!("`{one}`"),
        [a, b] => format!("`{a}` or `{b}`"),
        _ => {
            let mut out = "one of ".to_string();
            for (i, name) in names.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                out.push('`');
                out.push_str(name);
                out.push('`');
            }
            out
        }
    }
}

/// `s` quoted as Rust's `{:?}` writes a `str`.
fn debug_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            '\n' => out.push_str("\\n"),
            '\0' => out.push_str("\\0"),
            ' '..='~' => out.push(c),
            // Other controls, and beyond ASCII what Unicode says is not
            // printable or extends a grapheme, as `\u{..}`.
            _ => out.extend(c.escape_debug()),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::de::{Error as _, Unexpected};

    fn serde(unexpected: Unexpected) -> String {
        serde_json::Error::invalid_type(unexpected, &"x").to_string()
    }

    #[test]
    fn reads_as_serde_json_wrote_it() {
        let cases = [
            (Kind::Null, Unexpected::Unit),
            (Kind::Bool(true), Unexpected::Bool(true)),
            (Kind::Unsigned(5), Unexpected::Unsigned(5)),
            (Kind::Signed(-5), Unexpected::Signed(-5)),
            (Kind::Array, Unexpected::Seq),
            (Kind::Object, Unexpected::Map),
        ];
        for (kind, unexpected) in cases {
            assert_eq!(invalid_type(&found(&kind, ""), "x"), serde(unexpected));
        }
        let strings = [
            "plain",
            "q\"b\\s\t\r\n\0",
            "\u{1}\u{7f}",
            "é漢\u{301}\u{200b}\u{a0}\u{feff}\u{10ffff}😀",
        ];
        for s in strings {
            let kind = Kind::Str(s.into());
            assert_eq!(
                invalid_type(&found(&kind, ""), "x"),
                serde(Unexpected::Str(s))
            );
        }
        assert_eq!(
            found(&Kind::Float, "1.50"),
            "floating point `1.50`".to_string()
        );
        for names in [&[][..], &["a"], &["a", "b"], &["a", "b", "c"]] {
            let field = serde_json::Error::unknown_field("f", names).to_string();
            assert_eq!(unknown_field("f", names), field);
            let variant = serde_json::Error::unknown_variant("v", names).to_string();
            assert_eq!(unknown_variant("v", names), variant);
        }
        let value = serde_json::Error::invalid_value(Unexpected::Signed(-1), &"u64");
        assert_eq!(
            invalid_value(&found(&Kind::Signed(-1), "-1"), "u64"),
            value.to_string()
        );
        let missing = serde_json::Error::missing_field("f").to_string();
        assert_eq!(missing_field("f"), missing);
        let duplicate = serde_json::Error::duplicate_field("f").to_string();
        assert_eq!(duplicate_field("f"), duplicate);
    }
}
