//! Character classes as sorted, disjoint ranges of scalar values.

/// Why a pattern is refused (by the parser, or a class it reads).
pub(super) type Error = &'static str;

/// Inclusive ranges of scalar values, sorted, neither overlapping nor
/// adjacent once [`canonical`].
pub(super) type Ranges = Vec<(u32, u32)>;

const MAX: u32 = char::MAX as u32;

/// One character.
pub(super) fn single(c: char) -> (u32, u32) {
    (u32::from(c), u32::from(c))
}

/// `.`: any character but `\n`.
pub(super) fn dot() -> Ranges {
    vec![(0, 9), (11, MAX)]
}

/// `\d`, `\s` or `\w` (by its lower-case letter), ASCII only as in RE2.
pub(super) fn perl(name: char) -> Ranges {
    let ranges: &[(u8, u8)] = match name {
        'd' => &[(b'0', b'9')],
        's' => &[(b'\t', b'\r'), (b' ', b' ')],
        _ => &[(b'0', b'9'), (b'A', b'Z'), (b'_', b'_'), (b'a', b'z')],
    };
    ranges
        .iter()
        .map(|&(a, b)| (u32::from(a), u32::from(b)))
        .collect()
}

/// Sorted, with overlapping and adjacent ranges merged.
pub(super) fn canonical(ranges: Ranges) -> Ranges {
    // Insertion sort: a class has few ranges, and the library's sort would
    // cost the wasm 8 KB.
    let mut sorted: Ranges = Vec::with_capacity(ranges.len());
    for range in ranges {
        let at = sorted
            .iter()
            .rposition(|r| *r <= range)
            .map_or(0, |i| i + 1);
        sorted.insert(at, range);
    }
    let mut out: Ranges = Vec::with_capacity(sorted.len());
    for (lo, hi) in sorted {
        match out.last_mut() {
            Some(last) if lo <= last.1.saturating_add(1) => last.1 = last.1.max(hi),
            _ => out.push((lo, hi)),
        }
    }
    out
}

/// Every scalar value not in `ranges` (canonical).
pub(super) fn negate(ranges: &[(u32, u32)]) -> Ranges {
    let mut out = Vec::with_capacity(ranges.len() + 1);
    let mut next = 0;
    for &(lo, hi) in ranges {
        if lo > next {
            out.push((next, lo - 1));
        }
        next = hi.saturating_add(1);
    }
    if next <= MAX {
        out.push((next, MAX));
    }
    out
}

/// `ranges` (canonical) with the other case of each ASCII letter in them.
///
/// A range from an upper-case letter to a lower-case one short of `z`
/// (`[A-m]`) is refused: `regex-lite`, which the engine is tested against,
/// folds only its lower-case part.
pub(super) fn fold(ranges: &[(u32, u32)]) -> Result<Ranges, Error> {
    const CASE: u32 = 32;
    let (upper, lower) = (
        (u32::from(b'A'), u32::from(b'Z')),
        (u32::from(b'a'), u32::from(b'z')),
    );
    let mut out = ranges.to_vec();
    for &(lo, hi) in ranges {
        if lo <= upper.1 && hi >= lower.0 && hi < lower.1 {
            return Err("(?i) with a class range from an upper-case to a lower-case letter ([A-m]) is not supported");
        }
        let (a, b) = (lo.max(lower.0), hi.min(lower.1));
        if a <= b {
            out.push((a - CASE, b - CASE));
        }
        let (a, b) = (lo.max(upper.0), hi.min(upper.1));
        if a <= b {
            out.push((a + CASE, b + CASE));
        }
    }
    Ok(canonical(out))
}

/// Whether `c` is in `ranges` (sorted).
pub(super) fn contains(ranges: &[(u32, u32)], c: char) -> bool {
    let c = u32::from(c);
    ranges
        .iter()
        .take_while(|&&(lo, _)| lo <= c)
        .any(|&(_, hi)| c <= hi)
}
