use super::*;
use std::collections::HashMap;

/// A small deterministic generator (xorshift), so traces repeat.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Checks every Space-Saving bound of `s` against the exact counts of the
/// `n` refusals it saw.
fn check_bounds(s: &Summary, exact: &HashMap<String, u64>, n: u64, max_error: u64) {
    for e in s.entries() {
        let t = exact.get(&e.key).copied().unwrap_or(0);
        assert!(e.refusals >= t, "{e:?} under {t}");
        assert!(e.refusals - e.error <= t, "{e:?} over {t}");
        assert!(e.error <= max_error, "{e:?} error above {max_error}");
    }
    // Every key counted more than n/k is listed.
    let floor = n / s.capacity() as u64;
    for (k, t) in exact {
        if *t > floor {
            assert!(s.entries().iter().any(|e| &e.key == k), "{k} ({t}) missing");
        }
    }
}

#[test]
fn each_entry_bounds_its_key_and_the_errors_stay_within_n_over_k() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut s = Summary::new(32);
    let mut exact = HashMap::new();
    let n = 200_000u64;
    for _ in 0..n {
        // Skewed: a few keys often, many keys rarely.
        let r = rng.next();
        let key = if r % 4 == 0 {
            format!("hot{}", r % 5)
        } else {
            format!("k{}", r % 5_000)
        };
        s.add(&key, 1);
        *exact.entry(key).or_insert(0) += 1;
    }
    assert_eq!(s.entries().len(), 32);
    check_bounds(&s, &exact, n, n / 32);
    let top: Vec<_> = s.top(5).into_iter().map(|e| e.key).collect();
    let mut hot: Vec<_> = (0..5).map(|i| format!("hot{i}")).collect();
    hot.sort();
    let mut top_sorted = top.clone();
    top_sorted.sort();
    assert_eq!(top_sorted, hot);
}

#[test]
fn a_flood_key_among_a_million_distinct_keys_comes_first_in_fixed_memory() {
    let mut s = Summary::new(32);
    let bound = 12 + 32 * ENTRY_BYTES;
    let mut largest = 0;
    for i in 0..1_000_000u64 {
        s.add(&format!("10.{}.{}.{}", i >> 16, (i >> 8) & 255, i & 255), 1);
        if i % 10 == 0 {
            s.add("203.0.113.7", 1);
        }
        if i % 100_000 == 0 {
            largest = largest.max(encode(&s, 0).len());
        }
    }
    assert_eq!(s.entries().len(), 32);
    assert!(largest <= bound, "{largest} > {bound}");
    assert!(encode(&s, 0).len() <= bound);
    let first = &s.top(1)[0];
    assert_eq!(first.key, "203.0.113.7");
    // 100,000 true refusals; its overcount is at most n/k.
    assert!(first.refusals >= 100_000);
    assert!(first.refusals - first.error <= 100_000);
    assert!(first.error <= 1_100_000 / 32);
}

#[test]
fn workers_folded_at_their_ticks_keep_errors_within_2n_over_k() {
    let mut rng = Rng(42);
    let mut shared = Summary::new(16);
    let mut workers = [Summary::new(16), Summary::new(16)];
    let mut exact = HashMap::new();
    let n = 100_000u64;
    for i in 0..n {
        let r = rng.next();
        let key = if r % 3 == 0 {
            "flood".to_owned()
        } else {
            format!("k{}", r % 2_000)
        };
        workers[(r >> 32) as usize % 2].add(&key, 1);
        *exact.entry(key).or_insert(0) += 1;
        if i % 1_000 == 999 {
            for w in &mut workers {
                shared.absorb(w);
                assert!(w.is_empty());
            }
        }
    }
    check_bounds(&shared, &exact, n, 2 * n / 16);
    assert_eq!(shared.top(1)[0].key, "flood");
}

#[test]
fn a_full_summary_gives_the_least_counted_place_with_its_count_as_error() {
    let mut s = Summary::new(2);
    s.add("a", 5);
    s.add("b", 2);
    s.add("c", 1);
    assert_eq!(
        s.top(2),
        vec![
            Entry {
                key: "a".into(),
                refusals: 5,
                error: 0
            },
            Entry {
                key: "c".into(),
                refusals: 3,
                error: 2
            },
        ]
    );
}

#[test]
fn decay_halves_and_drops_keys_left_at_zero() {
    let mut s = Summary::new(4);
    s.add("a", 9);
    s.add("b", 1);
    s.decay();
    assert_eq!(
        s.entries(),
        &[Entry {
            key: "a".into(),
            refusals: 4,
            error: 0
        }]
    );
}

#[test]
fn the_wire_form_round_trips_and_rejects_what_is_cut_short() {
    let mut s = Summary::new(3);
    s.add("a", 2);
    s.add("é", 7);
    let bytes = encode(&s, 123);
    assert_eq!(decode(&bytes, 3), Some((s, 123)));
    assert_eq!(decode(&bytes[..bytes.len() - 1], 3), None);
    assert_eq!(decode(&[], 3), None);
}

#[test]
fn long_keys_are_cut_on_a_character_boundary() {
    let mut s = Summary::new(1);
    let long = "é".repeat(100);
    s.add(&long, 1);
    assert_eq!(s.entries()[0].key.len(), MAX_KEY_BYTES);
    assert!(long.starts_with(&s.entries()[0].key));
}
