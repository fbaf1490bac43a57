//! The arrival trace: quiet traffic, bursts on both sides of a window
//! boundary, steady overload, and one burst arriving all at once.

use sluice_core::{Nanos, MILLISECOND, SECOND};

/// Arrival times in nanoseconds from the start of the trace, sorted.
pub fn arrivals() -> Vec<Nanos> {
    let mut t = Vec::new();
    // 0-6 s: one request a second, well under the limit.
    t.extend((0..6).map(|i| i * SECOND));
    // 9.0-9.95 s: 20 requests in the last second of the first window...
    t.extend((0..20).map(|i| 9 * SECOND + i * 50 * MILLISECOND));
    // 10.0-10.95 s: ...and 20 more in the first second of the next one.
    t.extend((0..20).map(|i| 10 * SECOND + i * 50 * MILLISECOND));
    // 14-30 s: steady overload, 3 requests a second against a rate of 1.
    t.extend((0..48).map(|i| 14 * SECOND + i * SECOND / 3));
    // 36 s: 30 requests within 30 ms, after a quiet spell.
    t.extend((0..30).map(|i| 36 * SECOND + i * MILLISECOND));
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrivals_are_sorted() {
        let a = arrivals();
        assert!(a.windows(2).all(|w| w[0] <= w[1]));
        assert_eq!(a.len(), 124);
    }
}
