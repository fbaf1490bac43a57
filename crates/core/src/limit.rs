use crate::{Algorithm, Nanos};
use std::fmt;

/// One rate limit: `requests` per `window` under an algorithm.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limit {
    /// The algorithm deciding this limit.
    pub algorithm: Algorithm,
    /// Requests admitted per `window` at the sustained rate.
    pub requests: u64,
    /// The window, in nanoseconds (1 ms to 1 year).
    pub window: Nanos,
    /// How many requests a fresh key admits at once; defaults to `requests`.
    pub burst: u64,
    /// Sliding window counter: sub-windows per window (1 = two-counter estimate).
    pub precision: u32,
    /// Soft throttling: admit this many percent above the quota.
    pub soft_percent: u32,
    /// Delay mode (GCRA, leaky bucket): hold a request up to this long until it
    /// conforms instead of denying it; `None` denies at once.
    pub max_delay: Option<Nanos>,
}

/// Why a limit is invalid; `field` names the offending field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitError {
    /// The field at fault (`requests`, `window`, `burst`, ...).
    pub field: &'static str,
    /// What is wrong with it.
    pub message: String,
}

impl fmt::Display for LimitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

impl std::error::Error for LimitError {}

impl Limit {
    /// A limit of `requests` per `window` with `burst = requests` and no extras.
    pub fn new(algorithm: Algorithm, requests: u64, window: Nanos) -> Result<Limit, LimitError> {
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

    /// Checks every field's range.
    pub fn validate(&self) -> Result<(), LimitError> {
        todo!()
    }
}
