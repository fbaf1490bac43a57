//! A request built in memory, for the tests and the fuzzers.

use super::RequestView;
use crate::client_ip::{self, ClientIpPolicy};

/// A request built in memory, for tests.
#[derive(Debug, Default, Clone)]
pub struct FakeRequest {
    /// Headers, lowercase names, pseudo-headers included.
    pub headers: Vec<(String, String)>,
    /// The downstream peer address.
    pub source: Option<String>,
    /// Properties, by their path joined with `.`.
    pub properties: Vec<(String, Vec<u8>)>,
    /// The body, as the host gives it once the filter waited for it.
    pub body: Option<Vec<u8>>,
}

impl FakeRequest {
    /// A request with `:method`, `:path`, `:authority` and a peer address.
    pub fn get(path: &str) -> FakeRequest {
        FakeRequest {
            headers: vec![
                (":method".into(), "GET".into()),
                (":path".into(), path.into()),
                (":authority".into(), "example.com".into()),
            ],
            source: Some("203.0.113.7:40000".into()),
            properties: Vec::new(),
            body: None,
        }
    }

    /// Sets the body.
    pub fn with_body(mut self, body: &str) -> FakeRequest {
        self.body = Some(body.as_bytes().to_vec());
        self
    }

    /// Adds a property at `path` (names joined with `.`).
    pub fn with_property(mut self, path: &str, value: &[u8]) -> FakeRequest {
        self.properties.push((path.into(), value.to_vec()));
        self
    }

    /// Adds a header.
    pub fn with(mut self, name: &str, value: &str) -> FakeRequest {
        self.headers.push((name.into(), value.into()));
        self
    }
}

impl RequestView for FakeRequest {
    fn header(&self, name: &str) -> Option<String> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    }

    fn source_address(&self) -> Option<String> {
        self.source.clone()
    }

    fn body(&self) -> Option<Vec<u8>> {
        self.body.clone()
    }

    fn property(&self, path: &[&str]) -> Option<Vec<u8>> {
        let joined = path.join(".");
        self.properties
            .iter()
            .find(|(k, _)| *k == joined)
            .map(|(_, v)| v.clone())
    }
}

/// The masked text of every address `req` carries (its `x-forwarded-for`
/// entries and its peer): a client address in a key must be one of them.
pub fn address_candidates(policy: &ClientIpPolicy, req: &impl RequestView) -> Vec<String> {
    let header = req.header("x-forwarded-for").unwrap_or_default();
    let source = req.source_address();
    header
        .split(',')
        .chain(source.as_deref())
        .filter_map(client_ip::parse_address)
        .map(|ip| {
            let mut out = String::new();
            client_ip::write_masked(policy, ip, &mut out);
            out
        })
        .collect()
}
