//! Coalesced checks: `n` identical requests decided in one step.

use crate::algo::Mode;
use crate::{decide_all, decide_in, decide_times, Check, Decision, Encoded, Nanos};

/// The result of deciding `n` identical requests in arrival order with
/// [`decide_batch`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchOutcome {
    /// How many requests were admitted: the first `admitted`, in arrival
    /// order; the others were refused and consumed nothing.
    pub admitted: u32,
    /// One decision per check: that of the last request decided, which is
    /// the `n`-th when every request was admitted, else the first refused
    /// one (request `admitted + 1`), decided after the admitted ones, as
    /// [`decide_all`] reports a denied request.
    pub decisions: Vec<Decision>,
    /// One new state per check (`None` when unchanged): the state after the
    /// admitted requests (or a state rebased after a clock step).
    pub new_states: Vec<Option<Encoded>>,
    /// Delay mode: per admitted request, in arrival order, how long to hold
    /// it (the longest of its limits' delays). Empty when no admitted
    /// request waits.
    pub delays: Vec<Nanos>,
}

impl BatchOutcome {
    /// Whether every request was admitted.
    pub fn all_admitted(&self, n: u32) -> bool {
        self.admitted >= n.max(1)
    }
}

fn mode(cost: u64) -> Mode {
    if cost == 0 {
        Mode::Peek
    } else {
        Mode::Commit
    }
}

/// Whether `j` requests of `c` pass at `now`; with a reserve, the j-th
/// passes while the reserve still fits after it (as j calls of
/// [`decide_reserving`](crate::decide_reserving)).
fn admits(c: &Check<'_>, now: Nanos, j: u32) -> bool {
    if c.reserve == 0 || c.cost == 0 {
        let d = decide_times(c.limit, c.state, now, c.cost, u64::from(j), Mode::Peek);
        return d.decision.allowed;
    }
    let total = c
        .cost
        .saturating_mul(u64::from(j))
        .saturating_add(c.reserve);
    let d = decide_in(c.limit, c.state, now, total, Mode::Peek).decision;
    d.allowed && d.delay == 0
}

/// How many of `n` requests every check admits, in arrival order: each
/// limit's share by a binary search (a refusal at one instant is final for
/// identical requests).
fn admitted_of(checks: &[Check<'_>], now: Nanos, n: u32) -> u32 {
    let mut admitted = n;
    for c in checks {
        // Largest j whose j requests this limit admits (0 always is).
        let (mut lo, mut hi) = (0u32, admitted);
        while lo < hi {
            let mid = lo + (hi - lo).div_ceil(2);
            if admits(c, now, mid) {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        admitted = lo;
    }
    admitted
}

/// Decides `n` identical requests (each weighing each check's `cost`) at
/// `now`, in arrival order: request `i` is decided by [`decide_all`] after
/// requests `1..i`, all-or-nothing across the checks. `n` of 0 counts as 1.
///
/// The result is that of `n` calls of [`decide_all`] in a row, each on the
/// states the previous one left (the property tests hold it to that). It is
/// computed without deciding every request: at one instant, a limit that
/// refuses a request refuses every later identical one (a refusal consumes
/// nothing), and `j` admitted requests of cost `c` leave the state that one
/// request of cost `j * c` leaves. So each limit's share is found by a
/// binary search over `j`, and the state by one decision of cost
/// `admitted * c`; only delay mode, whose waits differ per request, takes
/// one decision per admitted request.
pub fn decide_batch(checks: &[Check<'_>], now: Nanos, n: u32) -> BatchOutcome {
    let n = n.max(1);
    let merged = |c: &Check<'_>, j: u32, mode: Mode| {
        decide_times(c.limit, c.state, now, c.cost, u64::from(j), mode)
    };
    let admitted = admitted_of(checks, now, n);

    let mut states: Vec<Option<Encoded>> = vec![None; checks.len()];
    let mut decisions = Vec::with_capacity(checks.len());
    if admitted > 0 {
        for (c, s) in checks.iter().zip(states.iter_mut()) {
            let out = merged(c, admitted, mode(c.cost));
            *s = out.new_state;
            decisions.push(out.decision);
        }
    }
    if admitted < n {
        // The first refused request, after the admitted ones.
        let after: Vec<Check<'_>> = checks
            .iter()
            .zip(&states)
            .map(|(c, s)| Check {
                state: s.as_ref().map(Encoded::as_bytes).or(c.state),
                ..*c
            })
            .collect();
        let refused = decide_all(&after, now);
        decisions = refused.decisions;
        for (s, new) in states.iter_mut().zip(refused.new_states) {
            if new.is_some() {
                *s = new;
            }
        }
    }

    let mut delays = Vec::new();
    let delaying: Vec<&Check<'_>> = checks
        .iter()
        .filter(|c| c.limit.max_delay.is_some())
        .collect();
    if !delaying.is_empty() {
        delays = (1..=admitted)
            .map(|i| {
                delaying
                    .iter()
                    .map(|c| merged(c, i, Mode::Peek).decision.delay)
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        if delays.iter().all(|&d| d == 0) {
            delays.clear();
        }
    }
    BatchOutcome {
        admitted,
        decisions,
        new_states: states,
        delays,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Algorithm, Denial, Limit, MILLISECOND, SECOND};

    const NOW: Nanos = 1_700_000_000 * SECOND;

    fn batch(limits: &[(&Limit, u64)], n: u32) -> BatchOutcome {
        let checks: Vec<Check<'_>> = limits
            .iter()
            .map(|&(limit, cost)| Check::new(limit, None, cost))
            .collect();
        decide_batch(&checks, NOW, n)
    }

    #[test]
    fn admits_a_prefix_and_reports_the_first_refused() {
        let five = Limit::new(Algorithm::FixedWindow, 5, SECOND).unwrap();
        let out = batch(&[(&five, 1)], 8);
        assert_eq!(out.admitted, 5);
        assert!(!out.all_admitted(8));
        let d = out.decisions[0];
        assert_eq!((d.allowed, d.remaining), (false, 0));
        assert_eq!(d.denial, Some(Denial::OverLimit));
        assert!(d.retry_after > 0);
        assert!(out.delays.is_empty());
        // All fit: the last request's decision.
        let out = batch(&[(&five, 2)], 2);
        assert_eq!(out.admitted, 2);
        assert!(out.all_admitted(2));
        assert_eq!(
            (out.decisions[0].allowed, out.decisions[0].remaining),
            (true, 1)
        );
    }

    #[test]
    fn the_strictest_limit_bounds_the_batch_and_the_others_keep_the_rest() {
        let wide = Limit::new(Algorithm::TokenBucket, 10, SECOND).unwrap();
        let narrow = Limit::new(Algorithm::SlidingLog, 3, SECOND).unwrap();
        let out = batch(&[(&wide, 1), (&narrow, 1)], 6);
        assert_eq!(out.admitted, 3);
        // The wide limit admits the fourth but consumed only three.
        let (w, n) = (out.decisions[0], out.decisions[1]);
        assert_eq!((w.allowed, w.remaining), (true, 7));
        assert_eq!((n.allowed, n.remaining), (false, 0));
        // Nothing fits: nothing stored.
        let out = batch(&[(&wide, 1), (&narrow, 4)], 3);
        assert_eq!(out.admitted, 0);
        assert!(out.new_states.iter().all(Option::is_none));
    }

    #[test]
    fn delay_mode_gives_each_request_its_wait() {
        // 10 per second, burst 1, up to a second of delay: 0, 100, ... 1000 ms.
        let l = Limit::new(Algorithm::Gcra, 10, SECOND)
            .unwrap()
            .with_burst(1)
            .with_max_delay(Some(SECOND));
        let out = batch(&[(&l, 1)], 15);
        assert_eq!(out.admitted, 11);
        let want: Vec<Nanos> = (0..11).map(|i| i * 100 * MILLISECOND).collect();
        assert_eq!(out.delays, want);
        assert_eq!(out.decisions[0].denial, Some(Denial::DelayTooLong));
        assert_eq!(out.decisions[0].retry_after, 1100 * MILLISECOND);
    }
}
