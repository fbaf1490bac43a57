//! Sliding window counter: the trailing window estimated from `precision`
//! sub-window counters aligned to the epoch, the oldest one weighted by how
//! much of it the trailing window still covers.
//!
//! With `precision = 1` this is the two-counter estimate `previous × (1 −
//! elapsed / window) + current`. With `P` sub-windows of `window / P`, the
//! estimate is `oldest × (1 − elapsed / sub-window) + the P newer counts`.
//! All of it is computed exactly in integers (time scaled by `P`).
//!
//! Error bound: the estimate differs from the exact count of the trailing
//! window by less than the count of the one sub-window that straddles the
//! window's trailing edge (which assumes its requests were spread evenly).
//! So a trailing window can hold up to `burst` plus that sub-window's count
//! (at most `2 × burst` with one counter, less with many sub-windows and
//! steady traffic), and a request can be denied while the exact count
//! still had room for at most that many.
//!
//! State: version, tag, counter width (4 or 8 bytes, 4 unless a count
//! exceeds `u32::MAX`), precision (u16), the current sub-window's index
//! (u64), then `precision + 1` counters, oldest first: 13 + 4 × (P + 1)
//! bytes, 21 bytes for `precision = 1`.
//!
//! Debt: a charge ([`charge`]) adds to the current sub-window's counter
//! beyond the capacity; the estimate decays as the window slides, and a
//! request passes again once it leaves room (`retry` finds when).

use super::{Mode, Verdict};
use crate::limit::Params;
use crate::math::{ceil_div, floor_div, sat64};
use crate::state::{payload, u64_at, INLINE, VERSION};
use crate::{Algorithm, Nanos, Outcome};
use smallvec::SmallVec;

/// Counters, inline up to precision 7.
pub(crate) type Counts = SmallVec<[u64; 8]>;

const HEADER: usize = 13;

/// Decoded state: the current sub-window's index and `P + 1` counters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Counters {
    pub index: u64,
    pub counts: Counts,
}

impl Counters {
    pub(crate) fn decode(p: &Params, bytes: &[u8]) -> Option<Counters> {
        let rest = payload(bytes, Algorithm::SlidingWindow)?;
        let width = usize::from(*rest.first()?);
        let precision = u16::from_le_bytes([*rest.get(1)?, *rest.get(2)?]);
        if u32::from(precision) != p.precision() || !(width == 4 || width == 8) {
            return None;
        }
        let index = u64_at(rest, 3)?;
        let body = rest.get(HEADER - 2..)?;
        let slots = usize::from(precision) + 1;
        if body.len() != slots * width {
            return None;
        }
        let mut counts = Counts::from_elem(0, slots);
        if width == 4 {
            for (c, b) in counts.iter_mut().zip(body.chunks_exact(4)) {
                *c = u64::from(u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
            }
        } else {
            for (c, b) in counts.iter_mut().zip(body.chunks_exact(8)) {
                *c = u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]);
            }
        }
        Some(Counters { index, counts })
    }

    pub(crate) fn encode(&self, p: &Params) -> crate::Encoded {
        let wide = self.counts.iter().any(|&c| c > u64::from(u32::MAX));
        let width: usize = if wide { 8 } else { 4 };
        let total = HEADER + self.counts.len() * width;
        if total <= INLINE {
            let mut buf = [0u8; INLINE];
            self.fill(p, &mut buf, width);
            crate::Encoded::inline(total as u8, buf)
        } else {
            let mut buf = vec![0u8; total];
            self.fill(p, &mut buf, width);
            crate::Encoded::heap(buf)
        }
    }

    /// Writes the state into `out` (at least as long as the state).
    fn fill(&self, p: &Params, out: &mut [u8], width: usize) {
        let (header, body) = out.split_at_mut(HEADER.min(out.len()));
        let mut h = [0u8; HEADER];
        h[0] = VERSION;
        h[1] = Algorithm::SlidingWindow.code();
        h[2] = width as u8;
        h[3..5].copy_from_slice(&(p.precision() as u16).to_le_bytes());
        h[5..13].copy_from_slice(&self.index.to_le_bytes());
        header.copy_from_slice(h.get(..header.len()).unwrap_or(&[]));
        if width == 8 {
            for (slot, &c) in body.chunks_exact_mut(8).zip(&self.counts) {
                slot.copy_from_slice(&c.to_le_bytes());
            }
        } else {
            for (slot, &c) in body.chunks_exact_mut(4).zip(&self.counts) {
                slot.copy_from_slice(&(c as u32).to_le_bytes());
            }
        }
    }

    /// Moves to sub-window `index`, dropping counters that fell out.
    fn advance(&mut self, index: u64) {
        let by = usize::try_from(index.saturating_sub(self.index)).unwrap_or(usize::MAX);
        let len = self.counts.len();
        if by >= len {
            self.counts.iter_mut().for_each(|c| *c = 0);
        } else if by > 0 {
            self.counts.rotate_left(by);
            if let Some(tail) = self.counts.get_mut(len - by..) {
                tail.iter_mut().for_each(|c| *c = 0);
            }
        }
        self.index = index;
    }
}

/// The sub-window holding `now` and how far into it (time scaled by `P`).
fn position(p: &Params, now: Nanos) -> (u64, u128) {
    let scaled = u128::from(now) * u128::from(p.precision());
    let index = floor_div(scaled, p.window());
    (sat64(index), scaled - index * p.window())
}

/// The estimate in units of `1 / window` requests.
fn estimate(p: &Params, counts: &[u64], into: u128) -> u128 {
    let (oldest, newer) = counts.split_first().map_or((0, &[][..]), |(o, n)| (*o, n));
    // At most 1001 counters of u64: the sum fits in u128.
    let newer: u128 = newer.iter().map(|&c| u128::from(c)).sum();
    u128::from(oldest)
        .saturating_mul(p.window() - into)
        .saturating_add(newer.saturating_mul(p.window()))
}

/// The counters of `state` moved to sub-window `index`, and whether they
/// were relabelled after the clock stepped back.
fn read(p: &Params, state: Option<&[u8]>, index: u64) -> (Counters, bool) {
    match state.and_then(|s| Counters::decode(p, s)) {
        // The clock stepped back: keep the counts, relabelled to now.
        Some(mut c) if c.index > index => {
            c.index = index;
            (c, true)
        }
        Some(mut c) => {
            c.advance(index);
            (c, false)
        }
        None => {
            let slots = p.precision() as usize + 1;
            let counts = smallvec::smallvec![0; slots];
            (Counters { index, counts }, false)
        }
    }
}

/// Counts `cost` in the current sub-window, beyond the capacity if need be.
pub(crate) fn charge(p: &Params, state: Option<&[u8]>, now: Nanos, cost: u64) -> crate::Encoded {
    let (mut c, _) = read(p, state, position(p, now).0);
    if let Some(last) = c.counts.last_mut() {
        *last = last.saturating_add(cost);
    }
    c.encode(p)
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
    let (index, into) = position(p, now);
    let (mut c, repaired) = read(p, state, index);
    let cap = u128::from(p.cap) * p.window();
    let need = u128::from(cost) * p.window();
    let est = estimate(p, &c.counts, into);
    let verdict = if est.saturating_add(need) <= cap {
        Verdict::ADMIT
    } else {
        Verdict::over_limit(retry(p, &c.counts, index, into, cost, now))
    };
    let consumed = verdict.allowed && mode == Mode::Commit;
    if consumed {
        if let Some(last) = c.counts.last_mut() {
            *last = last.saturating_add(cost);
        }
    }
    let after = if consumed { est + need } else { est };
    let reset = match c.counts.iter().rposition(|&n| n > 0) {
        Some(i) => {
            let clear = (u128::from(index) + i as u128 + 1) * p.window();
            sat64(ceil_div(clear, u128::from(p.precision())).saturating_sub(u128::from(now)))
        }
        None => 0,
    };
    let free = sat64(floor_div(cap.saturating_sub(after), p.window()));
    let decision = verdict.decision(p, free, reset);
    let new_state = (consumed || repaired).then(|| c.encode(p));
    Outcome {
        decision,
        new_state,
    }
}

/// The time until the estimate leaves room for `cost`: walks the coming
/// sub-windows; in each, the oldest counter's weight falls linearly.
fn retry(p: &Params, counts: &[u64], index: u64, into: u128, cost: u64, now: Nanos) -> Nanos {
    let cap = u128::from(p.cap) * p.window();
    let need = u128::from(cost) * p.window();
    let w = p.window();
    // Suffix sums: newer[k] = counts[k+1..].sum().
    let mut newer: SmallVec<[u128; 9]> = smallvec::smallvec![0u128; counts.len() + 1];
    for (i, &c) in counts.iter().enumerate().rev() {
        let next = newer.get(i + 1).copied().unwrap_or(0);
        if let Some(slot) = newer.get_mut(i) {
            *slot = next.saturating_add(u128::from(c));
        }
    }
    for k in 0..=counts.len() {
        let oldest = u128::from(counts.get(k).copied().unwrap_or(0));
        let rest = newer.get(k + 1).copied().unwrap_or(0).saturating_mul(w);
        let Some(room) = cap.checked_sub(need).and_then(|r| r.checked_sub(rest)) else {
            continue;
        };
        // Smallest `e` with oldest × (w − e) <= room.
        let earliest = match room.checked_div(oldest) {
            None => 0,
            Some(q) if q >= w => 0,
            Some(0) => continue,
            Some(q) => w - q,
        };
        let earliest = if k == 0 { earliest.max(into) } else { earliest };
        let at = (u128::from(index) + k as u128) * w + earliest;
        let at = ceil_div(at, u128::from(p.precision()));
        return sat64(at.saturating_sub(u128::from(now)));
    }
    0
}

pub(crate) fn refund(
    p: &Params,
    state: &[u8],
    admitted_at: Nanos,
    cost: u64,
) -> Option<crate::Encoded> {
    let mut c = Counters::decode(p, state)?;
    let (at, _) = position(p, admitted_at);
    // The counter the request was added to, if it is still kept.
    let back = c.index.checked_sub(at)?;
    let slot = c
        .counts
        .len()
        .checked_sub(1)?
        .checked_sub(usize::try_from(back).ok()?)?;
    let count = c.counts.get_mut(slot)?;
    if *count == 0 || cost == 0 {
        return None;
    }
    *count = count.saturating_sub(cost);
    Some(c.encode(p))
}
