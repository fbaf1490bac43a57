//! Matching a request against many rules, natively: `evaluate` of a request
//! that one rule of 1, 100 or 1000 matches (the last: the other rules are
//! prefixes, exact paths with a method, prefixes with methods and a header
//! condition, in turn), deciding that rule's one local limit. And what
//! compiling a configuration of 1000 such rules takes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use criterion::{criterion_group, criterion_main, Criterion};
use sluice_core::{Nanos, MILLISECOND, SECOND};
use sluice_filter::config;
use sluice_filter::engine::{self, Verdict};
use sluice_filter::key::{self, RequestView};
use std::cell::Cell;
use std::hint::black_box;
use std::time::Instant;
use support::{allocations, Counting, World};

mod support;

#[global_allocator]
static GLOBAL: Counting = Counting;

/// A configuration of `n` rules, the last of which matches [`Request`].
fn config(n: usize) -> String {
    let limit =
        r#""key":["client_ip"],"limits":[{"algorithm":"gcra","requests":1000000,"window":"1s"}]"#;
    let mut rules: Vec<String> = (0..n - 1)
        .map(|i| {
            let matcher = match i % 3 {
                0 => format!(r#"{{"path_prefix":"/svc{i}/"}}"#),
                1 => format!(r#"{{"path":"/svc{i}/login","methods":["POST"]}}"#),
                _ => format!(
                    r#"{{"path_prefix":"/svc{i}/","methods":["GET","POST"],"headers":[{{"name":"x-tier","exact":"free"}}]}}"#
                ),
            };
            format!(r#"{{"name":"r{i}","match":{matcher},{limit}}}"#)
        })
        .collect();
    rules.push(format!(
        r#"{{"name":"api","match":{{"path_prefix":"/api/","methods":["GET"]}},{limit}}}"#
    ));
    format!(r#"{{"domain":"bench","rules":[{}]}}"#, rules.join(","))
}

/// `GET /api/items` from one client.
struct Request;

impl RequestView for Request {
    fn header(&self, name: &str) -> Option<String> {
        match name {
            ":path" => Some("/api/items?page=2".to_string()),
            ":method" => Some("GET".to_string()),
            _ => None,
        }
    }

    fn source_address(&self) -> Option<String> {
        Some("127.0.0.1:40000".to_string())
    }
}

/// A plan of `n` rules, and a clock.
struct Bench {
    world: World,
    /// Advances a millisecond a request, so that the limit never denies.
    now: Cell<Nanos>,
}

impl Bench {
    fn new(n: usize) -> Bench {
        Bench {
            world: World::new(&config(n)),
            now: Cell::new(1_700_000_000 * SECOND),
        }
    }

    fn evaluate(&self) -> usize {
        let clock = || {
            self.now.set(self.now.get() + MILLISECOND);
            self.now.get()
        };
        let w = &self.world;
        let verdict =
            engine::evaluate(&w.plan, &w.hasher, 1, &Request, &w.store, &w.metrics, clock);
        match verdict {
            Verdict::Allow(admitted) => admitted.applied.len(),
            other => panic!("expected an admission, got {other:?}"),
        }
    }

    /// The rules the request matches, alone.
    fn matching(&self) -> usize {
        let plan = &self.world.plan;
        let request = key::Request::new(&Request, &plan.client_ip);
        let rules = &plan.rules;
        plan.rule_index
            .matching(&request, rules, |r| &r.matcher)
            .count()
    }
}

fn rules(c: &mut Criterion) {
    for n in [1, 100, 1000] {
        let w = Bench::new(n);
        assert_eq!(w.evaluate(), 1);
        let (_, made) = allocations(|| w.evaluate());
        println!("{n} rules: {made} allocations per request");
        c.bench_function(&format!("rules/{n}/evaluate"), |b| {
            b.iter(|| black_box(w.evaluate()))
        });
        c.bench_function(&format!("rules/{n}/match"), |b| {
            b.iter(|| black_box(w.matching()))
        });
    }
    let text = config(1000);
    let started = Instant::now();
    let plan = config::parse(text.as_bytes()).unwrap();
    println!(
        "compiling 1000 rules ({} bytes of JSON) once: {:?}",
        text.len(),
        started.elapsed()
    );
    assert_eq!(plan.rules.len(), 1000);
    c.bench_function("rules/1000/compile", |b| {
        b.iter(|| black_box(config::parse(black_box(text.as_bytes())).unwrap()))
    });
}

criterion_group!(benches, rules);
criterion_main!(benches);
