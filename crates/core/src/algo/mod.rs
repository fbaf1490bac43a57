//! The six algorithms. Each module decodes its state, decides, and encodes
//! the new state. The three rate-based ones (token bucket, leaky bucket,
//! GCRA) say only how their state reads as a level ([`meter::Meter`]); the
//! meter module decides, charges and refunds for all three (`debt` holds
//! their layout for a level beyond what their own can hold, `scaled` the
//! whole units and fraction both store).

pub(crate) mod debt;
pub(crate) mod fixed_window;
pub(crate) mod gcra;
pub(crate) mod leaky_bucket;
pub(crate) mod meter;
pub(crate) mod scaled;
pub(crate) mod sliding_log;
pub(crate) mod sliding_window;
pub(crate) mod token_bucket;

use crate::limit::Params;
use crate::{Decision, Denial, Nanos};

/// Whether a decision may consume quota.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Decide and, when allowed, consume.
    Commit,
    /// Decide without consuming (a query, or a limit of a denied check).
    Peek,
}

/// Whether a limit admits a request: the part of a [`Decision`] that the
/// admission test settles, before the algorithm reports what is left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Verdict {
    pub allowed: bool,
    pub retry_after: Nanos,
    pub delay: Nanos,
    pub denial: Option<Denial>,
}

impl Verdict {
    /// Admitted at once.
    pub(crate) const ADMIT: Verdict = Verdict {
        allowed: true,
        retry_after: 0,
        delay: 0,
        denial: None,
    };

    /// Denied: the quota is spent until `retry_after`.
    #[inline]
    pub(crate) fn over_limit(retry_after: Nanos) -> Verdict {
        Verdict {
            allowed: false,
            retry_after,
            delay: 0,
            denial: Some(Denial::OverLimit),
        }
    }

    /// A request that conforms only after `wait` (more than zero): in delay
    /// mode admitted with that delay when it is within `max_delay`, else
    /// denied.
    #[inline]
    pub(crate) fn after(wait: Nanos, max_delay: Option<Nanos>) -> Verdict {
        match max_delay {
            Some(max) if wait <= max => Verdict {
                delay: wait,
                ..Verdict::ADMIT
            },
            Some(_) => Verdict {
                allowed: false,
                retry_after: wait,
                delay: 0,
                denial: Some(Denial::DelayTooLong),
            },
            None => Verdict::over_limit(wait),
        }
    }

    /// The decision to report: this verdict, with `free` requests of cost 1
    /// that would pass after it (the soft allowance included; `remaining`
    /// hides it) and `reset`.
    #[inline(always)]
    pub(crate) fn decision(self, p: &Params, free: u64, reset: Nanos) -> Decision {
        Decision {
            allowed: self.allowed,
            limit: p.requests,
            remaining: p.report(free),
            reset,
            retry_after: self.retry_after,
            delay: self.delay,
            denial: self.denial,
        }
    }
}

#[cfg(test)]
mod codec_tests;
