//! Leases: an admitted check also takes a slice of a limit's quota for the
//! caller to spend itself, and gives back what a previous slice left.

use crate::algo::Mode;
use crate::{decide_all, decide_in, refund_at, Check, Decision, Encoded, Nanos};

/// One limit's lease terms in a check decided by [`decide_all_leased`].
/// The default takes and gives back nothing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Lease {
    /// When the check is admitted, take up to this many units more than the
    /// request's weight (0: none).
    pub take: u64,
    /// Units to give back before deciding (0: none), as [`refund_at`] gives
    /// them back: consumed at `returned_at`.
    pub returned: u64,
    /// When the returned units were consumed.
    pub returned_at: Nanos,
}

/// The result of [`decide_all_leased`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeasedOutcome {
    /// True when every limit allowed the request.
    pub allowed: bool,
    /// One decision per check, in order, as [`decide_all`] reports them; a
    /// limit that granted a lease reports the state after the request and
    /// the lease.
    pub decisions: Vec<Decision>,
    /// One new state per check (`None` when unchanged). A denied check
    /// consumes nothing, but the states it gave units back to (or rebased
    /// after a clock step) are here.
    pub new_states: Vec<Option<Encoded>>,
    /// Units granted per check, in order: 0 when denied.
    pub granted: Vec<u64>,
}

/// Decides `checks` together as [`decide_all`] does, after giving back each
/// check's `returned` units and, when the request is admitted, granting each
/// its lease: the largest `k` in `0..=take` such that one decision of cost
/// `cost + k` admits at once (no wait in delay mode), `k` units debited with
/// the request in that one decision. A denied check grants nothing and
/// consumes nothing; the units given back stay given back. `leases` is
/// matched to `checks` by position; missing entries take nothing.
pub fn decide_all_leased(checks: &[Check<'_>], leases: &[Lease], now: Nanos) -> LeasedOutcome {
    let lease = |i: usize| leases.get(i).copied().unwrap_or_default();
    let returned: Vec<Option<Encoded>> = checks
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let l = lease(i);
            c.state
                .and_then(|s| refund_at(c.limit, s, l.returned_at, now, l.returned))
        })
        .collect();
    let after: Vec<Check<'_>> = checks
        .iter()
        .zip(&returned)
        .map(|(c, r)| Check {
            state: r.as_ref().map(Encoded::as_bytes).or(c.state),
            ..*c
        })
        .collect();
    let multi = decide_all(&after, now);
    let mut decisions = multi.decisions;
    let mut new_states = multi.new_states;
    let mut granted = vec![0u64; checks.len()];
    if multi.allowed {
        for (i, c) in after.iter().enumerate() {
            let take = lease(i).take;
            let k = if take == 0 { 0 } else { grant(c, take, now) };
            if k == 0 {
                continue;
            }
            let out = decide_in(
                c.limit,
                c.state,
                now,
                c.cost.saturating_add(k),
                Mode::Commit,
            );
            if let (Some(d), Some(s), Some(g)) = (
                decisions.get_mut(i),
                new_states.get_mut(i),
                granted.get_mut(i),
            ) {
                *d = out.decision;
                *s = out.new_state;
                *g = k;
            }
        }
    }
    for (s, r) in new_states.iter_mut().zip(returned) {
        if s.is_none() {
            *s = r;
        }
    }
    LeasedOutcome {
        allowed: multi.allowed,
        decisions,
        new_states,
        granted,
    }
}

/// The largest `k` in `0..=take` whose cost `c.cost + k` fits now: at one
/// instant a larger cost never fits where a smaller one does not, so a
/// binary search over decisions that consume nothing.
fn grant(c: &Check<'_>, take: u64, now: Nanos) -> u64 {
    let fits = |k: u64| {
        let d = decide_in(c.limit, c.state, now, c.cost.saturating_add(k), Mode::Peek).decision;
        d.allowed && d.delay == 0
    };
    let (mut lo, mut hi) = (0u64, take);
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if fits(mid) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    // 0 also when even the request alone waits (delay mode): nothing fits.
    lo
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{decide, Algorithm, Limit, SECOND};

    const NOW: Nanos = 1_700_000_000 * SECOND;

    fn leased(limit: &Limit, state: Option<&[u8]>, cost: u64, l: Lease) -> LeasedOutcome {
        let checks = [Check::new(limit, state, cost)];
        decide_all_leased(&checks, &[l], NOW)
    }

    fn take(n: u64) -> Lease {
        Lease {
            take: n,
            ..Lease::default()
        }
    }

    #[test]
    fn grants_what_fits_and_reports_after_it() {
        for alg in Algorithm::ALL {
            let ten = Limit::new(alg, 10, SECOND).unwrap();
            let out = leased(&ten, None, 2, take(5));
            assert!(out.allowed, "{alg}");
            assert_eq!(out.granted, [5], "{alg}");
            assert_eq!(out.decisions[0].remaining, 3, "{alg}");
            // The state is that of one decision of cost 7.
            let once = decide(&ten, None, NOW, 7);
            assert_eq!(out.new_states[0], once.new_state, "{alg}");
            // Only 3 left: 1 for the request, 2 leased of 5 asked.
            let s = out.new_states[0].clone().unwrap();
            let out = leased(&ten, Some(s.as_bytes()), 1, take(5));
            assert_eq!(
                (out.granted[0], out.decisions[0].remaining),
                (2, 0),
                "{alg}"
            );
            // Nothing left: denied, nothing granted or consumed.
            let s2 = out.new_states[0].clone().unwrap();
            let out = leased(&ten, Some(s2.as_bytes()), 1, take(5));
            assert!(!out.allowed, "{alg}");
            assert_eq!(out.granted, [0]);
            assert_eq!(out.new_states, [None]);
        }
    }

    #[test]
    fn returns_are_applied_even_when_denied() {
        let five = Limit::new(Algorithm::FixedWindow, 5, SECOND).unwrap();
        let full = decide(&five, None, NOW, 5).new_state.unwrap();
        // The request weighs 4: 2 given back are not enough, but stay given back.
        let back = Lease {
            returned: 2,
            returned_at: NOW,
            ..take(3)
        };
        let out = leased(&five, Some(full.as_bytes()), 4, back);
        assert!(!out.allowed);
        assert_eq!((out.granted[0], out.decisions[0].remaining), (0, 2));
        let s = out.new_states[0].clone().unwrap();
        let out = leased(&five, Some(s.as_bytes()), 1, take(3));
        assert_eq!((out.allowed, out.granted[0]), (true, 1));
        // A return from an earlier window gives nothing back.
        let old = Lease {
            returned: 5,
            returned_at: NOW - 2 * SECOND,
            ..Lease::default()
        };
        let out = leased(&five, Some(full.as_bytes()), 1, old);
        assert!(!out.allowed);
        assert_eq!(out.new_states, [None]);
    }

    #[test]
    fn a_denying_limit_grants_nothing_anywhere() {
        let wide = Limit::new(Algorithm::TokenBucket, 100, SECOND).unwrap();
        let one = Limit::new(Algorithm::SlidingLog, 1, SECOND).unwrap();
        let spent = decide(&one, None, NOW, 1).new_state.unwrap();
        let checks = [
            Check::new(&wide, None, 1),
            Check::new(&one, Some(spent.as_bytes()), 1),
        ];
        let out = decide_all_leased(&checks, &[take(50), take(50)], NOW);
        assert!(!out.allowed);
        assert_eq!(out.granted, [0, 0]);
        assert_eq!(out.decisions[0].remaining, 100);
        assert_eq!(out.new_states, [None, None]);
    }

    #[test]
    fn a_waiting_request_is_granted_nothing() {
        let l = Limit::new(Algorithm::Gcra, 10, SECOND)
            .unwrap()
            .with_burst(1)
            .with_max_delay(Some(SECOND));
        let first = leased(&l, None, 1, take(4));
        assert_eq!(first.granted, [0]);
        let s = first.new_states[0].clone().unwrap();
        let out = leased(&l, Some(s.as_bytes()), 1, take(4));
        assert!(out.allowed && out.decisions[0].delay > 0);
        assert_eq!(out.granted, [0]);
    }
}
