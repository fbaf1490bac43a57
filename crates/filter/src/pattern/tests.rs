//! The engine's constructs and refusals, and a comparison with `regex-lite`
//! on generated patterns and values.

use super::*;

/// `regex-lite` anchored as `Pattern` is, without its size limit.
fn reference(text: &str) -> Option<regex_lite::Regex> {
    regex_lite::RegexBuilder::new(&format!("^(?:{text})$"))
        .nest_limit(MAX_NESTING)
        .size_limit(1 << 30)
        .build()
        .ok()
}

/// `Pattern::capture` as `regex-lite` does it.
fn reference_capture<'v>(re: &regex_lite::Regex, value: &'v str) -> Option<&'v str> {
    let caps = re.captures(value)?;
    caps.get(1).or_else(|| caps.get(0)).map(|m| m.as_str())
}

/// `text` compiles and agrees with `regex-lite` on each value.
fn agree(text: &str, values: &[&str]) {
    let p = Pattern::new(text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
    let re = reference(text).unwrap_or_else(|| panic!("{text:?}: refused by regex-lite"));
    for v in values {
        assert_eq!(p.matches(v), re.is_match(v), "{text:?} matches {v:?}");
        assert_eq!(
            p.capture(v),
            reference_capture(&re, v),
            "{text:?} captures {v:?}"
        );
    }
}

#[test]
fn smoke() {
    agree("a", &["a", "b", "", "aa"]);
    agree("(a+)+b", &["aaab", "aaa"]);
    agree("Bearer (.+)", &["Bearer abc", "Basic x"]);
    agree("(a*)*", &["", "a", "aa", "b"]);
    agree("(a|ab)(c|bcd)(d*)", &["abcd", "abcdd"]);
    agree("(?i)ab[c-e]", &["ABD", "abE", "abf"]);
}
