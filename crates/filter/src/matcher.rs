//! Which requests a rule applies to.

use crate::key::{Request, RequestView};

/// How the path (without query string) is matched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathMatch {
    /// Any path.
    Any,
    /// The path starts with this.
    Prefix(String),
    /// The path is exactly this.
    Exact(String),
}

/// A condition on one request header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderTest {
    /// The value equals this (case-sensitive).
    Exact(String),
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

/// A rule's match: every given condition must hold; an empty matcher matches all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Matcher {
    /// Path condition.
    pub path: PathMatch,
    /// Allowed methods (uppercase); empty allows any.
    pub methods: Vec<String>,
    /// Header conditions.
    pub headers: Vec<HeaderCondition>,
}

impl Matcher {
    /// A matcher that matches every request.
    pub fn any() -> Matcher {
        Matcher {
            path: PathMatch::Any,
            methods: Vec::new(),
            headers: Vec::new(),
        }
    }

    /// Whether `request` satisfies every condition.
    pub fn matches<'a, V: RequestView>(&'a self, request: &Request<'a, V>) -> bool {
        let path_ok = match &self.path {
            PathMatch::Any => true,
            PathMatch::Prefix(prefix) => request
                .path()
                .is_some_and(|p| p.starts_with(prefix.as_str())),
            PathMatch::Exact(path) => request.path() == Some(path.as_str()),
        };
        if !path_ok {
            return false;
        }
        if !self.methods.is_empty() {
            let Some(method) = request.method() else {
                return false;
            };
            if !self.methods.iter().any(|m| m == method) {
                return false;
            }
        }
        self.headers.iter().all(|cond| {
            let value = request.header(&cond.name);
            match &cond.test {
                HeaderTest::Exact(expected) => value.as_deref() == Some(expected.as_str()),
                HeaderTest::Present => value.is_some(),
                HeaderTest::Absent => value.is_none(),
            }
        })
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
}
