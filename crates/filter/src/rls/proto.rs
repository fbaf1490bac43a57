//! Protobuf's wire format, as much as the rate limit service's messages
//! need: varints, length-delimited fields, and a reader that skips what it
//! does not know.

pub(super) fn put_varint(out: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

pub(super) fn put_varint_field(out: &mut Vec<u8>, field: u64, n: u64) {
    put_varint(out, field << 3);
    put_varint(out, n);
}

pub(super) fn put_bytes(out: &mut Vec<u8>, field: u64, bytes: &[u8]) {
    put_varint(out, (field << 3) | 2);
    put_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// A 32-bit field (`uint32`, `int32`, an enum) read from a longer varint:
/// protobuf keeps the low 32 bits, so an `OVER_LIMIT` code or a remaining
/// count sent with high bits set reads as every other parser reads it.
pub(super) fn low32(n: u64) -> u64 {
    n & 0xffff_ffff
}

/// A field's value, by wire type.
pub(super) enum Value<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    Fixed,
}

/// Reads fields off a message, skipping what it does not know.
pub(super) struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    pub(super) fn new(bytes: &'a [u8]) -> Self {
        Reader { bytes, at: 0 }
    }

    fn varint(&mut self) -> Option<u64> {
        let mut n = 0u64;
        for shift in (0..64).step_by(7) {
            let b = *self.bytes.get(self.at)?;
            self.at += 1;
            n |= u64::from(b & 0x7f) << shift;
            if b < 0x80 {
                return Some(n);
            }
        }
        None
    }

    fn skip(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.at.checked_add(n)?;
        let slice = self.bytes.get(self.at..end)?;
        self.at = end;
        Some(slice)
    }

    /// The next field: `Some(None)` at the end, `None` when malformed.
    pub(super) fn field(&mut self) -> Option<Option<(u64, Value<'a>)>> {
        if self.at >= self.bytes.len() {
            return Some(None);
        }
        let tag = self.varint()?;
        let value = match tag & 7 {
            0 => Value::Varint(self.varint()?),
            1 => {
                self.skip(8)?;
                Value::Fixed
            }
            2 => {
                let len = usize::try_from(self.varint()?).ok()?;
                Value::Bytes(self.skip(len)?)
            }
            5 => {
                self.skip(4)?;
                Value::Fixed
            }
            _ => return None,
        };
        Some(Some((tag >> 3, value)))
    }
}
