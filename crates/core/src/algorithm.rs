use std::fmt;
use std::str::FromStr;

/// Declares [`Algorithm`] from one table: each variant with its code and its
/// name, so that `ALL`, `code` and `name` cannot disagree.
macro_rules! algorithms {
    ($($(#[$doc:meta])* $variant:ident = $code:literal, $name:literal;)+) => {
        /// The rate-limiting algorithms.
        ///
        /// Each has a name (configuration and the limiter's API spell it) and
        /// a code (it tags every stored state, and numbers the algorithm in
        /// the limiter's Redis script), declared together.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Algorithm {
            $($(#[$doc])* $variant,)+
        }

        impl Algorithm {
            /// Every algorithm, in a stable order (that of their codes).
            pub const ALL: [Algorithm; [$($code),+].len()] = [$(Algorithm::$variant),+];

            /// The algorithm's code: the second byte of its stored states
            /// (after the format version) and its number in the limiter's
            /// Redis script. Stored states carry it, so it never changes.
            pub const fn code(self) -> u8 {
                match self {
                    $(Algorithm::$variant => $code,)+
                }
            }

            /// The name used in configuration and on the wire (`token_bucket`, ...).
            pub const fn name(self) -> &'static str {
                match self {
                    $(Algorithm::$variant => $name,)+
                }
            }
        }
    };
}

algorithms! {
    /// Tokens refill at `requests` per `window` into a bucket of `burst`.
    TokenBucket = 1, "token_bucket";
    /// A meter: each request pours `cost` into a bucket of `burst` that
    /// leaks `requests` per `window`.
    LeakyBucket = 2, "leaky_bucket";
    /// Generic cell rate algorithm: a theoretical arrival time advancing by
    /// `window / requests` per request, with `burst` requests of tolerance.
    Gcra = 3, "gcra";
    /// A counter per window aligned to the Unix epoch.
    FixedWindow = 4, "fixed_window";
    /// The exact trailing window: one timestamp per admitted request.
    SlidingLog = 5, "sliding_log";
    /// The trailing window estimated from sub-window counters.
    SlidingWindow = 6, "sliding_window";
}

// Codes tag stored states: two algorithms must never share one.
const _: () = {
    let all = Algorithm::ALL;
    let mut i = 0;
    while i < all.len() {
        let mut j = i + 1;
        while j < all.len() {
            assert!(
                all[i].code() != all[j].code(),
                "two algorithms share a code"
            );
            j += 1;
        }
        i += 1;
    }
};

impl Algorithm {
    /// Whether a key of this algorithm can carry debt, i.e. be charged
    /// ([`charge`](crate::charge)) beyond its quota: every algorithm but the
    /// sliding log, whose one entry per unit makes charging thousands of
    /// units impractical.
    pub const fn carries_debt(self) -> bool {
        !matches!(self, Algorithm::SlidingLog)
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The error for a name that is not one of the algorithms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownAlgorithm(pub String);

impl fmt::Display for UnknownAlgorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown algorithm {:?} (expected one of ", self.0)?;
        for (i, a) in Algorithm::ALL.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            f.write_str(a.name())?;
        }
        f.write_str(")")
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
