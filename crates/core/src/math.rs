//! Integer helpers: every intermediate is `u128`, and results saturate.

/// `(a / b, a % b)`, with 64-bit division when both fit (the common case,
/// and several times faster than 128-bit division). `b` must not be zero;
/// zero is answered with `(u128::MAX, 0)` rather than a panic.
#[inline]
pub(crate) fn divrem(a: u128, b: u128) -> (u128, u128) {
    if b == 0 {
        return (u128::MAX, 0);
    }
    if (a | b) >> 64 == 0 {
        // Both fit in 64 bits: one 64-bit division gives both.
        let (a, b) = (a as u64, b as u64);
        return (u128::from(a / b), u128::from(a % b));
    }
    (a / b, a % b)
}

/// `a / b` rounded up; `b` must not be zero (callers pass validated rates
/// and windows), and zero is answered with `u128::MAX` rather than a panic.
#[inline]
pub(crate) fn ceil_div(a: u128, b: u128) -> u128 {
    let (q, r) = divrem(a, b);
    q.saturating_add(u128::from(r != 0))
}

/// `a / b` rounded down, zero when `b` is zero.
#[inline]
pub(crate) fn floor_div(a: u128, b: u128) -> u128 {
    if b == 0 {
        return 0;
    }
    divrem(a, b).0
}

/// `x` as `u64`, saturating.
pub(crate) fn sat64(x: u128) -> u64 {
    u64::try_from(x).unwrap_or(u64::MAX)
}
