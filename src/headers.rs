//! Rate-limit header values.
//!
//! With several limits, the one closest to exhaustion is reported
//! ([`sluice_core::most_restrictive`]). Seconds are always rounded up, so a
//! client that waits the advertised time is not refused for being early.
//!
//! * `legacy`: `x-ratelimit-limit: <requests>`, `x-ratelimit-remaining: <n>`,
//!   `x-ratelimit-reset: <seconds until the quota is full>`.
//! * `ietf`: `ratelimit-policy: "<rule>";q=<requests>;w=<window seconds>` and
//!   `ratelimit: "<rule>";r=<remaining>;t=<seconds until reset>`.

use crate::config::HeadersMode;
use crate::decimal::push_u64;
use sluice_core::{Decision, Nanos, SECOND};

/// One limit's decision as the headers report it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reported {
    /// Index of the rule whose limit this is.
    pub rule: usize,
    /// The limit's window.
    pub window: Nanos,
    /// What the limit decided.
    pub decision: Decision,
}

/// Keeps whichever of `current` and `next` is closer to exhaustion.
pub fn more_restrictive(current: Option<Reported>, next: Reported) -> Reported {
    match current {
        None => next,
        Some(current) => match sluice_core::most_restrictive(&[current.decision, next.decision]) {
            Some(1) => next,
            _ => current,
        },
    }
}

/// `nanos` in whole seconds, rounded up.
pub fn ceil_seconds(nanos: Nanos) -> u64 {
    nanos.div_ceil(SECOND)
}

/// The `retry-after` seconds of a denial: the decision's retry time rounded up
/// (at least 1); a denial that retrying cannot fix (zero retry time) advertises
/// the window.
pub fn retry_after_seconds(reported: &Reported) -> u64 {
    let retry = if reported.decision.retry_after > 0 {
        reported.decision.retry_after
    } else {
        reported.window
    };
    ceil_seconds(retry).max(1)
}

/// Appends the rate-limit headers of `mode` for `reported` (of the rule named `rule`).
pub fn push_rate_limit_headers(
    mode: HeadersMode,
    rule: &str,
    reported: &Reported,
    out: &mut Vec<(&'static str, String)>,
) {
    let d = &reported.decision;
    if d.limit == 0 {
        // A rate limit service's limit decided without its answer: its
        // quota is not known here.
        return;
    }
    // Exhaustive, so that a new mode is decided here.
    let (legacy, ietf) = match mode {
        HeadersMode::None => (false, false),
        HeadersMode::Legacy => (true, false),
        HeadersMode::Ietf => (false, true),
        HeadersMode::Both => (true, true),
    };
    if legacy {
        out.push(("x-ratelimit-limit", decimal(d.limit)));
        out.push(("x-ratelimit-remaining", decimal(d.remaining)));
        out.push(("x-ratelimit-reset", decimal(ceil_seconds(d.reset))));
    }
    if ietf {
        let policy = item(rule, ";q=", d.limit, ";w=", ceil_seconds(reported.window));
        let state = item(rule, ";r=", d.remaining, ";t=", ceil_seconds(d.reset));
        out.push(("ratelimit-policy", policy));
        out.push(("ratelimit", state));
    }
}

fn decimal(n: u64) -> String {
    let mut out = String::with_capacity(20);
    push_u64(&mut out, n);
    out
}

/// `"<rule>"<k1><v1><k2><v2>`, one item of the IETF headers.
fn item(rule: &str, k1: &str, v1: u64, k2: &str, v2: u64) -> String {
    let mut out = String::with_capacity(rule.len().saturating_add(48));
    out.push('"');
    out.push_str(rule);
    out.push('"');
    out.push_str(k1);
    push_u64(&mut out, v1);
    out.push_str(k2);
    push_u64(&mut out, v2);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::{Denial, MILLISECOND};

    fn reported(remaining: u64, reset: Nanos, retry_after: Nanos) -> Reported {
        Reported {
            rule: 0,
            window: 60 * SECOND,
            decision: Decision {
                allowed: retry_after == 0,
                limit: 100,
                remaining,
                reset,
                retry_after,
                delay: 0,
                denial: (retry_after > 0).then_some(Denial::OverLimit),
            },
        }
    }

    #[test]
    fn formats_each_mode() {
        let r = reported(7, 1_500 * MILLISECOND, 0);
        let mut out = Vec::new();
        push_rate_limit_headers(HeadersMode::Both, "per-ip", &r, &mut out);
        let expected: Vec<(&str, String)> = vec![
            ("x-ratelimit-limit", "100".into()),
            ("x-ratelimit-remaining", "7".into()),
            ("x-ratelimit-reset", "2".into()),
            ("ratelimit-policy", "\"per-ip\";q=100;w=60".into()),
            ("ratelimit", "\"per-ip\";r=7;t=2".into()),
        ];
        assert_eq!(out, expected);
        let mut none = Vec::new();
        push_rate_limit_headers(HeadersMode::None, "per-ip", &r, &mut none);
        assert!(none.is_empty());
    }

    #[test]
    fn retry_after_rounds_up() {
        assert_eq!(retry_after_seconds(&reported(0, SECOND, 1)), 1);
        assert_eq!(retry_after_seconds(&reported(0, SECOND, SECOND)), 1);
        assert_eq!(retry_after_seconds(&reported(0, SECOND, SECOND + 1)), 2);
        // Cannot succeed by retrying soon: advertise the window.
        let mut hopeless = reported(0, 0, 0);
        hopeless.decision.allowed = false;
        assert_eq!(retry_after_seconds(&hopeless), 60);
        assert_eq!(ceil_seconds(0), 0);
    }
}
