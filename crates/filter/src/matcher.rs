//! Which requests a rule applies to.

use crate::key::{KeyPart, Request, RequestView};
pub use crate::pattern::{Pattern, MAX_PATTERN_LEN};
pub use index::{Matching, RuleIndex};

mod index;

/// How the path (without query string) is matched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathMatch {
    /// Any path.
    Any,
    /// The path starts with this.
    Prefix(String),
    /// The path is exactly this.
    Exact(String),
    /// The whole path matches this.
    Regex(Pattern),
}

/// A condition on one request header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderTest {
    /// The value equals this (case-sensitive).
    Exact(String),
    /// The whole value matches this.
    Regex(Pattern),
    /// The header is present, with any value.
    Present,
    /// The header is absent.
    Absent,
}

/// A condition on a header by lowercase name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderCondition {
    /// Lowercase header name.
    pub name: String,
    /// What must hold.
    pub test: HeaderTest,
}

/// A condition on a key part's value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartCondition {
    /// The part.
    pub part: KeyPart,
    /// What must hold of its value.
    pub test: HeaderTest,
}

/// A rule's match: every given condition must hold; an empty matcher matches all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Matcher {
    /// Path condition.
    pub path: PathMatch,
    /// Allowed methods (uppercase); empty allows any.
    pub methods: Vec<String>,
    /// Header conditions.
    pub headers: Vec<HeaderCondition>,
    /// Conditions on key parts.
    pub parts: Vec<PartCondition>,
    /// A match the request must not satisfy.
    pub not: Option<Box<Matcher>>,
}

impl Matcher {
    /// A matcher that matches every request.
    pub fn any() -> Matcher {
        Matcher {
            path: PathMatch::Any,
            methods: Vec::new(),
            headers: Vec::new(),
            parts: Vec::new(),
            not: None,
        }
    }

    /// Whether `request` satisfies every condition.
    pub fn matches<'a, V: RequestView>(&'a self, request: &Request<'a, V>) -> bool {
        self.path_holds(request) && self.method_holds(request) && self.conditions_hold(request)
    }

    /// Whether the path condition holds (the path read only if one is set).
    pub fn path_holds<V: RequestView>(&self, request: &Request<'_, V>) -> bool {
        match &self.path {
            PathMatch::Any => true,
            PathMatch::Prefix(prefix) => request
                .path()
                .is_some_and(|p| p.starts_with(prefix.as_str())),
            PathMatch::Exact(path) => request.path() == Some(path.as_str()),
            PathMatch::Regex(pattern) => request.path().is_some_and(|p| pattern.matches(p)),
        }
    }

    /// Whether the method is allowed (read only if some are named).
    pub fn method_holds<V: RequestView>(&self, request: &Request<'_, V>) -> bool {
        self.methods.is_empty()
            || request
                .method()
                .is_some_and(|method| self.methods.iter().any(|m| m == method))
    }

    /// Whether the header and key-part conditions hold and `not` does not
    /// match: the conditions beyond path and method.
    pub fn conditions_hold<'a, V: RequestView>(&'a self, request: &Request<'a, V>) -> bool {
        let headers = self
            .headers
            .iter()
            .all(|cond| cond.test.holds(request.header(&cond.name).as_deref()));
        if !headers {
            return false;
        }
        let mut value = String::new();
        let parts = self.parts.iter().all(|cond| {
            let present = request.write_key(std::slice::from_ref(&cond.part), &mut value);
            cond.test.holds(present.then_some(value.as_str()))
        });
        parts && !self.not.as_ref().is_some_and(|not| not.matches(request))
    }
}

impl HeaderTest {
    /// Whether a value (`None`: absent) passes the test.
    pub fn holds(&self, value: Option<&str>) -> bool {
        match self {
            HeaderTest::Exact(expected) => value == Some(expected.as_str()),
            HeaderTest::Regex(pattern) => value.is_some_and(|v| pattern.matches(v)),
            HeaderTest::Present => value.is_some(),
            HeaderTest::Absent => value.is_none(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client_ip::ClientIpPolicy;
    use crate::key::fake::FakeRequest;

    fn check(matcher: &Matcher, req: &FakeRequest) -> bool {
        let policy = ClientIpPolicy::default();
        matcher.matches(&Request::new(req, &policy))
    }

    #[test]
    fn empty_matches_all() {
        assert!(check(&Matcher::any(), &FakeRequest::get("/")));
        assert!(check(&Matcher::any(), &FakeRequest::default()));
    }

    #[test]
    fn path_ignores_query() {
        let prefix = Matcher {
            path: PathMatch::Prefix("/api/".into()),
            ..Matcher::any()
        };
        assert!(check(&prefix, &FakeRequest::get("/api/x?y=1")));
        assert!(!check(&prefix, &FakeRequest::get("/apix")));
        assert!(!check(&prefix, &FakeRequest::get("/?/api/")));
        let exact = Matcher {
            path: PathMatch::Exact("/login".into()),
            ..Matcher::any()
        };
        assert!(check(&exact, &FakeRequest::get("/login?next=/")));
        assert!(!check(&exact, &FakeRequest::get("/login/")));
    }

    #[test]
    fn methods_and_headers() {
        let m = Matcher {
            path: PathMatch::Any,
            methods: vec!["GET".into(), "POST".into()],
            headers: vec![
                HeaderCondition {
                    name: "x-tier".into(),
                    test: HeaderTest::Exact("free".into()),
                },
                HeaderCondition {
                    name: "x-key".into(),
                    test: HeaderTest::Present,
                },
                HeaderCondition {
                    name: "x-internal".into(),
                    test: HeaderTest::Absent,
                },
            ],
            ..Matcher::any()
        };
        let ok = FakeRequest::get("/")
            .with("x-tier", "free")
            .with("x-key", "");
        assert!(check(&m, &ok));
        assert!(!check(
            &m,
            &FakeRequest::get("/")
                .with("x-tier", "paid")
                .with("x-key", "")
        ));
        assert!(!check(&m, &FakeRequest::get("/").with("x-tier", "free")));
        assert!(!check(&m, &ok.clone().with("x-internal", "1")));
        let mut put = ok;
        put.headers[0].1 = "PUT".into();
        assert!(!check(&m, &put));
    }

    #[test]
    fn regular_expressions_match_whole_values() {
        let p = Pattern::new("/users/[0-9]+").unwrap();
        assert!(p.matches("/users/42"));
        assert!(!p.matches("/users/42/x"), "anchored at the end");
        assert!(!p.matches("/v1/users/42"), "anchored at the start");
        let bearer = Pattern::new("Bearer (.+)").unwrap();
        assert_eq!(bearer.capture("Bearer abc"), Some("abc"));
        assert_eq!(bearer.capture("Basic abc"), None);
        assert_eq!(Pattern::new("[a-z]+").unwrap().capture("abc"), Some("abc"));
        assert!(Pattern::new("(").is_err());
        assert!(Pattern::new("(?=a)").is_err(), "no look-around");
        assert!(Pattern::new(&"a".repeat(MAX_PATTERN_LEN + 1)).is_err());
        assert!(Pattern::new(
            &"(".repeat(40)
                .to_string()
                .chars()
                .chain(")".repeat(40).chars())
                .collect::<String>()
        )
        .is_err());
        // Linear time: a pattern that backtracks exponentially elsewhere.
        let evil = Pattern::new("(a+)+b").unwrap();
        assert!(!evil.matches(&"a".repeat(10_000)));
    }

    #[test]
    fn conditions_on_parts_paths_and_not() {
        let m = Matcher {
            path: PathMatch::Regex(Pattern::new("/api/v[0-9]+/.*").unwrap()),
            parts: vec![PartCondition {
                part: KeyPart::parse("metadata:ns:plan").unwrap(),
                test: HeaderTest::Regex(Pattern::new("free|trial").unwrap()),
            }],
            not: Some(Box::new(Matcher {
                headers: vec![HeaderCondition {
                    name: "x-internal".into(),
                    test: HeaderTest::Present,
                }],
                ..Matcher::any()
            })),
            ..Matcher::any()
        };
        let free = FakeRequest::get("/api/v2/items")
            .with_property("metadata.filter_metadata.ns.plan", b"free");
        assert!(check(&m, &free));
        assert!(!check(&m, &free.clone().with("x-internal", "1")));
        assert!(
            !check(&m, &FakeRequest::get("/api/v2/items")),
            "no metadata"
        );
        let paid = FakeRequest::get("/api/v2/items")
            .with_property("metadata.filter_metadata.ns.plan", b"paid");
        assert!(!check(&m, &paid));
        let elsewhere =
            FakeRequest::get("/web/").with_property("metadata.filter_metadata.ns.plan", b"free");
        assert!(!check(&m, &elsewhere));
    }
}
