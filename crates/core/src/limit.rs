use crate::{Algorithm, Decision, Denial, FieldError, Nanos, MILLISECOND, SECOND};

/// The largest accepted `requests` and `burst` (10^12).
pub const MAX_REQUESTS: u64 = 1_000_000_000_000;
/// The shortest accepted window (1 ms).
pub const MIN_WINDOW: Nanos = MILLISECOND;
/// The longest accepted window, and the longest `max_delay` (366 days).
pub const MAX_WINDOW: Nanos = 366 * 24 * 3600 * SECOND;
/// The longest a bucket may take to drain (token bucket, leaky bucket,
/// GCRA): `burst * window / requests` is at most 100 years (of 365.25 days).
pub const MAX_DRAIN: Nanos = 3_155_760_000 * SECOND;
/// The shortest penalty-box block (`on_exceed: block`, 1 s).
pub const MIN_BLOCK: Nanos = SECOND;
/// The longest penalty-box block (24 h).
pub const MAX_BLOCK: Nanos = 24 * 3600 * SECOND;
/// The largest sliding window precision (sub-windows per window).
pub const MAX_PRECISION: u32 = 1000;
/// The largest soft throttling allowance, in percent.
pub const MAX_SOFT_PERCENT: u32 = 1000;
/// The largest sliding log capacity (`burst` including the soft allowance):
/// the log keeps one 4-byte entry per admitted unit of cost.
pub const MAX_LOG_ENTRIES: u64 = 100_000;

/// One rate limit: `requests` per `window` under an algorithm.
///
/// What `burst` means depends on the algorithm:
/// - token bucket: the bucket's capacity in tokens (refilled at
///   `requests` per `window`);
/// - leaky bucket: the bucket's capacity (it leaks `requests` per `window`);
/// - GCRA: the tolerance, i.e. how many requests may arrive at once
///   (`burst = 1` spaces requests by `window / requests`);
/// - fixed window, sliding log and sliding window: the count admitted per
///   window (the window-based algorithms ignore `requests` for admission and
///   count `burst` per window; `requests` is what headers report).
///
/// `burst` defaults to `requests`, so a fresh key admits exactly `requests`
/// at once under every algorithm.
///
/// ```
/// use sluice_core::{decide, Algorithm, Limit, SECOND};
/// let limit = Limit::new(Algorithm::Gcra, 10, SECOND).unwrap().with_burst(2);
/// let first = decide(&limit, None, 0, 1);
/// assert!(first.decision.allowed);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limit {
    /// The algorithm deciding this limit.
    pub algorithm: Algorithm,
    /// Requests admitted per `window` at the sustained rate; also the `limit`
    /// every [`Decision`](crate::Decision) reports.
    pub requests: u64,
    /// The window, in nanoseconds (1 ms to 366 days).
    pub window: Nanos,
    /// How many requests a fresh key admits at once; defaults to `requests`
    /// (see the type's documentation for each algorithm).
    pub burst: u64,
    /// Sliding window counter: sub-windows per window, 1 to 1000
    /// (1 = the two-counter weighted estimate). Must be 1 for the other
    /// algorithms.
    pub precision: u32,
    /// Soft throttling: admit this many percent above `requests` and `burst`
    /// (0 to 1000). Decisions still report `requests` as the limit, and
    /// `remaining` counts only the hard quota (it reaches 0 while the soft
    /// allowance still admits).
    pub soft_percent: u32,
    /// Delay mode (GCRA, leaky bucket only): a request that would conform
    /// within this long is admitted with [`Decision::delay`](crate::Decision::delay)
    /// set, as if it arrived then; later than that it is denied with
    /// [`Denial::DelayTooLong`](crate::Denial::DelayTooLong). `None` denies at once.
    pub max_delay: Option<Nanos>,
}

fn invalid(field: &str, message: String) -> Result<(), FieldError> {
    Err(FieldError::at(field, message))
}

impl Limit {
    /// A limit of `requests` per `window` with `burst = requests` and no extras.
    pub fn new(algorithm: Algorithm, requests: u64, window: Nanos) -> Result<Limit, FieldError> {
        let limit = Limit {
            algorithm,
            requests,
            window,
            burst: requests,
            precision: 1,
            soft_percent: 0,
            max_delay: None,
        };
        limit.validate()?;
        Ok(limit)
    }

    /// This limit with another `burst` (not validated; call [`Limit::validate`]).
    #[must_use]
    pub fn with_burst(mut self, burst: u64) -> Limit {
        self.burst = burst;
        self
    }

    /// This limit with another sliding window `precision` (not validated).
    #[must_use]
    pub fn with_precision(mut self, precision: u32) -> Limit {
        self.precision = precision;
        self
    }

    /// This limit with a soft throttling allowance in percent (not validated).
    #[must_use]
    pub fn with_soft_percent(mut self, soft_percent: u32) -> Limit {
        self.soft_percent = soft_percent;
        self
    }

    /// This limit with a maximum delay (delay mode; not validated).
    #[must_use]
    pub fn with_max_delay(mut self, max_delay: Option<Nanos>) -> Limit {
        self.max_delay = max_delay;
        self
    }

    /// The rate actually enforced, per `window`: `requests` plus the soft
    /// allowance (`requests + requests * soft_percent / 100`, rounded down).
    pub fn soft_requests(&self) -> u64 {
        with_soft(self.requests, self.soft_percent)
    }

    /// The whole units a key of this limit owes beyond an empty quota, read
    /// from `decision`, one of weight 0 ([`decide`](crate::decide) or
    /// [`charge`](crate::charge) with cost 0) on its state: 0 when it owes
    /// nothing. The meters (token bucket, leaky bucket, GCRA) drain their
    /// level at [`Limit::soft_requests`] per `window`, and `reset` is when the level is
    /// back to 0, so the level is `reset * rate` (in whole units, rounded
    /// up: a key owing 2.5 units owes 3) and the debt what it holds beyond
    /// the capacity enforced ([`Limit::soft_burst`]). `None` for the windows
    /// and the sliding log, whose debt ends with their window (`reset`
    /// says when), and for a decision refused by a penalty box (its
    /// `reset` is the block's).
    pub fn debt(&self, decision: &Decision) -> Option<u64> {
        if matches!(decision.denial, Some(Denial::Blocked { .. })) {
            return None;
        }
        match self.algorithm {
            Algorithm::TokenBucket | Algorithm::LeakyBucket | Algorithm::Gcra => {}
            Algorithm::FixedWindow | Algorithm::SlidingWindow | Algorithm::SlidingLog => {
                return None
            }
        }
        // `reset` was rounded up to whole nanoseconds: the level lies in
        // ((reset - 1) * rate, reset * rate], and less than a unit apart.
        let level = (u128::from(decision.reset.saturating_sub(1))
            * u128::from(self.soft_requests()))
        .div_ceil(u128::from(self.window.max(1)));
        let owed = level.saturating_sub(u128::from(self.soft_burst()));
        Some(u64::try_from(owed).unwrap_or(u64::MAX))
    }

    /// The capacity actually enforced: `burst` plus the soft allowance
    /// (`burst + burst * soft_percent / 100`, rounded down).
    pub fn soft_burst(&self) -> u64 {
        with_soft(self.burst, self.soft_percent)
    }

    /// Checks every field's range. [`decide`](crate::decide) never panics on
    /// an invalid limit, but it then clamps the fields into range.
    pub fn validate(&self) -> Result<(), FieldError> {
        self.validate_sizes()?;
        self.validate_precision_and_soft()?;
        self.validate_algorithm_extras()
    }

    /// `requests`, `burst` and `window`, and a bucket's drain time.
    fn validate_sizes(&self) -> Result<(), FieldError> {
        if self.requests == 0 || self.requests > MAX_REQUESTS {
            return invalid(
                "requests",
                format!(
                    "must be between 1 and {MAX_REQUESTS}, got {}",
                    self.requests
                ),
            );
        }
        if self.burst == 0 || self.burst > MAX_REQUESTS {
            return invalid(
                "burst",
                format!("must be between 1 and {MAX_REQUESTS}, got {}", self.burst),
            );
        }
        if self.window < MIN_WINDOW || self.window > MAX_WINDOW {
            return invalid(
                "window",
                format!("must be between 1ms and 366d, got {}ns", self.window),
            );
        }
        if matches!(
            self.algorithm,
            Algorithm::TokenBucket | Algorithm::LeakyBucket | Algorithm::Gcra
        ) {
            // GCRA keeps an instant in nanoseconds since the epoch: a bucket
            // draining over centuries would not fit.
            let drain =
                u128::from(self.burst) * u128::from(self.window) / u128::from(self.requests);
            if drain > u128::from(MAX_DRAIN) {
                return invalid(
                    "burst",
                    format!(
                        "a bucket of {} requests refilled at {} per {}ns takes more than 100 years to drain",
                        self.burst, self.requests, self.window
                    ),
                );
            }
        }
        Ok(())
    }

    /// `precision` (sliding_window only) and `soft_percent`.
    fn validate_precision_and_soft(&self) -> Result<(), FieldError> {
        if self.algorithm == Algorithm::SlidingWindow {
            if self.precision == 0 || self.precision > MAX_PRECISION {
                return invalid(
                    "precision",
                    format!(
                        "must be between 1 and {MAX_PRECISION}, got {}",
                        self.precision
                    ),
                );
            }
        } else if self.precision != 1 {
            return invalid(
                "precision",
                format!(
                    "only sliding_window has sub-windows; {} needs precision 1, got {}",
                    self.algorithm, self.precision
                ),
            );
        }
        if self.soft_percent > MAX_SOFT_PERCENT {
            return invalid(
                "soft_percent",
                format!(
                    "must be at most {MAX_SOFT_PERCENT}, got {}",
                    self.soft_percent
                ),
            );
        }
        Ok(())
    }

    /// What only some algorithms take: sliding_log's entry bound, delay
    /// mode.
    fn validate_algorithm_extras(&self) -> Result<(), FieldError> {
        if self.algorithm == Algorithm::SlidingLog {
            if self.burst > MAX_LOG_ENTRIES {
                return invalid(
                    "burst",
                    format!(
                        "sliding_log keeps one entry per request and allows at most {MAX_LOG_ENTRIES} per window, got {}",
                        self.burst
                    ),
                );
            }
            if self.soft_burst() > MAX_LOG_ENTRIES {
                return invalid(
                    "soft_percent",
                    format!(
                        "sliding_log allows at most {MAX_LOG_ENTRIES} per window including the soft allowance, got {}",
                        self.soft_burst()
                    ),
                );
            }
        }
        if let Some(delay) = self.max_delay {
            if !matches!(self.algorithm, Algorithm::Gcra | Algorithm::LeakyBucket) {
                return invalid(
                    "max_delay",
                    format!(
                        "delay mode is for gcra and leaky_bucket only, not {}",
                        self.algorithm
                    ),
                );
            }
            if delay > MAX_WINDOW {
                return invalid("max_delay", format!("must be at most 366d, got {delay}ns"));
            }
        }
        Ok(())
    }
}

fn with_soft(n: u64, percent: u32) -> u64 {
    if percent == 0 {
        return n;
    }
    let extra = u128::from(n) * u128::from(percent) / 100;
    u64::try_from(u128::from(n) + extra).unwrap_or(u64::MAX)
}

/// A limit's fields clamped into range, with the soft allowance applied and
/// the values the algorithms compute with.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Params {
    /// `requests`, reported as the decision's limit.
    pub requests: u64,
    /// Requests per window including the soft allowance.
    pub rate: u64,
    /// The window in nanoseconds.
    pub window: u64,
    /// Capacity including the soft allowance.
    pub cap: u64,
    /// How much of `cap` is the soft allowance (hidden from `remaining`).
    pub soft_extra: u64,
    /// Sub-windows (sliding window), as configured; see [`Params::precision`].
    pub raw_precision: u32,
    /// Delay mode.
    pub max_delay: Option<Nanos>,
}

impl Params {
    #[inline]
    pub(crate) fn of(limit: &Limit) -> Params {
        let requests = limit.requests.clamp(1, MAX_REQUESTS);
        let burst = limit.burst.clamp(1, MAX_REQUESTS);
        let soft = limit.soft_percent.min(MAX_SOFT_PERCENT);
        let window = limit.window.clamp(MIN_WINDOW, MAX_WINDOW);
        let mut cap = with_soft(burst, soft);
        if limit.algorithm == crate::Algorithm::SlidingLog {
            cap = cap.min(MAX_LOG_ENTRIES);
        }
        Params {
            requests,
            rate: with_soft(requests, soft),
            window,
            cap,
            soft_extra: cap.saturating_sub(burst),
            raw_precision: limit.precision,
            max_delay: limit.max_delay.map(|d| d.min(MAX_WINDOW)),
        }
    }

    /// Sub-windows (sliding window), clamped into range.
    #[inline]
    pub(crate) fn precision(&self) -> u32 {
        self.raw_precision.clamp(1, MAX_PRECISION)
    }

    /// `rate` widened for 128-bit arithmetic.
    #[inline]
    pub(crate) fn rate(&self) -> u128 {
        u128::from(self.rate)
    }

    /// `window` widened for 128-bit arithmetic.
    #[inline]
    pub(crate) fn window(&self) -> u128 {
        u128::from(self.window)
    }

    /// `remaining` as reported: the effective remaining minus the soft allowance.
    #[inline]
    pub(crate) fn report(&self, effective_remaining: u64) -> u64 {
        effective_remaining.saturating_sub(self.soft_extra)
    }
}

#[cfg(test)]
mod debt_tests {
    use crate::{charge, decide, Algorithm, Limit, SECOND};

    /// A meter charged `cost` beyond its quota owes exactly what went
    /// beyond, and less as it drains; the windows report none.
    #[test]
    fn debt_of_a_charged_key() {
        for algorithm in [
            Algorithm::TokenBucket,
            Algorithm::LeakyBucket,
            Algorithm::Gcra,
        ] {
            for (requests, window, burst, soft) in [(10, SECOND, 10, 0), (7, 3 * SECOND, 20, 50)] {
                let limit = Limit::new(algorithm, requests, window)
                    .unwrap()
                    .with_burst(burst)
                    .with_soft_percent(soft);
                let cap = limit.soft_burst();
                for cost in [0, 1, cap, cap + 1, cap + 13, 5 * cap + 3] {
                    let charged = charge(&limit, None, 0, cost).unwrap();
                    let d = charged.decision;
                    assert_eq!(
                        limit.debt(&d),
                        Some(cost.saturating_sub(cap)),
                        "{algorithm:?} {cost}"
                    );
                    // One unit's drain time later, one unit less owed.
                    let state = charged.new_state.as_ref().map(|s| s.as_bytes());
                    let unit = window.div_ceil(limit.soft_requests());
                    // Half a unit drained: still owed, rounded up.
                    let half = decide(&limit, state, unit / 2, 0).decision;
                    let owed = cost.saturating_sub(cap);
                    assert_eq!(limit.debt(&half), Some(owed), "{algorithm:?} {cost} half");
                    let later = decide(&limit, state, unit, 0).decision;
                    let expected = cost.saturating_sub(cap).saturating_sub(1);
                    assert_eq!(
                        limit.debt(&later),
                        Some(expected),
                        "{algorithm:?} {cost} later"
                    );
                }
            }
        }
        let window = Limit::new(Algorithm::FixedWindow, 10, SECOND).unwrap();
        let charged = charge(&window, None, 0, 30).unwrap().decision;
        assert_eq!(window.debt(&charged), None);
    }
}
