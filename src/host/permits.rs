//! The permits of concurrency limits on the host side: kept by a request
//! once it is admitted, given back when its stream ends (whichever way),
//! and renewed from the root context's ticks while some request holds
//! them (see [`sluice_filter::engine::concurrency`]).

use super::clock::now;
use super::runtime::Runtime;
use super::shared_data::HostStore;
use super::state;
use sluice_filter::engine::concurrency::{self, Held};
use sluice_filter::holdings::Place;
use sluice_filter::metrics::{GlobalEvent, MetricSink};

/// Counts the permits `held` as held by a request of `runtime` from now.
pub(super) fn keep(runtime: &Runtime, held: &Held) {
    if held.is_empty() {
        return;
    }
    let now = now();
    state::holdings(|h| {
        for permit in &held.local {
            h.add(Place::Local, permit, now);
        }
    });
    for permit in &held.local {
        runtime.metrics.permits(permit.rule, permit.weight, true);
    }
}

/// Gives back every permit of `held`, kept by a request of `runtime`.
pub(super) fn release(runtime: &Runtime, held: Held) {
    if held.is_empty() {
        return;
    }
    let now = now();
    for permit in &held.local {
        if concurrency::release_local(&HostStore, permit, now).is_err() {
            runtime.metrics.global(GlobalEvent::CasExhausted);
        }
        runtime.metrics.permits(permit.rule, permit.weight, false);
    }
    state::holdings(|h| {
        for permit in &held.local {
            h.remove(Place::Local, permit);
        }
    });
}

/// Renews the permits held on this VM that are due at the time of the
/// tick; returns how many keys no longer held any (they expired first).
pub(super) fn renew_due() -> usize {
    let now = now();
    let due = state::holdings(|h| h.due(now));
    let mut lost = 0;
    for d in due {
        if d.place == Place::Local {
            let kept = concurrency::renew_local(&HostStore, &d.key, d.holder, now, d.ttl);
            lost += usize::from(kept == Ok(false));
        }
    }
    lost
}
