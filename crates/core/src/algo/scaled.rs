//! A quantity in scaled units kept as whole units and a fraction of one:
//! how the meters (`super::meter`) and their debt layout (`super::debt`)
//! store a level or an arrival time.

use crate::math::{divrem, sat64};

/// Which way [`join`] reads a fraction out of range (a state written under
/// another limit): towards the stricter side for the meter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Round {
    /// Just below the next whole unit (fewer tokens).
    Down,
    /// The next whole unit (a fuller bucket, a later arrival time).
    Up,
}

/// A quantity stored as `whole` units of `unit` and a fraction `frac` of
/// one, in scaled units; a fraction of `unit` or more is rounded as `round`
/// says.
#[inline]
pub(crate) fn join(whole: u64, frac: u64, unit: u128, round: Round) -> u128 {
    let (whole, frac) = (u128::from(whole), u128::from(frac));
    match round {
        _ if frac < unit => whole * unit + frac,
        Round::Down => whole * unit + unit.saturating_sub(1),
        Round::Up => (whole + 1) * unit,
    }
}

/// `value` as whole units of `unit` and the fraction, the inverse of
/// [`join`]; a whole part beyond 64 bits saturates to `(u64::MAX, 0)`.
#[inline]
pub(crate) fn split(value: u128, unit: u128) -> (u64, u64) {
    let (whole, frac) = divrem(value, unit);
    match u64::try_from(whole) {
        Ok(whole) => (whole, sat64(frac)),
        Err(_) => (u64::MAX, 0),
    }
}
