//! A bucket's assignment from its standing: pure, no I/O.
//!
//! Each Envoy reporting a bucket gets an equal share of what remains of the
//! limit's window, as a token bucket holding that share (Envoy's filter
//! starts a token bucket full, and keeps one whose settings are unchanged):
//! `share = max(1, remaining / envoys)`, refilled by `share` over the rest
//! of the window. Nothing remaining is a blanket deny until the next
//! report finds quota again.
//!
//! **Bound.** Every report is charged before it is answered, so between two
//! reports an Envoy admits at most its token bucket: its share plus the
//! refill during the interval (`share × interval / rest of window`). The
//! fleet therefore admits at most `limit` plus what it admits in one
//! reporting interval beyond the remaining it was assigned: the requests
//! admitted between a report and its answer, the refill, and the rounding
//! up of shares to 1 (at most one per Envoy).

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
    let share = (s.remaining / s.envoys.max(1)).max(1);
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
    fn one_envoy_gets_all_that_remains() {
        assert_eq!(assign(&standing(40, 60, 1)), bucket(40, 60));
    }

    #[test]
    fn envoys_share_what_remains() {
        assert_eq!(assign(&standing(40, 30, 3)), bucket(13, 30));
        // Fewer units than Envoys: one each (the bound's rounding).
        assert_eq!(assign(&standing(2, 30, 5)), bucket(1, 30));
        // No Envoy counted yet reads as one.
        assert_eq!(assign(&standing(7, 30, 0)), bucket(7, 30));
    }

    #[test]
    fn nothing_left_is_a_blanket_deny() {
        assert_eq!(assign(&standing(0, 30, 2)), Assignment::DenyAll);
        assert_eq!(Assignment::DenyAll.kind(), "deny_all");
    }

    #[test]
    fn the_fill_interval_is_whole_seconds_at_least_one() {
        let s = Standing {
            remaining: 5,
            reset: SECOND / 2,
            envoys: 1,
        };
        assert_eq!(assign(&s), bucket(5, 1));
        let s = Standing {
            remaining: 5,
            reset: 2 * SECOND + 1,
            envoys: 1,
        };
        assert_eq!(assign(&s), bucket(5, 3));
    }

    #[test]
    fn a_huge_share_saturates() {
        assert_eq!(assign(&standing(u64::MAX, 60, 1)), bucket(u32::MAX, 60));
    }
}
