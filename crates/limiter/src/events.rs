//! Notable events in the log, never one line per request: a failure that
//! repeats on every request is logged at most once per [`EVERY`], with the
//! number of its repeats left out since.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The shortest time between two lines of one throttled event.
pub const EVERY: Duration = Duration::from_secs(10);

/// One throttled event.
#[derive(Debug, Default)]
pub struct Throttle {
    /// Milliseconds since the process's start of the last line, plus one
    /// (0: never logged).
    last: AtomicU64,
    suppressed: AtomicU64,
}

fn since_start() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    let start = *START.get_or_init(Instant::now);
    u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX)
}

impl Throttle {
    /// A throttle that has not logged yet.
    pub const fn new() -> Throttle {
        Throttle {
            last: AtomicU64::new(0),
            suppressed: AtomicU64::new(0),
        }
    }

    /// `Some(n)` when this occurrence is to be logged (`n` occurrences were
    /// left out since the last line), `None` when it is left out.
    pub fn admit(&self) -> Option<u64> {
        let now = since_start().saturating_add(1);
        let last = self.last.load(Ordering::Relaxed);
        let every = u64::try_from(EVERY.as_millis()).unwrap_or(u64::MAX);
        if last != 0 && now.saturating_sub(last) < every {
            self.suppressed.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        if self
            .last
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            self.suppressed.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        Some(self.suppressed.swap(0, Ordering::Relaxed))
    }
}

/// Logs a warning at most once per [`EVERY`] from this call site, with
/// the number of occurrences left out since (`suppressed`).
#[macro_export]
macro_rules! warn_throttled {
    ($($arg:tt)+) => {{
        static THROTTLE: $crate::events::Throttle = $crate::events::Throttle::new();
        if let Some(suppressed) = THROTTLE.admit() {
            tracing::warn!(suppressed, $($arg)+);
        }
    }};
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_period() {
        let t = Throttle::new();
        assert_eq!(t.admit(), Some(0));
        assert_eq!(t.admit(), None);
        assert_eq!(t.admit(), None);
        // The next line (after EVERY) reports the two left out.
        t.last.store(0, Ordering::Relaxed);
        assert_eq!(t.admit(), Some(2));
    }
}
