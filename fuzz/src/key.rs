//! Key extraction and client-address parsing on arbitrary requests.

use sluice_filter::client_ip::{self, ClientIpPolicy, EnvoyXff};
use sluice_filter::key::fake::{address_candidates, FakeRequest};
use sluice_filter::key::{KeyPart, Request, RequestView};

/// Three bytes of policy (trusted hops and `envoy_xff`, IPv4 and IPv6
/// prefixes), then
/// lines: key parts (comma-separated), `x-forwarded-for` (absent if there
/// is no such line), the peer address (`-` for none), `:path`, `:method`,
/// then `name: value` headers. Keys are built or refused, the same twice;
/// a client address in a key is one the request carried, masked.
pub fn key(data: &[u8]) {
    if data.len() < 3 {
        return;
    }
    let policy = ClientIpPolicy {
        trusted_hops: match data[0] {
            255 => u32::MAX,
            b => u32::from(b % 6),
        },
        envoy_xff: match data[0] / 6 % 3 {
            0 => EnvoyXff::Detect,
            1 => EnvoyXff::Appended,
            _ => EnvoyXff::AsSent,
        },
        ipv4_prefix: data[1],
        ipv6_prefix: data[2],
    };
    let text = String::from_utf8_lossy(&data[3..]);
    let mut lines = text.split('\n');
    let mut parts = Vec::new();
    for p in lines.next().unwrap_or_default().split(',') {
        match KeyPart::parse(p) {
            Ok(part) => parts.push(part),
            // A refusal says why: an unknown source, or what its source
            // needs (`metadata:` a namespace and a path, `jwt:` a path).
            Err(e) => assert!(!e.is_empty(), "{p:?} refused without a reason"),
        }
    }
    let mut req = FakeRequest::default();
    if let Some(xff) = lines.next() {
        req.headers.push(("x-forwarded-for".into(), xff.into()));
    }
    req.source = lines.next().filter(|s| *s != "-").map(str::to_string);
    if let Some(path) = lines.next() {
        req.headers.push((":path".into(), path.into()));
    }
    if let Some(method) = lines.next() {
        req.headers.push((":method".into(), method.into()));
    }
    for line in lines {
        let (name, value) = line.split_once(": ").unwrap_or((line, ""));
        req.headers.push((name.to_ascii_lowercase(), value.into()));
    }

    let request = Request::new(&req, &policy);
    let mut out = String::new();
    let built = request.write_key(&parts, &mut out);
    // Twice: the cached reads give the same key.
    let mut again = String::new();
    assert_eq!(request.write_key(&parts, &mut again), built);
    if built {
        assert_eq!(out, again);
    }
    let client = [KeyPart::ClientIp];
    let fresh = Request::new(&req, &policy);
    if fresh.write_key(&client, &mut out) {
        let known = address_candidates(&policy, &req);
        assert!(known.contains(&out), "{out:?} not among {known:?}");
    } else {
        assert!(req
            .source_address()
            .and_then(|s| client_ip::parse_address(&s))
            .is_none());
    }
}
