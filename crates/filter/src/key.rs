//! What a request looks like to the rules, and how a rule's key is built.
//!
//! A key is its parts joined with `|`. A request that lacks a part (an absent
//! header or query parameter, no client address) has no key, and the rule
//! does not count it.

use crate::client_ip::{self, ClientIpPolicy};
use crate::cost::extract::{FieldPath, Found, JsonScanner};
use crate::pattern::Pattern;
pub use context::{ContextPart, PeerField, DEFAULT_JWT_PAYLOAD};
pub use source::{Argument, Source};
use std::borrow::Cow;
use std::cell::OnceCell;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};

/// Whether the forged-source warning was logged (once per VM).
static FORWARDED_SOURCE_WARNED: AtomicBool = AtomicBool::new(false);

/// Read access to a request, implemented by the Envoy host layer and by tests.
pub trait RequestView {
    /// A request header by lowercase name; pseudo-headers (`:path`,
    /// `:method`, `:authority`) included.
    fn header(&self, name: &str) -> Option<String>;
    /// The downstream peer address as Envoy reports it (`1.2.3.4:5678`, `[::1]:5678`).
    fn source_address(&self) -> Option<String>;
    /// The request's body, when the filter waited for it (a rule estimates
    /// a response cost from it); `None` otherwise.
    fn body(&self) -> Option<Vec<u8>> {
        None
    }
    /// A property of the request's stream (Envoy's attributes: dynamic
    /// metadata, filter state, the connection, the route) by its path;
    /// `None` when it has none.
    fn property(&self, _path: &[&str]) -> Option<Vec<u8>> {
        None
    }
}

/// One part of a rule's key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyPart {
    /// The client address, masked (see [`crate::client_ip`]).
    ClientIp,
    /// A request header's value (lowercase name).
    Header(String),
    /// The path without the query string.
    Path,
    /// The method.
    Method,
    /// The `:authority` (host).
    Authority,
    /// A query parameter's raw (not percent-decoded) value; `?a` counts as empty.
    Query(String),
    /// Fixed text, e.g. to share one bucket among all requests of a rule.
    Const(String),
    /// A value Envoy knows about the request: a JWT claim, metadata, filter
    /// state, the peer certificate, the route or the cluster.
    Context(ContextPart),
    /// A part whose value is narrowed by a regular expression (its first
    /// group, or its whole match), or stands in for a missing value.
    Refined(Box<Refined>),
    /// The string or integer at a field of the request's JSON body (see
    /// [`body::field_text`]); read only when the plan waits for bodies.
    Body(FieldPath),
}

/// A key part with a capture or a default (`{"part", "regex", "default"}`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refined {
    /// The part read.
    pub part: KeyPart,
    /// What of its value is the key text; a value it does not match is
    /// missing.
    pub capture: Option<Pattern>,
    /// The key text when the value is missing.
    pub default: Option<String>,
    /// How the value's text is cased (not `default`'s).
    pub case: Case,
}

/// How a refined key part's value is cased in the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "schema", serde(rename_all = "snake_case"))]
pub enum Case {
    /// As sent.
    #[default]
    AsSent,
    /// ASCII letters `A`-`Z` as `a`-`z`, everything else as sent: spellings
    /// of one name that differ only in case share a key.
    Lower,
}

impl KeyPart {
    /// Whether the part reads the request's body (`body:PATH`, refined or
    /// not).
    pub fn reads_body(&self) -> bool {
        matches!(self.base(), KeyPart::Body(_))
    }

    /// The part read, without its capture or default.
    pub fn base(&self) -> &KeyPart {
        match self {
            KeyPart::Refined(r) => r.part.base(),
            part => part,
        }
    }
}

impl KeyPart {
    /// Parses `client_ip`, `header:NAME`, `path`, `method`, `authority`,
    /// `query:NAME`, `const:TEXT`, a context part (`jwt:CLAIM`,
    /// `metadata:NAMESPACE:PATH`, `filter_state:NAME`, `peer:FIELD`, `route`,
    /// `cluster`) or `body:PATH`: the sources of [`Source::ALL`].
    pub fn parse(text: &str) -> Result<KeyPart, String> {
        let (name, rest) = match text.split_once(':') {
            Some((name, rest)) => (name, Some(rest)),
            None => (text, None),
        };
        match Source::ALL.into_iter().find(|s| s.name() == name) {
            Some(source) => source.part(text, rest),
            None => Err(source::unknown(text)),
        }
    }
}

/// Distinct headers a [`Request`] remembers.
pub const CACHED_HEADERS: usize = 8;

/// A request with the values several rules may need read once: each read is
/// a host call, and one rule's match and key often name the same header.
pub struct Request<'a, V: RequestView> {
    view: &'a V,
    policy: &'a ClientIpPolicy,
    /// The `payload_in_metadata` name JWT claims are read under.
    jwt_payload: &'a str,
    /// Headers read so far, by name; more distinct names are read uncached.
    headers: [OnceCell<(&'a str, Option<String>)>; CACHED_HEADERS],
    path: OnceCell<Option<String>>,
    method: OnceCell<Option<String>>,
    client_ip: OnceCell<Option<IpAddr>>,
    body: OnceCell<Option<Vec<u8>>>,
}

impl<'a, V: RequestView> Request<'a, V> {
    /// Wraps `view`; `policy` decides how the client address is found.
    pub fn new(view: &'a V, policy: &'a ClientIpPolicy) -> Self {
        Request {
            view,
            policy,
            jwt_payload: DEFAULT_JWT_PAYLOAD,
            headers: Default::default(),
            path: OnceCell::new(),
            method: OnceCell::new(),
            client_ip: OnceCell::new(),
            body: OnceCell::new(),
        }
    }

    /// Reads JWT claims under `name` (`jwt_authn`'s `payload_in_metadata`).
    pub fn with_jwt_payload(mut self, name: &'a str) -> Self {
        self.jwt_payload = name;
        self
    }

    /// The non-negative integer at `path` of the request's JSON body (read
    /// once); `None` when there is no body, or no such integer there.
    pub fn body_field(&self, path: &FieldPath) -> Option<u64> {
        let body = self.body.get_or_init(|| self.view.body()).as_deref()?;
        let mut scanner = JsonScanner::new(std::slice::from_ref(path));
        scanner.feed(body);
        match scanner.finish().first() {
            Some(Found::Value(v)) => Some(*v),
            _ => None,
        }
    }

    /// A property of the request's stream (dynamic metadata ...), read
    /// each time it is asked for.
    pub fn property(&self, path: &[&str]) -> Option<Vec<u8>> {
        self.view.property(path)
    }

    /// The string or integer at `path` of the request's JSON body (read
    /// once), as text; `None` when there is no body or no such value.
    pub fn body_text(&self, path: &FieldPath) -> Option<String> {
        let body = self.body.get_or_init(|| self.view.body()).as_deref()?;
        // A form is read as the upstream reads it (a login form's fields).
        let form = self
            .header("content-type")
            .is_some_and(|t| body::is_form(&t));
        if form {
            return body::form_field(body, path);
        }
        body::field_text(body, path)
    }

    /// The full `:path`, query included.
    fn raw_path(&self) -> Option<&str> {
        self.path
            .get_or_init(|| self.view.header(":path"))
            .as_deref()
    }

    /// The path without the query string.
    pub fn path(&self) -> Option<&str> {
        self.raw_path()
            .map(|p| p.split_once('?').map_or(p, |(path, _)| path))
    }

    /// The value of query parameter `name` (the first, if repeated),
    /// decoded as a form-encoded query is: `%XX` escapes, in names too, and
    /// `+` as a space; bytes that are not UTF-8 read as U+FFFD. The
    /// upstream sees `%61nn` as `ann`: so does the key.
    pub fn query(&self, name: &str) -> Option<Cow<'_, str>> {
        let (_, query) = self.raw_path()?.split_once('?')?;
        form_urlencoded::parse(query.as_bytes()).find_map(|(k, v)| (k == name).then_some(v))
    }

    /// The method.
    pub fn method(&self) -> Option<&str> {
        self.method
            .get_or_init(|| self.view.header(":method"))
            .as_deref()
    }

    /// A header's value, read from the view at most once (for the first
    /// [`CACHED_HEADERS`] distinct names).
    pub fn header(&self, name: &'a str) -> Option<Cow<'_, str>> {
        for cell in &self.headers {
            if let Some((cached, value)) = cell.get() {
                if *cached == name {
                    return value.as_deref().map(Cow::Borrowed);
                }
                continue;
            }
            let (_, value) = cell.get_or_init(|| (name, self.view.header(name)));
            return value.as_deref().map(Cow::Borrowed);
        }
        self.view.header(name).map(Cow::Owned)
    }

    /// The client address before masking.
    pub fn client_ip(&self) -> Option<IpAddr> {
        *self.client_ip.get_or_init(|| {
            let xff = if self.policy.trusted_hops > 0 {
                self.view.header("x-forwarded-for")
            } else {
                None
            };
            // The downstream address is a property read: only if needed.
            let mut peer = || {
                let source = self.view.source_address();
                let peer = source.as_deref().and_then(client_ip::Peer::parse);
                if self.policy.trusted_hops == 0
                    && peer.is_some_and(|p| p.is_forwarded())
                    && !FORWARDED_SOURCE_WARNED.swap(true, Ordering::Relaxed)
                {
                    log::warn!(
                        "sluice: Envoy takes the downstream address from x-forwarded-for, so clients choose their client_ip key; set use_remote_address: true on the HTTP connection manager"
                    );
                }
                peer
            };
            client_ip::client_ip_with(self.policy, &mut peer, xff.as_deref())
        })
    }

    /// Writes the key made of `parts` into `out` (cleared first). Returns
    /// false, leaving `out` unspecified, when some part is missing.
    pub fn write_key(&self, parts: &'a [KeyPart], out: &mut String) -> bool {
        out.clear();
        for (i, part) in parts.iter().enumerate() {
            if i > 0 {
                out.push('|');
            }
            let present = match part {
                KeyPart::ClientIp => self
                    .client_ip()
                    .map(|ip| client_ip::write_masked(self.policy, ip, out))
                    .is_some(),
                KeyPart::Header(name) => self.header(name).map(|v| out.push_str(&v)).is_some(),
                KeyPart::Path => self.path().map(|v| out.push_str(v)).is_some(),
                KeyPart::Method => self.method().map(|v| out.push_str(v)).is_some(),
                KeyPart::Authority => self
                    .header(":authority")
                    .map(|v| out.push_str(&v))
                    .is_some(),
                KeyPart::Query(name) => self.query(name).map(|v| out.push_str(&v)).is_some(),
                KeyPart::Const(text) => {
                    out.push_str(text);
                    true
                }
                KeyPart::Context(part) => self
                    .view
                    .property(&part.property(self.jwt_payload))
                    .map(|v| context::push_value(out, &v))
                    .is_some(),
                KeyPart::Refined(r) => self.write_refined(r, out),
                KeyPart::Body(path) => self.body_text(path).map(|v| out.push_str(&v)).is_some(),
            };
            if !present {
                return false;
            }
        }
        true
    }
}

pub mod body;
pub mod context;
pub mod source;

impl<'a, V: RequestView> Request<'a, V> {
    /// Appends the text of refined part `r` to `out`; false when missing.
    fn write_refined(&self, r: &'a Refined, out: &mut String) -> bool {
        let mut value = String::new();
        let present = self.write_key(std::slice::from_ref(&r.part), &mut value);
        let text = match (&r.capture, present) {
            (Some(capture), true) => capture.capture(&value),
            (None, true) => Some(value.as_str()),
            (_, false) => None,
        };
        match (text, r.case) {
            (Some(text), Case::AsSent) => out.push_str(text),
            (Some(text), Case::Lower) => out.extend(text.chars().map(|c| c.to_ascii_lowercase())),
            (None, _) => match r.default.as_deref() {
                Some(default) => out.push_str(default),
                None => return false,
            },
        }
        true
    }
}

/// Requests built in memory, for the tests and the fuzzers (fuzz/).
#[doc(hidden)]
pub mod fake;

#[cfg(test)]
mod fuzz;

#[cfg(test)]
mod tests {
    use super::fake::FakeRequest;
    use super::*;

    fn key(req: &FakeRequest, parts: &[&str]) -> Option<String> {
        let parts: Vec<KeyPart> = parts
            .iter()
            .filter_map(|p| KeyPart::parse(p).ok())
            .collect();
        let policy = ClientIpPolicy::default();
        let request = Request::new(req, &policy);
        let mut out = String::new();
        request.write_key(&parts, &mut out).then_some(out)
    }

    #[test]
    fn parses_parts() {
        assert_eq!(KeyPart::parse("client_ip"), Ok(KeyPart::ClientIp));
        assert_eq!(
            KeyPart::parse("header:X-User"),
            Ok(KeyPart::Header("x-user".into()))
        );
        assert_eq!(KeyPart::parse("query:id"), Ok(KeyPart::Query("id".into())));
        assert_eq!(
            KeyPart::parse("const:a:b"),
            Ok(KeyPart::Const("a:b".into()))
        );
        assert_eq!(
            KeyPart::parse("cookie:x"),
            Err("unknown key part \"cookie:x\" (expected client_ip, header:NAME, path, method, authority, query:NAME, const:TEXT, jwt:CLAIM, metadata:NAMESPACE:PATH, filter_state:NAME, peer:uri_san, peer:dns_san, peer:subject, route, cluster or body:PATH)".into())
        );
        for bad in [
            "", "ip", "header:", "query:", "cookie:x", "Path", "jwt:", "peer:x", "route:x",
        ] {
            assert!(KeyPart::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn builds_composite_keys() {
        let req = FakeRequest::get("/api/items?id=7&flag&x=1").with("x-user", "alice");
        assert_eq!(key(&req, &["client_ip"]).as_deref(), Some("203.0.113.7"));
        assert_eq!(
            key(&req, &["header:x-user", "method", "path", "authority"]).as_deref(),
            Some("alice|GET|/api/items|example.com")
        );
        assert_eq!(
            key(&req, &["query:id", "query:flag", "const:v1"]).as_deref(),
            Some("7||v1")
        );
    }

    #[test]
    fn query_parameters_are_read_as_the_upstream_decodes_them() {
        for path in [
            "/?user=ann",
            "/?user=%61nn",
            "/?us%65r=%61%6En",
            "/?x=1&user=ann&user=bob",
        ] {
            let req = FakeRequest::get(path);
            assert_eq!(key(&req, &["query:user"]).as_deref(), Some("ann"), "{path}");
        }
        let req = FakeRequest::get("/?q=a+b%2Bc&bad=%FF&empty");
        assert_eq!(key(&req, &["query:q"]).as_deref(), Some("a b+c"));
        assert_eq!(key(&req, &["query:bad"]).as_deref(), Some("\u{fffd}"));
        assert_eq!(key(&req, &["query:empty"]).as_deref(), Some(""));
    }

    /// A view that counts header reads.
    struct Counting(FakeRequest, std::cell::Cell<usize>);

    impl RequestView for Counting {
        fn header(&self, name: &str) -> Option<String> {
            self.1.set(self.1.get() + 1);
            self.0.header(name)
        }

        fn source_address(&self) -> Option<String> {
            self.0.source_address()
        }
    }

    #[test]
    fn reads_each_header_once() {
        let view = Counting(
            FakeRequest::get("/").with("x-user", "alice"),
            Default::default(),
        );
        let policy = ClientIpPolicy::default();
        let request = Request::new(&view, &policy);
        let parts = [KeyPart::Header("x-user".into()), KeyPart::Authority];
        let mut out = String::new();
        for _ in 0..3 {
            assert!(request.write_key(&parts, &mut out));
            assert_eq!(request.header("x-absent"), None);
        }
        assert_eq!(out, "alice|example.com");
        assert_eq!(view.1.get(), 3);
    }

    #[test]
    fn reads_beyond_the_cache_uncached() {
        let names: Vec<String> = (0..CACHED_HEADERS + 2).map(|i| format!("x-h{i}")).collect();
        let mut req = FakeRequest::get("/");
        for name in &names {
            req = req.with(name, name);
        }
        let view = Counting(req, Default::default());
        let policy = ClientIpPolicy::default();
        let request = Request::new(&view, &policy);
        for _ in 0..2 {
            for name in &names {
                assert_eq!(request.header(name).as_deref(), Some(name.as_str()));
            }
        }
        assert_eq!(view.1.get(), CACHED_HEADERS + 2 * 2);
    }

    #[test]
    fn context_parts_read_envoys_properties() {
        let jwt = "metadata.filter_metadata.envoy.filters.http.jwt_authn";
        let req = FakeRequest::get("/")
            .with_property(&format!("{jwt}.jwt_payload.sub"), b"alice")
            .with_property(&format!("{jwt}.jwt_payload.org.tenant"), b"acme")
            .with_property(&format!("{jwt}.payload.sub"), b"bob")
            .with_property(&format!("{jwt}.jwt_payload.n"), &42f64.to_le_bytes())
            .with_property("metadata.filter_metadata.sluice.test.tier", b"gold")
            .with_property("filter_state.plan", b"free")
            .with_property(
                "connection.uri_san_peer_certificate",
                b"spiffe://mesh/ns/a/sa/b",
            )
            .with_property("xds.route_name", b"r1");
        assert_eq!(
            key(&req, &["jwt:sub", "jwt:org.tenant", "jwt:n"]).as_deref(),
            Some("alice|acme|0x0000000000004540")
        );
        assert_eq!(
            key(
                &req,
                &[
                    "metadata:sluice.test:tier",
                    "filter_state:plan",
                    "peer:uri_san",
                    "route"
                ]
            )
            .as_deref(),
            Some("gold|free|spiffe://mesh/ns/a/sa/b|r1")
        );
        // A claim, metadata or certificate that is not there: no key.
        for absent in [
            "jwt:email",
            "metadata:sluice.test:x",
            "peer:dns_san",
            "cluster",
        ] {
            assert_eq!(key(&req, &[absent]), None, "{absent}");
        }
        // The payload's name is the configuration's.
        let policy = ClientIpPolicy::default();
        let request = Request::new(&req, &policy).with_jwt_payload("payload");
        let parts = [KeyPart::parse("jwt:sub").unwrap()];
        let mut out = String::new();
        assert!(request.write_key(&parts, &mut out));
        assert_eq!(out, "bob");
    }

    /// The key of a rule whose one key part is `json`, as configured.
    fn rule_key(json: &str) -> Result<Vec<KeyPart>, crate::config::FieldError> {
        crate::config::parse(
            format!(r#"{{"domain":"d","rules":[{{"name":"r","key":[{json}],"limits":[{{"algorithm":"gcra","requests":1,"window":"1s"}}]}}]}}"#).as_bytes(),
        )
        .map(|p| p.rules[0].key.clone())
    }

    #[test]
    fn refined_parts_capture_or_default() {
        let parse = rule_key;
        let bearer = parse(r#"{"part":"header:authorization","regex":"Bearer (.+)"}"#).unwrap();
        let tenant = parse(r#"{"part":"jwt:tenant","default":"anonymous"}"#).unwrap();
        let policy = ClientIpPolicy::default();
        let write = |req: &FakeRequest, parts: &[KeyPart]| {
            let mut out = String::new();
            Request::new(req, &policy)
                .write_key(parts, &mut out)
                .then_some(out)
        };
        let req = FakeRequest::get("/").with("authorization", "Bearer k-123");
        assert_eq!(write(&req, &bearer).as_deref(), Some("k-123"));
        let basic = FakeRequest::get("/").with("authorization", "Basic abc");
        assert_eq!(write(&basic, &bearer), None, "no match: missing");
        assert_eq!(
            write(&FakeRequest::get("/"), &tenant).as_deref(),
            Some("anonymous")
        );
        let acme = FakeRequest::get("/").with_property(
            "metadata.filter_metadata.envoy.filters.http.jwt_authn.jwt_payload.tenant",
            b"acme",
        );
        assert_eq!(write(&acme, &tenant).as_deref(), Some("acme"));
        for (bad, field) in [
            (
                r#"{"part":"header:x","regex":"("}"#,
                "rules[0].key[0].regex",
            ),
            (r#"{"part":"header:x"}"#, "rules[0].key[0]"),
            (
                r#"{"part":"const:x","default":"y"}"#,
                "rules[0].key[0].part",
            ),
            (
                r#"{"part":"cookie:x","default":"y"}"#,
                "rules[0].key[0].part",
            ),
            (
                r#"{"part":"header:x","case":"upper"}"#,
                "rules[0].key[0].case",
            ),
        ] {
            let err = parse(bad).unwrap_err();
            assert_eq!(err.path, field, "{bad}: {err}");
        }
    }

    #[test]
    fn a_lower_cased_part_keys_the_spellings_of_one_name_together() {
        let parse = |json: &str| rule_key(json).unwrap();
        let user = parse(r#"{"part":"header:x-user","case":"lower"}"#);
        let mailbox = parse(
            r#"{"part":"header:x-user","regex":"([^@]+)@.*","case":"lower","default":"NONE"}"#,
        );
        let policy = ClientIpPolicy::default();
        let write = |value: Option<&str>, parts: &[KeyPart]| {
            let req = match value {
                Some(v) => FakeRequest::get("/").with("x-user", v),
                None => FakeRequest::get("/"),
            };
            let mut out = String::new();
            Request::new(&req, &policy)
                .write_key(parts, &mut out)
                .then_some(out)
        };
        for spelling in ["Ann@Example.COM", "ann@example.com", "ANN@EXAMPLE.COM"] {
            assert_eq!(
                write(Some(spelling), &user).as_deref(),
                Some("ann@example.com")
            );
            assert_eq!(write(Some(spelling), &mailbox).as_deref(), Some("ann"));
        }
        // Only ASCII letters change; a default is as written.
        assert_eq!(write(Some("Ölaf"), &user).as_deref(), Some("Ölaf"));
        assert_eq!(write(None, &user), None);
        assert_eq!(write(None, &mailbox).as_deref(), Some("NONE"));
    }

    #[test]
    fn body_parts_read_a_form_as_the_upstream_does() {
        let form = |content_type: &str, body: &str| {
            FakeRequest::get("/login")
                .with("content-type", content_type)
                .with_body(body)
        };
        let urlencoded = "application/x-www-form-urlencoded";
        for (content_type, body) in [
            (urlencoded, "username=ann&password=x"),
            (
                "Application/X-WWW-Form-Urlencoded; charset=utf-8",
                "password=x&user%6Eame=%61nn",
            ),
            (urlencoded, "username=ann&username=bob"),
            ("application/json", r#"{"username":"ann"}"#),
        ] {
            let req = form(content_type, body);
            assert_eq!(
                key(&req, &["body:username"]).as_deref(),
                Some("ann"),
                "{body}"
            );
        }
        let spaced = form(urlencoded, "username=ann+lee");
        assert_eq!(key(&spaced, &["body:username"]).as_deref(), Some("ann lee"));
        // A form is flat; JSON sent as a form, or a form sent as JSON, has no field.
        for (content_type, body, part) in [
            (urlencoded, "user.name=ann", "body:user.name"),
            (urlencoded, r#"{"username":"ann"}"#, "body:username"),
            ("application/json", "username=ann", "body:username"),
        ] {
            assert_eq!(key(&form(content_type, body), &[part]), None, "{body}");
        }
    }

    #[test]
    fn body_parts_read_the_requests_json_body() {
        let req = FakeRequest::get("/v1/chat/completions")
            .with("x-api-key", "k1")
            .with_body(r#"{"model":"gpt-4o","n":2,"meta":{"tier":"gold"},"max_tokens":1.5}"#);
        assert_eq!(
            key(&req, &["header:x-api-key", "body:model"]).as_deref(),
            Some("k1|gpt-4o")
        );
        assert_eq!(
            key(&req, &["body:n", "body:meta.tier"]).as_deref(),
            Some("2|gold")
        );
        // Missing, not a string or integer, not JSON, no body: no key.
        for part in [
            "body:absent",
            "body:meta",
            "body:max_tokens",
            "body:meta.tier.x",
        ] {
            assert_eq!(key(&req, &[part]), None, "{part}");
        }
        let not_json = FakeRequest::get("/").with_body("model=gpt-4o");
        assert_eq!(key(&not_json, &["body:model"]), None);
        assert_eq!(key(&FakeRequest::get("/"), &["body:model"]), None);
        assert_eq!(
            KeyPart::parse("body:usage.total_tokens").map(|p| p.reads_body()),
            Ok(true)
        );
        for bad in ["body:", "body:a..b", "body:a b", "body:.a"] {
            assert!(KeyPart::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn missing_part_means_no_key() {
        let req = FakeRequest::get("/api/items?id=7");
        assert_eq!(key(&req, &["header:x-user"]), None);
        assert_eq!(key(&req, &["const:a", "query:missing"]), None);
        let mut no_peer = req.clone();
        no_peer.source = None;
        assert_eq!(key(&no_peer, &["client_ip"]), None);
        let no_query = FakeRequest::get("/api/items");
        assert_eq!(key(&no_query, &["query:id"]), None);
    }
}
