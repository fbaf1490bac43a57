//! The host's clock.

use proxy_wasm::hostcalls;
use sluice_core::Nanos;
use std::time::UNIX_EPOCH;

/// The host's time since the epoch (0 if it cannot be read).
pub(super) fn now() -> Nanos {
    hostcalls::get_current_time()
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .and_then(|d| u64::try_from(d.as_nanos()).ok())
        .unwrap_or(0)
}
