//! Decimal text of integers without the formatting machinery: keys and header
//! values are written on every request, and `write!` costs more than the
//! digits in wasm.

/// Appends `n` in decimal to `out`.
pub fn push_u64(out: &mut String, n: u64) {
    let mut divisor: u64 = 1;
    while n / divisor >= 10 {
        // n / divisor >= 10 means divisor * 10 <= n: no overflow.
        divisor = divisor.saturating_mul(10);
    }
    loop {
        let digit = (n / divisor) % 10;
        out.push(char::from(b'0'.saturating_add(digit as u8)));
        if divisor == 1 {
            break;
        }
        divisor /= 10;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_display() {
        let mut out = String::from("x");
        for n in [
            0,
            1,
            9,
            10,
            99,
            100,
            12_345,
            1_000_000_007,
            u64::MAX - 1,
            u64::MAX,
        ] {
            out.truncate(1);
            push_u64(&mut out, n);
            assert_eq!(out, format!("x{n}"));
        }
        for k in 0..20u32 {
            let n = 10u64.pow(k);
            for m in [n - 1, n, n + 1] {
                out.clear();
                push_u64(&mut out, m);
                assert_eq!(out, m.to_string());
            }
        }
    }
}
