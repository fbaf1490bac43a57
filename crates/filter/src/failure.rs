//! Why a call to the limiter failed, read from what the host reports of
//! it, and how often that is logged.
//!
//! Each failed call counts once under its reason (`sluice.limiter_failed_*`),
//! whatever the failure mode then does with the request, so that an operator
//! sees a limiter that fails open as clearly as one that fails closed.

use crate::metrics::GlobalEvent;
use sluice_core::{Nanos, SECOND};

/// The reason a limiter call failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallFailure {
    /// The call could not be made, or no connection to the cluster could be
    /// had (no healthy host, connection refused or reset).
    Unreachable,
    /// No answer before the limiter's `timeout`.
    Timeout,
    /// The limiter answered with an error: an HTTP status other than 200,
    /// or a gRPC status other than OK.
    Status,
    /// The answer could not be read as a decision.
    Unreadable,
}

/// gRPC `DEADLINE_EXCEEDED`.
const GRPC_DEADLINE_EXCEEDED: u32 = 4;
/// gRPC `UNAVAILABLE`: Envoy's status when no connection could be had, and
/// also when the call's timeout ran out (its 504 read as a gRPC status).
const GRPC_UNAVAILABLE: u32 = 14;

impl CallFailure {
    /// The failure of a gRPC call that ended with `status` (`None`: OK),
    /// `timed_out` when it ended no earlier than its timeout (see
    /// [`timed_out`]).
    pub fn of_grpc(status: u32, timed_out: bool) -> Option<CallFailure> {
        match status {
            0 => None,
            GRPC_DEADLINE_EXCEEDED => Some(CallFailure::Timeout),
            GRPC_UNAVAILABLE if timed_out => Some(CallFailure::Timeout),
            GRPC_UNAVAILABLE => Some(CallFailure::Unreachable),
            _ => Some(CallFailure::Status),
        }
    }

    /// The failure of an HTTP call answered with `status` (`None`: the call
    /// ended without a response). `from_limiter` says whether the answer is
    /// the limiter's own (JSON) rather than Envoy's local reply, which is a
    /// 504 on a timeout and a 503 when no host can be reached.
    pub fn of_http(status: Option<&str>, from_limiter: bool) -> Option<CallFailure> {
        match status {
            None => Some(CallFailure::Unreachable),
            Some("200") => None,
            Some(_) if from_limiter => Some(CallFailure::Status),
            Some("504") => Some(CallFailure::Timeout),
            Some(_) => Some(CallFailure::Unreachable),
        }
    }

    /// The counter of this reason.
    pub fn event(self) -> GlobalEvent {
        match self {
            CallFailure::Unreachable => GlobalEvent::LimiterUnreachable,
            CallFailure::Timeout => GlobalEvent::LimiterTimeout,
            CallFailure::Status => GlobalEvent::LimiterStatus,
            CallFailure::Unreadable => GlobalEvent::LimiterUnreadable,
        }
    }

    /// The reason as logs name it.
    pub fn reason(self) -> &'static str {
        match self {
            CallFailure::Unreachable => "unreachable",
            CallFailure::Timeout => "timeout",
            CallFailure::Status => "error status",
            CallFailure::Unreadable => "unreadable answer",
        }
    }
}

/// Whether a call that ended `elapsed` after it was made ran out its
/// `timeout` (within a tenth of it: the host's timer and the filter's clock
/// are read at different times; a refused connection ends far sooner).
pub fn timed_out(elapsed: Nanos, timeout: Nanos) -> bool {
    elapsed >= timeout.saturating_sub(timeout / 10)
}

/// How often a worker logs limiter failures: once per period at most,
/// saying how many were not logged since.
pub const WARN_PERIOD: Nanos = 10 * SECOND;

/// One log line per [`WARN_PERIOD`] at most.
#[derive(Debug, Default)]
pub struct Throttle {
    last: Option<Nanos>,
    quiet: u64,
}

impl Throttle {
    /// Whether a failure at `now` is logged: `Some(n)` with the `n` failures
    /// not logged before it, or `None` (it is counted among them).
    pub fn admit(&mut self, now: Nanos) -> Option<u64> {
        let due = !matches!(self.last, Some(last) if now.saturating_sub(last) < WARN_PERIOD);
        if !due {
            self.quiet = self.quiet.saturating_add(1);
            return None;
        }
        self.last = Some(now);
        Some(std::mem::take(&mut self.quiet))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_statuses_name_their_reason() {
        assert_eq!(CallFailure::of_grpc(0, false), None);
        assert_eq!(CallFailure::of_grpc(0, true), None);
        assert_eq!(CallFailure::of_grpc(4, false), Some(CallFailure::Timeout));
        assert_eq!(
            CallFailure::of_grpc(14, false),
            Some(CallFailure::Unreachable)
        );
        assert_eq!(CallFailure::of_grpc(14, true), Some(CallFailure::Timeout));
        assert_eq!(CallFailure::of_grpc(13, true), Some(CallFailure::Status));
        assert_eq!(CallFailure::of_grpc(8, false), Some(CallFailure::Status));
        let ms = sluice_core::MILLISECOND;
        assert!(timed_out(300 * ms, 300 * ms));
        assert!(timed_out(280 * ms, 300 * ms));
        assert!(!timed_out(3 * ms, 300 * ms));
    }

    #[test]
    fn http_answers_name_their_reason() {
        assert_eq!(CallFailure::of_http(Some("200"), true), None);
        assert_eq!(CallFailure::of_http(Some("200"), false), None);
        assert_eq!(
            CallFailure::of_http(None, false),
            Some(CallFailure::Unreachable)
        );
        assert_eq!(
            CallFailure::of_http(Some("504"), false),
            Some(CallFailure::Timeout)
        );
        assert_eq!(
            CallFailure::of_http(Some("503"), false),
            Some(CallFailure::Unreachable)
        );
        // The limiter's own errors are statuses, whatever the code.
        assert_eq!(
            CallFailure::of_http(Some("503"), true),
            Some(CallFailure::Status)
        );
        assert_eq!(
            CallFailure::of_http(Some("504"), true),
            Some(CallFailure::Status)
        );
    }

    #[test]
    fn warnings_are_throttled_and_count_what_they_skipped() {
        let mut t = Throttle::default();
        assert_eq!(t.admit(5 * SECOND), Some(0));
        assert_eq!(t.admit(6 * SECOND), None);
        assert_eq!(t.admit(14 * SECOND), None);
        assert_eq!(t.admit(15 * SECOND), Some(2));
        assert_eq!(t.admit(15 * SECOND), None);
        assert_eq!(t.admit(40 * SECOND), Some(1));
    }
}
