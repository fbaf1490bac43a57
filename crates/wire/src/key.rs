//! Limiter keys: how the filter names a limit's counter, within what the
//! limiter accepts.

use std::fmt::Write;
use std::hash::Hasher;

/// Longest limit key the limiter accepts, in bytes.
pub const MAX_KEY_BYTES: usize = 512;

/// The limiter key of `key` for limit `index` of `rule`: `<rule>/<index>/<key>`,
/// or, when that would be longer than [`MAX_KEY_BYTES`] (a long header
/// value), `<rule>/<index>/#<hash of key>` with a hash every Envoy computes
/// alike. Keys that share a hash share a counter, which errs on the side of
/// limiting.
#[inline]
pub fn limiter_key(rule: &str, index: usize, key: &str) -> String {
    let prefix = rule.len().saturating_add(22);
    let mut out = String::with_capacity(prefix.saturating_add(key.len()).min(MAX_KEY_BYTES));
    out.push_str(rule);
    out.push('/');
    push_decimal(&mut out, index);
    out.push('/');
    if out.len().saturating_add(key.len()) <= MAX_KEY_BYTES {
        out.push_str(key);
    } else {
        push_key_hash(&mut out, key);
    }
    out
}

/// Appends `#` and the 16 hex digits of a hash of `key` that every Envoy
/// and every limiter computes alike: how a key too long to keep is kept.
pub fn push_key_hash(out: &mut String, key: &str) {
    // Fixed keys: the hash must agree across Envoys (unlike slot seeds).
    #[allow(deprecated)]
    let mut hasher = std::hash::SipHasher::new_with_keys(0x736c_7569_6365, 0x676c_6f62_616c);
    hasher.write(key.as_bytes());
    let _ = write!(out, "#{:016x}", hasher.finish());
}

/// Appends `n` in decimal (without the formatting machinery: a key is
/// written per global limit of every request).
fn push_decimal(out: &mut String, n: usize) {
    if n >= 10 {
        push_decimal(out, n / 10);
    }
    out.push(char::from(
        b'0'.saturating_add(u8::try_from(n % 10).unwrap_or(0)),
    ));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_keys_are_hashed() {
        assert_eq!(limiter_key("r", 0, "alice"), "r/0/alice");
        for index in [0, 7, 10, 99, 1234, usize::MAX] {
            assert_eq!(limiter_key("rule", index, "k"), format!("rule/{index}/k"));
        }
        let long = "x".repeat(600);
        let hashed = limiter_key("r", 0, &long);
        assert!(
            hashed.starts_with("r/0/#") && hashed.len() == 5 + 16,
            "{hashed}"
        );
        assert_eq!(hashed, limiter_key("r", 0, &long));
        assert_ne!(hashed, limiter_key("r", 0, &"y".repeat(600)));
        let fits = "x".repeat(MAX_KEY_BYTES - 4);
        assert_eq!(limiter_key("r", 0, &fits).len(), MAX_KEY_BYTES);
    }
}
