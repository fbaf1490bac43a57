//! Sliding log: one timestamp per admitted unit of cost; a request passes
//! when the entries younger than `window` plus its cost fit in `burst`.
//!
//! State: version, tag, `shift` (u8), `count` (u32), `base` (u64, in ticks)
//! and `count` little-endian `u32` offsets from `base`, sorted: 15 + 4 ×
//! count bytes. A tick is `2^shift` ns, the smallest power of two that keeps
//! a window within 2^31 ticks: 1 ns for windows up to 2.1 s, about 16 µs for
//! an hour, 16.8 ms for a year. Timestamps are rounded *up* to a tick, so an
//! entry leaves the window at most one tick late, never early: rounding can
//! only deny, never admit more.
//!
//! A decision reads the state in place: it finds the first live entry by
//! binary search over the offsets and writes the live offsets (copied as
//! they are while the base can stay, which is the common case) and the new ones.

use super::{Mode, Verdict};
use crate::limit::Params;
use crate::math::sat64;
use crate::state::{payload, u32_at, u64_at, VERSION};
use crate::{Algorithm, Nanos, Outcome};

const HEADER: usize = 15;

/// The tick shift for a window: the smallest `k` with `window < 2^(31 + k)`.
pub(crate) fn shift_for(window: u128) -> u32 {
    (128 - window.leading_zeros()).saturating_sub(31)
}

/// `t` in ticks, rounded up.
fn tick_of(t: Nanos, shift: u32) -> u64 {
    let mask = (1u64 << shift) - 1;
    (t >> shift) + u64::from(t & mask != 0)
}

/// A decoded log: offsets are read from the bytes when needed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Log<'a> {
    pub shift: u32,
    pub base: u64,
    offsets: &'a [u8],
}

impl<'a> Log<'a> {
    pub(crate) fn decode(p: &Params, bytes: &'a [u8]) -> Option<Log<'a>> {
        let rest = payload(bytes, Algorithm::SlidingLog)?;
        let shift = u32::from(*rest.first()?);
        if shift != shift_for(p.window()) {
            return None;
        }
        let count = usize::try_from(u32_at(rest, 1)?).ok()?;
        let base = u64_at(rest, 5)?;
        let offsets = rest.get(HEADER - 2..)?;
        if offsets.len() != count.checked_mul(4)? {
            return None;
        }
        Some(Log {
            shift,
            base,
            offsets,
        })
    }

    pub(crate) fn len(&self) -> usize {
        self.offsets.len() / 4
    }

    /// The `i`th offset.
    fn offset(&self, i: usize) -> u32 {
        i.checked_mul(4)
            .and_then(|at| u32_at(self.offsets, at))
            .unwrap_or(0)
    }

    /// The `i`th entry in ticks.
    pub(crate) fn tick(&self, i: usize) -> u64 {
        self.base.saturating_add(u64::from(self.offset(i)))
    }

    /// The number of offsets `<= bound` (offsets are sorted).
    fn count_up_to(&self, bound: u64) -> usize {
        partition_point(self.len(), |i| u64::from(self.offset(i)) <= bound)
    }

    /// How many entries (the first ones) have expired at `now`, counting
    /// ticks from `base`: those at ticks up to `(now - window) >> shift`.
    fn expired(&self, now: Nanos, window: Nanos, base: u64) -> usize {
        match now.checked_sub(window) {
            Some(edge) => match (edge >> self.shift).checked_sub(base) {
                Some(bound) => self.count_up_to(bound),
                None => 0,
            },
            None => 0,
        }
    }

    /// The log without its `first` expired entries, counted from `base`,
    /// plus `extra` entries at `now_tick`; `newest_after` is its newest tick.
    fn rewritten(
        &self,
        first: usize,
        base: u64,
        newest_after: u64,
        now_tick: u64,
        extra: u64,
    ) -> crate::Encoded {
        let kept = self.offsets.get(first * 4..).unwrap_or(&[]);
        // Keep the base while the new offsets fit (the live offsets are then
        // copied as they are); otherwise rebase on the oldest live entry.
        let (new_base, minus) = if first >= self.len() {
            (newest_after, 0)
        } else if newest_after.saturating_sub(base) <= u64::from(u32::MAX) {
            (base, 0)
        } else {
            let oldest = self.offset(first);
            (base.saturating_add(u64::from(oldest)), oldest)
        };
        write(
            self.shift,
            new_base,
            kept,
            minus,
            offset(now_tick, new_base),
            extra,
        )
    }
}

/// A new log: header, then `offsets`, each less `minus`, then `extra`
/// copies of `last`; `base` is the base tick.
fn write(
    shift: u32,
    base: u64,
    offsets: &[u8],
    minus: u32,
    last: u32,
    extra: u64,
) -> crate::Encoded {
    let extra = usize::try_from(extra).unwrap_or(0);
    let count = (offsets.len() / 4).saturating_add(extra);
    let mut out = Vec::with_capacity(HEADER + count.saturating_mul(4));
    out.push(VERSION);
    out.push(Algorithm::SlidingLog.code());
    out.push(shift as u8);
    out.extend_from_slice(&u32::try_from(count).unwrap_or(u32::MAX).to_le_bytes());
    out.extend_from_slice(&base.to_le_bytes());
    out.extend_from_slice(offsets);
    if minus != 0 {
        let start = HEADER.min(out.len());
        for chunk in out.get_mut(start..).unwrap_or(&mut []).chunks_exact_mut(4) {
            let mut word = [0u8; 4];
            word.copy_from_slice(chunk);
            chunk.copy_from_slice(&u32::from_le_bytes(word).wrapping_sub(minus).to_le_bytes());
        }
    }
    let tail = last.to_le_bytes();
    for _ in 0..extra {
        out.extend_from_slice(&tail);
    }
    crate::Encoded::heap(out)
}

/// Writes a log of `ticks` (sorted) followed by `extra` copies of `last`.
pub(crate) fn encode(shift: u32, ticks: &[u64], last: u64, extra: u64) -> crate::Encoded {
    let base = ticks.first().copied().unwrap_or(last).min(last);
    let offsets: Vec<u8> = ticks
        .iter()
        .flat_map(|&t| offset(t, base).to_le_bytes())
        .collect();
    write(shift, base, &offsets, 0, offset(last, base), extra)
}

fn offset(t: u64, base: u64) -> u32 {
    u32::try_from(t.saturating_sub(base)).unwrap_or(u32::MAX)
}

/// When an entry at `tick` leaves the window.
fn expiry(tick: u64, shift: u32, window: u128) -> u128 {
    (u128::from(tick) << shift) + window
}

// Kept out of line so that the fixed-size algorithms' path stays small.
#[inline(never)]
pub(crate) fn decide(
    p: &Params,
    state: Option<&[u8]>,
    now: Nanos,
    cost: u64,
    mode: Mode,
) -> Outcome {
    let shift = shift_for(p.window());
    let now_tick = tick_of(now, shift);
    let empty = Log {
        shift,
        base: now_tick,
        offsets: &[],
    };
    let log = state.and_then(|s| Log::decode(p, s)).unwrap_or(empty);
    let n = log.len();
    // The clock stepped back behind the newest entry: move every entry back
    // by the step, as if the clock had not moved, so the key recovers
    // within a window and admits no more than the limit.
    let newest = n.checked_sub(1).map_or(0, |i| log.tick(i));
    let back = newest.saturating_sub(now_tick);
    let base = log.base.saturating_sub(back);
    let first = log.expired(now, p.window, base);
    let live = n - first;
    let live64 = live as u64;
    let tick = |i: usize| base.saturating_add(u64::from(log.offset(i)));
    let allowed = live64.saturating_add(cost) <= p.cap;
    let consumed = allowed && mode == Mode::Commit;
    let after = if consumed { live64 + cost } else { live64 };
    let newest_after = if consumed {
        now_tick
    } else {
        newest.saturating_sub(back)
    };
    let now128 = u128::from(now);
    let verdict = if allowed {
        Verdict::ADMIT
    } else {
        // The entry whose expiry makes room for `cost`.
        let drop = usize::try_from(live64.saturating_add(cost) - p.cap).unwrap_or(usize::MAX);
        let at = first
            .saturating_add(drop)
            .saturating_sub(1)
            .min(n.saturating_sub(1));
        Verdict::over_limit(sat64(
            expiry(tick(at), shift, p.window()).saturating_sub(now128),
        ))
    };
    let reset = if after > 0 {
        sat64(expiry(newest_after, shift, p.window()).saturating_sub(now128))
    } else {
        0
    };
    let decision = verdict.decision(p, p.cap.saturating_sub(after), reset);
    let new_state = (consumed || back > 0).then(|| {
        let extra = if consumed { cost } else { 0 };
        log.rewritten(first, base, newest_after, now_tick, extra)
    });
    Outcome {
        decision,
        new_state,
    }
}

/// The first index in `0..n` where `pred` is false (`pred` must hold on a prefix).
fn partition_point(n: usize, pred: impl Fn(usize) -> bool) -> usize {
    let (mut lo, mut hi) = (0usize, n);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if pred(mid) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

pub(crate) fn refund(
    p: &Params,
    state: &[u8],
    admitted_at: Nanos,
    cost: u64,
) -> Option<crate::Encoded> {
    let log = Log::decode(p, state)?;
    let at = tick_of(admitted_at, log.shift);
    let n = log.len();
    // The entries written for the request: the last `cost` entries at its tick.
    let end = partition_point(n, |i| log.tick(i) <= at);
    let start = partition_point(end, |i| log.tick(i) < at);
    let take = (end - start).min(usize::try_from(cost).unwrap_or(usize::MAX));
    if take == 0 {
        return None;
    }
    let kept: Vec<u64> = (0..n)
        .filter(|&i| i < end - take || i >= end)
        .map(|i| log.tick(i))
        .collect();
    let last = kept.last().copied().unwrap_or(at);
    Some(encode(log.shift, &kept, last, 0))
}
