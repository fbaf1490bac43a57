use super::Found::{Malformed, Missing, Value};
use super::*;
use proptest::prelude::*;
use serde_json::Value as Json;

fn paths(texts: &[&str]) -> Vec<FieldPath> {
    texts.iter().map(|t| FieldPath::parse(t).unwrap()).collect()
}

/// The body fed in the chunks between `cuts` (positions, any order).
fn scan_cut(kind: BodyKind, body: &[u8], texts: &[&str], cuts: &[usize]) -> Vec<Found> {
    let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (body.len() + 1)).collect();
    cuts.sort_unstable();
    let mut s = BodyScanner::new(kind, &paths(texts));
    let mut at = 0;
    for cut in cuts.into_iter().chain([body.len()]) {
        s.feed(&body[at..cut]);
        at = cut;
    }
    s.finish().to_vec()
}

fn json(body: &str, texts: &[&str]) -> Vec<Found> {
    scan_cut(BodyKind::Json, body.as_bytes(), texts, &[])
}

fn sse(body: &str, texts: &[&str]) -> Vec<Found> {
    scan_cut(BodyKind::EventStream, body.as_bytes(), texts, &[])
}

const TOKENS: &[&str] = &[
    "usage.prompt_tokens",
    "usage.completion_tokens",
    "usage.total_tokens",
];

const OPENAI: &str = r#"{
  "id": "chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG",
  "object": "chat.completion",
  "created": 1741570283,
  "model": "gpt-4o-2024-08-06",
  "choices": [
    {
      "index": 0,
      "message": {
        "role": "assistant",
        "content": "The \"usage\": {\"total_tokens\": 7} here is only text.",
        "refusal": null,
        "annotations": []
      },
      "logprobs": null,
      "finish_reason": "stop"
    }
  ],
  "usage": {
    "prompt_tokens": 12,
    "completion_tokens": 30,
    "total_tokens": 42,
    "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
    "completion_tokens_details": {"reasoning_tokens": 0}
  },
  "service_tier": "default",
  "system_fingerprint": "fp_fc9f1d7035"
}"#;

/// `stream_options: {"include_usage": true}`: `usage` null until the last
/// chunk, whose `choices` are empty.
const STREAM: &str = concat!(
    "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}],\"usage\":null}\n\n",
    "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"},\"finish_reason\":null}],\"usage\":null}\n\n",
    "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":null}\n\n",
    "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":12,\"total_tokens\":21}}\n\n",
    "data: [DONE]\n\n",
);

/// Comments, other fields, CRLF, one payload over several data lines, a
/// lone CR.
const STREAM_MIXED: &str = concat!(
    ": keep-alive\r\n\r\n",
    "event: message\r\nid: 7\r\nretry: 1000\r\n",
    "data: {\"usage\":\r\n",
    "data:  {\"prompt_tokens\": 3,\r\n",
    "data:\"completion_tokens\": 4}}\r\n\r\n",
    "event: done\rdata: {\"usage\": null}\r\r",
    "data: [DONE]\r\n\r\n",
);

#[test]
fn the_openai_body() {
    assert_eq!(json(OPENAI, TOKENS), [Value(12), Value(30), Value(42)]);
    assert_eq!(
        json(
            OPENAI,
            &[
                "usage.prompt_tokens_details.cached_tokens",
                "model",
                "created",
                "usage"
            ]
        ),
        [Value(0), Malformed, Value(1_741_570_283), Malformed]
    );
}

#[test]
fn the_openai_stream_with_usage() {
    assert_eq!(sse(STREAM, TOKENS), [Value(9), Value(12), Value(21)]);
    // Read as JSON, the stream is not a document.
    assert_eq!(json(STREAM, TOKENS), [Missing; 3]);
}

#[test]
fn a_later_value_wins_and_null_never_hides_one() {
    let body = concat!(
        "data: {\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":1}}\n\n",
        "data: {\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2}}\n\n",
        "data: {\"usage\":null}\n\n",
        "data: {\"choices\":[]}\n\n",
        "data: {\"usage\":{\"prompt_tokens\":5}}\n\n",
        "data: [DONE]\n\n",
    );
    // completion_tokens: from the last event that had it.
    assert_eq!(sse(body, TOKENS), [Value(5), Value(2), Missing]);
}

#[test]
fn malformed_in_a_stream_only_when_no_event_has_a_value() {
    let body =
        "data: {\"n\":\"x\"}\n\ndata: {\"n\":3}\n\ndata: {\"n\":-1}\n\ndata: {\"m\":null}\n\n";
    assert_eq!(sse(body, &["n", "m", "o"]), [Value(3), Malformed, Missing]);
}

#[test]
fn the_mixed_stream() {
    assert_eq!(sse(STREAM_MIXED, TOKENS), [Value(3), Value(4), Missing]);
}

#[test]
fn stream_lines_and_fields() {
    // `data:` without a space, `data` alone (an empty line of payload).
    let body = "data:{\"a\":\ndata\ndata: 1}\n\n";
    assert_eq!(sse(body, &["a"]), [Value(1)]);
    // Field names are exact: `Data`, `data2`, `dat` are other fields.
    let body = "Data: {\"a\":1}\n\ndata2: {\"a\":2}\n\ndat: {\"a\":3}\n\n";
    assert_eq!(sse(body, &["a"]), [Missing]);
    // Broken JSON and text payloads are ignored, whole.
    let body = "data: {\"a\":4}}\n\ndata: {\"a\":5\n\ndata: hello\n\ndata: {\"a\":6} x\n\n";
    assert_eq!(sse(body, &["a"]), [Missing]);
    // An event needs its blank line, except the body's last.
    let body = "data: {\"a\":7}\ndata: {\"a\":8}\n\ndata: {\"a\":9}";
    assert_eq!(sse(body, &["a"]), [Value(9)]);
    let body = "data: {\"a\":7}\n\ndata: {\"a\":9";
    assert_eq!(sse(body, &["a"]), [Value(7)]);
}

#[test]
fn an_overlong_line_is_skipped_whole_and_counted() {
    let long = "x".repeat(MAX_LINE);
    let body = format!(
        "data: {{\"a\":1}}\n\n: {long}\ndata: {{\"a\":2}}\n\ndata: {{\"a\":3,\"s\":\"{long}\"}}\n\n"
    );
    let mut s = SseScanner::new(&paths(&["a"]));
    s.feed(body.as_bytes());
    assert_eq!(s.finish().to_vec(), [Value(2)]);
    assert_eq!((s.overlong_lines(), s.skipped_events()), (2, 1));
    // A payload over the bound in short lines.
    let line = format!("data: \"{}\"\n", "y".repeat(1000));
    let body = format!("data: {{\"a\":4, \"s\":[\n{}\"\"]}}\n\n", line.repeat(300));
    let mut s = SseScanner::new(&paths(&["a"]));
    s.feed(body.as_bytes());
    assert_eq!(s.finish().to_vec(), [Missing]);
    assert_eq!((s.overlong_lines(), s.skipped_events()), (0, 1));
}

#[test]
fn keys_that_are_prefixes_of_each_other() {
    let body = r#"{"usage_x":{"total_tokens":1},"usag":{"total_tokens":2},"usage":{"total_tokens_x":3,"total_token":4}}"#;
    assert_eq!(json(body, &["usage.total_tokens"]), [Missing]);
    let body = r#"{"usage_x":{"total_tokens":1},"usage":{"total_tokens_x":3,"total_tokens":5,"total_token":4}}"#;
    assert_eq!(
        json(
            body,
            &["usage.total_tokens", "usage_x.total_tokens", "usage_x"]
        ),
        [Value(5), Value(1), Malformed]
    );
}

#[test]
fn arrays_are_not_followed() {
    let body = r#"{"choices":[{"usage":{"total_tokens":5}}],"usage":[{"total_tokens":6}],"n":[7]}"#;
    assert_eq!(
        json(
            body,
            &[
                "choices.usage.total_tokens",
                "usage.total_tokens",
                "n",
                "usage"
            ]
        ),
        [Missing, Missing, Malformed, Malformed]
    );
    // A top-level array holds no paths.
    assert_eq!(
        json(r#"[{"usage":{"total_tokens":5}}]"#, &["usage.total_tokens"]),
        [Missing]
    );
}

#[test]
fn the_last_duplicate_wins() {
    let body = r#"{"usage":{"total_tokens":1,"total_tokens":2},"usage":{"prompt_tokens":3,"total_tokens":4}}"#;
    assert_eq!(json(body, TOKENS), [Value(3), Missing, Value(4)]);
    // A later object replaces the earlier one, with what it held.
    let body = r#"{"usage":{"total_tokens":1},"usage":{}}"#;
    assert_eq!(json(body, &["usage.total_tokens"]), [Missing]);
    let body = r#"{"usage":{"total_tokens":1},"usage":null}"#;
    assert_eq!(json(body, &["usage.total_tokens"]), [Missing]);
    let body = r#"{"a":1,"a":"x"}"#;
    assert_eq!(json(body, &["a"]), [Malformed]);
    let body = r#"{"a":"x","a":1}"#;
    assert_eq!(json(body, &["a"]), [Value(1)]);
}

#[test]
fn numbers() {
    let cases = [
        ("0", Value(0)),
        ("42", Value(42)),
        ("18446744073709551615", Value(u64::MAX)),
        ("18446744073709551616", Value(u64::MAX)),
        ("99999999999999999999999999999", Value(u64::MAX)),
        ("-1", Malformed),
        ("-0", Malformed),
        ("12.0", Malformed),
        ("1e3", Malformed),
        ("1E+3", Malformed),
        ("0.5e-1", Malformed),
        ("\"12\"", Malformed),
        ("null", Malformed),
        ("true", Malformed),
        ("false", Malformed),
        ("{}", Malformed),
        ("{\"a\":1}", Malformed),
        ("[]", Malformed),
        ("[1]", Malformed),
    ];
    for (text, found) in cases {
        for tail in ["}", " }", "\n,\"b\":0}"] {
            let body = format!("{{\"a\":{text}{tail}");
            assert_eq!(json(&body, &["a"]), [found], "{body}");
        }
    }
    // Not JSON: nothing found.
    for text in [
        "01", "-", "1.", ".5", "1e", "1e+", "+1", "0x10", "1_000", "Infinity", "nul", "tru e",
    ] {
        let body = format!("{{\"a\":{text}}}");
        assert_eq!(json(&body, &["a"]), [Missing], "{body}");
    }
}

#[test]
fn deep_nesting_is_skipped_balanced() {
    let open = "[{\"x\":".repeat(100);
    let close = "}]".repeat(100);
    let body = format!(
        r#"{{"a":{open}"]]}}\"{{[",{{"b":[1,{{}}]}}{close},"usage":{{"total_tokens":3}}}}"#
    );
    assert_eq!(json(&body, &["usage.total_tokens"]), [Value(3)]);
    let mut s = JsonScanner::new(&paths(&["usage.total_tokens"]));
    s.feed(body.as_bytes());
    assert!(s.is_complete());
    // A path of eight keys, the deepest there is.
    let body = r#"{"a":{"b":{"c":{"d":{"e":{"f":{"g":{"h":8}}}}}}}}"#;
    assert_eq!(
        json(body, &["a.b.c.d.e.f.g.h", "a.b.c.d.e.f.g"]),
        [Value(8), Malformed]
    );
    // At depth 64 exactly, brackets still checked.
    let body = format!("{}{}", "[".repeat(64), "}".repeat(64));
    let mut s = JsonScanner::new(&[]);
    s.feed(body.as_bytes());
    assert!(!s.is_complete());
}

#[test]
fn escapes() {
    // Keys compare after unescaping.
    let body = r#"{"usag\u0065":{"total_\u0074okens":1,"\u0070rompt\/tokens":2}}"#;
    assert_eq!(json(body, TOKENS), [Missing, Missing, Value(1)]);
    let body = r#"{"a\"b":1,"a\\":2,"\u00e9":3,"a\nb":4,"a":"\"},\"b\":9,\"x\":\"\\","b":5}"#;
    assert_eq!(
        json(body, &["a", "b", "ab"]),
        [Malformed, Value(5), Missing]
    );
    // A non-ASCII key never matches (path keys are ASCII).
    let body = "{\"caf\u{e9}\":1,\"\\ud83d\\ude00\":2,\"a\":3}";
    assert_eq!(json(body, &["a", "caf"]), [Value(3), Missing]);
    // Bad escapes and raw control characters are not JSON.
    for bad in [
        r#"{"a\x":1}"#,
        r#"{"a":"\u12g4","b":1}"#,
        "{\"a\":\"\t\",\"b\":1}",
    ] {
        assert_eq!(json(bad, &["b"]), [Missing], "{bad}");
    }
}

#[test]
fn whitespace_anywhere_json_allows() {
    let body = " \r\n\t{ \"usage\" \n:\t{ \"total_tokens\"\r\n : 7 \n} , \"n\" : [ ] } \n";
    assert_eq!(
        json(body, &["usage.total_tokens", "n"]),
        [Value(7), Malformed]
    );
}

#[test]
fn a_truncated_body_reports_what_was_complete() {
    let cut = &OPENAI[..OPENAI.find("\"total_tokens\": 42").unwrap() + 17];
    assert!(cut.ends_with('4'));
    assert_eq!(json(cut, TOKENS), [Value(12), Value(30), Missing]);
    assert_eq!(json(&OPENAI[..20], TOKENS), [Missing; 3]);
    assert_eq!(json("", TOKENS), [Missing; 3]);
    let mut s = JsonScanner::new(&paths(TOKENS));
    s.feed(cut.as_bytes());
    assert!(!s.is_complete());
}

#[test]
fn after_a_syntax_error_the_scanner_stops() {
    let body = r#"{"a":1,"b":2 "c":3}"#;
    assert_eq!(json(body, &["a", "b", "c"]), [Value(1), Value(2), Missing]);
    // A number only counts with a proper end.
    assert_eq!(json(r#"{"a":12x}"#, &["a"]), [Missing]);
    assert_eq!(json(r#"{"a":1]"#, &["a"]), [Value(1)]);
    for bad in [
        r#"{"a":1}}"#,
        r#"{"a":1} {"a":2}"#,
        r#"{"a":1,}"#,
        r#"{a:1}"#,
        "[1,]",
    ] {
        let mut s = JsonScanner::new(&paths(&["a"]));
        s.feed(bad.as_bytes());
        assert!(!s.is_complete(), "{bad}");
    }
    for good in ["{}", " 5 ", "5", "[]", "\"x\"", "null", "[1,{\"a\":[]}]"] {
        let mut s = JsonScanner::new(&[]);
        s.feed(good.as_bytes());
        assert!(s.is_complete(), "{good}");
    }
}

#[test]
fn garbage() {
    for body in ["\u{0}\u{ff}", "}{", "{\"a\":1", "data: x", "{{{{", "\"\\"] {
        assert_eq!(json(body, &["a"]), [Missing]);
        assert_eq!(sse(body, &["a"]), [Missing]);
    }
}

#[test]
fn field_paths() {
    let p = FieldPath::parse("usage.total_tokens").unwrap();
    assert_eq!((p.as_str(), p.depth()), ("usage.total_tokens", 2));
    assert_eq!(p.keys().collect::<Vec<_>>(), ["usage", "total_tokens"]);
    assert_eq!(
        (p.key(0), p.key(1), p.key(2)),
        (&b"usage"[..], &b"total_tokens"[..], &b""[..])
    );
    let longest = vec!["k".repeat(MAX_KEY_LEN); MAX_KEYS].join(".");
    assert_eq!(FieldPath::parse(&longest).unwrap().depth(), 8);
    assert!(FieldPath::parse("A-b_9").is_ok());
    let refused = [
        ("", "empty"),
        ("a..b", "empty key"),
        (".a", "empty key"),
        ("a.", "empty key"),
        ("a.b.c.d.e.f.g.h.i", "more than 8 keys"),
        ("a b", "' '"),
        ("a.b[0]", "'['"),
        ("café", "'é'"),
        ("a/b", "'/'"),
    ];
    for (text, why) in refused {
        let e = FieldPath::parse(text).unwrap_err();
        assert!(e.contains(why), "{text}: {e}");
    }
    let e = FieldPath::parse(&"k".repeat(129)).unwrap_err();
    assert!(e.contains("129 bytes"), "{e}");
}

#[test]
fn the_body_kind_comes_from_the_content_type() {
    for ct in [
        "text/event-stream",
        "Text/Event-Stream; charset=utf-8",
        " text/event-stream ;x=y",
    ] {
        assert_eq!(BodyKind::of(Some(ct)), BodyKind::EventStream, "{ct}");
    }
    for ct in [
        None,
        Some("application/json"),
        Some(""),
        Some("text/event-streams"),
        Some("text/plain"),
    ] {
        assert_eq!(BodyKind::of(ct), BodyKind::Json, "{ct:?}");
    }
    let s = scanner(Some("text/event-stream"), &paths(TOKENS));
    assert_eq!(s.kind(), BodyKind::EventStream);
}

#[test]
fn at_most_four_paths() {
    let texts = ["a", "b", "c", "d", "e"];
    let found = json(r#"{"a":1,"b":2,"c":3,"d":4,"e":5}"#, &texts);
    assert_eq!(found, [Value(1), Value(2), Value(3), Value(4)]);
    assert_eq!(json("{}", &[]), []);
}

#[test]
fn the_memory_bound_in_the_module_doc() {
    assert!(std::mem::size_of::<JsonScanner>() <= 208);
    assert!(std::mem::size_of::<SseScanner>() <= 320);
    assert!(std::mem::size_of::<BodyScanner>() <= 320);
    assert!(std::mem::size_of::<FieldPath>() <= 64);
}

const FIXTURES: &[(BodyKind, &str, &[&str])] = &[
    (BodyKind::Json, OPENAI, TOKENS),
    (BodyKind::EventStream, STREAM, TOKENS),
    (BodyKind::EventStream, STREAM_MIXED, TOKENS),
    (
        BodyKind::Json,
        r#"{"usag\u0065":{"total_tokens":18446744073709551616,"prompt_tokens":-0.5e+7},"usage_x":{"completion_tokens":"é"}}"#,
        TOKENS,
    ),
];

#[test]
fn every_split_in_two_gives_the_same() {
    for (kind, body, texts) in FIXTURES {
        let whole = scan_cut(*kind, body.as_bytes(), texts, &[]);
        assert!(whole.iter().any(|f| *f != Missing));
        for cut in 0..=body.len() {
            assert_eq!(
                scan_cut(*kind, body.as_bytes(), texts, &[cut]),
                whole,
                "cut at {cut}"
            );
        }
    }
}

proptest! {
    // Cheap cases: more of them, as the interesting ones are sparse.
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn any_chunks_give_the_same(
        which in 0..FIXTURES.len(),
        cuts in prop::collection::vec(any::<usize>(), 0..40),
    ) {
        let (kind, body, texts) = FIXTURES[which];
        prop_assert_eq!(
            scan_cut(kind, body.as_bytes(), texts, &cuts),
            scan_cut(kind, body.as_bytes(), texts, &[])
        );
    }

    #[test]
    fn garbage_never_panics_and_chunks_do_not_matter(
        body in prop::collection::vec(prop_oneof![
            any::<u8>(),
            prop::sample::select(b"{}[]\":,\\ \n\r0123456789-.eEtrufalsn".to_vec()),
        ], 0..300),
        cuts in prop::collection::vec(any::<usize>(), 0..20),
        stream in any::<bool>(),
    ) {
        let kind = if stream { BodyKind::EventStream } else { BodyKind::Json };
        let texts = ["a", "a.b", "t"];
        prop_assert_eq!(scan_cut(kind, &body, &texts, &cuts), scan_cut(kind, &body, &texts, &[]));
    }

    /// Against serde_json on documents it writes (no duplicate keys).
    #[test]
    fn agrees_with_serde_json(doc in document(), pretty in any::<bool>(), cuts in prop::collection::vec(any::<usize>(), 0..8)) {
        let text = if pretty { serde_json::to_string_pretty(&doc) } else { serde_json::to_string(&doc) }.unwrap();
        let mut s = JsonScanner::new(&paths(ORACLE_PATHS));
        let found = scan_cut(BodyKind::Json, text.as_bytes(), ORACLE_PATHS, &cuts);
        s.feed(text.as_bytes());
        prop_assert!(s.is_complete());
        let expected: Vec<Found> = ORACLE_PATHS.iter().map(|p| oracle(&doc, p)).collect();
        prop_assert_eq!(found, expected, "{}", text);
    }

    /// Each event as serde_json writes it (or not JSON), the stream's
    /// answer folded from each event's.
    #[test]
    fn streams_agree_with_serde_json(events in prop::collection::vec(prop::option::of(document()), 0..6), crlf in any::<bool>()) {
        let end = if crlf { "\r\n" } else { "\n" };
        let mut body = String::new();
        let mut expected = vec![Missing; ORACLE_PATHS.len()];
        for event in &events {
            let Some(doc) = event else {
                body.push_str(&format!("data: [DONE]{end}{end}"));
                continue;
            };
            for line in serde_json::to_string_pretty(doc).unwrap().lines() {
                body.push_str(&format!("data: {line}{end}"));
            }
            body.push_str(end);
            for (e, p) in expected.iter_mut().zip(ORACLE_PATHS) {
                match oracle(doc, p) {
                    Value(v) => *e = Value(v),
                    Malformed if *e == Missing => *e = Malformed,
                    _ => {}
                }
            }
        }
        prop_assert_eq!(scan_cut(BodyKind::EventStream, body.as_bytes(), ORACLE_PATHS, &[]), expected);
    }
}

const ORACLE_PATHS: &[&str] = &["usage.total_tokens", "usage", "a.usage.a", "a"];

/// What the value at `path` is, read from serde_json's tree.
fn oracle(doc: &Json, path: &str) -> Found {
    let mut at = doc;
    for key in path.split('.') {
        match at.as_object().and_then(|o| o.get(key)) {
            Some(v) => at = v,
            None => return Missing,
        }
    }
    at.as_u64().map_or(Malformed, Value)
}

fn document() -> impl Strategy<Value = Json> {
    let key = || {
        prop::sample::select(vec![
            "usage",
            "a",
            "total_tokens",
            "usage_x",
            "usag",
            "é\"\\",
        ])
        .prop_map(String::from)
    };
    let leaf = prop_oneof![
        3 => any::<u64>().prop_map(Json::from),
        3 => (0u64..100).prop_map(Json::from),
        1 => any::<i64>().prop_map(Json::from),
        1 => (-1e6f64..1e6).prop_map(Json::from),
        1 => Just(Json::Null),
        1 => any::<bool>().prop_map(Json::from),
        1 => "[a-z\"\\\\\u{e9}\n{}]{0,6}".prop_map(Json::from),
    ];
    let tree = leaf.prop_recursive(4, 40, 5, move |inner| {
        prop_oneof![
            1 => prop::collection::vec(inner.clone(), 0..4).prop_map(Json::from),
            3 => prop::collection::btree_map(key(), inner, 0..5)
                .prop_map(|m| Json::Object(m.into_iter().collect())),
        ]
    });
    // The document an object, as the bodies read are.
    prop::collection::btree_map(key(), tree, 0..5)
        .prop_map(|m| Json::Object(m.into_iter().collect()))
}
