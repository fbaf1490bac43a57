//! The fuzz targets' bodies, one function per target, shared by the
//! libFuzzer binaries (`fuzz_targets/`) and the corpus seeder. Each takes
//! arbitrary bytes, runs one parser (and what uses its output), and panics
//! only when an invariant fails: a panic here is a finding.

use std::sync::OnceLock;

pub mod cost_extract;
pub mod key;
pub mod pattern;
pub mod rls_request;

/// Every target, by name (the binary, corpus and dictionary names).
pub const TARGETS: &[&str] = &[
    "config",
    "state",
    "key",
    "check",
    "answer",
    "rls_answer",
    "rls_yaml",
    "rls_request",
    "cost_extract",
    "pattern",
];

/// The filter's configuration JSON → plan: a plan with a domain and
/// prefixes in range, or an error with a message.
pub fn config(data: &[u8]) {
    match sluice_filter::config::parse(data) {
        Ok(plan) => {
            assert!(!plan.domain.is_empty());
            assert!(plan.client_ip.ipv4_prefix <= 32);
            assert!(plan.client_ip.ipv6_prefix <= 128);
        }
        Err(e) => {
            assert!(!e.message.is_empty(), "no message at {:?}", e.path);
            let _ = e.to_string();
        }
    }
}

/// Reads a little-endian u64 from up to 8 bytes.
fn u64_of(bytes: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    for (d, s) in b.iter_mut().zip(bytes) {
        *d = *s;
    }
    u64::from_le_bytes(b)
}

/// A stored state of any algorithm, as bytes: the first 24 bytes choose
/// the limit, the time and the cost; the rest is the state. Decisions are
/// deterministic, an admitted request yields a state, and the state written
/// decodes again; refunds never panic.
pub fn state(data: &[u8]) {
    use sluice_core::{decide, decide_batch, refund_at, Algorithm, Check, Limit, SECOND};
    if data.len() < 24 {
        return;
    }
    let (head, state) = data.split_at(24);
    let algorithm = Algorithm::ALL[usize::from(head[0]) % Algorithm::ALL.len()];
    const WINDOWS: [u64; 6] = [
        1_000_000,
        7_000_000,
        SECOND,
        1_500_000_007,
        3_600 * SECOND + 1,
        366 * 86_400 * SECOND,
    ];
    let window = WINDOWS[usize::from(head[1]) % WINDOWS.len()];
    // Small numbers mostly (limits are reached), now and then extremes.
    let small = |b: u8| {
        if b == 255 {
            u64::MAX
        } else {
            1 + u64::from(b % 16)
        }
    };
    let limit = Limit {
        algorithm,
        requests: small(head[2]),
        window,
        burst: small(head[3]),
        precision: if algorithm == Algorithm::SlidingWindow {
            1 + u32::from(head[4] % 8)
        } else {
            1
        },
        soft_percent: [0, 50, 100, 1000][usize::from(head[5] % 4)],
        max_delay: match head[6] % 4 {
            0 | 1 => None,
            2 => Some(window / 2),
            _ => Some(u64::from(head[7]) * 1_000_000),
        },
    };
    let now = u64_of(&head[8..16]);
    let cost = match head[16] {
        255 => u64::MAX,
        b => u64::from(b % 8),
    };
    let admitted_at = now.wrapping_sub(u64_of(&head[17..24]) % (2 * window));

    let out = decide(&limit, Some(state), now, cost);
    assert_eq!(
        out,
        decide(&limit, Some(state), now, cost),
        "not deterministic"
    );
    if out.decision.allowed && cost > 0 {
        assert!(out.new_state.is_some(), "admitted without a state");
    }
    if let Some(s) = &out.new_state {
        let again = decide(&limit, Some(s.as_bytes()), now, 0);
        let _ = refund_at(&limit, s.as_bytes(), now, now, cost);
        assert!(again.decision.limit == out.decision.limit);
    }
    let _ = decide_batch(
        &[Check {
            reserve: u64::from(head[6] % 3),
            ..Check::new(&limit, Some(state), cost.min(4))
        }],
        now,
        u32::from(head[7] % 5),
    );
    let _ = refund_at(&limit, state, admitted_at, now, cost);
}

/// The limiter's reading of a check body: refused with a message, or valid
/// and decided without a panic; its answer reads back as written
/// (`sluice_wire::fuzzing::check_body`); the same bytes as a permits or a
/// charge body (`sluice_wire::fuzzing::permits_and_charge_bodies`).
pub fn check(data: &[u8]) {
    if let Err(broken) = sluice_wire::fuzzing::check_body(data) {
        panic!("{broken}");
    }
    if let Err(broken) = sluice_wire::fuzzing::permits_and_charge_bodies(data) {
        panic!("{broken}");
    }
}

/// The filter's reading of limiter answers: the compact reader agrees with
/// serde; `parse` and `parse_batch` keep their promises. The first byte
/// chooses how many limits and requests are expected.
pub fn answer(data: &[u8]) {
    let Some((&sel, body)) = data.split_first() else {
        return;
    };
    let expected = usize::from(sel & 3);
    let requests = u32::from(sel >> 2);
    if let Err(broken) = sluice_wire::fuzzing::answer_body(body, expected, requests) {
        panic!("{broken}");
    }
}

/// The filter's decoding of RLS answers (`crates/filter/src/rls/`): one
/// result per descriptor or `None`; what it reads agrees with prost's
/// decoding (the overall code decides; statuses count only one per
/// descriptor).
pub fn rls_answer(data: &[u8]) {
    use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
    use prost::Message;
    let Some((&sel, body)) = data.split_first() else {
        return;
    };
    let expected = usize::from(sel & 7);
    let Some(read) = sluice_filter::rls::decode_response(body, expected) else {
        return;
    };
    let answer = &read.check;
    assert_eq!(answer.limits.len(), expected);
    assert_eq!(read.windows.len(), expected);
    let Ok(pb) = RateLimitResponse::decode(body) else {
        return;
    };
    assert!(
        matches!(pb.overall_code, 1 | 2),
        "read an answer without a code"
    );
    assert_eq!(answer.allowed, pb.overall_code == 1, "overall code differs");
    let denying = pb.statuses.iter().any(|s| s.code == 2);
    if pb.statuses.len() == expected && (answer.allowed || denying) {
        for (mine, theirs) in answer.limits.iter().zip(&pb.statuses) {
            let allowed = answer.allowed || theirs.code != 2;
            assert_eq!(mine.allowed, allowed, "status code differs");
            assert_eq!(mine.remaining, u64::from(theirs.limit_remaining));
        }
    } else {
        assert!(answer.limits.iter().all(|l| l.limit == 0));
        let denied = answer.limits.iter().filter(|l| !l.allowed).count();
        assert_eq!(denied, usize::from(!answer.allowed && expected > 0));
    }
    let reply = &read.reply;
    assert!(reply.response_headers.len() <= pb.response_headers_to_add.len());
    assert!(reply.request_headers.len() <= pb.request_headers_to_add.len());
    for (name, _) in reply.response_headers.iter().chain(&reply.request_headers) {
        assert_eq!(*name, name.to_ascii_lowercase());
    }
    let body = (!pb.raw_body.is_empty()).then_some(pb.raw_body.as_slice());
    assert_eq!(reply.body.as_deref(), body, "raw body differs");
}

/// The limiter's descriptor YAML: descriptors, or an error naming what is
/// wrong; lookups in what loads never panic.
pub fn rls_yaml(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Err(broken) = sluice_limiter::rls::fuzzing::check_descriptor_yaml(&text) {
        panic!("{broken}");
    }
}

/// One current-thread runtime per process for the async targets.
pub(crate) fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        match tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
        {
            Ok(rt) => rt,
            Err(e) => panic!("no runtime: {e}"),
        }
    })
}

/// Runs the target called `name` on `data`; `false` for an unknown name.
pub fn run(name: &str, data: &[u8]) -> bool {
    match name {
        "config" => config(data),
        "state" => state(data),
        "key" => key::key(data),
        "check" => check(data),
        "answer" => answer(data),
        "rls_answer" => rls_answer(data),
        "rls_yaml" => rls_yaml(data),
        "rls_request" => rls_request::rls_request(data),
        "cost_extract" => cost_extract::cost_extract(data),
        "pattern" => pattern::pattern(data),
        _ => return false,
    }
    true
}
