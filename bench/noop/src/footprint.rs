//! Work of a known size for the `footprint` modes (cargo feature
//! `footprint`, `make bench-footprint`): what the code and the memory a
//! request runs through cost Envoy, beside what they cost in isolation.
//! Each mode makes the `host_calls` mode's calls, then one of:
//!
//! - `repeat`: `n` calls of one small function;
//! - `spread`: `n` calls of as many different functions of the same length
//!   (cycling through [`FUNCTIONS`] of them), the same instructions as
//!   `repeat` run through `n` times the code;
//! - `touch`: a byte read and written in each of `n` 64-byte lines of a
//!   64 KiB buffer.
//!
//! Without the feature the modes are not offered and this code is not in
//! the module.

use std::cell::RefCell;

/// The different functions `spread` cycles through.
pub const FUNCTIONS: usize = 256;

/// One unit of work: a function of the previous result.
type Step = fn(u64) -> u64;

/// The rotations of each round of [`step`]: of the constant before the
/// exclusive or, of the multiplier, and of the product.
const ROUNDS: [(u32, u32, u32); 6] = [
    (0, 7, 13),
    (11, 17, 29),
    (19, 23, 41),
    (31, 37, 7),
    (43, 47, 19),
    (53, 59, 37),
];

/// One of [`FUNCTIONS`] functions of equal length, told apart by the
/// constants `K` gives them (so that none is merged with another); its
/// rounds are unrolled, straight-line code.
#[inline(never)]
fn step<const K: u64>(x: u64) -> u64 {
    let c = K.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    ROUNDS.iter().fold(x, |y, &(a, b, r)| {
        (y ^ c.rotate_left(a))
            .wrapping_mul(c.rotate_left(b) | 1)
            .rotate_left(r)
    })
}

macro_rules! row {
    ($high:literal) => {
        row!(@ $high; 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15)
    };
    (@ $high:literal; $($low:literal)*) => {
        [$(step::<{ $high * 16 + $low }> as Step),*]
    };
}

/// The functions, 16 rows of 16.
static TABLE: [[Step; 16]; 16] = [
    row!(0),
    row!(1),
    row!(2),
    row!(3),
    row!(4),
    row!(5),
    row!(6),
    row!(7),
    row!(8),
    row!(9),
    row!(10),
    row!(11),
    row!(12),
    row!(13),
    row!(14),
    row!(15),
];

/// Function `i` of [`FUNCTIONS`] (cyclically).
fn function(i: usize) -> Step {
    let i = i % FUNCTIONS;
    TABLE
        .get(i / 16)
        .and_then(|row| row.get(i % 16))
        .copied()
        .unwrap_or(step::<0>)
}

/// `n` calls of one function, from `seed`.
pub fn repeat(n: u32, seed: u64) -> u64 {
    let f = std::hint::black_box(function(0));
    (0..n).fold(seed, |acc, _| f(acc))
}

/// `n` calls of [`FUNCTIONS`] different functions in turn, from `seed`.
pub fn spread(n: u32, seed: u64) -> u64 {
    (0..n as usize).fold(seed, |acc, i| std::hint::black_box(function(i))(acc))
}

/// The bytes of a 64 KiB buffer `touch` reads and writes.
const BUFFER: usize = 64 * 1024;

thread_local! {
    static LINES: RefCell<Vec<u8>> = RefCell::new(vec![0; BUFFER]);
}

/// A byte of each of `n` 64-byte lines (cyclically over 64 KiB) read and
/// written.
pub fn touch(n: u32, seed: u8) {
    LINES.with(|lines| {
        if let Ok(mut lines) = lines.try_borrow_mut() {
            for line in 0..n as usize {
                if let Some(byte) = lines.get_mut(line * 64 % BUFFER) {
                    *byte = byte.wrapping_add(seed);
                }
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_runs_as_many_different_functions_as_repeat_runs_calls() {
        let addresses: std::collections::HashSet<usize> =
            (0..FUNCTIONS).map(|i| function(i) as usize).collect();
        assert_eq!(addresses.len(), FUNCTIONS);
        // Each function computes something different from the same input.
        let outputs: std::collections::HashSet<u64> =
            (0..FUNCTIONS).map(|i| function(i)(1)).collect();
        assert_eq!(outputs.len(), FUNCTIONS);
        assert_eq!(repeat(3, 5), step::<0>(step::<0>(step::<0>(5))));
        assert_eq!(spread(2, 5), function(1)(function(0)(5)));
    }

    #[test]
    fn touch_writes_one_byte_per_line() {
        touch(3, 1);
        LINES.with(|lines| {
            let lines = lines.borrow();
            assert_eq!(lines.iter().filter(|b| **b == 1).count(), 3);
            assert_eq!((lines[0], lines[64], lines[128], lines[1]), (1, 1, 1, 0));
        });
    }
}
