//! Where the service reads the time: the system clock in production, a
//! manual clock in tests so nothing sleeps.

use sluice_core::Nanos;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// A source of "now" in nanoseconds since the Unix epoch.
pub trait Clock: Send + Sync + 'static {
    /// The current instant.
    fn now(&self) -> Nanos;
}

/// The system's wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Nanos {
        // A clock before 1970 or past year 2554 reads as the nearest bound.
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
            .unwrap_or(0)
    }
}

/// A clock that only moves when told to; for tests.
#[derive(Debug, Default)]
pub struct ManualClock(AtomicU64);

impl ManualClock {
    /// A clock standing at `now`.
    pub fn new(now: Nanos) -> Self {
        ManualClock(AtomicU64::new(now))
    }

    /// Moves the clock to `now`.
    pub fn set(&self, now: Nanos) {
        self.0.store(now, Ordering::SeqCst);
    }

    /// Moves the clock forward by `by` (saturating).
    pub fn advance(&self, by: Nanos) {
        let _ = self
            .0
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |t| {
                Some(t.saturating_add(by))
            });
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Nanos {
        self.0.load(Ordering::SeqCst)
    }
}
