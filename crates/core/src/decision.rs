use crate::{Algorithm, Limit, Nanos};

/// Why a request was denied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Denial {
    /// The quota is spent; `retry_after` says when this cost fits again.
    OverLimit,
    /// The cost is larger than the limit can ever admit at once; retrying
    /// never helps (`retry_after` is zero).
    CostExceedsCapacity,
    /// Delay mode: the request would conform only after longer than the
    /// limit's maximum delay; `retry_after` says when it conforms.
    DelayTooLong,
    /// A penalty box: the key is refused until its block ends
    /// (`retry_after`), whatever its quota allows; `started` when this
    /// refusal, over the limit, started the block.
    Blocked {
        /// This request went over the limit and started the block.
        started: bool,
    },
}

/// What one limit decided for one request, with what the headers need.
///
/// All durations are exact nanoseconds, rounded up where they come from a
/// division, so that a client waiting exactly `retry_after` and retrying is
/// admitted if nobody else spent the quota meanwhile. Round them up again
/// when converting to coarser units (milliseconds on the wire, seconds in
/// headers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    /// Whether the request passes this limit.
    pub allowed: bool,
    /// The limit's quota: `requests` per window (never including the soft
    /// allowance).
    pub limit: u64,
    /// Requests of cost 1 that would pass right now, after this decision,
    /// within the hard quota: with soft throttling the soft allowance is not
    /// counted, so `remaining` reaches 0 while requests still pass.
    pub remaining: u64,
    /// Time until the quota is entirely available again if no more requests
    /// come (0 for a key with nothing counted).
    pub reset: Nanos,
    /// Time until a request of this cost can pass; zero when allowed, and
    /// zero when the cost can never pass ([`Denial::CostExceedsCapacity`]).
    pub retry_after: Nanos,
    /// Delay mode: how long to hold an admitted request before it conforms
    /// (zero otherwise).
    pub delay: Nanos,
    /// Why the request was denied; `None` when allowed.
    pub denial: Option<Denial>,
}

impl Decision {
    /// A denial decided without an algorithm's state (a cached denial, or
    /// one made because the state could not be read or written): nothing
    /// remains, and both `reset` and `retry_after` are `retry_after`.
    pub fn over_limit(limit: u64, retry_after: Nanos) -> Decision {
        Decision {
            allowed: false,
            limit,
            remaining: 0,
            reset: retry_after,
            retry_after,
            delay: 0,
            denial: Some(Denial::OverLimit),
        }
    }

    /// The refusal of a key under a quota of `limit` that a penalty box
    /// holds for `wait` more.
    pub fn blocked(limit: u64, wait: Nanos) -> Decision {
        Decision {
            denial: Some(Denial::Blocked { started: false }),
            ..Decision::over_limit(limit, wait)
        }
    }

    /// This decision, when it refuses over the limit, as the start of a
    /// penalty box of `block`: the key waits the block out (`retry_after`;
    /// `reset` no earlier). Any other decision as it is.
    pub fn with_block(self, block: Nanos) -> Decision {
        if self.allowed || self.denial != Some(Denial::OverLimit) {
            return self;
        }
        Decision {
            remaining: 0,
            reset: self.reset.max(block),
            retry_after: block,
            denial: Some(Denial::Blocked { started: true }),
            ..self
        }
    }

    /// Whether this decision refuses over the limit, the refusal that
    /// starts a penalty box.
    pub fn starts_block(&self) -> bool {
        !self.allowed && self.denial == Some(Denial::OverLimit)
    }

    /// The whole units a key of `limit` owes beyond an empty quota, read
    /// from a decision of weight 0 ([`decide`](crate::decide) or
    /// [`charge`](crate::charge) with cost 0) on its state: 0 when it owes
    /// nothing. The meters (token bucket, leaky bucket, GCRA) drain their
    /// level at [`Limit::soft_requests`] per `window`, and `reset` is when the level is
    /// back to 0, so the level is `reset * rate` (in whole units, rounded
    /// up: a key owing 2.5 units owes 3) and the debt what it holds beyond
    /// the capacity enforced ([`Limit::soft_burst`]). `None` for the windows
    /// and the sliding log, whose debt ends with their window (`reset`
    /// says when), and for a decision refused by a penalty box (its
    /// `reset` is the block's).
    pub fn debt(&self, limit: &Limit) -> Option<u64> {
        if matches!(self.denial, Some(Denial::Blocked { .. })) {
            return None;
        }
        match limit.algorithm {
            Algorithm::TokenBucket | Algorithm::LeakyBucket | Algorithm::Gcra => {}
            Algorithm::FixedWindow | Algorithm::SlidingWindow | Algorithm::SlidingLog => {
                return None
            }
        }
        // `reset` was rounded up to whole nanoseconds: the level lies in
        // ((reset - 1) * rate, reset * rate], and less than a unit apart.
        let level = (u128::from(self.reset.saturating_sub(1)) * u128::from(limit.soft_requests()))
            .div_ceil(u128::from(limit.window.max(1)));
        let owed = level.saturating_sub(u128::from(limit.soft_burst()));
        Some(u64::try_from(owed).unwrap_or(u64::MAX))
    }
}

#[cfg(test)]
mod tests {
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
                        d.debt(&limit),
                        Some(cost.saturating_sub(cap)),
                        "{algorithm:?} {cost}"
                    );
                    // One unit's drain time later, one unit less owed.
                    let state = charged.new_state.as_ref().map(|s| s.as_bytes());
                    let unit = window.div_ceil(limit.soft_requests());
                    // Half a unit drained: still owed, rounded up.
                    let half = decide(&limit, state, unit / 2, 0).decision;
                    let owed = cost.saturating_sub(cap);
                    assert_eq!(half.debt(&limit), Some(owed), "{algorithm:?} {cost} half");
                    let later = decide(&limit, state, unit, 0).decision;
                    let expected = cost.saturating_sub(cap).saturating_sub(1);
                    assert_eq!(
                        later.debt(&limit),
                        Some(expected),
                        "{algorithm:?} {cost} later"
                    );
                }
            }
        }
        let window = Limit::new(Algorithm::FixedWindow, 10, SECOND).unwrap();
        let charged = charge(&window, None, 0, 30).unwrap().decision;
        assert_eq!(charged.debt(&window), None);
    }
}
