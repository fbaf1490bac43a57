use crate::Nanos;

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
}
