//! The engine against `regex-lite` on patterns generated from the supported
//! grammar and on values over a small alphabet, so that many match: the
//! same answers from `matches` and the same text from `capture`.

use super::*;
use super::{agree_on, reference};
use proptest::prelude::*;

/// A literal, escaped when it is syntax.
fn literal() -> impl Strategy<Value = String> {
    prop::sample::select(vec![
        "a", "b", "c", "A", "B", "0", "9", "_", "-", " ", "é", "\\.", "\\-", "\\/", "\\\\", "\\n",
        "\\t", "\\*", "\\(", "\\[", "]", "}", "/", ",",
    ])
    .prop_map(str::to_string)
}

/// An item of a bracket class.
fn class_item() -> impl Strategy<Value = String> {
    prop::sample::select(vec![
        "a", "b", "c", "A", "B", "Z", "0", "9", "_", "-", "é", " ", "a-c", "A-C", "0-9", "b-z",
        "B-Z", "\\d", "\\w", "\\s", "\\D", "\\W", "\\S", "\\-", "\\]", "\\[", "\\n", "^", ".", "*",
        "(",
    ])
    .prop_map(str::to_string)
}

fn class() -> impl Strategy<Value = String> {
    (any::<bool>(), prop::collection::vec(class_item(), 1..4)).prop_map(|(negate, items)| {
        format!("[{}{}]", if negate { "^" } else { "" }, items.concat())
    })
}

fn leaf() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => literal(),
        2 => class(),
        1 => prop::sample::select(vec![
            ".", "\\d", "\\w", "\\s", "\\D", "\\W", "\\S", "^", "$", "", "(?i)", "(?-i)",
        ])
            .prop_map(str::to_string),
    ]
}

/// A repetition operator, greedy or lazy.
fn repetition() -> impl Strategy<Value = String> {
    let op = prop::sample::select(vec![
        "*", "+", "?", "{2}", "{0}", "{1}", "{0,}", "{2,}", "{1,3}", "{0,2}",
    ]);
    (op, any::<bool>()).prop_map(|(op, lazy)| format!("{op}{}", if lazy { "?" } else { "" }))
}

/// The opening of a group.
fn open() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec!["(", "(?:", "(?i:", "(?-i:"])
}

/// A pattern of the supported grammar.
fn pattern() -> impl Strategy<Value = String> {
    let tree = leaf().prop_recursive(4, 24, 4, |inner| {
        prop_oneof![
            3 => prop::collection::vec(inner.clone(), 2..4).prop_map(|items| items.concat()),
            2 => prop::collection::vec(inner.clone(), 2..4).prop_map(|items| items.join("|")),
            2 => (inner.clone(), open()).prop_map(|(item, open)| format!("{open}{item})")),
            3 => (inner, repetition(), open())
                .prop_map(|(item, rep, open)| format!("{open}{item}){rep}")),
        ]
    });
    (tree, any::<bool>(), any::<bool>()).prop_map(|(tree, fold, wrap)| {
        let tree = if wrap { format!("({tree})") } else { tree };
        if fold {
            format!("(?i){tree}")
        } else {
            tree
        }
    })
}

/// A value over the alphabet of the generated patterns.
fn value() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop::sample::select(vec![
            'a', 'b', 'c', 'A', 'B', 'z', '0', '9', '_', '-', ' ', 'é', '\n', '.', '/', ']',
        ]),
        0..8,
    )
    .prop_map(|chars| chars.into_iter().collect())
}

/// A pattern over `a` and `b` only, with groups and repetitions in plenty:
/// on values of `a` and `b`, most match and the group's bounds depend on
/// which of several ways to match is preferred.
fn ab_pattern() -> impl Strategy<Value = String> {
    let leaf =
        prop::sample::select(vec!["a", "b", "[ab]", ".", "", "a?", "b*"]).prop_map(str::to_string);
    leaf.prop_recursive(4, 16, 3, |inner| {
        prop_oneof![
            2 => prop::collection::vec(inner.clone(), 2..4).prop_map(|items| items.concat()),
            2 => prop::collection::vec(inner.clone(), 2..3).prop_map(|items| items.join("|")),
            2 => inner.clone().prop_map(|item| format!("({item})")),
            3 => (inner, repetition()).prop_map(|(item, rep)| format!("(?:{item}){rep}")),
        ]
    })
}

fn ab_value() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(vec!['a', 'b']), 0..7)
        .prop_map(|chars| chars.into_iter().collect())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]

    #[test]
    fn captures_prefer_the_match_regex_lite_prefers(text in ab_pattern(), values in prop::collection::vec(ab_value(), 8)) {
        let p = Pattern::new(&text);
        let re = reference(&text);
        prop_assert_eq!(p.is_ok(), re.is_some(), "{:?}: {:?}", text, p.err());
        if let (Ok(p), Some(re)) = (p, re) {
            for v in &values {
                agree_on(&p, &re, &text, v);
            }
        }
    }

    #[test]
    fn the_engine_agrees_with_regex_lite(text in pattern(), values in prop::collection::vec(value(), 8)) {
        match Pattern::new(&text) {
            Ok(p) => {
                let re = reference(&text);
                prop_assert!(re.is_some(), "{text:?}: accepted, refused by regex-lite");
                if let Some(re) = re {
                    for v in &values {
                        agree_on(&p, &re, &text, v);
                    }
                }
            }
            // Refused as regex-lite refuses it (`[c-a]`, `[a--]`), or the
            // one construct of the grammar refused (see `class::fold`).
            Err(e) => prop_assert!(
                reference(&text).is_none() || e.contains("(?i) with a class range"),
                "{text:?}: refused ({e}), accepted by regex-lite"
            ),
        }
    }
}
