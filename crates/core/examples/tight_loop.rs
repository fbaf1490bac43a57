//! Nanoseconds per decision in a tight loop, best of several runs: a check
//! of the benchmark that is less sensitive to other load on the machine than
//! criterion's mean.
//!
//! `cargo run --release -p sluice-core --example tight_loop`

use sluice_core::{decide, Algorithm, Encoded, Limit, SECOND};
use std::hint::black_box;
use std::time::Instant;

/// Best ns per decision over `runs` runs of `n` decisions, each a little
/// later than the last at the limit's sustained rate (so each admits).
fn measure(limit: &Limit, runs: u32, n: u64) -> f64 {
    let step = limit.window / limit.requests.max(1);
    let mut state: Option<Encoded> = None;
    let mut now = 1_714_521_600 * SECOND;
    let mut best = f64::MAX;
    for _ in 0..runs {
        let start = Instant::now();
        for _ in 0..n {
            now += step;
            let out = decide(
                black_box(limit),
                black_box(state.as_ref().map(Encoded::as_bytes)),
                black_box(now),
                1,
            );
            if let Some(s) = out.new_state {
                state = Some(s);
            }
        }
        best = best.min(start.elapsed().as_nanos() as f64 / n as f64);
    }
    best
}

fn main() {
    let minute = 60 * SECOND;
    let mut cases = Vec::new();
    for a in [
        Algorithm::TokenBucket,
        Algorithm::LeakyBucket,
        Algorithm::Gcra,
        Algorithm::FixedWindow,
    ] {
        cases.push((a.name().to_string(), Limit::new(a, 100, minute)));
    }
    for p in [1, 10, 60] {
        let limit = Limit::new(Algorithm::SlidingWindow, 100, minute).map(|l| l.with_precision(p));
        cases.push((format!("sliding_window/precision_{p}"), limit));
    }
    for n in [10, 100, 1000] {
        cases.push((
            format!("sliding_log/{n}"),
            Limit::new(Algorithm::SlidingLog, n, minute),
        ));
    }
    for (name, limit) in cases {
        match limit {
            Ok(limit) => println!("{name:28} {:8.2} ns", measure(&limit, 7, 2_000_000)),
            Err(e) => eprintln!("{name}: {e}"),
        }
    }
}
