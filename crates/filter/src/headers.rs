//! Rate-limit header values.
//!
//! With several limits, the one closest to exhaustion is reported
//! ([`sluice_core::most_restrictive`]). Seconds are always rounded up, so a
//! client that waits the advertised time is not refused for being early.
//!
//! * `legacy`: `x-ratelimit-limit: <requests>`, `x-ratelimit-remaining: <n>`,
//!   `x-ratelimit-reset: <seconds until the quota is full>`.
//! * `ietf` (draft-ietf-httpapi-ratelimit-headers-10): `ratelimit-policy`
//!   lists one item per limit that applied, `"<name>";q=<requests>;w=<window
//!   seconds>`, and `ratelimit: "<name>";r=<remaining>;t=<seconds>` reports
//!   the one closest to exhaustion, where `t` is the time until *additional*
//!   quota is available (not until the quota is full). A limit's name is its
//!   rule's name when the rule has one limit, `<rule>.<index>` otherwise.

use crate::config::HeadersMode;
use crate::decimal::push_u64;
use sluice_core::{Algorithm, Decision, Nanos, SECOND};

/// One limit's decision as the headers report it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reported {
    /// Index of the rule whose limit this is.
    pub rule: usize,
    /// Index of the limit in its rule.
    pub limit: usize,
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

/// The time until additional quota is available for `reported`'s limit
/// (the IETF `t`), decided by `algorithm`.
///
/// A denial waits its retry time. Otherwise, nothing counted: none; a fixed
/// window gets quota back all at once when it resets; the buckets (GCRA,
/// token and leaky bucket) regain one request every `window / requests`, so
/// the next one comes within that of the full reset; the sliding window and
/// log free a request when an earlier one leaves the window, which their
/// decision does not say: the reset, the latest that can be.
pub fn next_quota(reported: &Reported, algorithm: Option<Algorithm>) -> Nanos {
    let d = &reported.decision;
    if !d.allowed && d.retry_after > 0 {
        return d.retry_after;
    }
    if d.reset == 0 {
        return 0;
    }
    match algorithm {
        Some(Algorithm::Gcra | Algorithm::TokenBucket | Algorithm::LeakyBucket) if d.limit > 0 => {
            let interval = (reported.window / d.limit).max(1);
            (d.reset - 1) % interval + 1
        }
        _ => d.reset,
    }
}

/// The `retry-after` seconds of a denial: the decision's retry time rounded up
/// (at least 1); a denial that retrying cannot fix (zero retry time) advertises
/// the window. Never earlier than `t` (`next_quota`).
pub fn retry_after_seconds(reported: &Reported, next_quota: Nanos) -> u64 {
    let retry = if reported.decision.retry_after > 0 {
        reported.decision.retry_after
    } else {
        reported.window
    };
    ceil_seconds(retry).max(ceil_seconds(next_quota)).max(1)
}

/// A limit that applied, by the name its IETF items carry.
#[derive(Debug, Clone, Copy)]
pub struct Named<'a> {
    /// The limit's name: its rule's, or `<rule>.<index>` (see [`Named::name`]).
    pub rule: &'a str,
    /// `Some(index)` when the rule has several limits.
    pub index: Option<usize>,
    /// What it decided.
    pub reported: &'a Reported,
}

impl Named<'_> {
    /// Appends the limit's name.
    fn push_name(&self, out: &mut String) {
        out.push_str(self.rule);
        if let Some(index) = self.index {
            out.push('.');
            push_u64(out, index as u64);
        }
    }

    /// At least the bytes [`Self::push_name`] appends.
    fn name_len(&self) -> usize {
        // An index's `.` and up to 20 digits.
        self.rule.len() + self.index.map_or(0, |_| 21)
    }

    /// The limit's name.
    pub fn name(&self) -> String {
        let mut out = String::new();
        self.push_name(&mut out);
        out
    }
}

/// The bytes of an IETF item beyond its name: quotes, two keys of 3 bytes,
/// two numbers of up to 20 digits, a separator.
const ITEM_ROOM: usize = 2 + 2 * (3 + 20) + 2;

/// Appends the rate-limit headers of `mode`: the policy of each limit of
/// `applied` whose quota is known, and the state of `current` (the one
/// closest to exhaustion) with `t` = `next_quota`.
pub fn push_rate_limit_headers(
    mode: HeadersMode,
    applied: &[Named<'_>],
    current: &Named<'_>,
    next_quota: Nanos,
    out: &mut Vec<(&'static str, String)>,
) {
    let d = &current.reported.decision;
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
        // Room for every item without growing: a name and two numbers each.
        let room = |n: &Named<'_>| n.name_len() + ITEM_ROOM;
        let mut policy =
            String::with_capacity(applied.iter().map(room).sum::<usize>().max(room(current)));
        let mut listed = 0usize;
        for named in applied.iter().filter(|n| n.reported.decision.limit > 0) {
            if listed > 0 {
                policy.push_str(", ");
            }
            listed += 1;
            push_item(
                &mut policy,
                named,
                ";q=",
                named.reported.decision.limit,
                ";w=",
                ceil_seconds(named.reported.window),
            );
        }
        if listed == 0 {
            push_item(
                &mut policy,
                current,
                ";q=",
                d.limit,
                ";w=",
                ceil_seconds(current.reported.window),
            );
        }
        let mut state = String::with_capacity(room(current));
        push_item(
            &mut state,
            current,
            ";r=",
            d.remaining,
            ";t=",
            ceil_seconds(next_quota),
        );
        out.push(("ratelimit-policy", policy));
        out.push(("ratelimit", state));
    }
}

fn decimal(n: u64) -> String {
    let mut out = String::with_capacity(20);
    push_u64(&mut out, n);
    out
}

/// Appends `"<name>"<k1><v1><k2><v2>`, one item of the IETF headers (names
/// are of letters, digits, `_` and `-`: nothing to escape in a String).
fn push_item(out: &mut String, named: &Named<'_>, k1: &str, v1: u64, k2: &str, v2: u64) {
    out.push('"');
    named.push_name(out);
    out.push('"');
    out.push_str(k1);
    push_u64(out, v1);
    // A concurrency limit has no window: its policy item has no `w`.
    if k2 != ";w=" || named.reported.window > 0 {
        out.push_str(k2);
        push_u64(out, v2);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::{Denial, MILLISECOND};

    fn reported(remaining: u64, reset: Nanos, retry_after: Nanos) -> Reported {
        Reported {
            rule: 0,
            limit: 0,
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

    fn named<'a>(rule: &'a str, index: Option<usize>, reported: &'a Reported) -> Named<'a> {
        Named {
            rule,
            index,
            reported,
        }
    }

    #[test]
    fn formats_each_mode() {
        let r = reported(7, 1_500 * MILLISECOND, 0);
        let current = named("per-ip", None, &r);
        let mut out = Vec::new();
        push_rate_limit_headers(
            HeadersMode::Both,
            &[current],
            &current,
            1_500 * MILLISECOND,
            &mut out,
        );
        let expected: Vec<(&str, String)> = vec![
            ("x-ratelimit-limit", "100".into()),
            ("x-ratelimit-remaining", "7".into()),
            ("x-ratelimit-reset", "2".into()),
            ("ratelimit-policy", "\"per-ip\";q=100;w=60".into()),
            ("ratelimit", "\"per-ip\";r=7;t=2".into()),
        ];
        assert_eq!(out, expected);
        let mut none = Vec::new();
        push_rate_limit_headers(HeadersMode::None, &[current], &current, 0, &mut none);
        assert!(none.is_empty());
    }

    #[test]
    fn every_limit_that_applied_has_its_policy_item() {
        let a = reported(7, SECOND, 0);
        let mut b = reported(1, SECOND, 0);
        b.limit = 1;
        b.window = 3_600 * SECOND;
        b.decision.limit = 5;
        let mut rls = reported(0, 0, 0);
        rls.decision.limit = 0;
        let applied = [
            named("two", Some(0), &a),
            named("two", Some(1), &b),
            named("svc", None, &rls),
        ];
        let mut out = Vec::new();
        push_rate_limit_headers(HeadersMode::Ietf, &applied, &applied[1], SECOND, &mut out);
        assert_eq!(
            out,
            vec![
                (
                    "ratelimit-policy",
                    "\"two.0\";q=100;w=60, \"two.1\";q=5;w=3600".to_string()
                ),
                ("ratelimit", "\"two.1\";r=1;t=1".to_string()),
            ]
        );
    }

    #[test]
    fn t_is_the_time_until_additional_quota() {
        // A bucket of 100 per minute regains one request every 600 ms.
        let r = reported(7, 55_900 * MILLISECOND, 0);
        assert_eq!(next_quota(&r, Some(Algorithm::Gcra)), 100 * MILLISECOND);
        assert_eq!(
            next_quota(&r, Some(Algorithm::TokenBucket)),
            100 * MILLISECOND
        );
        let whole = reported(7, 1_200 * MILLISECOND, 0);
        assert_eq!(
            next_quota(&whole, Some(Algorithm::LeakyBucket)),
            600 * MILLISECOND
        );
        // A fixed window gives quota back when it resets; the sliding ones
        // advertise the latest time that can be.
        assert_eq!(
            next_quota(&r, Some(Algorithm::FixedWindow)),
            55_900 * MILLISECOND
        );
        assert_eq!(
            next_quota(&r, Some(Algorithm::SlidingLog)),
            55_900 * MILLISECOND
        );
        // Nothing counted: nothing to wait for.
        assert_eq!(next_quota(&reported(100, 0, 0), Some(Algorithm::Gcra)), 0);
        // A denial: its retry time.
        let denied = reported(0, 59 * SECOND, 2 * SECOND);
        assert_eq!(next_quota(&denied, Some(Algorithm::Gcra)), 2 * SECOND);
    }

    #[test]
    fn retry_after_rounds_up_and_is_never_before_t() {
        assert_eq!(retry_after_seconds(&reported(0, SECOND, 1), 1), 1);
        assert_eq!(retry_after_seconds(&reported(0, SECOND, SECOND), SECOND), 1);
        assert_eq!(retry_after_seconds(&reported(0, SECOND, SECOND + 1), 0), 2);
        assert_eq!(
            retry_after_seconds(&reported(0, SECOND, SECOND), 3 * SECOND),
            3
        );
        // Cannot succeed by retrying soon: advertise the window.
        let mut hopeless = reported(0, 0, 0);
        hopeless.decision.allowed = false;
        assert_eq!(retry_after_seconds(&hopeless, 0), 60);
        assert_eq!(ceil_seconds(0), 0);
    }
}
