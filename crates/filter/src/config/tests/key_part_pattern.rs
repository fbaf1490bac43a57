//! The schema's pattern for key parts accepts exactly the texts the filter's
//! parser (`KeyPart::parse`) accepts: for every source and its near misses,
//! and for random texts made of sources' names and the characters that
//! separate their arguments.

use crate::config::schema::schema;
use crate::key::{KeyPart, Source};
use proptest::prelude::*;
use regex_lite::Regex;
use serde_json::Value;

/// Key parts the parser accepts, at least one of every source.
const VALID: &[&str] = &[
    "client_ip",
    "header:x-user",
    "header:X-User",
    "header::authority",
    "header:a:b",
    "header: ",
    "header:x\ny",
    "path",
    "method",
    "authority",
    "query:id",
    "query:a.b:c",
    "const:",
    "const:v1",
    "const:a:b",
    "const:\n",
    "jwt:sub",
    "jwt:org.tenant",
    "jwt:a:b",
    "jwt:a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p",
    "jwt:\u{e9}t\u{e9}",
    "metadata:ns:plan",
    "metadata:sluice.test:tier.name",
    "metadata:a:b:c",
    "metadata:a::b",
    "metadata:envoy.lb:a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p",
    "filter_state:plan",
    "filter_state:my.tier",
    "filter_state:a:b",
    "peer:uri_san",
    "peer:dns_san",
    "peer:subject",
    "route",
    "cluster",
    "body:model",
    "body:a.b-c.d_e",
    "body:a.b.c.d.e.f.g.h",
];

/// Texts the parser refuses: unknown sources, near misses, a source
/// without the argument it needs or with one it does not take.
const INVALID: &[&str] = &[
    "",
    ":",
    "ip",
    "client_ip:x",
    "client_ip:",
    "Client_ip",
    " path",
    "path ",
    "path:x",
    "Path",
    "method:",
    "authority:x",
    "header",
    "header:",
    "Header:x",
    "headers:x",
    "query",
    "query:",
    "const",
    "cookie:x",
    "body",
    "body:",
    "body:a..b",
    "body:.a",
    "body:a.",
    "body:a b",
    "body:a:b",
    "body:a.b.c.d.e.f.g.h.i",
    "jwt",
    "jwt:",
    "jwt:.",
    "jwt:a.",
    "jwt:.a",
    "jwt:a..b",
    "jwt:a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p.q",
    "metadata",
    "metadata:",
    "metadata:x",
    "metadata::a",
    "metadata:a:",
    "metadata:a:b.",
    "metadata:a:b..c",
    "metadata:ns:a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p.q",
    "filter_state",
    "filter_state:",
    "filter_stat:x",
    "filterstate:x",
    "peer",
    "peer:",
    "peer:foo",
    "peer:cn",
    "peer:uri_san ",
    "peer:URI_SAN",
    "peer:uri_san:x",
    "route:",
    "route:x",
    "routes",
    "cluster:x",
    "\nroute",
    "route\n",
];

/// The pattern at `pointer` of the schema.
fn pattern_at(schema: &Value, pointer: &str) -> String {
    schema
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("no pattern at {pointer}"))
        .to_string()
}

/// The key parts' pattern, the same wherever the schema takes a key part.
fn key_part_regex() -> Regex {
    let schema = schema();
    let key = "/definitions/RawRule/properties/key/items/oneOf";
    let pattern = pattern_at(&schema, &format!("{key}/0/pattern"));
    for pointer in [
        format!("{key}/1/properties/part/pattern"),
        "/definitions/RawPartMatch/properties/part/pattern".to_string(),
        "/definitions/RawPriority/properties/from/pattern".to_string(),
        "/definitions/RawEntry/properties/from/pattern".to_string(),
    ] {
        assert_eq!(pattern_at(&schema, &pointer), pattern, "{pointer}");
    }
    Regex::new(&pattern).unwrap()
}

#[test]
fn the_pattern_accepts_exactly_what_the_parser_accepts() {
    let regex = key_part_regex();
    for text in VALID {
        assert!(KeyPart::parse(text).is_ok(), "the parser refuses {text:?}");
        assert!(regex.is_match(text), "the pattern refuses {text:?}");
    }
    for text in INVALID {
        assert!(KeyPart::parse(text).is_err(), "the parser accepts {text:?}");
        assert!(!regex.is_match(text), "the pattern accepts {text:?}");
    }
    // Every source is among the valid parts.
    for source in Source::ALL {
        let name = source.name();
        assert!(
            VALID
                .iter()
                .any(|t| *t == name || t.starts_with(&format!("{name}:"))),
            "no valid part of {name}"
        );
    }
}

#[test]
fn the_description_lists_every_form() {
    let schema = schema();
    let description = schema
        .pointer("/definitions/RawRule/properties/key/items/oneOf/0/description")
        .and_then(Value::as_str)
        .unwrap();
    let forms: Vec<String> = Source::ALL.into_iter().flat_map(Source::forms).collect();
    assert_eq!(
        forms,
        [
            "client_ip",
            "header:NAME",
            "path",
            "method",
            "authority",
            "query:NAME",
            "const:TEXT",
            "jwt:CLAIM",
            "metadata:NAMESPACE:PATH",
            "filter_state:NAME",
            "peer:uri_san",
            "peer:dns_san",
            "peer:subject",
            "route",
            "cluster",
            "body:PATH"
        ]
    );
    for form in forms {
        assert!(description.contains(&format!("`{form}`")), "{form}");
    }
}

/// A source's name (or a near miss), then pieces of arguments: names,
/// the separators `.` and `:`, line breaks.
fn near_part() -> impl Strategy<Value = String> {
    let names: Vec<String> = Source::ALL
        .into_iter()
        .flat_map(|s| [s.name().to_string(), format!("{}s", s.name())])
        .chain(["uri_san", "dns_san", "subject", ""].map(String::from))
        .collect();
    let piece = prop_oneof![
        prop::sample::select(names.clone()),
        Just(".".to_string()),
        Just(":".to_string()),
        Just("\n".to_string()),
        "[a-z]{1,2}",
        any::<char>().prop_map(String::from),
    ];
    (
        prop::sample::select(names),
        prop::collection::vec(piece, 0..24),
    )
        .prop_map(|(name, pieces)| name + &pieces.concat())
}

/// The pattern, compiled once for the random cases.
static REGEX: std::sync::OnceLock<Regex> = std::sync::OnceLock::new();

proptest! {
    #[test]
    fn the_pattern_agrees_with_the_parser_on_random_parts(text in near_part()) {
        let regex = REGEX.get_or_init(key_part_regex);
        prop_assert_eq!(regex.is_match(&text), KeyPart::parse(&text).is_ok(), "{:?}", text);
    }
}
