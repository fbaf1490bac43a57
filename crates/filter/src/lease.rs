//! Leases of global limits: units of a key's quota the limiter debited in
//! advance, spent by this Envoy with a compare-and-swap over shared data (so
//! every worker spends the same lease, exactly), until the lease runs out or
//! expires.
//!
//! A key's lease lives in one shared-data slot (see [`crate::layout`]); a key
//! hashed to a slot another key's lease holds simply has no lease. At most
//! one grant is asked for at a time per slot, and a grant never brings the
//! units in hand above the limit's share, so this Envoy never holds more
//! than `max_share` of a limit for a key.
//!
//! Sizes adapt: a lease spent before it expires asks for twice as much next
//! time; one that expires with units left asks for what was used. Units left
//! when a lease is replaced are returned to the limiter with the next ask.
//!
//! A lease is renewed before it runs out: the request that brings it below
//! half of its grant spends as the others do and starts a renewal, a call
//! no request waits for, while the others go on spending what is left; the
//! new units join the lease. So a busy key makes one call per grant and no
//! request waits for it while units are left.

use crate::local::{measure_and_replace, Contended, SharedStore};
use sluice_core::Nanos;

/// The state of a slot's lease, as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Lease {
    /// The key whose lease this is.
    pub fingerprint: u64,
    /// Units left to spend.
    pub left: u64,
    /// Units of the current grant (or grants added while it ran).
    pub granted: u64,
    /// When the current grant was asked for (the filter's clock).
    pub granted_at: Nanos,
    /// When its units may no longer be spent.
    pub expires_at: Nanos,
    /// How many units to ask for next.
    pub next: u64,
    /// Until when a grant asked for is awaited (0: none).
    pub asking_until: Nanos,
    /// What the limiter reported remaining after the grant.
    pub remaining: u64,
    /// When the limiter reported the key's quota full again.
    pub reset_at: Nanos,
}

const VERSION: u8 = 1;
const SIZE: usize = 1 + 8 * 9;

impl Lease {
    fn encode(&self) -> [u8; SIZE] {
        let mut out = [0u8; SIZE];
        out[0] = VERSION;
        let fields = [
            self.fingerprint,
            self.left,
            self.granted,
            self.granted_at,
            self.expires_at,
            self.next,
            self.asking_until,
            self.remaining,
            self.reset_at,
        ];
        for (chunk, field) in out[1..].chunks_exact_mut(8).zip(fields) {
            chunk.copy_from_slice(&field.to_le_bytes());
        }
        out
    }

    fn decode(bytes: &[u8]) -> Option<Lease> {
        if bytes.len() != SIZE || bytes.first() != Some(&VERSION) {
            return None;
        }
        let mut f = bytes[1..]
            .chunks_exact(8)
            .map(|c| c.try_into().map(u64::from_le_bytes).unwrap_or(0));
        let mut next = || f.next().unwrap_or(0);
        Some(Lease {
            fingerprint: next(),
            left: next(),
            granted: next(),
            granted_at: next(),
            expires_at: next(),
            next: next(),
            asking_until: next(),
            remaining: next(),
            reset_at: next(),
        })
    }
}

/// What [`take`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Take {
    /// The request's weight was spent from the lease granted at
    /// `granted_at`, which has `left` units after it.
    Spent { granted_at: Nanos, lease: Lease },
    /// As [`Take::Spent`], and the lease is running low: ask the limiter
    /// for `ask` more units in a call of their own (no request waits for
    /// it); its answer, or its failure, must end the ask ([`grant`]).
    Renew {
        granted_at: Nanos,
        lease: Lease,
        ask: u64,
    },
    /// No lease to spend: ask the limiter for `ask` units with the request
    /// (0: another ask is awaited, check the request alone), and give back
    /// `returned` units consumed `age` ago.
    Ask { ask: u64, returned: u64, age: Nanos },
}

/// Spends `weight` from the lease of the key `fingerprint` at `key`, or says
/// what to ask the limiter for. `max` is the most units this Envoy may hold
/// (the limit's share, at least 1); an ask is awaited until `now + wait`.
pub fn take<S: SharedStore + ?Sized>(
    store: &S,
    key: &str,
    fingerprint: u64,
    now: Nanos,
    weight: u64,
    max: u64,
    wait: Nanos,
) -> Result<Take, Contended> {
    measure_and_replace(store, key, |value| {
        let lease = value.and_then(Lease::decode).unwrap_or_default();
        let (write, take) = if lease.fingerprint != fingerprint {
            start(&lease, fingerprint, now, max, wait)
        } else if now < lease.expires_at && lease.left >= weight {
            spend_from(lease, now, weight, max, wait)
        } else if now < lease.asking_until {
            (None, ask_alone())
        } else {
            ask_anew(lease, now, max, wait)
        };
        (write.map(|l| l.encode()), take)
    })
}

/// [`take`] for a key whose slot holds another key's lease, or none: start
/// this key's at one unit, unless the other is still in use.
fn start(
    lease: &Lease,
    fingerprint: u64,
    now: Nanos,
    max: u64,
    wait: Nanos,
) -> (Option<Lease>, Take) {
    if lease.fingerprint != 0 && now < lease.expires_at.max(lease.asking_until) {
        // Still in use by the other key: check this one alone.
        return (None, ask_alone());
    }
    let fresh = Lease {
        fingerprint,
        next: 1,
        asking_until: now.saturating_add(wait),
        ..Lease::default()
    };
    let ask = Take::Ask {
        ask: 1.min(max),
        returned: 0,
        age: 0,
    };
    (Some(fresh), ask)
}

/// [`take`] from a lease with `weight` units left: spends them and, when
/// that brings it below half of its grant and no ask is awaited, starts
/// renewing it early (twice the grant, within the share).
fn spend_from(
    lease: Lease,
    now: Nanos,
    weight: u64,
    max: u64,
    wait: Nanos,
) -> (Option<Lease>, Take) {
    let asking = now < lease.asking_until;
    let after = lease.left.saturating_sub(weight);
    let renew = lease.granted.saturating_mul(2).clamp(1, max.max(1));
    let ask = renew.min(max.saturating_sub(after));
    let spent = Lease {
        left: after,
        ..lease
    };
    if asking || after >= lease.granted / 2 || ask == 0 {
        let take = Take::Spent {
            granted_at: lease.granted_at,
            lease: spent,
        };
        return (Some(spent), take);
    }
    let renewing = Lease {
        next: renew,
        asking_until: now.saturating_add(wait),
        ..spent
    };
    let take = Take::Renew {
        granted_at: lease.granted_at,
        lease: renewing,
        ask,
    };
    (Some(renewing), take)
}

/// [`take`] from a lease run out or expired, with no ask awaited: asks for
/// a new grant sized by what was used, returning the units left.
fn ask_anew(lease: Lease, now: Nanos, max: u64, wait: Nanos) -> (Option<Lease>, Take) {
    let used = lease.granted.saturating_sub(lease.left);
    let next = if used >= lease.granted {
        // Spent before it expired: ask for more.
        lease.granted.saturating_mul(2).max(lease.next)
    } else {
        used
    }
    .clamp(1, max.max(1));
    let asking = Lease {
        left: 0,
        granted: 0,
        expires_at: 0,
        next,
        asking_until: now.saturating_add(wait),
        ..lease
    };
    let take = Take::Ask {
        ask: next.min(max),
        returned: lease.left,
        age: now.saturating_sub(lease.granted_at),
    };
    (Some(asking), take)
}

fn ask_alone() -> Take {
    Take::Ask {
        ask: 0,
        returned: 0,
        age: 0,
    }
}

/// Spends `weight` from the key's lease if it has that much left and has not
/// expired, renewal or not (its call failed: units in hand keep serving).
/// `None` when it cannot.
pub fn spend<S: SharedStore + ?Sized>(
    store: &S,
    key: &str,
    fingerprint: u64,
    now: Nanos,
    weight: u64,
) -> Result<Option<Lease>, Contended> {
    measure_and_replace(store, key, |value| match value.and_then(Lease::decode) {
        Some(l) if l.fingerprint == fingerprint && now < l.expires_at && l.left >= weight => {
            let spent = Lease {
                left: l.left - weight,
                ..l
            };
            (Some(spent.encode()), Some(spent))
        }
        _ => (None, None),
    })
}

/// A grant that arrived, for [`grant`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grant {
    /// When it was asked for (the filter's clock).
    pub asked_at: Nanos,
    /// The units granted (maybe 0).
    pub units: u64,
    /// Until when they may be spent.
    pub expires_at: Nanos,
    /// What the limiter reported remaining after the grant.
    pub remaining: u64,
    /// When the limiter reported the key's quota full again.
    pub reset_at: Nanos,
}

/// `grant` arrived for the key `fingerprint` at `key`: ends the ask; the
/// units join what is left of the key's lease. Returns the units this Envoy now holds for
/// the key.
pub fn grant<S: SharedStore + ?Sized>(
    store: &S,
    key: &str,
    fingerprint: u64,
    grant: &Grant,
) -> Result<u64, Contended> {
    measure_and_replace(store, key, |value| {
        let Some(lease) = value.and_then(Lease::decode) else {
            return (None, 0);
        };
        if lease.fingerprint != fingerprint {
            // The slot went to another key meanwhile: the units are not
            // spent (the limiter gets them back as they drain or the window
            // ends).
            return (None, 0);
        }
        // Units in hand that ended before this grant was asked for (a grant
        // that came after its lease ended, while a newer ask was out) never
        // join it: spent under its end, they could outlive their window.
        let kept = if lease.expires_at > grant.asked_at {
            lease.left
        } else {
            0
        };
        // Units still in hand keep their (older) grant time: a return of
        // them then gives back no more than it should.
        let granted_at = if kept > 0 {
            lease.granted_at
        } else {
            grant.asked_at
        };
        let left = kept.saturating_add(grant.units);
        let granted = Lease {
            left,
            granted: left,
            granted_at,
            expires_at: grant.expires_at,
            asking_until: 0,
            remaining: grant.remaining,
            reset_at: grant.reset_at,
            ..lease
        };
        (Some(granted.encode()), granted.left)
    })
}

/// An ask that was not sent after all (the request was denied first): ends
/// it, and puts back the `returned` units it was to give back (the lease
/// stays expired, so the next request asks and returns them).
pub fn cancel<S: SharedStore + ?Sized>(
    store: &S,
    key: &str,
    fingerprint: u64,
    returned: u64,
) -> Result<(), Contended> {
    measure_and_replace(store, key, |value| {
        let lease = value.and_then(Lease::decode);
        match lease {
            Some(l) if l.fingerprint == fingerprint && l.asking_until != 0 => {
                let back = Lease {
                    left: l.left.saturating_add(returned),
                    granted: l.granted.saturating_add(returned),
                    asking_until: 0,
                    ..l
                };
                (Some(back.encode()), ())
            }
            _ => (None, ()),
        }
    })
}

/// Gives back `weight` spent from the lease granted at `granted_at` (the
/// request was denied by another limit), if that lease still runs.
pub fn give_back<S: SharedStore + ?Sized>(
    store: &S,
    key: &str,
    fingerprint: u64,
    granted_at: Nanos,
    weight: u64,
) -> Result<(), Contended> {
    measure_and_replace(store, key, |value| {
        let lease = value.and_then(Lease::decode);
        match lease {
            Some(l) if l.fingerprint == fingerprint && l.granted_at == granted_at => {
                let back = Lease {
                    left: l.left.saturating_add(weight),
                    ..l
                };
                (Some(back.encode()), ())
            }
            _ => (None, ()),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::local::fake::MemoryStore;

    const K: &str = "lease/1";
    const MS: Nanos = 1_000_000;

    fn spent(t: Take) -> Lease {
        match t {
            Take::Spent { lease, .. } => lease,
            other => panic!("{other:?}"),
        }
    }

    /// A grant of `units` to key `fingerprint`, asked with a request's check.
    fn give(
        s: &MemoryStore,
        fingerprint: u64,
        asked_at: Nanos,
        units: u64,
        expires_at: Nanos,
        remaining: u64,
        reset_at: Nanos,
    ) -> Result<u64, Contended> {
        let g = Grant {
            asked_at,
            units,
            expires_at,
            remaining,
            reset_at,
        };
        grant(s, K, fingerprint, &g)
    }

    /// The lease after a request that spent and started a renewal, and the
    /// units the renewal asks for.
    fn renewed(t: Take) -> (Lease, u64) {
        match t {
            Take::Renew { lease, ask, .. } => (lease, ask),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_fresh_key_asks_for_one_then_spends_its_grant() {
        let s = MemoryStore::default();
        let t = take(&s, K, 7, 0, 1, 100, 50 * MS).unwrap();
        assert_eq!(
            t,
            Take::Ask {
                ask: 1,
                returned: 0,
                age: 0
            }
        );
        // While the ask is awaited, other requests check alone.
        assert_eq!(take(&s, K, 7, MS, 1, 100, 50 * MS).unwrap(), ask_alone());
        give(&s, 7, 0, 1, 100 * MS, 50, 1000 * MS).unwrap();
        assert_eq!(
            spent(take(&s, K, 7, 2 * MS, 1, 100, 50 * MS).unwrap()).left,
            0
        );
        // Spent before it expired: the next ask doubles.
        let t = take(&s, K, 7, 3 * MS, 1, 100, 50 * MS).unwrap();
        assert_eq!(
            t,
            Take::Ask {
                ask: 2,
                returned: 0,
                age: 3 * MS
            }
        );
        give(&s, 7, 3 * MS, 2, 103 * MS, 40, 1000 * MS).unwrap();
        spent(take(&s, K, 7, 4 * MS, 1, 100, 50 * MS).unwrap());
        // Spending the last unit leaves less than half the grant: spent,
        // and renewed early, doubled.
        let (lease, ask) = renewed(take(&s, K, 7, 5 * MS, 1, 100, 50 * MS).unwrap());
        assert_eq!((lease.left, ask), (0, 4));
    }

    #[test]
    fn an_expired_lease_returns_its_units_and_asks_for_what_was_used() {
        let s = MemoryStore::default();
        take(&s, K, 7, 0, 1, 100, 50 * MS).unwrap();
        give(&s, 7, 0, 10, 100 * MS, 50, 1000 * MS).unwrap();
        for _ in 0..3 {
            spent(take(&s, K, 7, MS, 1, 100, 50 * MS).unwrap());
        }
        let t = take(&s, K, 7, 100 * MS, 1, 100, 50 * MS).unwrap();
        assert_eq!(
            t,
            Take::Ask {
                ask: 3,
                returned: 7,
                age: 100 * MS
            }
        );
    }

    #[test]
    fn asks_never_exceed_the_share() {
        let s = MemoryStore::default();
        take(&s, K, 7, 0, 1, 4, 50 * MS).unwrap();
        give(&s, 7, 0, 4, 100 * MS, 50, 1000 * MS).unwrap();
        for _ in 0..2 {
            spent(take(&s, K, 7, MS, 1, 4, 50 * MS).unwrap());
        }
        // 1 in hand once this request spent: a renewal may bring 3 more.
        let (lease, ask) = renewed(take(&s, K, 7, 2 * MS, 1, 4, 50 * MS).unwrap());
        assert_eq!((lease.left, ask), (1, 3));
    }

    #[test]
    fn a_heavier_request_than_what_is_left_asks_and_returns_the_rest() {
        let s = MemoryStore::default();
        take(&s, K, 7, 0, 1, 100, 50 * MS).unwrap();
        give(&s, 7, 0, 3, 100 * MS, 50, 1000 * MS).unwrap();
        spent(take(&s, K, 7, MS, 2, 100, 50 * MS).unwrap());
        let t = take(&s, K, 7, 2 * MS, 2, 100, 50 * MS).unwrap();
        assert_eq!(
            t,
            Take::Ask {
                ask: 2,
                returned: 1,
                age: 2 * MS
            }
        );
    }

    #[test]
    fn a_stale_ask_is_given_up_after_its_wait() {
        let s = MemoryStore::default();
        take(&s, K, 7, 0, 1, 100, 50 * MS).unwrap();
        // No grant ever came (the request left, the call failed).
        assert_eq!(
            take(&s, K, 7, 10 * MS, 1, 100, 50 * MS).unwrap(),
            ask_alone()
        );
        let t = take(&s, K, 7, 60 * MS, 1, 100, 50 * MS).unwrap();
        assert!(matches!(t, Take::Ask { ask: 1, .. }), "{t:?}");
    }

    #[test]
    fn another_key_in_the_slot_is_left_alone_while_its_lease_runs() {
        let s = MemoryStore::default();
        take(&s, K, 7, 0, 1, 100, 50 * MS).unwrap();
        give(&s, 7, 0, 5, 100 * MS, 50, 1000 * MS).unwrap();
        assert_eq!(take(&s, K, 8, MS, 1, 100, 50 * MS).unwrap(), ask_alone());
        // A grant for a key that lost the slot is dropped.
        give(&s, 8, 0, 5, 100 * MS, 50, 1000 * MS).unwrap();
        assert_eq!(spent(take(&s, K, 7, MS, 1, 100, 50 * MS).unwrap()).left, 4);
        // Once it expired, the other key takes the slot.
        let t = take(&s, K, 8, 200 * MS, 1, 100, 50 * MS).unwrap();
        assert!(
            matches!(
                t,
                Take::Ask {
                    ask: 1,
                    returned: 0,
                    ..
                }
            ),
            "{t:?}"
        );
    }

    #[test]
    fn a_cancelled_ask_keeps_its_units_for_the_next_one() {
        let s = MemoryStore::default();
        take(&s, K, 7, 0, 1, 100, 50 * MS).unwrap();
        give(&s, 7, 0, 5, 100 * MS, 50, 1000 * MS).unwrap();
        spent(take(&s, K, 7, MS, 1, 100, 50 * MS).unwrap());
        let t = take(&s, K, 7, 200 * MS, 1, 100, 50 * MS).unwrap();
        assert_eq!(
            t,
            Take::Ask {
                ask: 1,
                returned: 4,
                age: 200 * MS
            }
        );
        cancel(&s, K, 7, 4).unwrap();
        let t = take(&s, K, 7, 201 * MS, 1, 100, 50 * MS).unwrap();
        assert!(matches!(t, Take::Ask { returned: 4, .. }), "{t:?}");
    }

    #[test]
    fn a_lease_running_low_is_renewed_while_the_rest_is_spent() {
        let s = MemoryStore::default();
        take(&s, K, 7, 0, 1, 100, 50 * MS).unwrap();
        give(&s, 7, 0, 8, 100 * MS, 50, 1000 * MS).unwrap();
        for left in [7, 6, 5, 4] {
            assert_eq!(
                spent(take(&s, K, 7, MS, 1, 100, 50 * MS).unwrap()).left,
                left
            );
        }
        // Spending one more leaves 3 of 8: this request spends and renews.
        let (lease, ask) = renewed(take(&s, K, 7, 2 * MS, 1, 100, 50 * MS).unwrap());
        assert_eq!((lease.left, ask), (3, 16));
        // The others spend what is left while the renewal is awaited.
        for left in [2, 1, 0] {
            assert_eq!(
                spent(take(&s, K, 7, 3 * MS, 1, 100, 50 * MS).unwrap()).left,
                left
            );
        }
        assert_eq!(
            take(&s, K, 7, 3 * MS, 1, 100, 50 * MS).unwrap(),
            ask_alone()
        );
        // All old units were spent by the grant: it has its own time.
        give(&s, 7, 2 * MS, 16, 102 * MS, 30, 1000 * MS).unwrap();
        let t = take(&s, K, 7, 4 * MS, 1, 100, 50 * MS).unwrap();
        assert!(
            matches!(
                t,
                Take::Spent {
                    granted_at: 2_000_000,
                    ..
                }
            ),
            "{t:?}"
        );
        assert_eq!(spent(t).left, 15);
        for _ in 0..4 {
            spent(take(&s, K, 7, 5 * MS, 1, 100, 50 * MS).unwrap());
        }
        // 11 of 16 left, 7 after this one: renewed early; units left keep
        // the older time.
        let t = take(&s, K, 7, 6 * MS, 4, 100, 50 * MS).unwrap();
        assert!(
            matches!(
                t,
                Take::Renew {
                    granted_at: 2_000_000,
                    ask: 32,
                    ..
                }
            ),
            "{t:?}"
        );
        assert_eq!(give(&s, 7, 6 * MS, 32, 106 * MS, 30, 1000 * MS), Ok(39));
        let t = take(&s, K, 7, 7 * MS, 1, 100, 50 * MS).unwrap();
        assert!(
            matches!(
                t,
                Take::Spent {
                    granted_at: 2_000_000,
                    ..
                }
            ),
            "{t:?}"
        );
    }

    #[test]
    fn renewals_never_hold_more_than_the_share() {
        let s = MemoryStore::default();
        take(&s, K, 7, 0, 1, 10, 50 * MS).unwrap();
        give(&s, 7, 0, 8, 100 * MS, 50, 1000 * MS).unwrap();
        for _ in 0..4 {
            spent(take(&s, K, 7, MS, 1, 10, 50 * MS).unwrap());
        }
        // 3 left after this request, at most 10 held: ask for 7.
        let (lease, ask) = renewed(take(&s, K, 7, MS, 1, 10, 50 * MS).unwrap());
        assert_eq!((lease.left, ask), (3, 7));
    }

    #[test]
    fn spend_takes_what_is_left_whatever_the_renewal() {
        let s = MemoryStore::default();
        take(&s, K, 7, 0, 1, 100, 50 * MS).unwrap();
        give(&s, 7, 0, 2, 100 * MS, 50, 1000 * MS).unwrap();
        assert_eq!(spend(&s, K, 7, MS, 2).unwrap().map(|l| l.left), Some(0));
        assert_eq!(spend(&s, K, 7, MS, 1).unwrap(), None);
        assert_eq!(spend(&s, K, 8, MS, 1).unwrap(), None);
    }

    #[test]
    fn give_back_returns_units_to_the_same_lease_only() {
        let s = MemoryStore::default();
        take(&s, K, 7, 0, 1, 100, 50 * MS).unwrap();
        give(&s, 7, 0, 5, 100 * MS, 50, 1000 * MS).unwrap();
        let Take::Spent { granted_at, .. } = take(&s, K, 7, MS, 2, 100, 50 * MS).unwrap() else {
            panic!()
        };
        give_back(&s, K, 7, granted_at, 2).unwrap();
        assert_eq!(spent(take(&s, K, 7, MS, 1, 100, 50 * MS).unwrap()).left, 4);
        give_back(&s, K, 7, granted_at + 1, 2).unwrap();
        assert_eq!(spent(take(&s, K, 7, MS, 1, 100, 50 * MS).unwrap()).left, 3);
    }

    /// A renewal's grant (asked at `asked_at`).
    fn renewal(s: &MemoryStore, asked_at: Nanos, units: u64) -> u64 {
        let g = Grant {
            asked_at,
            units,
            expires_at: asked_at + 100 * MS,
            remaining: 50,
            reset_at: 1000 * MS,
        };
        grant(s, K, 7, &g).unwrap()
    }

    #[test]
    fn units_that_ended_before_a_newer_grant_was_asked_do_not_join_it() {
        let s = MemoryStore::default();
        take(&s, K, 7, 0, 1, 10, 50 * MS).unwrap();
        give(&s, 7, 0, 4, 100 * MS, 50, 1000 * MS).unwrap();
        // Spendable until 100 ms; a grant asked at 150 ms keeps none of
        // them, one asked at 50 ms keeps all.
        assert_eq!(renewal(&s, 150 * MS, 2), 2);
        assert_eq!(renewal(&s, 50 * MS, 3), 5);
    }

    #[test]
    fn a_failed_renewal_grants_nothing_and_keeps_what_is_left() {
        let s = MemoryStore::default();
        take(&s, K, 7, 0, 1, 10, 50 * MS).unwrap();
        give(&s, 7, 0, 10, 100 * MS, 50, 1000 * MS).unwrap();
        for _ in 0..5 {
            spent(take(&s, K, 7, MS, 1, 10, 50 * MS).unwrap());
        }
        let (lease, ask) = renewed(take(&s, K, 7, MS, 1, 10, 50 * MS).unwrap());
        assert_eq!((lease.left, ask), (4, 6));
        // Nothing granted (the call failed): the ask ends, 4 units stay.
        assert_eq!(renewal(&s, MS, 0), 4);
        assert_eq!(
            spent(take(&s, K, 7, 2 * MS, 1, 10, 50 * MS).unwrap()).left,
            3
        );
    }
}
