//! The answer for each descriptor of a decided call: its code, limit,
//! remaining count and reset, and the result its metric counts.

use super::plan::Plan;
use crate::store::Verdict;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit as PbRateLimit,
};
use envoy_types::pb::google::protobuf::Duration as PbDuration;
use sluice_core::{Decision, Nanos};

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
    pub(super) shadows: &'a [Option<Verdict>],
}

/// The answer for one descriptor's plan at `now`.
pub(super) fn answer(plan: &Plan, verdicts: &Verdicts<'_>, now: Nanos) -> Answer {
    match plan {
        Plan::NoMatch => ok(None, 0, "no_match"),
        Plan::Replaced => ok(None, 0, "replaced"),
        Plan::Unlimited => ok(None, u32::MAX, "unlimited"),
        Plan::Block { report, shadow } => {
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
            let over = !d.allowed && !*shadow;
            let remaining = u32::try_from(d.remaining).unwrap_or(u32::MAX);
            Answer {
                status: status(over, Some(report.current_limit()), remaining, d.reset),
                result: match (d.allowed, *shadow) {
                    (true, _) => "ok",
                    (false, false) => "over_limit",
                    (false, true) => "shadow_over_limit",
                },
                over,
            }
        }
    }
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

fn duration(ns: Nanos) -> PbDuration {
    PbDuration {
        seconds: i64::try_from(ns / 1_000_000_000).unwrap_or(i64::MAX),
        nanos: i32::try_from(ns % 1_000_000_000).unwrap_or(0),
    }
}
