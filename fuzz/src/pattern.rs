//! The filter's regular expressions (`sluice_filter::pattern::Pattern`, its
//! own engine) against `regex-lite` on arbitrary patterns and values.

use regex_lite::{Regex, RegexBuilder};
use sluice_filter::pattern::{Pattern, MAX_NESTING};

/// The pattern, then values, separated by NUL bytes (text read lossily as
/// UTF-8). A pattern is refused with a message, or it is one `regex-lite`
/// reads too (anchored as the filter anchors it, with its nesting limit
/// and no size limit) and both answer alike on every value and on the
/// empty one: whether it matches whole, and the first group's text (or
/// the whole value's).
pub fn pattern(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let mut parts = text.split('\0');
    let source = parts.next().unwrap_or_default();
    let p = match Pattern::new(source) {
        Ok(p) => p,
        Err(e) => {
            assert!(
                e.starts_with("not a regular expression: ") || e.starts_with("longer than"),
                "{e}"
            );
            return;
        }
    };
    let Some(re) = reference(source) else {
        panic!("{source:?}: accepted, and regex-lite refuses it");
    };
    for value in parts.chain([""]) {
        assert_eq!(
            p.matches(value),
            re.is_match(value),
            "{source:?} matches {value:?}"
        );
        let theirs = re
            .captures(value)
            .and_then(|caps| caps.get(1).or_else(|| caps.get(0)))
            .map(|m| m.as_str());
        assert_eq!(p.capture(value), theirs, "{source:?} captures {value:?}");
    }
}

fn reference(source: &str) -> Option<Regex> {
    RegexBuilder::new(&format!("^(?:{source})$"))
        .nest_limit(MAX_NESTING)
        .size_limit(1 << 30)
        .build()
        .ok()
}
