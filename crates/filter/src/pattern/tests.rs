//! The engine's constructs and refusals, each checked against `regex-lite`.

use super::*;

mod differential;
mod timing;

/// `regex-lite` anchored as `Pattern` is, with its nesting limit and
/// without its size limit.
pub(super) fn reference(text: &str) -> Option<regex_lite::Regex> {
    regex_lite::RegexBuilder::new(&format!("^(?:{text})$"))
        .nest_limit(MAX_NESTING)
        .size_limit(1 << 30)
        .build()
        .ok()
}

/// `Pattern::capture` as `regex-lite` does it.
pub(super) fn reference_capture<'v>(re: &regex_lite::Regex, value: &'v str) -> Option<&'v str> {
    let caps = re.captures(value)?;
    caps.get(1).or_else(|| caps.get(0)).map(|m| m.as_str())
}

/// `p` (of `text`) answers as `re` on `value`.
pub(super) fn agree_on(p: &Pattern, re: &regex_lite::Regex, text: &str, value: &str) {
    assert_eq!(
        p.matches(value),
        re.is_match(value),
        "{text:?} matches {value:?}"
    );
    assert_eq!(
        p.capture(value),
        reference_capture(re, value),
        "{text:?} captures {value:?}"
    );
}

/// `text` compiles and agrees with `regex-lite` on each value.
fn agree(text: &str, values: &[&str]) {
    let p = Pattern::new(text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
    let re = reference(text).unwrap_or_else(|| panic!("{text:?}: refused by regex-lite"));
    for v in values {
        agree_on(&p, &re, text, v);
    }
}

/// `text` is refused with a message containing `why`.
fn refused(text: &str, why: &str) {
    match Pattern::new(text) {
        Ok(_) => panic!("{text:?} compiled"),
        Err(e) => assert!(e.contains(why), "{text:?}: {e:?} does not say {why:?}"),
    }
}

const WORDS: &[&str] = &[
    "", "a", "b", "ab", "ba", "aab", "abab", "A", "aB", "é", "\n", "a\nb", "a.b", "a-b", "0", "42",
    " ", "\t", "_",
];

/// `text` agrees with `regex-lite` on [`WORDS`] and on `more`.
fn agree_all(text: &str, more: &[&str]) {
    let mut values = WORDS.to_vec();
    values.extend_from_slice(more);
    agree(text, &values);
}

#[test]
fn literals_and_dot() {
    agree_all("a", &["aa"]);
    agree_all("ab", &[]);
    agree_all("é+", &["éé", "ée"]);
    agree_all("", &[]);
    agree_all(".", &["\n", "\r", "é", "日"]);
    agree_all("a.b", &["a\nb", "aéb"]);
    agree_all("/api/v1/users", &["/api/v1/users", "/api/v1/user"]);
    agree_all("]}", &["]}"]);
}

#[test]
fn escapes() {
    agree_all(r"\.", &["."]);
    agree_all(r"\\", &["\\"]);
    agree_all(
        r"\/\-\*\+\?\(\)\[\]\{\}\|\^\$\#\&\~",
        &["/-*+?()[]{}|^$#&~"],
    );
    agree_all(r"\t\n\r\f\v\a", &["\t\n\r\x0C\x0B\x07"]);
    agree_all(r"\ \%\,\!\@", &[" %,!@"]);
    agree_all(r"\d+", &["0123456789", "٣"]);
    agree_all(r"\D+", &["٣", "a"]);
    agree_all(r"\w+", &["az_AZ09", "é"]);
    agree_all(r"\W+", &["é-", " "]);
    agree_all(r"\s+", &[" \t\n\x0B\x0C\r", "\u{a0}"]);
    agree_all(r"\S+", &["\u{a0}", "ab"]);
}

#[test]
fn classes() {
    agree_all("[ab]+", &[]);
    agree_all("[a-c0-9_]+", &["c9_"]);
    agree_all("[^ab]", &["c", "\n", "é"]);
    agree_all("[]a]+", &["]a]"]);
    agree_all("[^]a]", &["]", "b"]);
    agree_all("[-a]+", &["-a"]);
    agree_all("[a-]+", &["-a"]);
    agree_all("[--a]+", &["--a"]);
    agree_all("[a-c-e]+", &["-", "d", "e"]);
    agree_all(r"[a\-z]+", &["-", "b", "z"]);
    agree_all(r"[\d_]+", &[]);
    agree_all(r"[^\n]+", &[]);
    agree_all(r"[\D\d]", &[]);
    agree_all(r"[^\D\d]", &[]);
    agree_all(r"[\w.-]+", &["a.b-c"]);
    agree_all(r"[\]\[\\]+", &["[]\\"]);
    agree_all("[à-ÿ]+", &["é", "à", "ÿ", "ā"]);
    agree_all("[.*+?(){}|^$]+", &[".*+?(){}|^$"]);
    agree_all("[^^]", &["^", "a"]);
}

#[test]
fn groups_and_alternation() {
    agree_all("(a)", &[]);
    agree_all("(a)b|(b)a", &["ab", "ba"]);
    agree_all("(a)|b", &["a", "b"]);
    agree_all("a|b|", &[]);
    agree_all("|", &[]);
    agree_all("(?:ab)|(a)", &[]);
    agree_all("(a){0}(b)", &["b"]);
    agree_all("((a)b)", &["ab"]);
    agree_all("()", &[]);
    agree_all("(a|ab)(c|bcd)(d*)", &["abcd", "abcdd"]);
    agree_all("(?:(a)|b)*", &["ab", "ba", "abb"]);
    agree_all(
        "Bearer ([A-Za-z0-9._-]+)",
        &["Bearer abc.DEF-1_", "Bearer ", "bearer x"],
    );
}

#[test]
fn repetitions() {
    for op in [
        "*", "+", "?", "{2}", "{0}", "{1}", "{2,}", "{0,}", "{1,3}", "{0,2}",
    ] {
        for lazy in ["", "?"] {
            agree_all(&format!("(a){op}{lazy}"), &["aa", "aaa", "aaaa"]);
            agree_all(&format!("(a{op}{lazy})(a*)"), &["aa", "aaa", "aaaa"]);
            agree_all(&format!("(?:(a*)b?){op}{lazy}"), &["aab", "abab"]);
            agree_all(&format!("(a|){op}{lazy}"), &["aa"]);
        }
    }
    agree_all("(a+)+b", &["aaab"]);
    agree_all("(a*)*", &["aa"]);
    agree_all("(a*)+", &["aa"]);
    agree_all("(a?)*?", &["aa"]);
    agree_all("a**", &["aa"]);
    agree_all("a*??", &["aa"]);
    agree_all("(?:a{2}){2}", &["aaaa"]);
    agree_all("a{2,}?(a*)", &["aaaa"]);
    agree_all("(^)*a", &[]);
}

#[test]
fn anchors_are_redundant_at_the_ends() {
    agree_all("^ab$", &[]);
    agree_all("^(a)$", &[]);
    agree_all("a^b", &[]);
    agree_all("a$b", &[]);
    agree_all("(a$|ab)", &[]);
    agree_all("(^a|b)+", &[]);
}

#[test]
fn the_flag_i_folds_ascii_letters() {
    agree_all("(?i)ab", &["AB", "Ab", "aB"]);
    agree_all("(?i)é", &["É"]);
    agree_all("a(?i)b", &["aB", "AB"]);
    agree_all("a(?i)b|c", &["C"]);
    agree_all("(?i:a)b", &["Ab", "AB"]);
    agree_all("(?i)a(?-i)b", &["Ab", "AB"]);
    agree_all("(?i)a(?-i:b)c", &["AbC", "ABC"]);
    agree_all("(?i)(a)(?-i)b|c", &["C", "c"]);
    agree_all("(x(?i)a)b", &["xAb", "xAB"]);
    agree_all("(?i)[a-c]+", &["ABC"]);
    agree_all("(?i)[^a-c]", &["A", "d", "D"]);
    agree_all("(?i)[A-Z]+", &["abc"]);
    agree_all("(?i)[X-z]+", &["XYZ[`abc", "xyz", "ABC"]);
    agree_all(r"(?i)[\W]", &["A", "-"]);
    agree_all(r"(?i)\w", &["A"]);
    agree_all("(?i)[@-z]+", &["@AZaz[`"]);
}

#[test]
fn what_is_refused_is_named() {
    for text in ["(?=a)", "(?!a)", "(?<=a)", "(?<!a)"] {
        refused(text, "look-around is not supported");
    }
    for text in ["(?P<n>a)", "(?<n>a)"] {
        refused(text, "named groups are not supported");
    }
    for text in [
        "(?m)a", "(?s)a", "(?x)a", "(?U)a", "(?)a", "(?i-s)a", "(?ii)a", "(?-)a", "(?u:a)", "(?",
    ] {
        refused(text, "only the flag i is supported");
    }
    refused(r"\1", "backreferences are not supported");
    refused(r"\pL", "Unicode classes");
    refused(r"\p{Greek}", "Unicode classes");
    for text in [r"\x41", r"\x{41}", r"\u0041"] {
        refused(text, "hexadecimal escapes");
    }
    for text in [r"\b", r"\B", r"\A", r"\z", r"\<", r"\>", r"[\b]"] {
        refused(text, "assertions");
    }
    for text in [r"\e", r"\é", r"\q", "\\\n"] {
        refused(text, "unknown escape");
    }
    refused("a\\", "cannot end with \\");
    for text in ["[[:alpha:]]", "[a[b]]", "[[]"] {
        refused(text, "classes inside classes");
    }
    for text in ["[a&&b]", "[a--b]", "[a~~b]"] {
        refused(text, "class set operations");
    }
    for text in ["[", "[a", "[^", "[]", "[a-"] {
        refused(text, "a class is not closed");
    }
    refused("[z-a]", "a class range runs backwards");
    for text in [r"[\d-z]", r"[a-\w]"] {
        refused(text, "a class range must run between two characters");
    }
    for text in ["(", "(a", "((a)", "(?:a", "(?i:a"] {
        refused(text, "a group is not closed");
    }
    for text in [")", "a)", "(a))", "a)|(b"] {
        refused(text, "')' without '('");
    }
    for text in ["*a", "a|*", "(+)", "{2}", "(?i)*", "?"] {
        refused(text, "must follow what it repeats");
    }
    for text in [
        "a{",
        "a{x}",
        "a{1,x}",
        "a{ 1}",
        "a{1",
        "a{1,",
        "a{,2}",
        "a{99999999999}",
    ] {
        refused(text, "a counted repetition is {n}, {n,} or {n,m}");
    }
    refused("a{3,2}", "n greater than m");
    for text in ["(?i)[A-m]", "(?i)[Z-a]", "(?i)[X-c]", "(?i)[A-Z\\[-`a-m]"] {
        refused(text, "(?i) with a class range");
    }
    refused(&"a".repeat(MAX_PATTERN_LEN + 1), "longer than 1024 bytes");
}

#[test]
fn refusals_are_refusals_of_regex_lite_but_for_a_few() {
    // What the engine refuses and regex-lite reads: constructs left out of
    // the subset, and `a)|(b`, which regex-lite reads inside its anchors.
    let left_out = [
        "(?P<n>a)",
        "(?m)a",
        "(?s)a",
        "(?x)a",
        r"\x41",
        r"\b",
        r"\A",
        "[[:alpha:]]",
        "a{ 1}",
        "(?i)[A-m]",
        "a)|(b",
        "\\\n",
    ];
    for text in left_out {
        assert!(Pattern::new(text).is_err(), "{text:?}");
        assert!(reference(text).is_some(), "{text:?}");
    }
}

#[test]
fn nesting_is_bounded_as_regex_lite_bounds_it() {
    for depth in 28..36 {
        for (open, close) in [("(", ")"), ("(?:", ")"), ("(?:a", ")*")] {
            let text = format!("{}a{}", open.repeat(depth), close.repeat(depth));
            let ours = Pattern::new(&text);
            assert_eq!(ours.is_ok(), reference(&text).is_some(), "{text}: {ours:?}");
            if let Err(e) = ours {
                assert!(e.contains("32"), "{e}");
            }
        }
        let text = format!("a{}", "*".repeat(depth));
        assert_eq!(
            Pattern::new(&text).is_ok(),
            reference(&text).is_some(),
            "{text}"
        );
    }
    assert!(Pattern::new(&format!("{}a{}", "(".repeat(31), ")".repeat(31))).is_ok());
    refused(&format!("{}a{}", "(".repeat(32), ")".repeat(32)), "32");
}

#[test]
fn programs_are_bounded() {
    assert!(Pattern::new(&format!("a{{{}}}", MAX_PROGRAM_LEN - 1)).is_ok());
    for text in [
        format!("a{{{MAX_PROGRAM_LEN}}}"),
        "(a{100}){100}".to_string(),
        "((a{1000}){1000}){1000}".to_string(),
        "(?:){4294967295}".to_string(),
        "a{0,4294967295}".to_string(),
        "a{4294967295,}".to_string(),
    ] {
        refused(&text, "more than 8192 instructions");
    }
    // Each copy of a class shares its ranges.
    let classes = format!("[{}]{{1000}}", "a-b0-1c-d".repeat(20));
    assert!(Pattern::new(&classes).is_ok());
}

#[test]
fn matching_takes_linear_time() {
    let long = "a".repeat(20_000);
    for text in [
        "(a+)+b",
        "(a|aa)*b",
        "(.*)*x",
        "(a*)*(a*)*(a*)*b",
        "(?:a?){50}a{50}",
    ] {
        let p = Pattern::new(text).unwrap_or_else(|e| panic!("{text}: {e}"));
        assert!(!p.matches(&long), "{text}");
        assert_eq!(p.capture(&long), None, "{text}");
    }
    assert!(Pattern::new("(a|aa)*").unwrap().matches(&long));
}

#[test]
fn capture_gives_the_first_group_or_the_whole_value() {
    let bearer = Pattern::new("Bearer (.+)").unwrap();
    assert_eq!(bearer.capture("Bearer abc"), Some("abc"));
    assert_eq!(bearer.capture("Basic abc"), None);
    let whole = Pattern::new("[a-z]+").unwrap();
    assert_eq!(whole.capture("abc"), Some("abc"));
    let absent = Pattern::new("(a)|b").unwrap();
    assert_eq!(absent.capture("b"), Some("b"), "the group took no part");
    let second = Pattern::new("(a)(b)").unwrap();
    assert_eq!(second.capture("ab"), Some("a"));
    let lazy = Pattern::new("(a+?)(a*)").unwrap();
    assert_eq!(lazy.capture("aaa"), Some("a"));
    let last = Pattern::new("(?:(a)|b)+").unwrap();
    assert_eq!(
        last.capture("aab"),
        Some("a"),
        "the last iteration that set it"
    );
}

#[test]
fn patterns_are_equal_by_their_text() {
    assert_eq!(Pattern::new("a+").unwrap(), Pattern::new("a+").unwrap());
    assert_ne!(Pattern::new("a+").unwrap(), Pattern::new("aa*").unwrap());
    assert_eq!(
        format!("{:?}", Pattern::new("a+").unwrap()),
        "Pattern(\"a+\")"
    );
}

/// Found by the `pattern` fuzz target: `(?i:)`, an empty group with the
/// flag, read as the directive `(?i)` (so `b(?i:)*` was `b*`).
#[test]
fn fuzz_pattern_regressions() {
    let input = include_bytes!("../../../../fuzz/regressions/pattern/empty-flag-group");
    let text = String::from_utf8_lossy(input);
    let mut parts = text.split('\0');
    let source = parts.next().unwrap_or_default();
    agree(source, &parts.chain([""]).collect::<Vec<_>>());
    for text in ["b(?i:)*", "(?i:)*", "(?i:)a", "(?-i:)*", "a(?i:)|b"] {
        agree_all(text, &["b", "bb", "A"]);
    }
}
