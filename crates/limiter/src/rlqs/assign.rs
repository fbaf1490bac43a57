//! A bucket's assignment from its standing: pure, no I/O.
//!
//! Each Envoy reporting a bucket gets a share of what remains of the
//! limit's window, as a token bucket holding that share (the service has
//! Envoy start it full at every report), refilled
//! by the share over the rest of the window. Nothing remaining is a blanket
//! deny until the next report finds quota again.
//!
//! * **First report** of the bucket by an Envoy (or one whose count of
//!   Envoys is not settled yet): `remaining / 2^envoys`.
//!   Envoys that have not reported yet are not counted, so the one counted
//!   first would otherwise take everything; the n-th counted takes at most
//!   `1 / 2^n`, and the first shares of any fleet add up to less than what
//!   remained. The requests Envoy admits before its first assignment
//!   (`no_assignment_behavior`) are reported next, and fit in what is left.
//! * **Later reports**: `remaining / (2 × envoys − 1)`. The remaining read
//!   does not hold what the n − 1 others admitted since their own reports,
//!   from shares they still hold: each may spend up to one more share.
//!
//! Shares are at least 1. **Bound** (`the_fleet_bound` below: Envoys
//! starting in any order within one interval, each spending its whole
//! share every interval): for a limit of 1,000, a fleet of 1, 2, 3, 4, 8,
//! 16 and 64 Envoys admits at most 1,000, 1,028, 1,053, 1,069, 1,072, 1,082
//! and 1,130, plus what each Envoy admitted before its first assignment
//! beyond what remained; small limits add up to one request per Envoy and
//! interval, the shares rounded up to 1 (a limit of 40: 41 for 2 Envoys, 63
//! for 16).

use sluice_core::{Nanos, SECOND};

/// A bucket's standing at one report, after the report was charged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Standing {
    /// Requests the limit still admits in its window.
    pub remaining: u64,
    /// Time until the window is full again.
    pub reset: Nanos,
    /// Envoys reporting the bucket (at least 1: the one asking).
    pub envoys: u64,
    /// Whether the Envoys are all counted (see [`Report`]).
    pub report: Report,
}

/// Which report of a bucket an Envoy's is, as far as the count goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Report {
    /// Its first, or one whose count of Envoys is not settled
    /// ([`Presence::settled`](super::presence::Presence::settled)): Envoys
    /// not counted yet may be taking shares too.
    First,
    /// A later one, with every Envoy holding a share counted.
    Later,
}

/// A token bucket in Envoy's `envoy.type.v3.TokenBucket` terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenBucket {
    /// Tokens held at most (and at the start).
    pub max_tokens: u32,
    /// Tokens added every `fill_interval_secs`.
    pub tokens_per_fill: u32,
    /// Whole seconds: Envoy's filter reads the interval in seconds.
    pub fill_interval_secs: u64,
}

/// What a bucket is told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Assignment {
    /// Admit every request.
    AllowAll,
    /// Deny every request.
    DenyAll,
    /// Admit as the token bucket does.
    TokenBucket(TokenBucket),
}

impl Assignment {
    /// The assignment's kind as `/metrics` labels it.
    pub fn kind(&self) -> &'static str {
        match self {
            Assignment::AllowAll => "allow_all",
            Assignment::DenyAll => "deny_all",
            Assignment::TokenBucket(_) => "token_bucket",
        }
    }
}

/// The assignment of one Envoy for a bucket standing at `s`.
pub fn assign(s: &Standing) -> Assignment {
    if s.remaining == 0 {
        return Assignment::DenyAll;
    }
    let envoys = s.envoys.max(1);
    let share = match s.report {
        Report::First => s.remaining >> envoys.min(63),
        Report::Later => s.remaining / envoys.saturating_mul(2).saturating_sub(1),
    }
    .max(1);
    let share = u32::try_from(share).unwrap_or(u32::MAX);
    Assignment::TokenBucket(TokenBucket {
        max_tokens: share,
        tokens_per_fill: share,
        fill_interval_secs: s.reset.div_ceil(SECOND).max(1),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn standing(remaining: u64, reset_secs: u64, envoys: u64) -> Standing {
        Standing {
            remaining,
            reset: reset_secs * SECOND,
            envoys,
            report: Report::Later,
        }
    }

    fn first(remaining: u64, reset_secs: u64, envoys: u64) -> Standing {
        Standing {
            report: Report::First,
            ..standing(remaining, reset_secs, envoys)
        }
    }

    fn bucket(max: u32, secs: u64) -> Assignment {
        Assignment::TokenBucket(TokenBucket {
            max_tokens: max,
            tokens_per_fill: max,
            fill_interval_secs: secs,
        })
    }

    #[test]
    fn one_envoy_gets_all_that_remains_once_it_reported() {
        assert_eq!(assign(&standing(40, 60, 1)), bucket(40, 60));
    }

    #[test]
    fn a_first_report_gets_half_of_what_remains_per_envoy_counted() {
        assert_eq!(assign(&first(39, 60, 1)), bucket(19, 60));
        assert_eq!(assign(&first(38, 60, 2)), bucket(9, 60));
        assert_eq!(assign(&first(40, 60, 3)), bucket(5, 60));
        // However many Envoys: at least 1, and no overflow of the shift.
        assert_eq!(assign(&first(40, 60, 1_000)), bucket(1, 60));
    }

    #[test]
    fn envoys_share_what_remains_leaving_room_for_the_others_shares() {
        assert_eq!(assign(&standing(40, 30, 2)), bucket(13, 30));
        assert_eq!(assign(&standing(40, 30, 3)), bucket(8, 30));
        // Fewer units than Envoys: one each (the bound's rounding).
        assert_eq!(assign(&standing(2, 30, 5)), bucket(1, 30));
        // No Envoy counted yet reads as one.
        assert_eq!(assign(&standing(7, 30, 0)), bucket(7, 30));
        assert_eq!(assign(&first(7, 30, 0)), bucket(3, 30));
    }

    #[test]
    fn nothing_left_is_a_blanket_deny() {
        assert_eq!(assign(&standing(0, 30, 2)), Assignment::DenyAll);
        assert_eq!(assign(&first(0, 30, 1)), Assignment::DenyAll);
        assert_eq!(Assignment::DenyAll.kind(), "deny_all");
    }

    #[test]
    fn the_fill_interval_is_whole_seconds_at_least_one() {
        let s = Standing {
            reset: SECOND / 2,
            ..standing(5, 0, 1)
        };
        assert_eq!(assign(&s), bucket(5, 1));
        let s = Standing {
            reset: 2 * SECOND + 1,
            ..standing(5, 0, 1)
        };
        assert_eq!(assign(&s), bucket(5, 3));
    }

    #[test]
    fn a_huge_share_saturates() {
        assert_eq!(assign(&standing(u64::MAX, 60, 1)), bucket(u32::MAX, 60));
    }

    /// A fleet of `envoys` on a manual clock: Envoy `i` sends its first
    /// request at `starts[i]` ms (admitted without an assignment, with
    /// `early` more before its first answer), reports it at once, then every
    /// 5 s; between reports it admits its whole token bucket (each
    /// assignment a full one). Returns the requests admitted.
    fn fleet(limit: u64, starts: &[u64], early: u64) -> u64 {
        let mut reports: Vec<(u64, usize, u64)> = Vec::new();
        for (i, start) in starts.iter().enumerate() {
            for n in 0..8 {
                reports.push((start + n * 5_000, i, n));
            }
        }
        reports.sort_unstable();
        let (mut charged, mut admitted, mut counted) = (0u64, 0u64, 0u64);
        let mut unreported = vec![0u64; starts.len()];
        for (_, i, n) in reports {
            let (usage, report) = if n == 0 {
                counted += 1;
                admitted += 1 + early;
                unreported[i] = early;
                (1, Report::First)
            } else {
                (std::mem::take(&mut unreported[i]), Report::Later)
            };
            charged += usage.min(limit - charged);
            let s = Standing {
                remaining: limit - charged,
                reset: 3_600 * SECOND,
                envoys: counted,
                report,
            };
            let spent = match assign(&s) {
                Assignment::TokenBucket(tb) => u64::from(tb.max_tokens),
                Assignment::DenyAll => 0,
                Assignment::AllowAll => u64::MAX,
            };
            admitted += spent;
            unreported[i] += spent;
        }
        admitted
    }

    /// The worst over start orders and spreads, and over what each Envoy
    /// admits before its first assignment (beyond the limit, not counted).
    fn worst(limit: u64, envoys: u64) -> u64 {
        let mut worst = 0;
        for spread in [10, 300, 1_000, 4_900 / envoys] {
            let ascending: Vec<u64> = (0..envoys).map(|i| i * spread).collect();
            let descending: Vec<u64> = ascending.iter().rev().copied().collect();
            for starts in [ascending, descending] {
                for early in 0..4 {
                    worst = worst.max(fleet(limit, &starts, early) - envoys * early);
                }
            }
        }
        worst
    }

    #[test]
    fn one_envoy_admits_exactly_the_limit() {
        // The requests admitted before the first assignment are charged
        // from the half the first share left.
        for limit in [20, 40, 1_000] {
            for early in 0..4 {
                assert_eq!(
                    fleet(limit, &[0], early),
                    limit,
                    "limit {limit}, early {early}"
                );
            }
        }
    }

    #[test]
    fn the_fleet_bound() {
        // (Envoys, the most admitted for a limit of 1,000.)
        let bounds = [
            (1, 1_000),
            (2, 1_028),
            (3, 1_053),
            (4, 1_069),
            (8, 1_072),
            (16, 1_082),
            (64, 1_130),
        ];
        for (envoys, bound) in bounds {
            assert_eq!(worst(1_000, envoys), bound, "{envoys} Envoys");
        }
        // A limit of 40 (the end-to-end test's): two Envoys admit at most
        // 41; 16 Envoys 63, most of it shares rounded up to 1.
        assert_eq!(worst(40, 2), 41);
        assert_eq!(worst(40, 16), 63);
    }
}
