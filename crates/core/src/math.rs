//! Integer helpers: every intermediate is `u128`, and results saturate.

/// `a / b` rounded up; `b` must not be zero (callers pass validated rates
/// and windows), and zero is answered with `u128::MAX` rather than a panic.
pub(crate) fn ceil_div(a: u128, b: u128) -> u128 {
    match (a.checked_div(b), a.checked_rem(b)) {
        (Some(q), Some(r)) => q + u128::from(r != 0),
        _ => u128::MAX,
    }
}

/// `a / b` rounded down, zero when `b` is zero.
pub(crate) fn floor_div(a: u128, b: u128) -> u128 {
    a.checked_div(b).unwrap_or(0)
}

/// `x` as `u64`, saturating.
pub(crate) fn sat64(x: u128) -> u64 {
    u64::try_from(x).unwrap_or(u64::MAX)
}
