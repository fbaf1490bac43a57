//! The answer for each descriptor of a decided call: its code, limit,
//! remaining count and reset, and the result its metric counts.

use super::plan::Plan;
use crate::store::Verdict;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit as PbRateLimit,
};
use envoy_types::pb::google::protobuf::Duration as PbDuration;
use sluice_core::{Decision, Nanos, SECOND};

/// One descriptor answered.
pub(super) struct Answer {
    pub(super) status: DescriptorStatus,
    /// What its metric counts (`ok`, `over_limit`, `no_match`, ...).
    pub(super) result: &'static str,
    /// Whether it puts the call over the limit.
    pub(super) over: bool,
}

/// How the store decided a call: the enforcing check's verdict (none when
/// it was not asked) and each shadow check's.
pub(super) struct Verdicts<'a> {
    pub(super) enforcing: Option<&'a Verdict>,
    /// Each refund's query after it (`is_negative_hits`).
    pub(super) refunds: &'a [Decision],
    pub(super) shadows: &'a [Option<Verdict>],
}

/// The answer for one descriptor's plan at `now`.
pub(super) fn answer(plan: &Plan, verdicts: &Verdicts<'_>, now: Nanos) -> Answer {
    match plan {
        Plan::NoMatch => ok(None, 0, "no_match"),
        Plan::Replaced => ok(None, 0, "replaced"),
        Plan::Unlimited => ok(None, u32::MAX, "unlimited"),
        Plan::GiveBack { report, index } => match index.and_then(|i| verdicts.refunds.get(i)) {
            Some(d) => Answer {
                status: status(
                    false,
                    Some(report.current_limit()),
                    clamp(d.remaining),
                    d.reset,
                ),
                result: "given_back",
                over: false,
            },
            None => ok(Some(report.current_limit()), 0, "given_back"),
        },
        Plan::Block { report, shadow, .. } => {
            let window = report.window.max(1);
            let reset = window - now % window;
            Answer {
                status: status(!*shadow, Some(report.current_limit()), 0, reset),
                result: if *shadow {
                    "shadow_over_limit"
                } else {
                    "over_limit"
                },
                over: !*shadow,
            }
        }
        Plan::Check {
            report,
            shadow,
            index,
            prefix,
            later,
            ..
        } => {
            let decision: Option<&Decision> = if *shadow {
                verdicts
                    .shadows
                    .get(*index)
                    .and_then(Option::as_ref)
                    .and_then(|v| v.decisions.first())
            } else {
                verdicts.enforcing.and_then(|v| v.decisions.get(*index))
            };
            // Not decided: the call was refused by another limit (a shadow
            // limit is then not counted), or a shadow check failed.
            let Some(d) = decision else {
                return ok(Some(report.current_limit()), 0, "not_decided");
            };
            let seen = Shared {
                prefix: *prefix,
                later: *later,
            };
            let (allowed, remaining) = seen.remaining(d);
            let over = !allowed && !*shadow;
            Answer {
                status: status(over, Some(report.current_limit()), remaining, d.reset),
                result: match (allowed, *shadow) {
                    (true, _) => "ok",
                    (false, false) => "over_limit",
                    (false, true) => "shadow_over_limit",
                },
                over,
            }
        }
    }
}

/// A descriptor's share of a counter that other descriptors of its call
/// weigh too: `prefix` hits from it and those before it, `later` after it.
struct Shared {
    prefix: u64,
    later: u64,
}

impl Shared {
    /// Whether this descriptor passes and what remains as it sees it.
    /// Admitted: the remaining count after its own hits and those before
    /// it, as envoyproxy/ratelimit reports it (it adds them one descriptor
    /// at a time). Denied: nothing was consumed; the descriptors before the
    /// one that does not fit pass and report what is left, the others are
    /// over the limit with 0 left.
    fn remaining(&self, d: &Decision) -> (bool, u32) {
        let left = if d.allowed {
            d.remaining.saturating_add(self.later)
        } else if self.later > 0 && self.prefix <= d.remaining {
            d.remaining
        } else {
            return (false, 0);
        };
        (true, clamp(left))
    }
}

/// A count as `limit_remaining` reports it (at most 2^32-1).
fn clamp(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

fn ok(current_limit: Option<PbRateLimit>, remaining: u32, result: &'static str) -> Answer {
    Answer {
        status: DescriptorStatus {
            code: Code::Ok as i32,
            current_limit,
            limit_remaining: remaining,
            duration_until_reset: None,
            quota: None,
        },
        result,
        over: false,
    }
}

fn status(
    over: bool,
    current_limit: Option<PbRateLimit>,
    remaining: u32,
    reset: Nanos,
) -> DescriptorStatus {
    let code = if over { Code::OverLimit } else { Code::Ok };
    DescriptorStatus {
        code: code as i32,
        current_limit,
        limit_remaining: remaining,
        duration_until_reset: Some(duration(reset)),
        quota: None,
    }
}

/// Whole seconds, rounded up: envoyproxy/ratelimit sends whole seconds
/// (`unit - now % unit`, which this is for a fixed window), and Envoy's
/// `X-RateLimit-Reset` keeps only the seconds.
fn duration(ns: Nanos) -> PbDuration {
    PbDuration {
        seconds: i64::try_from(ns.div_ceil(SECOND)).unwrap_or(i64::MAX),
        nanos: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_whole_seconds_rounded_up() {
        let secs = |ns| duration(ns).seconds;
        assert_eq!((secs(0), secs(1), secs(SECOND)), (0, 1, 1));
        assert_eq!((secs(SECOND + 1), secs(30 * SECOND - 1)), (2, 30));
        assert_eq!(duration(SECOND / 2).nanos, 0);
    }

    fn decided(allowed: bool, remaining: u64) -> Decision {
        Decision {
            allowed,
            limit: 10,
            remaining,
            reset: SECOND,
            retry_after: 0,
            delay: 0,
            denial: None,
        }
    }

    #[test]
    fn a_shared_counter_is_seen_one_descriptor_at_a_time() {
        let at = |prefix, later| Shared { prefix, later };
        // 10 left before a call of 1 + 2 + 3 hits on one counter: 4 after.
        let admitted = decided(true, 4);
        assert_eq!(at(1, 5).remaining(&admitted), (true, 9));
        assert_eq!(at(3, 3).remaining(&admitted), (true, 7));
        assert_eq!(at(6, 0).remaining(&admitted), (true, 4));
        // 2 left: the first fits, the others do not; nothing is consumed.
        let denied = decided(false, 2);
        assert_eq!(at(1, 5).remaining(&denied), (true, 2));
        assert_eq!(at(3, 3).remaining(&denied), (false, 0));
        assert_eq!(at(6, 0).remaining(&denied), (false, 0));
        // Alone on its counter, a denied descriptor has 0 left.
        assert_eq!(at(3, 0).remaining(&denied), (false, 0));
    }
}
