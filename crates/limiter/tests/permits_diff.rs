//! The Lua script's concurrency limits against sluice-core's `permits` on
//! random sequences of acquires (in checks), releases and renewals (the
//! script's `permits` mode), by holders whose ids pass 2^53, on the script's
//! clock set by the test (microseconds there, the same instants in
//! nanoseconds for the core).
#![cfg(test)]

mod support;

use sluice_core::permits::{acquire, held_by, release, renew};
use sluice_core::{Encoded, Permits, MILLISECOND};
use sluice_limiter::store::redis::{RedisStore, Target};
use sluice_limiter::store::{permits_id, PermitItem, StoreItem};
use std::time::Duration;

use support::Rng;

const HOLDERS: [u64; 5] = [0, 1, 2, u64::MAX, (1 << 60) + 1];

#[tokio::test]
async fn lua_permits_match_core_on_random_sequences() {
    let Some(server) = support::RedisServer::start(&[]) else {
        return;
    };
    let store = RedisStore::connect_now(Target::Single(server.url()), Duration::from_secs(2))
        .await
        .unwrap();
    let mut rng = Rng(0x00c0_ffee_1234_5678);
    let (mut acquires, mut releases, mut renewals) = (0, 0, 0);
    for seq in 0..40 {
        let p = Permits {
            max: 1 + rng.below(4),
            ttl: (1000 + rng.below(2) * 500) * MILLISECOND,
        };
        let id = permits_id("diff", &format!("seq-{seq}"));
        let mut state: Option<Encoded> = None;
        let mut now_us = 1_700_000_000_000_000u64;
        for step in 0..120 {
            now_us += rng.below(400_000);
            let now = now_us * 1000;
            let holder = HOLDERS[rng.below(HOLDERS.len() as u64) as usize];
            let cost = rng.below(4);
            let ctx = format!("seq {seq} step {step} {p:?} holder {holder} cost {cost}");
            let bytes = state.as_ref().map(Encoded::as_bytes);
            match rng.below(3) {
                0 => {
                    let item = StoreItem::from(PermitItem {
                        id: id.clone(),
                        permits: p,
                        holder,
                        hits: cost,
                    });
                    let lua = store.run_check(&[&item], 1, Some(now_us)).await.unwrap();
                    let core = acquire(&p, bytes, holder, now, cost);
                    assert_eq!(lua.decisions[0], core.decision, "{ctx}");
                    assert_eq!(lua.allowed, core.decision.allowed, "{ctx}");
                    if let Some(s) = core.new_state {
                        state = Some(s);
                    }
                    acquires += usize::from(core.decision.allowed);
                }
                1 => {
                    let held = held_by(bytes, holder, now) > 0 && cost > 0;
                    let keys = [(id.as_str(), cost, false)];
                    let lua = store
                        .run_permits(holder, p.ttl, &keys, Some(now_us))
                        .await
                        .unwrap();
                    assert_eq!(lua, [(held, false)], "{ctx}");
                    if let Some(s) = release(bytes, holder, now, cost) {
                        state = Some(s);
                    }
                    releases += usize::from(held);
                }
                _ => {
                    let held = held_by(bytes, holder, now) > 0;
                    let keys = [(id.as_str(), 0, true)];
                    let lua = store
                        .run_permits(holder, p.ttl, &keys, Some(now_us))
                        .await
                        .unwrap();
                    assert_eq!(lua, [(false, held)], "{ctx}");
                    if let Some(s) = renew(bytes, holder, now, p.ttl) {
                        state = Some(s);
                    }
                    renewals += usize::from(held);
                }
            }
        }
    }
    assert!(
        acquires > 100 && releases > 50 && renewals > 50,
        "{acquires} {releases} {renewals}"
    );
}
