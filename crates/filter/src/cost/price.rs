//! A response cost's prices: each place a response reports a count may be
//! weighted (`{"from": "body:usage.output_tokens", "times": 4}`), as LLM
//! prices weigh output, input and cached input tokens differently.
//!
//! A price is fixed-point, in thousandths, so that a weighted sum is exact:
//! Σ value × times is added up in `u128` thousandths (4 counts of
//! `u64::MAX` times [`MAX_TIMES`] fit) and rounded **up** to a whole unit
//! once, at the end, so that a priced count is never free. A total beyond
//! `u64::MAX` is `u64::MAX`.

/// Thousandths in one unit.
const SCALE: u64 = 1000;

/// The largest price, in units.
pub const MAX_TIMES: u64 = 1_000_000;

/// What one unit of a count costs, in thousandths of a unit (1000: as is).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Price(u64);

impl Price {
    /// A count as is.
    pub const ONE: Price = Price(SCALE);

    /// Reads a price as written: a non-negative decimal of at most 3
    /// decimal places, at most [`MAX_TIMES`] (`4`, `0.1`, `1.25`); the
    /// error says what is wrong.
    pub fn parse(text: &str) -> Result<Price, String> {
        let expected = || {
            format!(
                "must be a non-negative decimal of at most 3 decimal places, at most {MAX_TIMES}, got {text}"
            )
        };
        let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
        let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
        if whole.is_empty()
            || !digits(whole)
            || !digits(fraction)
            || fraction.len() > 3
            || (text.contains('.') && fraction.is_empty())
        {
            return Err(expected());
        }
        // Leading zeros aside, more than 7 digits is past the maximum.
        let whole = whole.trim_start_matches('0');
        if whole.len() > 7 {
            return Err(expected());
        }
        let units: u64 = if whole.is_empty() {
            0
        } else {
            whole.parse().map_err(|_| expected())?
        };
        let mut thousandths: u64 = 0;
        for (i, b) in fraction.bytes().enumerate() {
            let place = [100, 10, 1].get(i).copied().unwrap_or(0);
            thousandths += u64::from(b - b'0') * place;
        }
        let price = units * SCALE + thousandths;
        if price > MAX_TIMES * SCALE {
            return Err(expected());
        }
        Ok(Price(price))
    }

    /// The price in thousandths of a unit.
    pub fn thousandths(self) -> u64 {
        self.0
    }
}

/// Σ count × price over `priced`, rounded up to a whole unit; `u64::MAX`
/// when larger.
pub fn total(priced: impl IntoIterator<Item = (u64, Price)>) -> u64 {
    let sum = priced.into_iter().fold(0u128, |sum, (count, price)| {
        sum.saturating_add(u128::from(count) * u128::from(price.0))
    });
    let units = sum.div_ceil(u128::from(SCALE));
    u64::try_from(units).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(text: &str) -> Price {
        Price::parse(text).unwrap()
    }

    #[test]
    fn prices_are_read_in_thousandths() {
        for (text, thousandths) in [
            ("0", 0),
            ("1", 1000),
            ("4", 4000),
            ("0.1", 100),
            ("0.125", 125),
            ("1.05", 1050),
            ("007.5", 7500),
            ("1000000", 1_000_000_000),
            ("1000000.000", 1_000_000_000),
        ] {
            assert_eq!(p(text).thousandths(), thousandths, "{text}");
        }
        for bad in [
            "",
            "-1",
            "1.",
            ".5",
            "0.0001",
            "1e3",
            "1,5",
            " 1",
            "+1",
            "1000000.001",
            "1000001",
            "99999999999999999999",
        ] {
            assert_eq!(
                Price::parse(bad),
                Err(format!(
                    "must be a non-negative decimal of at most 3 decimal places, at most 1000000, got {bad}"
                )),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn a_weighted_total_is_exact_and_rounded_up_once() {
        // 3 × 0.1 = 0.3: rounded up to 1, never free.
        assert_eq!(total([(3, p("0.1"))]), 1);
        // 10 input + 4 × 5 output + 0.1 × 7 cached = 30.7 → 31.
        assert_eq!(total([(10, Price::ONE), (5, p("4")), (7, p("0.1"))]), 31);
        // Rounded once, at the end: 0.5 + 0.5 is 1, not 2.
        assert_eq!(total([(5, p("0.1")), (5, p("0.1"))]), 1);
        // Exact: 3 × 0.333 + 1 × 0.001 = 1.000.
        assert_eq!(total([(3, p("0.333")), (1, p("0.001"))]), 1);
        assert_eq!(total([(0, p("4")), (9, p("0"))]), 0);
        assert_eq!(total([(42, Price::ONE), (8, Price::ONE)]), 50);
    }

    #[test]
    fn overflow_saturates() {
        assert_eq!(total([(u64::MAX, Price::ONE)]), u64::MAX);
        assert_eq!(total([(u64::MAX, p("0.5"))]), u64::MAX / 2 + 1);
        assert_eq!(total([(u64::MAX / 2, p("4"))]), u64::MAX);
        let max = p("1000000");
        assert_eq!(total([(u64::MAX, max); 4]), u64::MAX);
    }
}
