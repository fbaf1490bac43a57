//! The permits a request holds, in this Envoy's shared data or at the
//! limiter, and how local ones are given back and renewed: plain data the
//! verdict carries to the host (see [`crate::engine::concurrency`]).

use crate::layout;
use crate::local::{self, Contended, SharedStore};
use crate::slots::SlotHasher;
use crate::table;
use sluice_core::permits::{self, Holder};
use sluice_core::{Encoded, Nanos};

/// Permits an admitted request holds until its stream ends.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Held {
    /// Permits in this Envoy's shared data.
    pub local: Vec<HeldPermit>,
    /// Permits the limiter holds for this Envoy.
    pub global: Vec<HeldPermit>,
}

/// Permits of one key, held by one holder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldPermit {
    /// The shared-data key of the key table's bucket (local) or the limiter
    /// key (global).
    pub key: String,
    /// The entry in the bucket (local; 0 for global permits).
    pub fingerprint: u64,
    /// The units held.
    pub weight: u64,
    /// Who holds them: the configuration that took them.
    pub holder: Holder,
    /// How long they count after a renewal.
    pub ttl: Nanos,
    /// The rule whose limit took them (its gauge counts them).
    pub rule: usize,
}

impl Held {
    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.local.is_empty() && self.global.is_empty()
    }
}

/// Gives back, at `now`, the local permit `held` (by compare-and-swap).
pub fn release_local<S: SharedStore + ?Sized>(
    store: &S,
    held: &HeldPermit,
    now: Nanos,
) -> Result<(), Contended> {
    table::update_entry(store, &held.key, held.fingerprint, |state, _| {
        let released = permits::release(Some(state), held.holder, now, held.weight);
        (released.map(|s| rest(s, now)), ())
    })
    .map(|_| ())
}

/// A permits state with the instant it rests: when its last permit expires
/// unless renewed (at once when none is held).
pub(crate) fn rest(state: Encoded, now: Nanos) -> (Encoded, Nanos) {
    let rest_at = permits::expires_at(Some(state.as_bytes()), now).unwrap_or(now);
    (state, rest_at)
}

/// Keeps, at `now`, the local permits of `holder` in the entry of
/// `fingerprint` of the bucket at `key` for `ttl` more. Returns whether the
/// holder still held some there.
pub fn renew_local<S: SharedStore + ?Sized>(
    store: &S,
    key: &str,
    fingerprint: u64,
    holder: Holder,
    now: Nanos,
    ttl: Nanos,
) -> Result<bool, Contended> {
    let held = table::update_entry(store, key, fingerprint, |state, _| {
        let held = permits::held_by(Some(state), holder, now) > 0;
        let renewed = permits::renew(Some(state), holder, now, ttl);
        (renewed.map(|s| rest(s, now)), held)
    })?;
    Ok(held.unwrap_or(false))
}

/// A holder for a configuration of `domain` loaded now: the next number of
/// the Envoy's counter of loaded configurations, hashed with the domain's
/// seed (which differs between Envoys), so that holders differ within an
/// Envoy for sure and between Envoys but for a 2^-64 chance.
pub fn new_holder<S: SharedStore + ?Sized>(
    store: &S,
    domain: &str,
    hasher: &SlotHasher,
) -> Result<Holder, Contended> {
    let number = local::measure_and_replace(store, &layout::holders_key(domain), |value| {
        let last = value
            .and_then(|v| <[u8; 8]>::try_from(v).ok())
            .map_or(0, u64::from_le_bytes);
        let next = last.wrapping_add(1);
        (Some(next.to_le_bytes()), next)
    })?;
    let mut text = String::from("holder/");
    crate::decimal::push_u64(&mut text, number);
    Ok(hasher.fingerprint(&text))
}
