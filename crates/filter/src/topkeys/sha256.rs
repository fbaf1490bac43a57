//! SHA-256 (RustCrypto's `sha2`), only for showing keys hashed as the
//! limiter does.

use sha2::{Digest, Sha256};

/// The SHA-256 digest of `data`.
pub fn digest(data: &[u8]) -> [u8; 32] {
    Sha256::digest(data).into()
}

/// `key` as shown hashed: the first 16 hex digits of its SHA-256, as the
/// limiter shows keys.
pub fn hashed(key: &str) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let d = digest(key.as_bytes());
    let mut out = String::with_capacity(16);
    for b in &d[..8] {
        out.push(char::from(HEX[usize::from(b >> 4)]));
        out.push(char::from(HEX[usize::from(b & 15)]));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(d: [u8; 32]) -> String {
        d.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn digests_match_the_standards_vectors() {
        assert_eq!(
            hex(digest(b"")),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(
            hex(digest(b"abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(
            hex(digest(
                b"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"
            )),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"
        );
        let million = vec![b'a'; 1_000_000];
        assert_eq!(
            hex(digest(&million)),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"
        );
    }

    #[test]
    fn a_hashed_key_is_the_first_16_hex_digits() {
        assert_eq!(hashed("abc"), "ba7816bf8f01cfea");
    }
}
