//! The host's clock, and the root's tick periods.

use proxy_wasm::hostcalls;
use sluice_core::Nanos;
use std::time::{Duration, UNIX_EPOCH};

/// The root's tick period while requests wait: their resume times are kept
/// to within about this.
pub(super) const HOLD_TICK: Duration = Duration::from_millis(1);

/// The host's time since the epoch (0 if it cannot be read).
pub(super) fn now() -> Nanos {
    hostcalls::get_current_time()
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .and_then(|d| u64::try_from(d.as_nanos()).ok())
        .unwrap_or(0)
}

pub(super) fn nanos(d: Duration) -> Nanos {
    u64::try_from(d.as_nanos()).unwrap_or(Nanos::MAX)
}
