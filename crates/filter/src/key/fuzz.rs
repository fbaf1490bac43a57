//! Fuzzing key extraction and client-address parsing: arbitrary
//! `x-forwarded-for` values (IPv4, IPv6 in every spelling, bracketed, with
//! ports and zones, garbage bytes, huge headers), arbitrary header values,
//! paths and key parts, under any client-address policy. Keys are built or
//! refused, never a panic, and a client address in a key is always one the
//! request carried, masked.
//!
//! More cases: `PROPTEST_CASES=100000 cargo test -p sluice fuzz_`.

use super::fake::{address_candidates, FakeRequest};
use super::*;
use crate::client_ip::EnvoyXff;
use proptest::prelude::*;

/// One `x-forwarded-for` entry, in the spellings proxies and attackers use.
fn entry() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<[u8; 4]>().prop_map(|o| std::net::Ipv4Addr::from(o).to_string()),
        any::<u128>().prop_map(|n| std::net::Ipv6Addr::from(n).to_string()),
        any::<[u8; 4]>().prop_map(|o| format!("::ffff:{}", std::net::Ipv4Addr::from(o))),
        (any::<u128>(), any::<u16>())
            .prop_map(|(n, p)| format!("[{}]:{p}", std::net::Ipv6Addr::from(n))),
        (any::<[u8; 4]>(), any::<u32>())
            .prop_map(|(o, p)| format!("{}:{p}", std::net::Ipv4Addr::from(o))),
        any::<u128>().prop_map(|n| format!("{}%eth0", std::net::Ipv6Addr::from(n))),
        "[ 0-9a-fA-F:.\\[\\]%]{0,60}",
        prop::collection::vec(any::<u8>(), 0..40)
            .prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
        Just(String::new()),
        Just(" ".to_string()),
        Just("unknown".to_string()),
        Just("1.2.3.4.5".to_string()),
        Just("::".to_string()),
        Just("[::1".to_string()),
        Just("1:2:3:4:5:6:7:8:9".to_string()),
    ]
}

fn xff() -> impl Strategy<Value = String> {
    prop::collection::vec((entry(), "[ ]{0,2}"), 0..12).prop_map(|entries| {
        entries
            .into_iter()
            .map(|(e, pad)| format!("{pad}{e}"))
            .collect::<Vec<_>>()
            .join(",")
    })
}

fn policy() -> impl Strategy<Value = ClientIpPolicy> {
    let envoy_xff = prop_oneof![
        Just(EnvoyXff::Detect),
        Just(EnvoyXff::Appended),
        Just(EnvoyXff::AsSent)
    ];
    let hops = prop_oneof![0..4u32, any::<u32>()];
    (hops, envoy_xff, any::<u8>(), any::<u8>()).prop_map(
        |(trusted_hops, envoy_xff, ipv4_prefix, ipv6_prefix)| ClientIpPolicy {
            trusted_hops,
            envoy_xff,
            ipv4_prefix,
            ipv6_prefix,
        },
    )
}

fn part() -> impl Strategy<Value = KeyPart> {
    prop_oneof![
        Just(KeyPart::ClientIp),
        Just(KeyPart::Path),
        Just(KeyPart::Method),
        Just(KeyPart::Authority),
        "[a-z-]{1,8}".prop_map(KeyPart::Header),
        Just(KeyPart::Header("x-forwarded-for".into())),
        "[a-z=&]{1,4}".prop_map(KeyPart::Query),
        ".{0,8}".prop_map(KeyPart::Const),
    ]
}

fn any_text() -> impl Strategy<Value = String> {
    prop_oneof![
        ".{0,40}",
        prop::collection::vec(any::<u8>(), 0..64)
            .prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn fuzz_client_ip_from_arbitrary_headers(
        policy in policy(),
        source in prop::option::of(prop_oneof![entry(), Just("192.0.2.5:0".to_string()), Just("[2001:db8::1]:443".to_string())]),
        xff in prop::option::of(xff()),
    ) {
        let mut req = FakeRequest::get("/");
        req.source = source;
        if let Some(xff) = xff {
            req = req.with("x-forwarded-for", &xff);
        }
        let request = Request::new(&req, &policy);
        let parts = [KeyPart::ClientIp];
        let mut out = String::new();
        if request.write_key(&parts, &mut out) {
            let known = address_candidates(&policy, &req);
            prop_assert!(known.contains(&out), "{out:?} not among {known:?}");
        } else {
            prop_assert!(req.source_address().and_then(|s| client_ip::parse_address(&s)).is_none());
        }
    }

    #[test]
    fn fuzz_key_from_arbitrary_requests(
        policy in policy(),
        parts in prop::collection::vec(part(), 0..6),
        path in any_text(),
        method in any_text(),
        headers in prop::collection::vec(("[a-z-]{1,8}", any_text()), 0..10),
        xff in xff(),
        source in prop::option::of(entry()),
    ) {
        let mut req = FakeRequest::get(&path);
        req.headers[0].1 = method;
        req.source = source;
        req = req.with("x-forwarded-for", &xff);
        for (name, value) in &headers {
            req = req.with(name, value);
        }
        let request = Request::new(&req, &policy);
        let mut out = String::new();
        let built = request.write_key(&parts, &mut out);
        // Twice: the cached reads give the same key.
        let mut again = String::new();
        prop_assert_eq!(request.write_key(&parts, &mut again), built);
        if built {
            prop_assert_eq!(out, again);
        }
    }

    #[test]
    fn fuzz_key_part_parse(text in any_text()) {
        match KeyPart::parse(&text) {
            Ok(_) => {}
            Err(e) => prop_assert!(e.contains("unknown key part")),
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// A header of tens of thousands of entries, the client at any depth.
    #[test]
    fn fuzz_client_ip_from_huge_headers(
        policy in policy(),
        filler in entry(),
        copies in 1000..20_000usize,
        tail in xff(),
    ) {
        let huge = format!("{},{tail}", vec![filler.as_str(); copies].join(","));
        let req = FakeRequest::get("/").with("x-forwarded-for", &huge);
        let request = Request::new(&req, &policy);
        let mut out = String::new();
        if request.write_key(&[KeyPart::ClientIp], &mut out) {
            let known = address_candidates(&policy, &req);
            prop_assert!(known.contains(&out));
        }
    }
}
