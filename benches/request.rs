//! The filter's request path natively, without Envoy: what Sluice's own code
//! costs per request beyond its host calls. One global limit (the bench's
//! `global-memory` row: one `gcra` limit keyed by `client_ip` from a trusted
//! `x-forwarded-for`, `ietf` headers), one key: `evaluate` builds the check,
//! `record` reads the limiter's answer, `finish` merges it, and the admitted
//! response's headers are formatted. Host calls are in-memory fakes here.
//!
//! Before the timings, it prints the allocations of one request of each step.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use criterion::{criterion_group, criterion_main, Criterion};
use sluice_core::{Nanos, MILLISECOND, SECOND};
use sluice_filter::engine::{self, PendingCheck, Verdict};
use sluice_filter::key::RequestView;
use sluice_filter::response;
use std::cell::Cell;
use std::hint::black_box;
use support::{allocations, Counting, World};

mod support;

#[global_allocator]
static GLOBAL: Counting = Counting;

const NOW: Nanos = 1_700_000_000 * SECOND;

/// The configuration of the bench's `global-memory` row.
const CONFIG: &str = r#"{"domain":"bench","client_ip":{"xff_trusted_hops":1},
  "limiter":{"cluster":"sluice_limiter","authority":"sluice-limiter","timeout":"50ms"},
  "rules":[{"name":"per-ip","key":["client_ip"],
    "limits":[{"algorithm":"gcra","requests":1000,"window":"10ms","scope":"global"}]}]}"#;

/// What the limiter answers an admitted check of that row.
const ANSWER: &[u8] =
    br#"{"allowed":true,"limits":[{"allowed":true,"limit":1000,"remaining":999,"reset_ms":1,"retry_after_ms":0}]}"#;

/// The request as Envoy shows it to the filter in that row.
struct Request;

impl RequestView for Request {
    fn header(&self, name: &str) -> Option<String> {
        (name == "x-forwarded-for").then(|| "10.0.0.0,127.0.0.1".to_string())
    }

    fn source_address(&self) -> Option<String> {
        Some("127.0.0.1:40000".to_string())
    }
}

impl World {
    fn evaluate(&self) -> PendingCheck {
        let verdict = engine::evaluate(
            &self.plan,
            &self.hasher,
            1,
            &Request,
            &self.store,
            &self.metrics,
            || NOW,
        );
        match verdict {
            Verdict::Check(pending) => *pending,
            other => panic!("expected a check, got {other:?}"),
        }
    }

    fn answer(&self, mut pending: PendingCheck) -> PendingCheck {
        assert_eq!(pending.call_count(), 1);
        black_box(pending.body(0));
        assert!(pending.record(0, Some(ANSWER)));
        pending
    }

    fn finish(&self, pending: PendingCheck) -> usize {
        match engine::finish(&self.plan, pending, &self.store, &self.metrics) {
            Verdict::Allow(admitted) => {
                let headers = response::admitted_headers(
                    &self.plan,
                    admitted.report.as_ref(),
                    &admitted.applied,
                    &admitted.shadow_denied,
                );
                headers.len()
            }
            other => panic!("expected an admission, got {other:?}"),
        }
    }

    fn request(&self) -> usize {
        self.finish(self.answer(self.evaluate()))
    }
}

fn global(c: &mut Criterion) {
    let w = World::new(CONFIG);
    assert_eq!(w.request(), 2);
    let (pending, evaluate) = allocations(|| w.evaluate());
    println!("check body: {}", String::from_utf8_lossy(pending.body(0)));
    let (pending, record) = allocations(|| w.answer(pending));
    let (_, finish) = allocations(|| w.finish(pending));
    println!(
        "allocations per request: evaluate {evaluate}, record {record}, finish and headers {finish}"
    );
    c.bench_function("global/request", |b| b.iter(|| black_box(w.request())));
    c.bench_function("global/evaluate", |b| b.iter(|| black_box(w.evaluate())));
    c.bench_function("global/record", |b| {
        b.iter_batched(
            || w.evaluate(),
            |p| black_box(w.answer(p)),
            criterion::BatchSize::SmallInput,
        )
    });
    c.bench_function("global/finish+headers", |b| {
        b.iter_batched(
            || w.answer(w.evaluate()),
            |p| black_box(w.finish(p)),
            criterion::BatchSize::SmallInput,
        )
    });
}

/// The configuration of the bench's `local-gcra` row.
const LOCAL: &str = r#"{"domain":"bench","client_ip":{"xff_trusted_hops":1},
  "rules":[{"name":"per-ip","key":["client_ip"],
    "limits":[{"algorithm":"gcra","requests":1000,"window":"10ms"}]}]}"#;

/// One request of the `local-gcra` row: the decision against the key
/// table, then the admitted response's headers.
fn local_request(w: &World, clock: &Cell<Nanos>) -> usize {
    // 20 µs apart: 500 requests a window of 10 ms, under its 1,000.
    let now = || {
        clock.set(clock.get() + 20 * MILLISECOND / 1000);
        clock.get()
    };
    let verdict = engine::evaluate(&w.plan, &w.hasher, 1, &Request, &w.store, &w.metrics, now);
    match verdict {
        Verdict::Allow(admitted) => response::admitted_headers(
            &w.plan,
            admitted.report.as_ref(),
            &admitted.applied,
            &admitted.shadow_denied,
        )
        .len(),
        other => panic!("expected an admission, got {other:?}"),
    }
}

fn local(c: &mut Criterion) {
    let w = World::new(LOCAL);
    let clock = Cell::new(NOW);
    assert_eq!(local_request(&w, &clock), 2);
    let (_, n) = allocations(|| local_request(&w, &clock));
    println!("allocations per local request: decision and headers {n}");
    c.bench_function("local/request", |b| {
        b.iter(|| black_box(local_request(&w, &clock)))
    });
}

criterion_group!(benches, global, local);
criterion_main!(benches);
