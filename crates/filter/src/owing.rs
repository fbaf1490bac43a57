//! What a worker still owes the limiter, per limiter key: the charges of
//! streams that cost more than their estimates, from the stream's end until
//! the limiter has answered their `POST /v1/charge`.
//!
//! A check of a key the worker owes on waits until those charges are
//! answered (the host makes it then), so that no request is admitted ahead
//! of what the requests that ended before it on its worker still owe: at
//! most one request per stream at once is admitted and not yet charged.
//! That is what bounds the overshoot of estimates below the real cost (see
//! the repository's `docs/guides/llm-tokens.md`, "How far over the limit").

/// The charges owed, each with its id and the limiter keys it is for.
#[derive(Debug, Default)]
pub struct Owing {
    owed: Vec<(u64, String)>,
    last: u64,
}

impl Owing {
    /// Notes a charge owed on each of `keys`; returns its id, by which it
    /// is [`paid`](Owing::paid) (0 when it is on no key: nothing owed).
    pub fn owe<'a>(&mut self, keys: impl IntoIterator<Item = &'a str>) -> u64 {
        let id = self.last.saturating_add(1);
        let before = self.owed.len();
        self.owed
            .extend(keys.into_iter().map(|key| (id, key.to_string())));
        if self.owed.len() == before {
            return 0;
        }
        self.last = id;
        id
    }

    /// Charge `id` was answered (or will never be): no longer owed.
    pub fn paid(&mut self, id: u64) {
        self.owed.retain(|(i, _)| *i != id);
    }

    /// The id of the last charge owed: a check waits for the charges owed
    /// up to it when it came, not for those owed after (which could keep
    /// it waiting for as long as streams of its key end).
    pub fn last(&self) -> u64 {
        self.last
    }

    /// Whether nothing is owed (the common case: checked first).
    pub fn is_empty(&self) -> bool {
        self.owed.is_empty()
    }

    /// Whether a charge up to id `last` is owed on one of `keys`.
    pub fn owes<'a>(&self, mut keys: impl Iterator<Item = &'a str>, last: u64) -> bool {
        !self.owed.is_empty()
            && keys.any(|key| self.owed.iter().any(|(i, k)| *i <= last && k == key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_owed_until_each_of_its_charges_is_paid() {
        let mut owing = Owing::default();
        assert!(owing.is_empty());
        assert!(!owing.owes(["t/0/a"].into_iter(), u64::MAX));
        let first = owing.owe(["t/0/a", "t/1/a"]);
        let second = owing.owe(["t/0/a"]);
        assert!(owing.owes(["x", "t/1/a"].into_iter(), owing.last()));
        owing.paid(first);
        assert!(owing.owes(["t/0/a"].into_iter(), second), "one charge left");
        assert!(!owing.owes(["t/1/a"].into_iter(), second));
        owing.paid(second);
        assert!(owing.is_empty());
        // Paying what is not owed changes nothing; a charge on no key is
        // not owed.
        owing.paid(first);
        assert_eq!(owing.owe([]), 0);
        assert!(owing.is_empty());
    }

    #[test]
    fn a_check_waits_only_for_the_charges_owed_when_it_came() {
        let mut owing = Owing::default();
        let before = owing.owe(["t/0/a"]);
        let waits_for = owing.last();
        let after = owing.owe(["t/0/a"]);
        assert!(owing.owes(["t/0/a"].into_iter(), waits_for));
        owing.paid(before);
        // Owed again since, but not before it came: it goes.
        assert!(!owing.owes(["t/0/a"].into_iter(), waits_for));
        assert!(owing.owes(["t/0/a"].into_iter(), owing.last()));
        owing.paid(after);
        assert!(owing.is_empty());
    }
}
