//! Key parts Envoy knows about a request besides its headers, read as
//! proxy-wasm properties: claims of a JWT that Envoy's `jwt_authn` filter
//! verified, dynamic metadata, filter state, the downstream certificate, the
//! route and the upstream cluster.
//!
//! A property's value comes without its type: a string as its bytes, a
//! number as an 8-byte float, a boolean as one byte, a map or a list in
//! Envoy's pairs encoding. A value that is printable UTF-8 is the key part
//! as it is; any other is written `0x` and its bytes in hex, so that every
//! value keys apart from every other.

/// The `jwt_authn` filter's metadata namespace.
pub const JWT_AUTHN_NAMESPACE: &str = "envoy.filters.http.jwt_authn";

/// The `payload_in_metadata` name Sluice reads JWT claims under when the
/// configuration names none.
pub const DEFAULT_JWT_PAYLOAD: &str = "jwt_payload";

/// Longest path of names in a claim or metadata key part.
pub const MAX_PATH: usize = 16;

/// A key part read from Envoy's view of the request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ContextPart {
    /// A claim of the verified JWT, by its path in the payload
    /// (`org.tenant`: the claim `tenant` of the object claim `org`).
    Jwt(Vec<String>),
    /// Dynamic metadata: a namespace and the path of names in it.
    Metadata(String, Vec<String>),
    /// A filter state object's value, by name.
    FilterState(String),
    /// A field of the downstream peer's certificate.
    Peer(PeerField),
    /// The route's name.
    Route,
    /// The upstream cluster's name.
    Cluster,
}

/// A field of the downstream certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerField {
    /// The first URI SAN (a SPIFFE ID in a mesh).
    UriSan,
    /// The first DNS SAN.
    DnsSan,
    /// The subject.
    Subject,
}

impl PeerField {
    /// Every field.
    pub const ALL: [PeerField; 3] = [PeerField::UriSan, PeerField::DnsSan, PeerField::Subject];

    /// Their names in a key part (`peer:uri_san`), in the order of
    /// [`PeerField::ALL`].
    pub const NAMES: [&'static str; 3] = [
        PeerField::ALL[0].name(),
        PeerField::ALL[1].name(),
        PeerField::ALL[2].name(),
    ];

    /// The field named `name` in a key part.
    pub fn parse(name: &str) -> Option<PeerField> {
        PeerField::ALL.into_iter().find(|f| f.name() == name)
    }

    /// The field's name in a key part.
    pub const fn name(self) -> &'static str {
        match self {
            PeerField::UriSan => "uri_san",
            PeerField::DnsSan => "dns_san",
            PeerField::Subject => "subject",
        }
    }
}

impl ContextPart {
    /// The property path of the value, JWT claims under `jwt_payload`.
    pub fn property<'a>(&'a self, jwt_payload: &'a str) -> Vec<&'a str> {
        match self {
            ContextPart::Jwt(claim) => {
                let mut path = vec![
                    "metadata",
                    "filter_metadata",
                    JWT_AUTHN_NAMESPACE,
                    jwt_payload,
                ];
                path.extend(claim.iter().map(String::as_str));
                path
            }
            ContextPart::Metadata(namespace, names) => {
                let mut path = vec!["metadata", "filter_metadata", namespace.as_str()];
                path.extend(names.iter().map(String::as_str));
                path
            }
            ContextPart::FilterState(name) => vec!["filter_state", name.as_str()],
            ContextPart::Peer(PeerField::UriSan) => {
                vec!["connection", "uri_san_peer_certificate"]
            }
            ContextPart::Peer(PeerField::DnsSan) => {
                vec!["connection", "dns_san_peer_certificate"]
            }
            ContextPart::Peer(PeerField::Subject) => {
                vec!["connection", "subject_peer_certificate"]
            }
            ContextPart::Route => vec!["xds", "route_name"],
            ContextPart::Cluster => vec!["xds", "cluster_name"],
        }
    }

    /// The rate limit service descriptor key this part gets by default.
    pub fn descriptor_key(&self) -> String {
        match self {
            ContextPart::Jwt(claim) => format!("jwt.{}", claim.join(".")),
            ContextPart::Metadata(namespace, names) => {
                format!("{namespace}.{}", names.join("."))
            }
            ContextPart::FilterState(name) => name.clone(),
            ContextPart::Peer(PeerField::UriSan) => "peer_uri_san".to_string(),
            ContextPart::Peer(PeerField::DnsSan) => "peer_dns_san".to_string(),
            ContextPart::Peer(PeerField::Subject) => "peer_subject".to_string(),
            ContextPart::Route => "route".to_string(),
            ContextPart::Cluster => "cluster".to_string(),
        }
    }
}

/// A dotted path of names: `org.tenant`.
pub(super) fn names(text: &str) -> Result<Vec<String>, String> {
    let names: Vec<String> = text.split('.').map(str::to_string).collect();
    if names.iter().any(String::is_empty) {
        return Err(format!("{text:?} is not a path of names separated by '.'"));
    }
    if names.len() > MAX_PATH {
        return Err(format!("{text:?} has more than {MAX_PATH} names"));
    }
    Ok(names)
}

/// `NAMESPACE:PATH`: the namespace may hold dots, the path is after the
/// last `:`.
pub(super) fn metadata(rest: &str) -> Result<ContextPart, String> {
    let Some((namespace, path)) = rest.rsplit_once(':').filter(|(n, _)| !n.is_empty()) else {
        return Err(format!(
            "metadata:{rest} needs a namespace and a path: metadata:NAMESPACE:PATH"
        ));
    };
    Ok(ContextPart::Metadata(namespace.to_string(), names(path)?))
}

/// Writes a property's value into `out` as a key part (see the module
/// doc).
pub fn push_value(out: &mut String, value: &[u8]) {
    match std::str::from_utf8(value) {
        Ok(text) if !text.chars().any(char::is_control) => out.push_str(text),
        _ => {
            out.push_str("0x");
            for b in value {
                for nibble in [b >> 4, b & 0xf] {
                    out.push(char::from_digit(u32::from(nibble), 16).unwrap_or('0'));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The context part `text` parses into; `Err` for any other part.
    fn parse(text: &str) -> Result<ContextPart, String> {
        match super::super::KeyPart::parse(text)? {
            super::super::KeyPart::Context(part) => Ok(part),
            other => Err(format!("{other:?}")),
        }
    }

    #[test]
    fn parses_each_source() {
        let ok = |t: &str| parse(t).ok();
        assert_eq!(
            ok("jwt:org.tenant"),
            Some(ContextPart::Jwt(vec!["org".into(), "tenant".into()]))
        );
        assert_eq!(
            ok("metadata:envoy.lb:tier.name"),
            Some(ContextPart::Metadata(
                "envoy.lb".into(),
                vec!["tier".into(), "name".into()]
            ))
        );
        assert_eq!(
            ok("filter_state:my.tier"),
            Some(ContextPart::FilterState("my.tier".into()))
        );
        assert_eq!(
            ok("peer:uri_san"),
            Some(ContextPart::Peer(PeerField::UriSan))
        );
        assert_eq!(ok("route"), Some(ContextPart::Route));
        assert_eq!(ok("cluster"), Some(ContextPart::Cluster));
        for bad in [
            "jwt:",
            "jwt:a..b",
            "metadata:x",
            "metadata::a",
            "peer:cn",
            "filter_state:",
            "header:x",
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
        assert!(parse(&format!("jwt:{}", ["a"; 17].join("."))).is_err());
        assert_eq!(
            parse("peer:cn"),
            Err("peer:cn is not a certificate field (expected peer:uri_san, peer:dns_san or peer:subject)".into())
        );
    }

    #[test]
    fn properties_are_envoys_paths() {
        let claim = ContextPart::Jwt(vec!["org".into(), "tenant".into()]);
        assert_eq!(
            claim.property("payload"),
            [
                "metadata",
                "filter_metadata",
                "envoy.filters.http.jwt_authn",
                "payload",
                "org",
                "tenant"
            ]
        );
        assert_eq!(ContextPart::Route.property("p"), ["xds", "route_name"]);
    }

    #[test]
    fn values_key_apart_whatever_their_type() {
        let text = |v: &[u8]| {
            let mut out = String::new();
            push_value(&mut out, v);
            out
        };
        assert_eq!(text(b"acme"), "acme");
        assert_eq!(text(&42f64.to_le_bytes()), "0x0000000000004540");
        assert_eq!(text(&[1]), "0x01");
        assert_eq!(text(b"a\nb"), "0x610a62");
        assert_eq!(text(b""), "");
    }
}
