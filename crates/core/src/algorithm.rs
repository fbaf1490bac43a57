use std::fmt;
use std::str::FromStr;

/// The six rate-limiting algorithms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// Tokens refill at `requests` per `window` into a bucket of `burst`.
    TokenBucket,
    /// A meter: each request pours `cost` into a bucket of `burst` that
    /// leaks `requests` per `window`.
    LeakyBucket,
    /// Generic cell rate algorithm: a theoretical arrival time advancing by
    /// `window / requests` per request, with `burst` requests of tolerance.
    Gcra,
    /// A counter per window aligned to the Unix epoch.
    FixedWindow,
    /// The exact trailing window: one timestamp per admitted request.
    SlidingLog,
    /// The trailing window estimated from sub-window counters.
    SlidingWindow,
}

impl Algorithm {
    /// Every algorithm, in a stable order.
    pub const ALL: [Algorithm; 6] = [
        Algorithm::TokenBucket,
        Algorithm::LeakyBucket,
        Algorithm::Gcra,
        Algorithm::FixedWindow,
        Algorithm::SlidingLog,
        Algorithm::SlidingWindow,
    ];

    /// The name used in configuration and on the wire (`token_bucket`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::TokenBucket => "token_bucket",
            Algorithm::LeakyBucket => "leaky_bucket",
            Algorithm::Gcra => "gcra",
            Algorithm::FixedWindow => "fixed_window",
            Algorithm::SlidingLog => "sliding_log",
            Algorithm::SlidingWindow => "sliding_window",
        }
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The error for a name that is not one of the six algorithms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownAlgorithm(pub String);

impl fmt::Display for UnknownAlgorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown algorithm {:?} (expected one of token_bucket, leaky_bucket, gcra, fixed_window, sliding_log, sliding_window)",
            self.0
        )
    }
}

impl std::error::Error for UnknownAlgorithm {}

impl FromStr for Algorithm {
    type Err = UnknownAlgorithm;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Algorithm::ALL
            .into_iter()
            .find(|a| a.name() == s)
            .ok_or_else(|| UnknownAlgorithm(s.to_string()))
    }
}
