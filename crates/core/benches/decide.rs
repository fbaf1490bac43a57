//! Nanoseconds per decision, allowed path on a warm state, including the
//! decode of the stored state and the encode of the new one.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use criterion::{criterion_group, criterion_main, Criterion};
use sluice_core::{decide, Algorithm, Limit, Nanos, SECOND};
use std::hint::black_box;

const T0: Nanos = 1_714_521_600 * SECOND;

/// Benchmarks `limit` on a key kept about half full: each iteration decides
/// one request a little later than the last, at the limit's sustained rate,
/// so every decision admits and writes a new state.
fn bench(c: &mut Criterion, name: &str, limit: &Limit) {
    let step = limit.window / limit.requests;
    let mut state = None;
    let mut now = T0;
    // Warm the key up to half its burst.
    for _ in 0..limit.burst / 2 {
        let out = decide(
            limit,
            state.as_ref().map(|s: &sluice_core::Encoded| s.as_bytes()),
            now,
            1,
        );
        state = out.new_state.or(state);
    }
    c.bench_function(name, |b| {
        b.iter(|| {
            now += step;
            let out = decide(
                black_box(limit),
                black_box(state.as_ref().map(|s| s.as_bytes())),
                black_box(now),
                1,
            );
            debug_assert!(out.decision.allowed);
            if let Some(s) = out.new_state {
                state = Some(s);
            }
        })
    });
}

fn algorithms(c: &mut Criterion) {
    let minute = 60 * SECOND;
    for a in [
        Algorithm::TokenBucket,
        Algorithm::LeakyBucket,
        Algorithm::Gcra,
        Algorithm::FixedWindow,
    ] {
        let limit = Limit::new(a, 100, minute).unwrap();
        bench(c, a.name(), &limit);
    }
    for precision in [1, 10, 60] {
        let limit = Limit::new(Algorithm::SlidingWindow, 100, minute)
            .unwrap()
            .with_precision(precision);
        bench(c, &format!("sliding_window/precision_{precision}"), &limit);
    }
    for n in [10, 100, 1000] {
        let limit = Limit::new(Algorithm::SlidingLog, n, minute).unwrap();
        bench(c, &format!("sliding_log/{n}"), &limit);
    }
}

criterion_group!(benches, algorithms);
criterion_main!(benches);
