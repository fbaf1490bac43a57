//! The debt layout of the three meters (token bucket, leaky bucket, GCRA):
//! a level above what their own layouts hold, written by
//! [`charge`](crate::charge) only.
//!
//! A token bucket cannot hold fewer than zero tokens, a leaky bucket's level
//! and a GCRA arrival time are read as at most full (a higher one is taken
//! for a state of another limit, or a clock that stepped back). A charge may
//! go beyond: the meter then writes this layout instead, and goes back to its
//! own once the level is representable again (the next write after it
//! drained).
//!
//! State (27 bytes): version, tag (the meter's code), then three
//! little-endian `u64`: the time the level was measured (ns), the whole
//! level in requests and its fraction in units of `1 / window_ns`, then the
//! byte [`MARK`]. The length differs from every meter's own layout (26 and
//! 18 bytes), so states written before decode as they always did. The level
//! is read as stored, never capped (a cap would forget debt); a fraction out
//! of range is rounded up (more debt); a level beyond `u64::MAX` requests
//! is written as `u64::MAX` requests.

use super::scaled::{join, split, Round};
use crate::limit::Params;
use crate::state::{payload, u64_at, INLINE, VERSION};
use crate::{Algorithm, Encoded, Nanos};

/// The last byte of a debt state.
pub(crate) const MARK: u8 = 0xDE;

/// The payload's length: three words and the mark.
const PAYLOAD: usize = 25;

/// The time and level (scaled units) of a debt state of `algorithm`.
pub(crate) fn decode(p: &Params, bytes: &[u8], algorithm: Algorithm) -> Option<(Nanos, u128)> {
    let rest = payload(bytes, algorithm)?;
    if rest.len() != PAYLOAD || rest.last() != Some(&MARK) {
        return None;
    }
    let (last, whole, frac) = (u64_at(rest, 0)?, u64_at(rest, 8)?, u64_at(rest, 16)?);
    Some((last, join(whole, frac, p.window(), Round::Up)))
}

/// The debt state of `algorithm` holding `level` as of `at`.
pub(crate) fn encode(p: &Params, algorithm: Algorithm, at: Nanos, level: u128) -> Encoded {
    let (whole, frac) = split(level, p.window());
    let mut out = [0u8; INLINE];
    out[0] = VERSION;
    out[1] = algorithm.code();
    out[2..10].copy_from_slice(&at.to_le_bytes());
    out[10..18].copy_from_slice(&whole.to_le_bytes());
    out[18..26].copy_from_slice(&frac.to_le_bytes());
    out[26] = MARK;
    Encoded::inline(27, out)
}
