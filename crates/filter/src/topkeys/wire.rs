//! A summary in shared data: `u64` decayed-at (ns), `u32` entry count,
//! then per entry `u16` key length, the key, `u64` refusals, `u64` error
//! (little-endian). At most `12 + entries × ENTRY_BYTES` bytes.

use super::{Entry, Summary};

/// `summary` and when it last decayed, as stored in shared data.
pub fn encode(summary: &Summary, decayed_at: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(12 + summary.entries.len() * 32);
    out.extend_from_slice(&decayed_at.to_le_bytes());
    out.extend_from_slice(&(summary.entries.len() as u32).to_le_bytes());
    for e in &summary.entries {
        // Keys are cut to MAX_KEY_BYTES, so their length fits a u16.
        out.extend_from_slice(&(e.key.len() as u16).to_le_bytes());
        out.extend_from_slice(e.key.as_bytes());
        out.extend_from_slice(&e.refusals.to_le_bytes());
        out.extend_from_slice(&e.error.to_le_bytes());
    }
    out
}

/// The summary (of `capacity` entries) and decayed-at stored in `bytes`;
/// `None` if they are not one (an empty summary is then the answer).
pub fn decode(bytes: &[u8], capacity: usize) -> Option<(Summary, u64)> {
    let mut r = Reader(bytes);
    let decayed_at = r.u64()?;
    let count = usize::try_from(r.u32()?).ok()?;
    let mut summary = Summary::new(capacity);
    for _ in 0..count.min(capacity) {
        let len = usize::from(u16::from_le_bytes(r.take(2)?.try_into().ok()?));
        let key = std::str::from_utf8(r.take(len)?).ok()?.to_owned();
        let refusals = r.u64()?;
        let error = r.u64()?;
        summary.entries.push(Entry {
            key,
            refusals,
            error,
        });
    }
    Some((summary, decayed_at))
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }

    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }

    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
}
