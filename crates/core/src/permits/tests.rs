use super::*;
use crate::MILLISECOND;

const P: Permits = Permits {
    max: 3,
    ttl: 100 * MILLISECOND,
};

fn take(state: &mut Option<Encoded>, holder: Holder, now: Nanos, cost: u64) -> Decision {
    let out = acquire(&P, state.as_ref().map(|s| s.as_bytes()), holder, now, cost);
    if let Some(s) = out.new_state {
        *state = Some(s);
    }
    out.decision
}

fn bytes(state: &Option<Encoded>) -> Option<&[u8]> {
    state.as_ref().map(|s| s.as_bytes())
}

#[test]
fn admits_up_to_max_across_holders_and_refuses_the_next() {
    let mut s = None;
    assert_eq!(take(&mut s, 1, 0, 1).remaining, 2);
    assert_eq!(take(&mut s, 2, 0, 1).remaining, 1);
    assert_eq!(take(&mut s, 1, 0, 1).remaining, 0);
    let refused = take(&mut s, 3, 0, 1);
    assert!(!refused.allowed);
    assert_eq!(refused.denial, Some(Denial::OverLimit));
    assert_eq!(refused.retry_after, PERMIT_RETRY_AFTER);
    assert_eq!(in_use(bytes(&s), 0), 3);
    assert_eq!(held_by(bytes(&s), 1, 0), 2);
}

#[test]
fn a_release_makes_room_and_never_goes_below_zero() {
    let mut s = None;
    for _ in 0..3 {
        assert!(take(&mut s, 7, 0, 1).allowed);
    }
    s = release(bytes(&s), 7, 1, 1);
    assert!(take(&mut s, 8, 1, 1).allowed);
    s = release(bytes(&s), 7, 2, 10);
    assert_eq!(in_use(bytes(&s), 2), 1);
    assert_eq!(held_by(bytes(&s), 7, 2), 0);
    // Another holder's release takes nothing of holder 8's.
    assert_eq!(release(bytes(&s), 9, 2, 1), None);
    assert_eq!(in_use(bytes(&s), 2), 1);
}

#[test]
fn weighted_requests_and_costs_above_max() {
    let mut s = None;
    assert!(take(&mut s, 1, 0, 2).allowed);
    assert!(!take(&mut s, 2, 0, 2).allowed);
    let never = take(&mut s, 2, 0, 4);
    assert_eq!(never.denial, Some(Denial::CostExceedsCapacity));
    assert_eq!(never.retry_after, 0);
    // A query takes nothing.
    let q = take(&mut s, 2, 0, 0);
    assert!(q.allowed);
    assert_eq!(in_use(bytes(&s), 0), 2);
}

#[test]
fn a_holder_that_stops_renewing_loses_its_permits_after_ttl() {
    let mut s = None;
    assert!(take(&mut s, 1, 0, 2).allowed);
    assert!(take(&mut s, 2, 0, 1).allowed);
    assert!(!take(&mut s, 3, 50 * MILLISECOND, 1).allowed);
    // Holder 2 renews; holder 1 (crashed) does not.
    s = renew(bytes(&s), 2, 60 * MILLISECOND, P.ttl);
    assert_eq!(in_use(bytes(&s), 99 * MILLISECOND), 3);
    assert_eq!(in_use(bytes(&s), 100 * MILLISECOND), 1);
    assert!(take(&mut s, 3, 100 * MILLISECOND, 2).allowed);
    assert_eq!(
        expires_at(bytes(&s), 100 * MILLISECOND),
        Some(200 * MILLISECOND)
    );
    assert_eq!(expires_at(bytes(&s), 300 * MILLISECOND), None);
    // Renewing what is not held changes nothing.
    assert_eq!(renew(None, 4, 0, P.ttl), None);
}

#[test]
fn too_many_holders_are_refused() {
    let p = Permits {
        max: 10_000,
        ttl: SECOND,
    };
    let mut s: Option<Encoded> = None;
    for h in 0..MAX_HOLDERS as u64 {
        let out = acquire(&p, bytes(&s), h, 0, 1);
        assert!(out.decision.allowed);
        s = out.new_state;
    }
    assert!(!acquire(&p, bytes(&s), 1_000_000, 0, 1).decision.allowed);
    assert!(acquire(&p, bytes(&s), 5, 0, 1).decision.allowed);
}

#[test]
fn foreign_bytes_read_as_nothing_held() {
    for junk in [&b""[..], b"\x01\x40\x00", b"\x01\x01abcdefgh", b"\x02\x40"] {
        assert_eq!(in_use(Some(junk), 0), 0);
        assert!(acquire(&P, Some(junk), 1, 0, 3).decision.allowed);
    }
}

/// A naive model: the holders' counts and expiries in a map.
#[test]
fn random_sequences_agree_with_a_model() {
    use std::collections::HashMap;
    let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    for _ in 0..200 {
        let mut state: Option<Encoded> = None;
        let mut model: HashMap<u64, (u64, Nanos)> = HashMap::new();
        let mut now = 0;
        for _ in 0..200 {
            now += next(30) * MILLISECOND;
            let holder = next(4);
            let cost = next(3);
            model.retain(|_, (c, e)| *e > now && *c > 0);
            let used: u64 = model.values().map(|(c, _)| c).sum();
            match next(3) {
                0 => {
                    let d = take(&mut state, holder, now, cost);
                    let fits = used + cost.max(1) <= P.max;
                    assert_eq!(d.allowed, fits);
                    if fits && cost > 0 {
                        let e = model.entry(holder).or_insert((0, 0));
                        e.0 += cost;
                        e.1 = now + P.ttl;
                    }
                }
                1 => {
                    if let Some(s) = release(bytes(&state), holder, now, cost) {
                        state = Some(s);
                    }
                    if let Some(e) = model.get_mut(&holder) {
                        e.0 = e.0.saturating_sub(cost);
                    }
                }
                _ => {
                    if let Some(s) = renew(bytes(&state), holder, now, P.ttl) {
                        state = Some(s);
                    }
                    if let Some(e) = model.get_mut(&holder) {
                        e.1 = e.1.max(now + P.ttl);
                    }
                }
            }
            model.retain(|_, (c, e)| *e > now && *c > 0);
            let used: u64 = model.values().map(|(c, _)| c).sum();
            assert_eq!(in_use(bytes(&state), now), used);
            assert!(used <= P.max);
        }
    }
}
