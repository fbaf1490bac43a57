//! Finding the client address (downstream peer or `x-forwarded-for`) and
//! masking it to the prefix that identifies one client.
//!
//! The key text of a client is its masked address. An IPv4 client under the
//! default `/32` is the plain address (`203.0.113.7`); a shorter prefix adds
//! the length (`203.0.113.0/24`). IPv6 works the same way: under the default
//! `/64`, `2001:db8:1:2:3:4:5:6` becomes `2001:db8:1:2::/64`, and `/128` is the
//! plain address. IPv4-mapped IPv6 addresses (`::ffff:1.2.3.4`) count as IPv4.
//! Overrides must be written in this form.

use crate::decimal::push_u64;
use std::fmt::Write;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Whether Envoy appended its downstream peer to `x-forwarded-for` (the
/// HTTP connection manager's `use_remote_address`), which decides which
/// entry is the `N`th trusted one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "schema", serde(rename_all = "snake_case"))]
pub enum EnvoyXff {
    /// Tell from the downstream address, read on each request that has
    /// the header: a port other than 0 means Envoy appended.
    #[default]
    Detect,
    /// Envoy appends (`use_remote_address: true`): the last entry is its
    /// own, and the downstream address is read only when the header is
    /// missing or too short.
    Appended,
    /// Envoy leaves the header as sent (`use_remote_address: false`).
    AsSent,
}

/// How the client address is found and masked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientIpPolicy {
    /// Trusted proxies in front of Envoy. Zero uses the downstream peer
    /// address; `N > 0` uses the `N`th `x-forwarded-for` entry from the right.
    pub trusted_hops: u32,
    /// Whether Envoy appended to `x-forwarded-for`.
    pub envoy_xff: EnvoyXff,
    /// IPv4 prefix length, 0..=32.
    pub ipv4_prefix: u8,
    /// IPv6 prefix length, 0..=128.
    pub ipv6_prefix: u8,
}

impl Default for ClientIpPolicy {
    fn default() -> Self {
        ClientIpPolicy {
            trusted_hops: 0,
            envoy_xff: EnvoyXff::Detect,
            ipv4_prefix: 32,
            ipv6_prefix: 64,
        }
    }
}

/// Parses an address as Envoy reports it: `1.2.3.4:5678`, `[::1]:5678`, or
/// a bare address.
pub fn parse_address(text: &str) -> Option<IpAddr> {
    parse_socket_address(text).map(|(ip, _)| ip)
}

/// A downstream address as Envoy reports it, parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer {
    /// The address.
    pub ip: IpAddr,
    /// The port, when the text had one.
    pub port: Option<u16>,
}

impl Peer {
    /// Parses `1.2.3.4:5678`, `[::1]:5678`, or a bare address.
    pub fn parse(text: &str) -> Option<Peer> {
        parse_socket_address(text).map(|(ip, port)| Peer { ip, port })
    }

    /// Whether Envoy took this address from `x-forwarded-for` (port 0), so
    /// that the true peer is hidden from filters.
    pub fn is_forwarded(&self) -> bool {
        self.port == Some(0)
    }
}

/// Parses an address and its port, if any.
fn parse_socket_address(text: &str) -> Option<(IpAddr, Option<u16>)> {
    // Header whitespace is ASCII (spaces and tabs around list entries).
    let text = text.trim_ascii();
    // Envoy's usual form first: an IPv4 address before the last colon is
    // never part of a bare IPv6 address.
    if let Some((host, port)) = text.rsplit_once(':') {
        if let Some(ip) = parse_ipv4(host) {
            return Some((IpAddr::V4(ip), port.parse().ok()));
        }
    }
    if let Some(ip) = parse_ipv4(text) {
        return Some((IpAddr::V4(ip), None));
    }
    if let Ok(ip) = text.parse::<Ipv6Addr>() {
        return Some((IpAddr::V6(ip), None));
    }
    let rest = text.strip_prefix('[')?;
    let (host, port) = rest.split_once(']')?;
    let ip = host.parse::<Ipv6Addr>().ok()?;
    let port = port.strip_prefix(':').and_then(|p| p.parse().ok());
    Some((IpAddr::V6(ip), port))
}

/// Parses a dotted-quad IPv4 address exactly as `Ipv4Addr::from_str` does
/// (four decimal octets of at most three digits, none with a leading zero),
/// in one pass over the bytes: every request parses one or two, and the
/// standard parser's generic number reading is several times this code on
/// the request path (not inlined: its two callers share one copy).
#[inline(never)]
fn parse_ipv4(text: &str) -> Option<Ipv4Addr> {
    let mut address = 0u32;
    let mut octet = 0u32;
    let mut digits = 0u8;
    let mut dots = 0u8;
    for &byte in text.as_bytes() {
        match byte {
            b'0'..=b'9' => {
                // A leading zero, or a fourth digit: no octet.
                if (digits == 1 && octet == 0) || digits == 3 {
                    return None;
                }
                octet = octet * 10 + u32::from(byte - b'0');
                digits += 1;
            }
            b'.' if digits > 0 && dots < 3 => {
                address = address << 8 | octet;
                (octet, digits, dots) = (0, 0, dots + 1);
            }
            _ => return None,
        }
        if octet > 255 {
            return None;
        }
    }
    (digits > 0 && dots == 3).then(|| Ipv4Addr::from(address << 8 | octet))
}

/// Appends `octet` in decimal (not inlined: the four calls of an address
/// share one copy).
#[inline(never)]
fn push_octet(out: &mut String, octet: u8) {
    if octet >= 100 {
        out.push(char::from(b'0' + octet / 100));
    }
    if octet >= 10 {
        out.push(char::from(b'0' + octet / 10 % 10));
    }
    out.push(char::from(b'0' + octet % 10));
}

/// The client address under `policy`, from the downstream address Envoy
/// reports (`peer`, parsed by [`Peer::parse`]) and the `x-forwarded-for` header.
///
/// With `N` trusted hops the client is the `N`th entry from the right of
/// `x-forwarded-for` as the trusted proxies sent it; when the header has fewer
/// entries, or that entry is not an address, the downstream address is used.
///
/// Envoy changes what filters see, depending on the HTTP connection manager's
/// `use_remote_address`:
/// * `true`: the downstream address is the true peer, and Envoy has appended
///   an entry of its own to `x-forwarded-for`; that entry is not counted.
/// * `false` (Envoy's default): Envoy replaced the downstream address with the
///   last `x-forwarded-for` entry (port 0) and left the header as sent. With
///   zero trusted hops, clients can then choose their own address: use
///   `use_remote_address: true` when rate limiting by client address.
///
/// (A non-zero port on the downstream address alongside `x-forwarded-for`
/// tells the first case from the second; `skip_xff_append` is not supported.)
pub fn client_ip(policy: &ClientIpPolicy, peer: Option<Peer>, xff: Option<&str>) -> Option<IpAddr> {
    client_ip_with(policy, &mut || peer, xff)
}

/// [`client_ip`], reading the downstream address with `peer` only when it
/// is needed (at most once): with zero trusted hops, when `x-forwarded-for`
/// has no trusted entry, or to tell whether Envoy appended
/// ([`EnvoyXff::Detect`]).
pub fn client_ip_with(
    policy: &ClientIpPolicy,
    peer: &mut dyn FnMut() -> Option<Peer>,
    xff: Option<&str>,
) -> Option<IpAddr> {
    let mut read: Option<Option<Peer>> = None;
    let mut peer = || *read.get_or_insert_with(&mut *peer);
    if policy.trusted_hops > 0 {
        if let Some(xff) = xff {
            let envoy_appended = match policy.envoy_xff {
                EnvoyXff::Detect => peer().is_some_and(|p| p.port.is_some_and(|port| port != 0)),
                EnvoyXff::Appended => true,
                EnvoyXff::AsSent => false,
            };
            let skip = usize::try_from(policy.trusted_hops)
                .ok()
                .and_then(|n| n.checked_sub(usize::from(!envoy_appended)));
            if let Some(ip) = skip
                .and_then(|s| nth_from_right(xff, s))
                .and_then(parse_address)
            {
                return Some(ip);
            }
        }
    }
    peer().map(|p| p.ip)
}

/// The `n`th entry from the right of a comma-separated list, as
/// `list.rsplit(',').nth(n)` (a byte loop: the general searcher is
/// several times this code on the request path).
fn nth_from_right(list: &str, n: usize) -> Option<&str> {
    let mut end = list.len();
    let mut seen = 0;
    for (at, byte) in list.bytes().enumerate().rev() {
        if byte == b',' {
            if seen == n {
                return list.get(at + 1..end);
            }
            seen += 1;
            end = at;
        }
    }
    if seen == n {
        list.get(..end)
    } else {
        None
    }
}

/// Writes the key text of `ip` masked under `policy` into `out`.
pub fn write_masked(policy: &ClientIpPolicy, ip: IpAddr, out: &mut String) {
    let ip = match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        },
        v4 => v4,
    };
    // Writing to a String cannot fail.
    let _ = match ip {
        IpAddr::V4(v4) => {
            let len = policy.ipv4_prefix.min(32);
            let masked = Ipv4Addr::from(u32::from(v4) & mask32(len));
            for (i, octet) in masked.octets().into_iter().enumerate() {
                if i > 0 {
                    out.push('.');
                }
                push_octet(out, octet);
            }
            if len != 32 {
                out.push('/');
                push_u64(out, u64::from(len));
            }
            Ok(())
        }
        IpAddr::V6(v6) => {
            let len = policy.ipv6_prefix.min(128);
            let masked = Ipv6Addr::from(u128::from(v6) & mask128(len));
            if len == 128 {
                write!(out, "{masked}")
            } else {
                write!(out, "{masked}/{len}")
            }
        }
    };
}

fn mask32(len: u8) -> u32 {
    u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0)
}

fn mask128(len: u8) -> u128 {
    u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn ipv4_is_parsed_as_the_standard_parser_does(text in "[0-9.]{0,17}|[0-9a-f.:+ -]{0,20}|.{0,20}") {
            prop_assert_eq!(parse_ipv4(&text), text.parse::<Ipv4Addr>().ok());
        }

        #[test]
        fn entries_from_the_right_are_those_of_rsplit(list in "[0-9a-z, ]{0,12}|.{0,12}", n in 0usize..6) {
            prop_assert_eq!(nth_from_right(&list, n), list.rsplit(',').nth(n));
        }

        #[test]
        fn octets_are_written_in_decimal(octet: u8) {
            let mut out = String::from("x");
            push_octet(&mut out, octet);
            prop_assert_eq!(out, format!("x{octet}"));
        }
    }

    #[test]
    fn ipv4_edge_cases_match_the_standard_parser() {
        for text in [
            "0.0.0.0",
            "255.255.255.255",
            "256.0.0.1",
            "01.2.3.4",
            "1.2.3.04",
            "1.2.3",
            "1.2.3.4.",
            ".1.2.3",
            "1..2.3",
            "1.2.3.4.5",
            "1000.1.1.1",
            "+1.2.3.4",
            "1.2.3.+4",
            "١.2.3.4",
            "",
            "0.00.0.0",
        ] {
            assert_eq!(parse_ipv4(text), text.parse::<Ipv4Addr>().ok(), "{text}");
        }
    }

    fn masked(policy: &ClientIpPolicy, text: &str) -> String {
        let mut out = String::new();
        write_masked(
            policy,
            text.parse().unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED)),
            &mut out,
        );
        out
    }

    #[test]
    fn parses_envoy_addresses() {
        assert_eq!(
            parse_address("1.2.3.4:5678"),
            Some(IpAddr::V4(Ipv4Addr::new(1, 2, 3, 4)))
        );
        assert_eq!(
            parse_address("[::1]:5678"),
            Some(IpAddr::V6(Ipv6Addr::LOCALHOST))
        );
        assert_eq!(
            parse_address(" 10.0.0.1 "),
            Some(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)))
        );
        assert_eq!(parse_address("2001:db8::1"), "2001:db8::1".parse().ok());
        assert_eq!(
            parse_address("::ffff:1.2.3.4"),
            "::ffff:1.2.3.4".parse().ok()
        );
        assert_eq!(parse_address("::1.2.3.4"), "::1.2.3.4".parse().ok());
        assert_eq!(
            Peer::parse("1.2.3.4:x"),
            Some(Peer {
                ip: IpAddr::V4(Ipv4Addr::new(1, 2, 3, 4)),
                port: None
            })
        );
        assert_eq!(
            Peer::parse("1.2.3.4:0").map(|p| p.is_forwarded()),
            Some(true)
        );
        assert_eq!(parse_address("01.2.3.4:5"), None);
        assert_eq!(parse_address("not-an-ip"), None);
        assert_eq!(parse_address("[::1"), None);
        assert_eq!(parse_address(""), None);
    }

    #[test]
    fn masks_to_prefix() {
        let policy = ClientIpPolicy::default();
        assert_eq!(masked(&policy, "203.0.113.7"), "203.0.113.7");
        assert_eq!(masked(&policy, "2001:db8:1:2:3:4:5:6"), "2001:db8:1:2::/64");
        assert_eq!(masked(&policy, "::ffff:1.2.3.4"), "1.2.3.4");
        let narrow = ClientIpPolicy {
            ipv4_prefix: 24,
            ipv6_prefix: 128,
            ..ClientIpPolicy::default()
        };
        assert_eq!(masked(&narrow, "203.0.113.7"), "203.0.113.0/24");
        assert_eq!(masked(&narrow, "2001:db8::1"), "2001:db8::1");
        let zero = ClientIpPolicy {
            ipv4_prefix: 0,
            ipv6_prefix: 0,
            ..ClientIpPolicy::default()
        };
        assert_eq!(masked(&zero, "203.0.113.7"), "0.0.0.0/0");
        assert_eq!(masked(&zero, "2001:db8::1"), "::/0");
    }

    /// The client address for the downstream address as Envoy writes it.
    fn client_ip_from(
        policy: &ClientIpPolicy,
        source: Option<&str>,
        xff: Option<&str>,
    ) -> Option<IpAddr> {
        client_ip(policy, source.and_then(Peer::parse), xff)
    }

    fn is_forwarded_source(source: &str) -> bool {
        Peer::parse(source).is_some_and(|p| p.is_forwarded())
    }

    #[test]
    fn picks_forwarded_entry_from_the_right() {
        // use_remote_address: false — Envoy reports the last entry, port 0.
        let src = Some("192.0.2.5:0");
        let xff = Some("198.51.100.1, 203.0.113.7,192.0.2.5");
        let hops = |n| ClientIpPolicy {
            trusted_hops: n,
            ..ClientIpPolicy::default()
        };
        let ip = |s: &str| s.parse::<IpAddr>().ok();
        assert_eq!(client_ip_from(&hops(0), src, xff), ip("192.0.2.5"));
        assert_eq!(client_ip_from(&hops(1), src, xff), ip("192.0.2.5"));
        assert_eq!(client_ip_from(&hops(2), src, xff), ip("203.0.113.7"));
        assert_eq!(client_ip_from(&hops(3), src, xff), ip("198.51.100.1"));
        // Fewer entries than hops, a missing header, or garbage: the downstream address.
        assert_eq!(client_ip_from(&hops(4), src, xff), ip("192.0.2.5"));
        let peer = Some("10.0.0.9:1234");
        assert_eq!(client_ip_from(&hops(1), peer, None), ip("10.0.0.9"));
        assert_eq!(
            client_ip_from(&hops(1), peer, Some("garbage,10.0.0.1")),
            ip("10.0.0.9")
        );
        assert_eq!(client_ip_from(&hops(1), None, Some("garbage")), None);
    }

    #[test]
    fn skips_the_entry_envoy_appended() {
        // use_remote_address: true — the true peer, and Envoy's own entry last.
        let hops = |n| ClientIpPolicy {
            trusted_hops: n,
            ..ClientIpPolicy::default()
        };
        let ip = |s: &str| s.parse::<IpAddr>().ok();
        let src = Some("127.0.0.1:1234");
        let xff = Some("198.51.100.1, 203.0.113.7,192.0.2.2");
        assert_eq!(client_ip_from(&hops(0), src, xff), ip("127.0.0.1"));
        assert_eq!(client_ip_from(&hops(1), src, xff), ip("203.0.113.7"));
        assert_eq!(client_ip_from(&hops(2), src, xff), ip("198.51.100.1"));
        assert_eq!(client_ip_from(&hops(3), src, xff), ip("127.0.0.1"));
        assert!(is_forwarded_source("10.0.0.9:0"));
        assert!(!is_forwarded_source("10.0.0.9:1234"));
        assert!(!is_forwarded_source("[::1]:5"));
        assert!(is_forwarded_source("[2001:db8::1]:0"));
    }

    /// The client address under `envoy_xff` and the downstream address
    /// reads it made.
    fn told(
        envoy_xff: EnvoyXff,
        hops: u32,
        source: &str,
        xff: Option<&str>,
    ) -> (Option<IpAddr>, u32) {
        let policy = ClientIpPolicy {
            trusted_hops: hops,
            envoy_xff,
            ..ClientIpPolicy::default()
        };
        let mut reads = 0;
        let ip = client_ip_with(
            &policy,
            &mut || {
                reads += 1;
                Peer::parse(source)
            },
            xff,
        );
        (ip, reads)
    }

    #[test]
    fn a_declared_envoy_xff_decides_as_detect_without_reading_the_peer() {
        let ip = |s: &str| s.parse::<IpAddr>().ok();
        let xff = Some("198.51.100.1, 203.0.113.7,192.0.2.2");
        // use_remote_address: true, the true peer; false, Envoy's copy.
        for (mode, source) in [
            (EnvoyXff::Appended, "127.0.0.1:1234"),
            (EnvoyXff::AsSent, "192.0.2.2:0"),
        ] {
            for hops in 1..=2 {
                let detected = told(EnvoyXff::Detect, hops, source, xff);
                assert_eq!(detected.1, 1, "detect reads the peer");
                assert_eq!(told(mode, hops, source, xff), (detected.0, 0));
            }
        }
        assert_eq!(
            told(EnvoyXff::Appended, 1, "127.0.0.1:1", xff),
            (ip("203.0.113.7"), 0)
        );
        assert_eq!(
            told(EnvoyXff::AsSent, 1, "192.0.2.2:0", xff),
            (ip("192.0.2.2"), 0)
        );
        // No trusted entry: the peer, read once whatever the mode.
        for mode in [EnvoyXff::Detect, EnvoyXff::Appended, EnvoyXff::AsSent] {
            assert_eq!(told(mode, 4, "10.0.0.9:5", xff), (ip("10.0.0.9"), 1));
            assert_eq!(told(mode, 1, "10.0.0.9:5", None), (ip("10.0.0.9"), 1));
            assert_eq!(told(mode, 0, "10.0.0.9:5", xff), (ip("10.0.0.9"), 1));
        }
    }
}
