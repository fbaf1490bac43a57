//! Local limits: a compare-and-swap loop over Envoy shared data.
//!
//! Shared data has no create-if-absent primitive: setting a missing key with
//! cas 0 is unconditional, so two workers creating the same key at once would
//! lose an update. In Envoy, a set with a *non-zero* cas on a missing key
//! creates it, and on an existing key fails unless the cas matches. So a key
//! seen missing is created with cas [`CREATE_CAS`]: if another worker created
//! it first, the set fails with a mismatch and the loop reads again. (It would
//! wrongly succeed only if the existing entry's cas happened to equal
//! `CREATE_CAS`, a 2^-32 chance.)

use sluice_core::{Decision, Encoded, Limit, Nanos};
use std::cell::Cell;

/// The cas used to create a key that was seen missing.
pub const CREATE_CAS: u32 = u32::MAX;

/// Attempts per decision before giving up (and denying).
pub const MAX_ATTEMPTS: u32 = 64;

thread_local! {
    /// Compare-and-swap retries on this thread (one worker's VM) not yet
    /// taken by [`take_cas_retries`].
    static CAS_RETRIES: Cell<u64> = const { Cell::new(0) };
}

/// The compare-and-swap retries counted on this thread since the last call
/// (the host adds them to `sluice.cas_retries` when it flushes metrics).
///
/// A retry is a write that lost a race and was attempted again; the last
/// mismatch of a decision that gives up is not a retry (`cas_exhausted`
/// counts it), so an exhausted decision adds `MAX_ATTEMPTS - 1`.
pub fn take_cas_retries() -> u64 {
    CAS_RETRIES.with(|c| c.replace(0))
}

/// Counts one compare-and-swap retry.
pub(crate) fn count_retry() {
    CAS_RETRIES.with(|c| c.set(c.get().saturating_add(1)));
}

/// Why a shared-data write failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetError {
    /// Another writer changed (or created) the key since it was read.
    CasMismatch,
    /// Any other failure.
    Failed,
}

/// Envoy shared data as the filter uses it: one map shared by every worker.
pub trait SharedStore {
    /// The value and cas of `key`; `(None, None)` when missing.
    fn get(&self, key: &str) -> (Option<Vec<u8>>, Option<u32>);
    /// Writes `value` if the key's cas still equals `cas` (or, for a missing
    /// key, creates it whatever the non-zero `cas`). `None` writes unconditionally.
    fn set(&self, key: &str, value: &[u8], cas: Option<u32>) -> Result<(), SetError>;
    /// The time now, read after the gets it follows, if the store can tell.
    ///
    /// A request whose time was read before a state (for an earlier limit)
    /// may write after a worker that read a later time: it decides at the
    /// later of the two ([`decided_at`], [`When`]).
    fn clock(&self) -> Option<Nanos> {
        None
    }
}

/// The instant to decide at on a state just read: the request's `now`, or
/// the store's clock if that is later.
pub fn decided_at<S: SharedStore + ?Sized>(store: &S, now: Nanos) -> Nanos {
    store.clock().map_or(now, |clock| clock.max(now))
}

/// Where a decision's instant comes from. It is read after the get of the
/// state it decides on: a worker whose write stands read the state after
/// every earlier write to it, so it read the clock after theirs too, and
/// the instants of the decisions on a key follow the order of their writes.
#[derive(Clone, Copy)]
pub enum When<'c> {
    /// The request's time is not read yet: `clock`, read after the get, is
    /// both the request's time and the decision's instant (one read).
    Unread(&'c dyn Fn() -> Nanos),
    /// The request's time, read before this state (for an earlier limit):
    /// the later of it and the store's clock read after the get
    /// ([`decided_at`]).
    Read(Nanos),
}

impl When<'_> {
    /// The instant to decide at on a state just read; an unread time is
    /// read now and kept as the request's.
    pub fn after_get<S: SharedStore + ?Sized>(&mut self, store: &S) -> Nanos {
        match *self {
            When::Unread(_) => self.now(),
            When::Read(now) => decided_at(store, now),
        }
    }

    /// The request's time, read now if it was not.
    pub fn now(&mut self) -> Nanos {
        match *self {
            When::Unread(clock) => {
                let now = clock();
                *self = When::Read(now);
                now
            }
            When::Read(now) => now,
        }
    }

    /// The request's time, if read.
    pub fn read(&self) -> Option<Nanos> {
        match *self {
            When::Unread(_) => None,
            When::Read(now) => Some(now),
        }
    }
}

/// A decision, and the instant it was made at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Taken {
    /// What the limit decided.
    pub decision: Decision,
    /// When: the instant its state was decided at ([`decided_at`]); a
    /// refund gives back as of this instant plus the decision's delay.
    pub at: Nanos,
}

/// The loop ran out of attempts (heavy contention) or the store failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Contended;

/// Decides one request of `cost` against `limit` for the state at `key`
/// (admitted only if `reserve` more units would still fit), storing the new
/// state atomically; decided at `now` or later ([`decided_at`]).
pub fn consume<S: SharedStore + ?Sized>(
    store: &S,
    key: &str,
    limit: &Limit,
    now: Nanos,
    cost: u64,
    reserve: u64,
) -> Result<Taken, Contended> {
    consume_when(store, key, limit, &mut When::Read(now), cost, reserve)
}

/// [`consume`], decided at the instant `when` gives after each get.
pub fn consume_when<S: SharedStore + ?Sized>(
    store: &S,
    key: &str,
    limit: &Limit,
    when: &mut When<'_>,
    cost: u64,
    reserve: u64,
) -> Result<Taken, Contended> {
    measure_and_replace(store, key, |value| {
        let at = when.after_get(store);
        let outcome = sluice_core::decide_reserving(limit, value, at, cost, reserve);
        let taken = Taken {
            decision: outcome.decision,
            at,
        };
        (outcome.new_state, taken)
    })
}

/// Gives back `cost` consumed at `admitted_at` from the state at `key`.
pub fn refund<S: SharedStore + ?Sized>(
    store: &S,
    key: &str,
    limit: &Limit,
    admitted_at: Nanos,
    cost: u64,
) -> Result<(), Contended> {
    refund_at(store, key, limit, admitted_at, admitted_at, cost)
}

/// Gives back, at `now`, `cost` consumed at `admitted_at` (for a request
/// held in delay mode, the time it conforms) from the state at `key`.
pub fn refund_at<S: SharedStore + ?Sized>(
    store: &S,
    key: &str,
    limit: &Limit,
    admitted_at: Nanos,
    now: Nanos,
    cost: u64,
) -> Result<(), Contended> {
    measure_and_replace(store, key, |value| {
        let state = value.and_then(|v| sluice_core::refund_at(limit, v, admitted_at, now, cost));
        (state, ())
    })
}

/// Reads the value at `key`, or stores `candidate` there if the key is
/// missing; every caller gets the same value even when several race.
pub fn load_or_create<S: SharedStore + ?Sized>(
    store: &S,
    key: &str,
    candidate: &[u8],
) -> Result<Vec<u8>, Contended> {
    measure_and_replace(store, key, |value| match value {
        Some(value) => (None, value.to_vec()),
        None => (Some(candidate), candidate.to_vec()),
    })
}

/// A value to write: a key state or raw bytes.
pub(crate) trait Value {
    fn bytes(&self) -> &[u8];
}

impl Value for Encoded {
    fn bytes(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl Value for Vec<u8> {
    fn bytes(&self) -> &[u8] {
        self
    }
}

impl Value for &[u8] {
    fn bytes(&self) -> &[u8] {
        self
    }
}

impl<const N: usize> Value for [u8; N] {
    fn bytes(&self) -> &[u8] {
        self
    }
}

/// The compare-and-swap loop: reads `key` (one get), runs `step` on its value
/// (`None`: missing), and writes what `step` returns, if anything (one set),
/// unless another worker wrote the key in between; then it reads again and
/// reruns `step`. Returns the result of the step whose write (or absence of
/// one) stood.
pub(crate) fn measure_and_replace<S, W, T>(
    store: &S,
    key: &str,
    mut step: impl FnMut(Option<&[u8]>) -> (Option<W>, T),
) -> Result<T, Contended>
where
    S: SharedStore + ?Sized,
    W: Value,
{
    for attempt in 1..=MAX_ATTEMPTS {
        if attempt > 1 {
            // The previous write lost a race: this attempt is a retry.
            count_retry();
        }
        let (value, cas) = store.get(key);
        let (write, result) = step(value.as_deref());
        let Some(write) = write else {
            return Ok(result);
        };
        // A missing key has no cas: it is created with CREATE_CAS (see the
        // module doc).
        match store.set(key, write.bytes(), Some(cas.unwrap_or(CREATE_CAS))) {
            Ok(()) => return Ok(result),
            Err(SetError::CasMismatch) => continue,
            Err(SetError::Failed) => return Err(Contended),
        }
    }
    Err(Contended)
}

/// An in-memory store with Envoy's shared-data semantics, for tests.
#[cfg(test)]
pub mod fake;

#[cfg(test)]
mod tests;
