//! The six algorithms. Each module decodes its state, decides, and encodes
//! the new state; the meter module holds what the three rate-based ones
//! (token bucket, leaky bucket, GCRA) share.

pub(crate) mod fixed_window;
pub(crate) mod gcra;
pub(crate) mod leaky_bucket;
pub(crate) mod meter;
pub(crate) mod sliding_log;
pub(crate) mod sliding_window;
pub(crate) mod token_bucket;

/// Whether a decision may consume quota.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Decide and, when allowed, consume.
    Commit,
    /// Decide without consuming (a query, or a limit of a denied check).
    Peek,
}

#[cfg(test)]
mod codec_tests;
