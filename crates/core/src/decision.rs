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
    /// limit's maximum delay.
    DelayTooLong,
}

/// What one limit decided for one request, with what the headers need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    /// Whether the request passes this limit.
    pub allowed: bool,
    /// The limit's quota: `requests` per window.
    pub limit: u64,
    /// Requests of cost 1 that would pass right now, after this decision.
    pub remaining: u64,
    /// Time until the quota is entirely available again if no more requests come.
    pub reset: Nanos,
    /// Time until a request of this cost can pass; zero when allowed.
    pub retry_after: Nanos,
    /// Delay mode: how long to hold an admitted request before it conforms.
    pub delay: Nanos,
    /// Why the request was denied; `None` when allowed.
    pub denial: Option<Denial>,
}
