//! The index against trying every rule's match in order: the same rules, in
//! the same order, on random rule sets and requests, and its edge cases.
#![allow(clippy::unwrap_used)]

use super::*;
use crate::client_ip::ClientIpPolicy;
use crate::key::fake::FakeRequest;
use crate::key::KeyPart;
use crate::matcher::{HeaderCondition, HeaderTest, PartCondition, Pattern};
use proptest::prelude::*;

/// A rule of the tests: its match, and whether it is a pool rule.
type TestRule = (Matcher, bool);

fn index(rules: &[TestRule]) -> RuleIndex {
    RuleIndex::new(rules, |(m, pool)| (!pool).then_some(m))
}

/// The rules `req` matches, by the index.
fn indexed(index: &RuleIndex, rules: &[TestRule], req: &FakeRequest) -> Vec<usize> {
    let policy = ClientIpPolicy::default();
    let request = Request::new(req, &policy);
    index
        .matching(&request, rules, |(m, _)| m)
        .map(|(i, _)| i)
        .collect()
}

/// The rules `req` matches, each tried in order.
fn linear(rules: &[TestRule], req: &FakeRequest) -> Vec<usize> {
    let policy = ClientIpPolicy::default();
    let request = Request::new(req, &policy);
    (0..rules.len())
        .filter(|&i| !rules[i].1 && rules[i].0.matches(&request))
        .collect()
}

fn path(path: PathMatch) -> Matcher {
    Matcher {
        path,
        ..Matcher::any()
    }
}

fn prefix(text: &str) -> Matcher {
    path(PathMatch::Prefix(text.into()))
}

fn exact(text: &str) -> Matcher {
    path(PathMatch::Exact(text.into()))
}

fn with_methods(mut m: Matcher, methods: &[&str]) -> Matcher {
    m.methods = methods.iter().map(|s| s.to_string()).collect();
    m
}

/// The rules `req` matches, checked to be those of the linear walk.
fn both(rules: &[Matcher], req: &FakeRequest) -> Vec<usize> {
    let rules: Vec<TestRule> = rules.iter().map(|m| (m.clone(), false)).collect();
    let found = indexed(&index(&rules), &rules, req);
    assert_eq!(found, linear(&rules, req), "{rules:?} on {req:?}");
    found
}

fn method(method: &str, path: &str) -> FakeRequest {
    let mut req = FakeRequest::get(path);
    req.headers[0].1 = method.into();
    req
}

#[test]
fn empty_and_root_prefixes_match_every_path() {
    let rules = [prefix(""), prefix("/"), prefix("/a")];
    assert_eq!(both(&rules, &FakeRequest::get("/a/b")), [0, 1, 2]);
    assert_eq!(both(&rules, &FakeRequest::get("/")), [0, 1]);
    assert_eq!(both(&rules, &FakeRequest::get("")), [0]);
    assert_eq!(both(&rules, &FakeRequest::get("x")), [0]);
    // No path at all: only rules of any path.
    let no_path = FakeRequest {
        headers: vec![(":method".into(), "GET".into())],
        ..FakeRequest::default()
    };
    assert_eq!(both(&[prefix(""), Matcher::any()], &no_path), [1]);
}

#[test]
fn overlapping_prefixes_keep_rule_order() {
    let rules = [
        prefix("/api/v1/"),
        prefix("/api/"),
        prefix("/api/v2"),
        prefix("/api/v1/users"),
        prefix("/api/"),
        prefix("/ap"),
        prefix("/api/v1/users/x"),
    ];
    assert_eq!(
        both(&rules, &FakeRequest::get("/api/v1/users/1")),
        [0, 1, 3, 4, 5]
    );
    // Sorted between `/api/v1/users` and this path, but not a prefix of it.
    assert_eq!(
        both(&rules, &FakeRequest::get("/api/v1/usersz")),
        [0, 1, 3, 4, 5]
    );
    assert_eq!(both(&rules, &FakeRequest::get("/api/v2?x")), [1, 2, 4, 5]);
    assert_eq!(both(&rules, &FakeRequest::get("/apx")), [5]);
    assert_eq!(both(&rules, &FakeRequest::get("/a")), Vec::<usize>::new());
}

#[test]
fn the_same_exact_path_in_many_rules() {
    let rules: Vec<Matcher> = (0..50)
        .map(|i| match i % 3 {
            0 => exact("/login"),
            1 => prefix("/log"),
            _ => exact("/logout"),
        })
        .collect();
    let login = both(&rules, &FakeRequest::get("/login?next=/"));
    assert_eq!(login, (0..50).filter(|i| i % 3 != 2).collect::<Vec<_>>());
    assert_eq!(both(&rules, &FakeRequest::get("/login/")).len(), 17);
}

#[test]
fn rules_without_methods_take_any_method_and_none() {
    let rules = [
        with_methods(Matcher::any(), &["GET", "POST"]),
        Matcher::any(),
        with_methods(prefix("/"), &["DELETE"]),
        with_methods(exact("/x"), &["POST"]),
    ];
    assert_eq!(both(&rules, &FakeRequest::get("/x")), [0, 1]);
    assert_eq!(both(&rules, &method("POST", "/x")), [0, 1, 3]);
    assert_eq!(both(&rules, &method("DELETE", "/x")), [1, 2]);
    assert_eq!(both(&rules, &method("PATCH", "/x")), [1]);
    let no_method = FakeRequest {
        headers: vec![(":path".into(), "/x".into())],
        ..FakeRequest::default()
    };
    assert_eq!(both(&rules, &no_method), [1]);
}

#[test]
fn methods_are_compared_as_given() {
    // Configured methods are upper case; a request's is taken as sent.
    let rules = [with_methods(Matcher::any(), &["GET"]), Matcher::any()];
    assert_eq!(both(&rules, &method("get", "/")), [1]);
    assert_eq!(both(&rules, &method("GET", "/")), [0, 1]);
}

#[test]
fn methods_beyond_the_bits_are_checked_by_their_rule() {
    let mut rules: Vec<Matcher> = (0..70)
        .map(|i| with_methods(Matcher::any(), &[&format!("M{i}")]))
        .collect();
    rules.push(with_methods(prefix("/"), &["M1", "M69"]));
    rules.push(Matcher::any());
    assert_eq!(both(&rules, &method("M69", "/")), [69, 70, 71]);
    assert_eq!(both(&rules, &method("M1", "/")), [1, 70, 71]);
    assert_eq!(both(&rules, &method("M3", "/")), [3, 71]);
}

#[test]
fn pool_rules_are_never_candidates() {
    let rules = vec![
        (Matcher::any(), true),
        (prefix("/"), false),
        (exact("/"), true),
    ];
    let req = FakeRequest::get("/");
    assert_eq!(indexed(&index(&rules), &rules, &req), [1]);
}

#[test]
fn conditions_are_checked_after_the_index() {
    let tier = |test| HeaderCondition {
        name: "x-tier".into(),
        test,
    };
    let rules = [
        Matcher {
            headers: vec![tier(HeaderTest::Exact("free".into()))],
            ..prefix("/api/")
        },
        Matcher {
            not: Some(Box::new(prefix("/api/admin"))),
            ..prefix("/api/")
        },
        Matcher {
            parts: vec![PartCondition {
                part: KeyPart::parse("header:x-tier").unwrap(),
                test: HeaderTest::Absent,
            }],
            ..path(PathMatch::Regex(Pattern::new("/api/[a-z]+").unwrap()))
        },
    ];
    assert_eq!(both(&rules, &FakeRequest::get("/api/users")), [1, 2]);
    let free = FakeRequest::get("/api/admin").with("x-tier", "free");
    assert_eq!(both(&rules, &free), [0]);
}

#[test]
fn no_rules_match_nothing() {
    assert_eq!(both(&[], &FakeRequest::get("/")), Vec::<usize>::new());
}

/// The pieces of paths: few, so that rules and requests overlap.
const PIECES: [&str; 5] = ["/", "a", "b", "/a", "?"];

/// A short path (a request's may have a query string).
fn text() -> impl Strategy<Value = String> {
    proptest::collection::vec(proptest::sample::select(&PIECES[..]), 0..5).prop_map(|s| s.concat())
}

const REGEXES: [&str; 5] = ["/a.*", "/[ab]+", ".*b", "/a/?b?", ""];

fn path_match() -> impl Strategy<Value = PathMatch> {
    prop_oneof![
        Just(PathMatch::Any),
        text().prop_map(|t| PathMatch::Prefix(t.replace('?', ""))),
        text().prop_map(|t| PathMatch::Exact(t.replace('?', ""))),
        proptest::sample::select(&REGEXES[..])
            .prop_map(|r| PathMatch::Regex(Pattern::new(r).unwrap())),
    ]
}

fn header_test() -> impl Strategy<Value = HeaderTest> {
    prop_oneof![
        Just(HeaderTest::Present),
        Just(HeaderTest::Absent),
        Just(HeaderTest::Exact("1".into())),
        Just(HeaderTest::Regex(Pattern::new("[0-9]+").unwrap())),
    ]
}

fn condition() -> impl Strategy<Value = HeaderCondition> {
    (prop_oneof!["x-a", "x-b"], header_test()).prop_map(|(name, test)| HeaderCondition {
        name: name.to_string(),
        test,
    })
}

const METHODS: [&str; 4] = ["GET", "POST", "PUT", "PURGE"];

fn simple_matcher() -> impl Strategy<Value = Matcher> {
    (
        path_match(),
        proptest::sample::subsequence(&METHODS[..], 0..3),
        proptest::collection::vec(condition(), 0..2),
    )
        .prop_map(|(path, methods, headers)| Matcher {
            path,
            methods: methods.into_iter().map(String::from).collect(),
            headers,
            ..Matcher::any()
        })
}

fn matcher() -> impl Strategy<Value = Matcher> {
    (
        simple_matcher(),
        proptest::option::weighted(0.2, simple_matcher()),
        proptest::option::weighted(0.1, header_test()),
    )
        .prop_map(|(mut m, not, part)| {
            m.not = not.map(Box::new);
            m.parts = part
                .map(|test| PartCondition {
                    part: KeyPart::parse("header:x-b").unwrap(),
                    test,
                })
                .into_iter()
                .collect();
            m
        })
}

fn request() -> impl Strategy<Value = FakeRequest> {
    (
        proptest::option::weighted(0.9, text()),
        proptest::option::weighted(0.9, prop_oneof!["GET", "POST", "get", "DELETE", "PURGE"]),
        proptest::option::of(prop_oneof!["1", "22", "x"]),
        proptest::option::of(prop_oneof!["1", ""]),
    )
        .prop_map(|(path, method, a, b)| {
            let mut headers = Vec::new();
            let pairs = [(":path", path), (":method", method), ("x-a", a), ("x-b", b)];
            for (name, value) in pairs {
                if let Some(value) = value {
                    headers.push((name.to_string(), value));
                }
            }
            FakeRequest {
                headers,
                ..FakeRequest::default()
            }
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Whatever the rules, the index picks the rules the linear walk picks,
    /// in the same order.
    #[test]
    fn the_index_matches_the_linear_walk(
        rules in proptest::collection::vec((matcher(), proptest::bool::weighted(0.1)), 0..40),
        requests in proptest::collection::vec(request(), 1..8),
    ) {
        let built = index(&rules);
        for req in &requests {
            prop_assert_eq!(indexed(&built, &rules, req), linear(&rules, req), "{:?}", req);
        }
    }
}
