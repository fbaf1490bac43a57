//! Where values sit in the configuration's text, for the `at line L column C`
//! of a message, the order of an object's members and its repeated keys
//! (which a parsed `serde_json::Value` no longer shows).
//!
//! Only run on text that serde_json has parsed, so it assumes valid JSON;
//! out-of-range reads give `0`, which ends every loop, rather than a panic.

/// One member of an object, as written.
pub struct Member {
    /// The key, from its opening quote to after its closing quote.
    pub key: (usize, usize),
    /// The colon after the key (serde_json reports key errors there).
    pub colon: usize,
    /// The first byte of the value.
    pub value: usize,
}

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

/// After the value that starts at `at`.
pub fn value_end(text: &[u8], at: usize) -> usize {
    match byte(text, at) {
        b'"' => string_end(text, at),
        b'{' | b'[' => container_end(text, at),
        _ => {
            let mut i = at;
            while !matches!(
                byte(text, i),
                b',' | b'}' | b']' | b' ' | b'\n' | b'\t' | b'\r' | 0
            ) {
                i += 1;
            }
            i
        }
    }
}

/// After the object or array whose opening bracket is at `at`.
fn container_end(text: &[u8], at: usize) -> usize {
    let mut depth = 0usize;
    let mut i = at;
    while i < text.len() {
        match byte(text, i) {
            b'"' => {
                i = string_end(text, i);
                continue;
            }
            b'{' | b'[' => depth += 1,
            b'}' | b']' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
    i
}

/// The members of the object whose `{` is at `at`, in the order written.
pub fn members(text: &[u8], at: usize) -> Vec<Member> {
    let mut out = Vec::new();
    let mut i = skip_ws(text, at + 1);
    while byte(text, i) == b'"' {
        let key_end = string_end(text, i);
        let colon = skip_ws(text, key_end);
        let value = skip_ws(text, colon + 1);
        out.push(Member {
            key: (i, key_end),
            colon,
            value,
        });
        i = skip_ws(text, value_end(text, value));
        if byte(text, i) != b',' {
            break;
        }
        i = skip_ws(text, i + 1);
    }
    out
}

/// Where the elements of the array whose `[` is at `at` start.
pub fn elements(text: &[u8], at: usize) -> Vec<usize> {
    let mut out = Vec::new();
    let mut i = skip_ws(text, at + 1);
    while !matches!(byte(text, i), b']' | 0) {
        out.push(i);
        i = skip_ws(text, value_end(text, i));
        if byte(text, i) != b',' {
            break;
        }
        i = skip_ws(text, i + 1);
    }
    out
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
    fn finds_members_elements_and_ends() {
        let text = br#"{ "a" : [1, "x]" , {"b":null}], "c\"d":-2.5e3 }"#;
        let m = members(text, 0);
        assert_eq!(m.len(), 2);
        assert_eq!(&text[m[0].key.0..m[0].key.1], br#""a""#);
        assert_eq!(text[m[0].colon], b':');
        assert_eq!(&text[m[1].key.0..m[1].key.1], br#""c\"d""#);
        let end = value_end(text, m[1].value);
        assert_eq!(&text[m[1].value..end], b"-2.5e3");
        let e = elements(text, m[0].value);
        let spans: Vec<&[u8]> = e.iter().map(|&s| &text[s..value_end(text, s)]).collect();
        assert_eq!(spans, [&b"1"[..], br#""x]""#, br#"{"b":null}"#]);
        assert_eq!(value_end(text, 0), text.len());
        assert!(members(b"{}", 0).is_empty());
        assert!(elements(b"[ ]", 0).is_empty());
    }

    #[test]
    fn positions_count_bytes_on_the_line() {
        assert_eq!(line_column(b"ab\ncd", 4), (2, 1));
        assert_eq!(line_column(b"ab\ncd", 2), (1, 2));
        assert_eq!(line_column(b"ab", 9), (1, 2));
    }
}
