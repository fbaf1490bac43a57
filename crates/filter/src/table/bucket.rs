//! A bucket's stored form: a tag byte, then its entries, each the key's
//! fingerprint, the instant its state is back at rest (full quota, so the
//! entry may be reclaimed), and the state itself:
//!
//! | bytes | field |
//! | --- | --- |
//! | 1 | [`TAG`] |
//! | 8 | fingerprint (little endian; [`OVERFLOW`] for the shared entry) |
//! | 8 | rest at, nanoseconds |
//! | 4 | state length |
//! | n | state |
//!
//! (the last four repeated per entry). Values that do not read as a bucket
//! are read as an empty one: nothing in them is trusted.

use sluice_core::Nanos;

/// The first byte of a bucket.
pub const TAG: u8 = 0xB1;

/// The fingerprint of the entry shared by keys that found no room.
pub const OVERFLOW: u64 = 0;

/// Entries a bucket holds for keys of their own (besides the shared one).
pub const WAYS: usize = 8;

const HEADER: usize = 8 + 8 + 4;

/// One entry as read: its fingerprint, rest time and where its state is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    pub fingerprint: u64,
    pub rest_at: Nanos,
    start: usize,
    end: usize,
}

/// A bucket read from its stored bytes (borrowed, not copied): its
/// entries are read as they are walked, so a hot key's lookup reads its
/// own entry and no other.
#[derive(Debug, Clone, Copy)]
pub struct Bucket<'a> {
    bytes: &'a [u8],
}

impl<'a> Bucket<'a> {
    /// Reads `bytes` (`None`: the bucket was never written).
    pub fn read(bytes: Option<&'a [u8]>) -> Bucket<'a> {
        let bytes = bytes.filter(|b| b.first() == Some(&TAG)).unwrap_or(&[]);
        Bucket { bytes }
    }

    /// The entries, in stored order: up to `WAYS + 1`, and none after the
    /// first that does not read as one.
    pub fn entries(&self) -> impl Iterator<Item = (usize, Entry)> + 'a {
        let bytes = self.bytes;
        let mut at = 1;
        (0..=WAYS).map_while(move |i| {
            let entry = entry_at(bytes, at)?;
            at = entry.end;
            Some((i, entry))
        })
    }

    /// The entry of `fingerprint` and its index.
    pub fn find(&self, fingerprint: u64) -> Option<(usize, Entry)> {
        self.entries().find(|(_, e)| e.fingerprint == fingerprint)
    }

    /// The state bytes of `entry`.
    pub fn state(&self, entry: Entry) -> &'a [u8] {
        self.bytes.get(entry.start..entry.end).unwrap_or(&[])
    }

    /// Keys of their own whose state is not at rest at `now`.
    pub fn live(&self, now: Nanos) -> usize {
        self.entries()
            .filter(|(_, e)| e.fingerprint != OVERFLOW && e.rest_at > now)
            .count()
    }

    /// Where a new key of its own can go at `now`: an entry at rest to
    /// reuse, or a free place; `None` when every place holds a live key.
    pub fn room(&self, now: Nanos) -> Option<usize> {
        let own = self.entries().filter(|(_, e)| e.fingerprint != OVERFLOW);
        let mut count = 0;
        for (i, e) in own {
            if e.rest_at <= now {
                return Some(i);
            }
            count += 1;
        }
        (count < WAYS).then(|| self.free_index())?
    }

    /// The live key of its own that rests first (the one an eviction
    /// forgets): its index and rest time.
    pub fn stalest(&self) -> Option<(usize, Nanos)> {
        self.entries()
            .filter(|(_, e)| e.fingerprint != OVERFLOW)
            .map(|(i, e)| (i, e.rest_at))
            .min_by_key(|&(_, rest)| rest)
    }

    /// An index no entry uses.
    pub fn free_index(&self) -> Option<usize> {
        let used = self.entries().count();
        (used <= WAYS).then_some(used)
    }

    /// The bucket with the entry at `index` set to `fingerprint`, `rest_at`
    /// and `state` (added when `index` is free).
    pub fn with(&self, index: usize, fingerprint: u64, rest_at: Nanos, state: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.bytes.len().max(1) + HEADER + state.len());
        out.push(TAG);
        let mut written = false;
        for (i, e) in self.entries() {
            if i == index {
                push_entry(&mut out, fingerprint, rest_at, state);
                written = true;
            } else {
                push_entry(&mut out, e.fingerprint, e.rest_at, self.state(e));
            }
        }
        if !written {
            push_entry(&mut out, fingerprint, rest_at, state);
        }
        out
    }
}

fn entry_at(bytes: &[u8], at: usize) -> Option<Entry> {
    let header = bytes.get(at..at.checked_add(HEADER)?)?;
    let fingerprint = u64::from_le_bytes(header.get(..8)?.try_into().ok()?);
    let rest_at = u64::from_le_bytes(header.get(8..16)?.try_into().ok()?);
    let len = u32::from_le_bytes(header.get(16..20)?.try_into().ok()?);
    let start = at + HEADER;
    let end = start.checked_add(usize::try_from(len).ok()?)?;
    (end <= bytes.len()).then_some(Entry {
        fingerprint,
        rest_at,
        start,
        end,
    })
}

fn push_entry(out: &mut Vec<u8>, fingerprint: u64, rest_at: Nanos, state: &[u8]) {
    out.extend_from_slice(&fingerprint.to_le_bytes());
    out.extend_from_slice(&rest_at.to_le_bytes());
    let len = u32::try_from(state.len()).unwrap_or(u32::MAX);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(state);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn any_bytes_read_as_a_bucket_that_rewrites_itself(
            bytes in proptest::collection::vec(any::<u8>(), 0..400),
            tagged in any::<bool>(),
            fingerprint in any::<u64>(),
            state in proptest::collection::vec(any::<u8>(), 0..40),
        ) {
            let mut bytes = bytes;
            if tagged {
                bytes.insert(0, TAG);
            }
            let bucket = Bucket::read(Some(&bytes));
            let before: Vec<_> = bucket.entries().map(|(_, e)| (e.fingerprint, e.rest_at, bucket.state(e).to_vec())).collect();
            let index = bucket.room(0).or(bucket.free_index()).unwrap_or(0);
            let written = bucket.with(index, fingerprint, 7, &state);
            let after = Bucket::read(Some(&written));
            prop_assert!(after.entries().count() <= WAYS + 1);
            let (_, e) = after.entries().find(|(i, _)| *i == index).unwrap_or((0, Entry { fingerprint: 0, rest_at: 0, start: 0, end: 0 }));
            prop_assert_eq!((e.fingerprint, e.rest_at, after.state(e)), (fingerprint, 7, &state[..]));
            // Every other entry is kept as it was.
            for (i, (f, r, s)) in before.iter().enumerate() {
                if i != index {
                    let (_, e) = after.entries().find(|(j, _)| *j == i).unwrap();
                    prop_assert_eq!((e.fingerprint, e.rest_at, after.state(e)), (*f, *r, &s[..]));
                }
            }
        }
    }

    #[test]
    fn entries_round_trip_and_replace_in_place() {
        let empty = Bucket::read(None);
        assert_eq!(empty.entries().count(), 0);
        assert_eq!(empty.room(0), Some(0));
        let one = empty.with(0, 7, 100, b"abc");
        let two = Bucket::read(Some(&one)).with(1, 9, 50, b"");
        let bucket = Bucket::read(Some(&two));
        let (i, e) = bucket.find(7).unwrap();
        assert_eq!((i, e.rest_at, bucket.state(e)), (0, 100, &b"abc"[..]));
        assert_eq!(bucket.live(60), 1);
        assert_eq!(bucket.room(60), Some(1), "the entry at rest is reused");
        assert_eq!(bucket.stalest(), Some((1, 50)));
        let replaced = bucket.with(0, 8, 200, b"xy");
        let bucket = Bucket::read(Some(&replaced));
        assert_eq!(bucket.find(7), None);
        assert_eq!(bucket.state(bucket.find(8).unwrap().1), b"xy");
        assert_eq!(bucket.find(9).unwrap().0, 1);
    }

    #[test]
    fn a_full_bucket_has_no_room_until_an_entry_rests() {
        let mut bytes = Vec::new();
        for k in 1..=WAYS as u64 {
            let bucket = Bucket::read(Some(bytes.as_slice()).filter(|b| !b.is_empty()));
            let i = bucket.free_index().unwrap();
            bytes = bucket.with(i, k, 100 + k, b"s");
        }
        let bucket = Bucket::read(Some(&bytes));
        assert_eq!(bucket.room(100), None);
        let with_overflow = bucket.with(WAYS, OVERFLOW, 500, b"o");
        let bucket = Bucket::read(Some(&with_overflow));
        assert_eq!(bucket.live(100), WAYS, "the shared entry is not a key");
        assert_eq!(bucket.room(101), Some(0));
        assert_eq!(bucket.stalest(), Some((0, 101)));
    }

    #[test]
    fn garbage_reads_as_empty_or_stops_at_the_first_bad_entry() {
        assert_eq!(Bucket::read(Some(b"not a bucket")).entries().count(), 0);
        let good = Bucket::read(None).with(0, 1, 1, b"state");
        let mut cut = good.clone();
        cut.extend_from_slice(&[1, 2, 3]);
        assert_eq!(Bucket::read(Some(&cut)).entries().count(), 1);
        let mut lying = good;
        lying.truncate(lying.len() - 1);
        assert_eq!(Bucket::read(Some(&lying)).entries().count(), 0);
    }
}
