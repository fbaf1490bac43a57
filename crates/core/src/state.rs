//! The stored form of a key's state.
//!
//! Every state starts with two bytes: a format version ([`VERSION`]) and the
//! algorithm's code ([`Algorithm::code`], its tag). Integers are little-endian. Bytes
//! that do not start with this version and the deciding algorithm's code, or
//! that are too short, are treated as no state (a fresh key).

use crate::Algorithm;
use std::fmt;

/// The state format version, the first byte of every state.
pub const VERSION: u8 = 1;

/// States up to this many bytes are kept inline, without heap allocation.
pub const INLINE: usize = 32;

/// An encoded key state, ready to store.
///
/// Fixed-size states (token bucket, leaky bucket, GCRA, fixed window and a
/// sliding window of up to 3 sub-windows) are held inline; larger ones on the
/// heap.
#[derive(Clone)]
pub struct Encoded(Repr);

#[derive(Clone)]
enum Repr {
    Inline { len: u8, buf: [u8; INLINE] },
    Heap(Vec<u8>),
}

impl Encoded {
    /// The bytes to store.
    pub fn as_bytes(&self) -> &[u8] {
        match &self.0 {
            Repr::Inline { len, buf } => buf.get(..usize::from(*len)).unwrap_or(&[]),
            Repr::Heap(v) => v,
        }
    }

    /// A copy of stored bytes (for example read back from a store); whether
    /// they decode is checked only when they are used.
    pub fn from_bytes(bytes: &[u8]) -> Encoded {
        let mut buf = [0u8; INLINE];
        match buf.get_mut(..bytes.len()) {
            Some(head) => {
                head.copy_from_slice(bytes);
                Encoded(Repr::Inline {
                    len: bytes.len() as u8,
                    buf,
                })
            }
            None => Encoded(Repr::Heap(bytes.to_vec())),
        }
    }

    /// An inline state: the first `len` bytes of `buf` (`len <= INLINE`).
    #[inline]
    pub(crate) fn inline(len: u8, buf: [u8; INLINE]) -> Encoded {
        Encoded(Repr::Inline {
            len: len.min(INLINE as u8),
            buf,
        })
    }

    /// A heap state.
    pub(crate) fn heap(bytes: Vec<u8>) -> Encoded {
        if bytes.len() <= INLINE {
            Encoded::from_bytes(&bytes)
        } else {
            Encoded(Repr::Heap(bytes))
        }
    }

    /// The number of bytes.
    pub fn len(&self) -> usize {
        self.as_bytes().len()
    }

    /// Whether there are no bytes (never true for a state Sluice encodes).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes as an owned vector.
    pub fn into_vec(self) -> Vec<u8> {
        match self.0 {
            Repr::Heap(v) => v,
            Repr::Inline { .. } => self.as_bytes().to_vec(),
        }
    }
}

impl AsRef<[u8]> for Encoded {
    fn as_ref(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl PartialEq for Encoded {
    fn eq(&self, other: &Self) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for Encoded {}

impl fmt::Debug for Encoded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Encoded(")?;
        for b in self.as_bytes() {
            write!(f, "{b:02x}")?;
        }
        write!(f, ")")
    }
}

/// The payload of `bytes` when they carry this version and the code of
/// `algorithm`.
pub(crate) fn payload(bytes: &[u8], algorithm: Algorithm) -> Option<&[u8]> {
    match bytes {
        [VERSION, t, rest @ ..] if *t == algorithm.code() => Some(rest),
        _ => None,
    }
}

/// The fixed-size payload of `bytes` when they carry this version, the code
/// of `algorithm` and exactly `N` payload bytes.
pub(crate) fn fixed<const N: usize>(bytes: &[u8], algorithm: Algorithm) -> Option<[u8; N]> {
    payload(bytes, algorithm).and_then(|p| <[u8; N]>::try_from(p).ok())
}

/// Reads the little-endian `u64` at `at`.
pub(crate) fn u64_at(bytes: &[u8], at: usize) -> Option<u64> {
    let end = at.checked_add(8)?;
    let chunk = bytes.get(at..end)?;
    <[u8; 8]>::try_from(chunk).ok().map(u64::from_le_bytes)
}

/// Reads the little-endian `u32` at `at`.
pub(crate) fn u32_at(bytes: &[u8], at: usize) -> Option<u32> {
    let end = at.checked_add(4)?;
    let chunk = bytes.get(at..end)?;
    <[u8; 4]>::try_from(chunk).ok().map(u32::from_le_bytes)
}

/// Two `u64` words behind the header: 18 bytes.
#[inline]
pub(crate) fn encode2(algorithm: Algorithm, a: u64, b: u64) -> Encoded {
    let mut out = [0u8; INLINE];
    out[0] = VERSION;
    out[1] = algorithm.code();
    out[2..10].copy_from_slice(&a.to_le_bytes());
    out[10..18].copy_from_slice(&b.to_le_bytes());
    Encoded::inline(18, out)
}

/// Decodes what [`encode2`] wrote.
#[inline]
pub(crate) fn decode2(bytes: &[u8], algorithm: Algorithm) -> Option<(u64, u64)> {
    let p: [u8; 16] = fixed(bytes, algorithm)?;
    Some((u64_at(&p, 0)?, u64_at(&p, 8)?))
}

/// Three `u64` words behind the header: 26 bytes.
#[inline]
pub(crate) fn encode3(algorithm: Algorithm, a: u64, b: u64, c: u64) -> Encoded {
    let mut out = [0u8; INLINE];
    out[0] = VERSION;
    out[1] = algorithm.code();
    out[2..10].copy_from_slice(&a.to_le_bytes());
    out[10..18].copy_from_slice(&b.to_le_bytes());
    out[18..26].copy_from_slice(&c.to_le_bytes());
    Encoded::inline(26, out)
}

/// Decodes what [`encode3`] wrote.
#[inline]
pub(crate) fn decode3(bytes: &[u8], algorithm: Algorithm) -> Option<(u64, u64, u64)> {
    let p: [u8; 24] = fixed(bytes, algorithm)?;
    Some((u64_at(&p, 0)?, u64_at(&p, 8)?, u64_at(&p, 16)?))
}
