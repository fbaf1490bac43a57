//! Native match times of typical patterns, the engine beside `regex-lite`;
//! printed, never asserted: `cargo test --release -p sluice-filter --lib
//! pattern::tests::timing -- --ignored --nocapture`.

use super::*;
use super::{reference, reference_capture};
use std::hint::black_box;
use std::time::Instant;

const CASES: &[(&str, &str)] = &[
    ("/api/v[0-9]+/users/[^/]+", "/api/v2/users/12345"),
    ("/api/v[0-9]+/users/[^/]+", "/static/images/logo.png"),
    (
        "Bearer ([A-Za-z0-9._-]+)",
        "Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4ifQ.SflKxwRJSMeKKF2QT4fwpM",
    ),
    ("(free|trial)-.*", "trial-user-42"),
    (
        "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
        "123e4567-e89b-12d3-a456-426614174000",
    ),
    ("(?i)application/json.*", "Application/JSON; charset=utf-8"),
];

/// Nanoseconds a call of `f` takes, over enough calls to last a while.
fn time(mut f: impl FnMut() -> bool) -> f64 {
    let rounds = 50_000;
    for _ in 0..rounds / 10 {
        black_box(f());
    }
    let started = Instant::now();
    for _ in 0..rounds {
        black_box(f());
    }
    started.elapsed().as_nanos() as f64 / f64::from(rounds)
}

#[test]
#[ignore = "prints timings; run in release"]
fn typical_patterns_against_regex_lite() {
    println!(
        "pattern | value bytes | matches: ns engine / regex-lite | capture: ns engine / regex-lite"
    );
    for &(text, value) in CASES {
        let (Ok(p), Some(re)) = (Pattern::new(text), reference(text)) else {
            panic!("{text}");
        };
        let value = black_box(value);
        let m = (time(|| p.matches(value)), time(|| re.is_match(value)));
        let c = (
            time(|| p.capture(value).is_some()),
            time(|| reference_capture(&re, value).is_some()),
        );
        println!(
            "`{text}` | {} | {:.0} / {:.0} | {:.0} / {:.0}",
            value.len(),
            m.0,
            m.1,
            c.0,
            c.1
        );
    }
}
