//! The waits between reconnection attempts, spread so that instances that
//! lost Redis together do not come back in step.

use std::time::Duration;

/// `d` give or take half of it, from the clock's low bits: instances that
/// lost Redis together do not come back in step.
pub fn jittered(d: Duration) -> Duration {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|t| u64::from(t.subsec_nanos()))
        .unwrap_or(0);
    let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1);
    let spread = nanos.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 33;
    Duration::from_millis(ms / 2 + spread % ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_stays_within_half_either_side() {
        for _ in 0..100 {
            let d = jittered(Duration::from_millis(400));
            assert!(d >= Duration::from_millis(200) && d < Duration::from_millis(600));
        }
    }
}
