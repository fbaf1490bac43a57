//! Reading positions in the configuration's text: its whitespace, where a
//! string ends, and the `at line L column C` of a message.
//!
//! Out-of-range reads give `0`, which ends every loop, rather than a panic.

pub fn byte(text: &[u8], at: usize) -> u8 {
    text.get(at).copied().unwrap_or(0)
}

/// The first byte at or after `at` that is not whitespace.
pub fn skip_ws(text: &[u8], mut at: usize) -> usize {
    while matches!(byte(text, at), b' ' | b'\n' | b'\t' | b'\r') {
        at += 1;
    }
    at
}

/// After the closing quote of the string whose opening quote is at `at`.
pub fn string_end(text: &[u8], mut at: usize) -> usize {
    at += 1;
    loop {
        match byte(text, at) {
            b'"' => return at + 1,
            b'\\' => at += 2,
            _ if at >= text.len() => return at,
            _ => at += 1,
        }
    }
}

/// serde_json's position of `offset`: 1-based line, and the bytes before
/// `offset` on that line.
pub fn line_column(text: &[u8], offset: usize) -> (usize, usize) {
    let before = text.get(..offset).unwrap_or(text);
    let line_start = before
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |i| i + 1);
    let line = 1 + before.iter().filter(|&&b| b == b'\n').count();
    (line, before.len() - line_start)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_count_bytes_on_the_line() {
        assert_eq!(line_column(b"ab\ncd", 4), (2, 1));
        assert_eq!(line_column(b"ab\ncd", 2), (1, 2));
        assert_eq!(line_column(b"ab", 9), (1, 2));
    }
}
