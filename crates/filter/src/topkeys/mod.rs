//! Top limited keys: per rule, the keys refused most, as a Space-Saving
//! summary (Metwally et al.) of a fixed number of entries, so that a flood
//! of distinct keys cannot grow it.
//!
//! Each entry's `refusals` is an upper bound of the key's true count and
//! `error` its largest overcount: `refusals - error <= true <= refusals`.
//! With `n` refusals counted into `k` entries, every error is at most
//! `n / k`, so a key refused more than `n / k` times is always listed.
//! Workers count into a summary of their own (no shared-data call per
//! refusal) and fold it into the shared one at their tick ([`Summary::absorb`]):
//! each fold can add at most `n_tick / k` more, so the shared summary's
//! errors stay within `2n / k`.

mod sha256;
mod wire;

pub use sha256::hashed;
pub use wire::{decode, encode};

/// Most bytes of a key an entry keeps (longer keys are cut, on a character
/// boundary): with it an entry is at most [`ENTRY_BYTES`].
pub const MAX_KEY_BYTES: usize = 128;

/// The most an entry takes on the wire (shared data): its key and three
/// 8-byte figures.
pub const ENTRY_BYTES: usize = MAX_KEY_BYTES + 2 + 3 * 8;

/// One listed key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The key as shown (clear, or hashed).
    pub key: String,
    /// Refusals counted for it: an upper bound of the true count.
    pub refusals: u64,
    /// How much `refusals` may overcount.
    pub error: u64,
}

/// A Space-Saving summary of at most `capacity` entries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    capacity: usize,
    entries: Vec<Entry>,
}

impl Summary {
    /// An empty summary keeping at most `capacity` keys.
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity,
            entries: Vec::with_capacity(capacity),
        }
    }

    /// How many keys it keeps at most.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Whether it holds no key.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Counts `n` refusals of `key`.
    pub fn add(&mut self, key: &str, n: u64) {
        self.add_counted(key, n, 0);
    }

    /// Counts `n` refusals of `key` that may overcount by `error` (an entry
    /// of another summary folded in).
    pub fn add_counted(&mut self, key: &str, n: u64, error: u64) {
        let key = cut(key);
        if let Some(e) = self.entries.iter_mut().find(|e| e.key == key) {
            e.refusals = e.refusals.saturating_add(n);
            e.error = e.error.saturating_add(error);
            return;
        }
        if self.entries.len() < self.capacity {
            self.entries.push(Entry {
                key: key.to_owned(),
                refusals: n,
                error,
            });
            return;
        }
        // Full: the least counted key gives its place, and its count
        // becomes the newcomer's possible overcount.
        let least = self.entries.iter_mut().min_by_key(|e| e.refusals);
        if let Some(e) = least {
            let floor = e.refusals;
            e.key.clear();
            e.key.push_str(key);
            e.refusals = floor.saturating_add(n);
            e.error = floor.saturating_add(error);
        }
    }

    /// Folds `other` (a worker's refusals since its last fold) into this
    /// summary, and empties it.
    pub fn absorb(&mut self, other: &mut Summary) {
        for e in other.entries.drain(..) {
            self.add_counted(&e.key, e.refusals, e.error);
        }
    }

    /// Halves every figure, dropping keys left at 0: older refusals weigh
    /// half as much at each decay, so the list follows recent minutes.
    pub fn decay(&mut self) {
        for e in &mut self.entries {
            e.refusals /= 2;
            e.error /= 2;
        }
        self.entries.retain(|e| e.refusals > 0);
    }

    /// The `n` keys refused most, most refused first (ties by key).
    pub fn top(&self, n: usize) -> Vec<Entry> {
        let mut all = self.entries.clone();
        all.sort_by(|a, b| b.refusals.cmp(&a.refusals).then_with(|| a.key.cmp(&b.key)));
        all.truncate(n);
        all
    }

    /// The entries, in no order.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }
}

/// A worker's refusals since its last fold, one summary per rule (none
/// when top limited keys are off).
#[derive(Debug, Default)]
pub struct Counts(pub std::cell::RefCell<Vec<Summary>>);

impl Counts {
    /// One summary of `entries` per rule of `rules`, if `entries` is given.
    pub fn new(rules: usize, entries: Option<usize>) -> Self {
        let Some(entries) = entries else {
            return Self::default();
        };
        Counts(std::cell::RefCell::new(
            (0..rules).map(|_| Summary::new(entries)).collect(),
        ))
    }
}

/// `key` cut to at most [`MAX_KEY_BYTES`], on a character boundary.
fn cut(key: &str) -> &str {
    if key.len() <= MAX_KEY_BYTES {
        return key;
    }
    let mut end = MAX_KEY_BYTES;
    while !key.is_char_boundary(end) {
        end -= 1;
    }
    &key[..end]
}

#[cfg(test)]
mod tests;
