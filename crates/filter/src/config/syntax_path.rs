//! The field path of a JSON syntax error: the member or element serde_json
//! was reading where the text stops being JSON, named as the configuration's
//! other errors are (`rules[0].limits[1].window`; `rules[0].?` between two
//! members, where no key names the place).
//!
//! Only run after serde_json refused the text: it walks the text as far as
//! it is JSON and names where it stopped.

use super::doc::{self, Kind};
use super::span::{byte, skip_ws, string_end};

/// Containers open at once when serde_json gives up (its recursion limit).
const MAX_DEPTH: usize = 127;

/// An object or array being read, with its path.
enum Open {
    Object(String),
    Array(String, usize),
}

/// The path of the first syntax error in `text` ("" at the top level).
pub fn syntax_error_path(text: &[u8]) -> String {
    let mut open: Vec<Open> = Vec::new();
    let mut at = skip_ws(text, 0);
    // The path of the value about to be read.
    let mut path = String::new();
    loop {
        match byte(text, at) {
            b'{' if open.len() < MAX_DEPTH => {
                at = skip_ws(text, at + 1);
                if byte(text, at) != b'}' {
                    match key(text, &mut at, &path) {
                        Ok(member) => {
                            open.push(Open::Object(path));
                            path = member;
                            continue;
                        }
                        Err(stop) => return stop,
                    }
                }
                at += 1;
            }
            b'[' if open.len() < MAX_DEPTH => {
                let first = skip_ws(text, at + 1);
                match byte(text, first) {
                    b']' => at = first + 1,
                    _ if first >= text.len() => return path,
                    _ => {
                        at = first;
                        open.push(Open::Array(path.clone(), 0));
                        path = format!("{path}[0]");
                        continue;
                    }
                }
            }
            _ => match scalar_end(text, at) {
                Some(end) => at = end,
                None => return path,
            },
        }
        // A value is complete: what follows it in its container.
        loop {
            at = skip_ws(text, at);
            match open.last_mut() {
                None => return String::new(),
                Some(Open::Object(object)) => match byte(text, at) {
                    b'}' => at += 1,
                    b',' => {
                        at = skip_ws(text, at + 1);
                        match key(text, &mut at, object) {
                            Ok(member) => {
                                path = member;
                                break;
                            }
                            Err(stop) => return stop,
                        }
                    }
                    _ => return join(object, "?"),
                },
                Some(Open::Array(array, index)) => match byte(text, at) {
                    b']' => at += 1,
                    b',' => {
                        at = skip_ws(text, at + 1);
                        if byte(text, at) == b']' || at >= text.len() {
                            return array.clone();
                        }
                        *index += 1;
                        path = format!("{array}[{index}]");
                        break;
                    }
                    _ => return array.clone(),
                },
            }
            open.pop();
        }
    }
}

/// Reads `"key":` at `at` in the object at `object`, leaving `at` on the
/// value; the member's path, or where the error is.
fn key(text: &[u8], at: &mut usize, object: &str) -> Result<String, String> {
    if byte(text, *at) != b'"' {
        return Err(join(object, "?"));
    }
    let end = string_end(text, *at);
    let read = doc::read(text.get(*at..end).unwrap_or_default());
    let key = match read.as_ref().map(|d| d.items.first().map(|i| &i.kind)) {
        Ok(Some(Kind::Str(key))) => key.to_string(),
        _ => return Err(join(object, "?")),
    };
    let colon = skip_ws(text, end);
    if byte(text, colon) != b':' {
        return Err(object.to_string());
    }
    *at = skip_ws(text, colon + 1);
    Ok(join(object, &key))
}

/// After the string, number or literal at `at`, if it is valid.
fn scalar_end(text: &[u8], at: usize) -> Option<usize> {
    let rest = text.get(at..).unwrap_or_default();
    let len = if byte(text, at) == b'"' {
        string_end(text, at) - at
    } else if let Some(literal) = [&b"true"[..], b"false", b"null"]
        .into_iter()
        .find(|l| rest.starts_with(l))
    {
        literal.len()
    } else {
        number_len(rest)?
    };
    // serde_json's own reading (escapes, UTF-8, a number's range).
    doc::read(rest.get(..len)?).ok().map(|_| at + len)
}

/// The length of the JSON number at the start of `s`, if one starts there.
fn number_len(s: &[u8]) -> Option<usize> {
    let digits = |from: usize| {
        s.get(from..)
            .unwrap_or_default()
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .count()
    };
    let mut i = usize::from(s.first() == Some(&b'-'));
    match s.get(i) {
        Some(b'0') if !s.get(i + 1).is_some_and(u8::is_ascii_digit) => i += 1,
        Some(b'1'..=b'9') => i += digits(i),
        _ => return None,
    }
    if s.get(i) == Some(&b'.') {
        let n = digits(i + 1);
        if n == 0 {
            return None;
        }
        i += 1 + n;
    }
    if matches!(s.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(s.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        let n = digits(i);
        if n == 0 {
            return None;
        }
        i += n;
    }
    Some(i)
}

fn join(parent: &str, name: &str) -> String {
    if parent.is_empty() {
        name.to_string()
    } else {
        format!("{parent}.{name}")
    }
}

#[cfg(test)]
mod tests {
    use super::syntax_error_path as path;

    #[test]
    fn names_the_member_or_element_being_read() {
        assert_eq!(path(br#"{"rules":[{"name":"#), "rules[0].name");
        assert_eq!(path(br#"{"rules":[{"name":"r",}]}"#), "rules[0].?");
        assert_eq!(path(br#"{"a":[1,]}"#), "a");
        assert_eq!(path(br#"{"a":[1,}"#), "a[1]");
        assert_eq!(path(br#"{"a":[1 2]}"#), "a");
        assert_eq!(path(br#"{"a" 1}"#), "");
        assert_eq!(path(br#"{"a":{"b" 1}}"#), "a");
        assert_eq!(path(br#"{"a":tru}"#), "a");
        assert_eq!(path(br#"{"a":truex}"#), "?");
        assert_eq!(path(br#"{"a":01}"#), "a");
        assert_eq!(path(br#"{"a":1.}"#), "a");
        assert_eq!(path(br#"{"a":"\x"}"#), "a");
        assert_eq!(path(br#"{"a":1} x"#), "");
        assert_eq!(path(b""), "");
        assert_eq!(path(b"{"), "?");
        assert_eq!(path(br#"{"a":[{"b":[]},{"c":-}]}"#), "a[1].c");
    }
}
