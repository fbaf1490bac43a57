//! Decimal text of integers without the formatting machinery: keys and header
//! values are written on every request, and `write!` costs more than the
//! digits in wasm.

/// Appends `n` in decimal to `out`.
pub fn push_u64(out: &mut String, n: u64) {
    out.push_str(itoa::Buffer::new().format(n));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_display() {
        let mut out = String::from("x");
        for n in [0, 1, 9, 10, 99, 100, 12_345, 1_000_000_007, u64::MAX] {
            out.truncate(1);
            push_u64(&mut out, n);
            assert_eq!(out, format!("x{n}"));
        }
    }
}
