//! The local key table: where each key of a local limit keeps its state in
//! shared data, exact per key until the table is full, in bounded memory.
//!
//! A limit's table is `buckets` shared-data values, each holding up to
//! [`WAYS`](bucket::WAYS) entries tagged with their key's 64-bit keyed
//! fingerprint (and one entry shared by keys that found no room). A key has
//! two candidate buckets, `p` and `s`; it lives in whichever held fewer live
//! keys when it arrived (ties go to `p`), reusing an entry whose state is at
//! rest (back at full quota, so forgetting it changes nothing). With
//! [`buckets_for`] sizing the table at 1.5 entries per `local_max_keys`,
//! keys arriving into a table 90% full (of `local_max_keys`) find room: no
//! key shares state with another until then.
//!
//! **Exactness.** Every bucket is read and written by compare-and-swap, so
//! a key's entry changes atomically. What no single write covers is a new
//! key placed in its two buckets at once by two workers. `p` is the
//! arbiter: whoever consumes from an entry in `s` then writes `p` back
//! unchanged (a *touch*), which fails if `p` changed since it was read. A
//! worker that placed the key in `p` read `s` before placing it, so either
//! it saw the key in `s`, or its write to `p` makes the touch fail and the
//! consumer in `s` finds the key in `p`, gives back what it took from `s`
//! and decides again on `p`. Keys found in `p` (most keys, and all while
//! the table is little used) cost one read and one write; keys in `s` a
//! read and a write more.
//!
//! **When full** (both buckets hold live keys of their own), the key either
//! shares `p`'s overflow entry with the other keys that found no room
//! ([`WhenFull::Share`]: keys with entries stay exact and nothing is ever
//! admitted beyond a key's limit; a key that later gets an entry of its own
//! starts from the shared state), or takes the place of the live key whose
//! state rests first ([`WhenFull::Evict`]: no key waits on others, and the
//! evicted key starts again at full quota).

pub mod bucket;

use crate::layout;
use crate::local::{Contended, SetError, SharedStore, Taken, When, CREATE_CAS, MAX_ATTEMPTS};
use bucket::{Bucket, OVERFLOW, TAG, WAYS};
use sluice_core::{Encoded, Limit, Nanos};
use std::cell::Cell;

/// What a table does with a key that finds its two buckets full of live
/// keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "schema", serde(rename_all = "snake_case"))]
pub enum WhenFull {
    /// Share the bucket's overflow entry with the other keys without room:
    /// never admits beyond a key's limit, may limit them early.
    #[default]
    Share,
    /// Take the place of the live key whose state rests first: no key is
    /// limited by another's requests; the evicted key starts at full quota.
    Evict,
}

/// Entries of a table per key of `local_max_keys`, in halves.
const ENTRIES_PER_KEY_HALVES: u64 = 3;

/// The number of buckets of a table sized for `max_keys` live keys.
pub fn buckets_for(max_keys: u64) -> u64 {
    let entries = max_keys.saturating_mul(ENTRIES_PER_KEY_HALVES) / 2;
    entries.div_ceil(WAYS as u64).max(2)
}

/// A table's size and policy, the same for every local limit of a
/// configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// The number of buckets (at least 2).
    pub buckets: u64,
    /// What a key without room does.
    pub when_full: WhenFull,
}

impl Shape {
    /// The shape of tables for `max_keys` live keys.
    pub fn for_keys(max_keys: u64, when_full: WhenFull) -> Shape {
        Shape {
            buckets: buckets_for(max_keys),
            when_full,
        }
    }
}

/// A limit's table: where its buckets are and how many.
#[derive(Debug, Clone, Copy)]
pub struct Table<'a> {
    /// The shared-data key prefix of the buckets (the number follows).
    pub prefix: &'a str,
    /// The number of buckets (at least 2).
    pub buckets: u64,
    /// What a key without room does.
    pub when_full: WhenFull,
}

/// Where a key's state was: its bucket and fingerprint ([`OVERFLOW`] for
/// the shared entry). Refunds and charges find it there, or nothing if it
/// has been replaced since.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Spot {
    pub bucket: u64,
    pub fingerprint: u64,
}

/// How the key came by the entry it was decided on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placed {
    /// Its own entry.
    Own,
    /// The overflow entry of a full table ([`WhenFull::Share`]).
    Shared,
    /// The entry of a live key it evicted ([`WhenFull::Evict`]).
    Evicted,
}

/// What a step makes of a key's state: the state to store with the instant
/// it rests, if anything changes, and the step's result.
pub struct Step<T> {
    pub write: Option<(Encoded, Nanos)>,
    pub result: T,
}

/// A decision made in the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decided<T> {
    pub result: T,
    pub spot: Spot,
    pub placed: Placed,
}

impl<'a> Table<'a> {
    /// The table of `shape` whose buckets are under `prefix`.
    pub fn new(prefix: &'a str, shape: Shape) -> Table<'a> {
        Table {
            prefix,
            buckets: shape.buckets,
            when_full: shape.when_full,
        }
    }

    /// The two buckets of a key with `fingerprint`: always different.
    pub fn candidates(&self, fingerprint: u64) -> (u64, u64) {
        let buckets = self.buckets.max(2);
        let p = fingerprint % buckets;
        let step = 1 + crate::slots::splitmix(fingerprint) % (buckets - 1);
        (p, (p + step) % buckets)
    }

    fn key(&self, out: &mut String, bucket: u64) {
        layout::bucket_key(out, self.prefix, bucket);
    }
}

/// Where a new or found entry is: which bucket, which index, the state
/// the step starts from, and how the key came by it.
struct Choice<'a> {
    in_p: bool,
    index: usize,
    state: Option<&'a [u8]>,
    fingerprint: u64,
    placed: Placed,
}

/// Decides for the key of `fingerprint` at `now`: runs `step` on its
/// state (`None`: a fresh key) and stores what it returns. `undo` gives
/// back from a state what `step` took, for the rare race in which another
/// worker placed the key in its other bucket meanwhile (the step is then
/// run again there).
pub fn decide<S, T>(
    store: &S,
    table: &Table<'_>,
    fingerprint: u64,
    now: Nanos,
    step: &mut dyn FnMut(Option<&[u8]>) -> Step<T>,
    undo: &mut dyn FnMut(&[u8], &T) -> Option<Encoded>,
) -> Result<Decided<T>, Contended>
where
    S: SharedStore + ?Sized,
{
    let mut step = |state: Option<&[u8]>, _: Nanos| step(state);
    decide_timed(store, table, fingerprint, &mut || now, &mut step, undo)
}

/// A step given a key's state (`None`: a fresh key) and the instant to
/// decide at.
pub type TimedStep<'s, T> = dyn FnMut(Option<&[u8]>, Nanos) -> Step<T> + 's;

/// [`decide`] at the instant `time` gives, read after each attempt's gets
/// and given to `step`.
pub fn decide_timed<S, T>(
    store: &S,
    table: &Table<'_>,
    fingerprint: u64,
    time: &mut dyn FnMut() -> Nanos,
    step: &mut TimedStep<'_, T>,
    undo: &mut dyn FnMut(&[u8], &T) -> Option<Encoded>,
) -> Result<Decided<T>, Contended>
where
    S: SharedStore + ?Sized,
{
    let mut names = NAMES.with(Cell::take);
    let decided = decide_named(store, table, fingerprint, time, step, undo, &mut names);
    NAMES.with(|n| n.set(names));
    decided
}

thread_local! {
    /// The bucket names of the decision in progress, kept between decisions
    /// for their allocations.
    static NAMES: Cell<Names> = const {
        Cell::new(Names {
            p: String::new(),
            s: String::new(),
        })
    };
}

/// The names of a key's two buckets.
#[derive(Default)]
struct Names {
    p: String,
    s: String,
}

/// [`decide`], naming the buckets in `names`.
fn decide_named<S, T>(
    store: &S,
    table: &Table<'_>,
    fingerprint: u64,
    time: &mut dyn FnMut() -> Nanos,
    step: &mut TimedStep<'_, T>,
    undo: &mut dyn FnMut(&[u8], &T) -> Option<Encoded>,
    names: &mut Names,
) -> Result<Decided<T>, Contended>
where
    S: SharedStore + ?Sized,
{
    let fingerprint = fingerprint.max(1);
    let (p, s) = table.candidates(fingerprint);
    let Names { p: p_key, s: s_key } = names;
    table.key(p_key, p);
    s_key.clear();
    for attempt in 1..=MAX_ATTEMPTS {
        if attempt > 1 {
            crate::local::count_retry();
        }
        let (p_value, p_cas) = store.get(p_key);
        let p_bucket = Bucket::read(p_value.as_deref());
        let (s_value, s_cas) = match p_bucket.find(fingerprint) {
            Some(_) => (None, None),
            None => {
                // Most keys are in `p`: the other bucket's name only when needed.
                if s_key.is_empty() {
                    table.key(s_key, s);
                }
                store.get(s_key)
            }
        };
        let s_bucket = Bucket::read(s_value.as_deref());
        let now = time();
        let choice = choose(table, &p_bucket, &s_bucket, fingerprint, now);
        let out = step(choice.state, now);
        let spot = Spot {
            bucket: if choice.in_p { p } else { s },
            fingerprint: choice.fingerprint,
        };
        let decided = Decided {
            result: out.result,
            spot,
            placed: choice.placed,
        };
        let Some((state, rest_at)) = out.write else {
            return Ok(decided);
        };
        let (bucket, key, cas) = match choice.in_p {
            true => (&p_bucket, &*p_key, p_cas),
            false => (&s_bucket, &*s_key, s_cas),
        };
        let bytes = bucket.with(choice.index, spot.fingerprint, rest_at, state.as_bytes());
        match store.set(key, &bytes, Some(cas.unwrap_or(CREATE_CAS))) {
            Ok(()) => {}
            Err(SetError::CasMismatch) => continue,
            Err(SetError::Failed) => return Err(Contended),
        }
        if choice.in_p {
            return Ok(decided);
        }
        match touch(store, p_key, p_value, p_cas, fingerprint)? {
            Touched::Alone => return Ok(decided),
            Touched::PlacedInP => {
                update_at(store, table.prefix, spot, |state, rest_at| {
                    undo(state, &decided.result).map(|s| (s, rest_at))
                })?;
            }
        }
    }
    Err(Contended)
}

/// Where the key is, or goes.
fn choose<'a>(
    table: &Table<'_>,
    p: &Bucket<'a>,
    s: &Bucket<'a>,
    fingerprint: u64,
    now: Nanos,
) -> Choice<'a> {
    let own = |in_p: bool, index: usize, state: Option<&'a [u8]>| Choice {
        in_p,
        index,
        state,
        fingerprint,
        placed: Placed::Own,
    };
    if let Some((i, e)) = p.find(fingerprint) {
        return own(true, i, Some(p.state(e)));
    }
    if let Some((i, e)) = s.find(fingerprint) {
        return own(false, i, Some(s.state(e)));
    }
    // A key that shared the overflow entry starts from its state.
    let overflow = p.find(OVERFLOW);
    let inherited = overflow
        .filter(|(_, e)| e.rest_at > now)
        .map(|(_, e)| p.state(e));
    match (p.room(now), s.room(now)) {
        (Some(_), Some(j)) if s.live(now) < p.live(now) => own(false, j, inherited),
        (Some(i), _) => own(true, i, inherited),
        (None, Some(j)) => own(false, j, inherited),
        (None, None) => full(table.when_full, p, s, overflow, fingerprint),
    }
}

/// Where a key goes when both its buckets hold live keys.
fn full<'a>(
    when_full: WhenFull,
    p: &Bucket<'a>,
    s: &Bucket<'a>,
    overflow: Option<(usize, bucket::Entry)>,
    fingerprint: u64,
) -> Choice<'a> {
    match when_full {
        WhenFull::Share => Choice {
            in_p: true,
            // A full bucket has WAYS entries of its own and room for one more.
            index: overflow.map_or_else(|| p.free_index().unwrap_or(WAYS), |(i, _)| i),
            state: overflow.map(|(_, e)| p.state(e)),
            fingerprint: OVERFLOW,
            placed: Placed::Shared,
        },
        WhenFull::Evict => {
            let (in_p, index) = match (p.stalest(), s.stalest()) {
                (Some((_, a)), Some((j, b))) if b < a => (false, j),
                (Some((i, _)), _) => (true, i),
                (None, Some((j, _))) => (false, j),
                (None, None) => (true, 0),
            };
            Choice {
                in_p,
                index,
                state: None,
                fingerprint,
                placed: Placed::Evicted,
            }
        }
    }
}

/// What a touch of `p` found.
enum Touched {
    /// `p` was written back unchanged: no other worker placed the key there.
    Alone,
    /// Another worker placed the key in `p` meanwhile.
    PlacedInP,
}

/// Writes `p` back as it is, unless the key has been placed in it.
fn touch<S: SharedStore + ?Sized>(
    store: &S,
    p_key: &str,
    mut value: Option<Vec<u8>>,
    mut cas: Option<u32>,
    fingerprint: u64,
) -> Result<Touched, Contended> {
    for _ in 0..MAX_ATTEMPTS {
        let bytes = value.unwrap_or_else(|| vec![TAG]);
        match store.set(p_key, &bytes, Some(cas.unwrap_or(CREATE_CAS))) {
            Ok(()) => return Ok(Touched::Alone),
            Err(SetError::CasMismatch) => crate::local::count_retry(),
            Err(SetError::Failed) => return Err(Contended),
        }
        (value, cas) = store.get(p_key);
        if Bucket::read(value.as_deref()).find(fingerprint).is_some() {
            return Ok(Touched::PlacedInP);
        }
    }
    Err(Contended)
}

/// Changes the entry at `spot`, if it is still there, with `change` (given
/// its state and rest time; `None` leaves it as it is).
pub fn update_at<S: SharedStore + ?Sized>(
    store: &S,
    prefix: &str,
    spot: Spot,
    mut change: impl FnMut(&[u8], Nanos) -> Option<(Encoded, Nanos)>,
) -> Result<(), Contended> {
    let mut key = String::with_capacity(prefix.len() + 8);
    layout::bucket_key(&mut key, prefix, spot.bucket);
    update_entry(store, &key, spot.fingerprint, |state, rest_at| {
        (change(state, rest_at), ())
    })
    .map(|_| ())
}

/// Changes the entry of `fingerprint` in the bucket stored at `bucket_key`
/// with `change` (given its state and rest time, it returns the new state
/// and rest time, `None` to leave it, and a result). Returns the result,
/// `None` when the bucket holds no such entry.
pub fn update_entry<S: SharedStore + ?Sized, T>(
    store: &S,
    bucket_key: &str,
    fingerprint: u64,
    mut change: impl FnMut(&[u8], Nanos) -> (Option<(Encoded, Nanos)>, T),
) -> Result<Option<T>, Contended> {
    crate::local::measure_and_replace(store, bucket_key, |value| {
        let bucket = Bucket::read(value);
        let Some((index, e)) = bucket.find(fingerprint) else {
            return (None, None);
        };
        let (write, result) = change(bucket.state(e), e.rest_at);
        let bytes = write
            .map(|(state, rest_at)| bucket.with(index, fingerprint, rest_at, state.as_bytes()));
        (bytes, Some(result))
    })
}

/// The shared-data key of the bucket of `spot` in the table under `prefix`.
pub fn bucket_key(prefix: &str, spot: Spot) -> String {
    let mut key = String::with_capacity(prefix.len() + 8);
    layout::bucket_key(&mut key, prefix, spot.bucket);
    key
}

/// Decides one request of `cost` against `limit` for the key of
/// `fingerprint` in `table` (admitted only if `reserve` more units would
/// still fit: see [`sluice_core::decide_reserving`]), storing the new state
/// atomically with the instant it rests; decided at `now` or later
/// ([`crate::local::decided_at`]).
pub fn consume<S: SharedStore + ?Sized>(
    store: &S,
    table: &Table<'_>,
    fingerprint: u64,
    limit: &Limit,
    now: Nanos,
    cost: u64,
    reserve: u64,
) -> Result<Decided<Taken>, Contended> {
    let mut when = When::Read(now);
    consume_when(store, table, fingerprint, limit, &mut when, cost, reserve)
}

/// [`consume`] at the instant `when` gives after each attempt's gets (the
/// request's time, if unread, is read there: one clock read a decision).
pub fn consume_when<S: SharedStore + ?Sized>(
    store: &S,
    table: &Table<'_>,
    fingerprint: u64,
    limit: &Limit,
    when: &mut When<'_>,
    cost: u64,
    reserve: u64,
) -> Result<Decided<Taken>, Contended> {
    decide_timed(
        store,
        table,
        fingerprint,
        &mut || when.after_get(store),
        &mut |state, at| {
            let outcome = sluice_core::decide_reserving(limit, state, at, cost, reserve);
            let rest_at = at.saturating_add(outcome.decision.reset);
            Step {
                write: outcome.new_state.map(|s| (s, rest_at)),
                result: Taken {
                    decision: outcome.decision,
                    at,
                },
            }
        },
        &mut |state, taken: &Taken| {
            let admitted_at = taken.at.saturating_add(taken.decision.delay);
            sluice_core::refund_at(limit, state, admitted_at, taken.at, cost)
        },
    )
}

/// Gives back, at `now`, `cost` consumed at `admitted_at` from the entry at
/// `spot` of the table under `prefix`, if it is still there.
pub fn refund<S: SharedStore + ?Sized>(
    store: &S,
    prefix: &str,
    spot: Spot,
    limit: &Limit,
    admitted_at: Nanos,
    now: Nanos,
    cost: u64,
) -> Result<(), Contended> {
    update_at(store, prefix, spot, |state, rest_at| {
        let back = sluice_core::refund_at(limit, state, admitted_at, now, cost)?;
        Some((back, rest_at))
    })
}

/// The state in the entry of `fingerprint` of the bucket at `bucket_key`.
#[cfg(test)]
pub(crate) fn entry_state<S: SharedStore + ?Sized>(
    store: &S,
    bucket_key: &str,
    fingerprint: u64,
) -> Option<Vec<u8>> {
    let value = store.get(bucket_key).0?;
    let bucket = Bucket::read(Some(&value));
    let (_, e) = bucket.find(fingerprint)?;
    Some(bucket.state(e).to_vec())
}

/// The state of the key of `fingerprint` in `table`, if it has an entry.
#[cfg(test)]
pub(crate) fn stored_state<S: SharedStore + ?Sized>(
    store: &S,
    table: &Table<'_>,
    fingerprint: u64,
) -> Option<Vec<u8>> {
    let (p, s) = table.candidates(fingerprint.max(1));
    let mut key = String::new();
    [p, s].into_iter().find_map(|b| {
        table.key(&mut key, b);
        let value = store.get(&key).0?;
        let bucket = Bucket::read(Some(&value));
        let (_, e) = bucket.find(fingerprint.max(1))?;
        Some(bucket.state(e).to_vec())
    })
}

#[cfg(test)]
mod tests;
