//! The permits of concurrency limits on the host side: kept by a request
//! once it is admitted, given back when its stream ends (whichever way),
//! and renewed from the root context's ticks while some request holds
//! them (see [`sluice_filter::engine::concurrency`]).
//!
//! Local permits go back at once, by compare-and-swap. Global ones are given
//! back by the root context, woken at once ([`super::wake`]), all of a
//! configuration's in one `POST /v1/permits`: the stream's own context is
//! ending and could not take the call's answer.

use super::clock::now;
use super::limiter::dispatch_permits;
use super::runtime::Runtime;
use super::shared_data::HostStore;
use super::state;
use super::wake;
use sluice_core::{Holder, Nanos, MILLISECOND};
use sluice_filter::engine::concurrency::{self, Held, HeldPermit};
use sluice_filter::holdings::{Due, Place};
use sluice_filter::metrics::{GlobalEvent, MetricSink};
use sluice_wire::{permits_json, MAX_PERMIT_KEYS};
use std::rc::Rc;

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
        for permit in &held.global {
            h.add(Place::Global, permit, now);
        }
    });
    for permit in held.local.iter().chain(&held.global) {
        runtime.metrics.permits(permit.rule, permit.weight, true);
    }
}

/// Gives back every permit of `held`, kept by a request of `runtime`
/// ([`keep`]): no longer renewed nor counted in the gauges.
pub(super) fn release(runtime: &Rc<Runtime>, held: Held) {
    if held.is_empty() {
        return;
    }
    state::holdings(|h| {
        for permit in &held.local {
            h.remove(Place::Local, permit);
        }
        for permit in &held.global {
            h.remove(Place::Global, permit);
        }
    });
    for permit in held.local.iter().chain(&held.global) {
        runtime.metrics.permits(permit.rule, permit.weight, false);
    }
    give_back(runtime, held);
}

/// Gives back the permits `held` took for a request of `runtime` (never
/// kept, as those of a request denied after they were taken, or once
/// [`release`] forgot them): local ones at once, global ones by the root.
pub(super) fn give_back(runtime: &Rc<Runtime>, held: Held) {
    let now = now();
    for permit in &held.local {
        if concurrency::release_local(&HostStore, permit, now).is_err() {
            runtime.metrics.global(GlobalEvent::CasExhausted);
        }
    }
    for permit in held.global {
        state::release_later(Rc::clone(runtime), permit);
        wake::root();
    }
}

/// Sends, from the root context ticking now, the global permits given back
/// since the last tick: one call per configuration, holder and ttl.
pub(super) fn send_releases() {
    let mut waiting = state::take_releases();
    while let Some((runtime, first)) = waiting.pop() {
        let same = |(r, p): &(Rc<Runtime>, HeldPermit)| {
            Rc::ptr_eq(r, &runtime) && p.holder == first.holder && p.ttl == first.ttl
        };
        let (group, rest): (Vec<_>, Vec<_>) = waiting.into_iter().partition(same);
        waiting = rest;
        // One entry per key (the limiter refuses a key listed twice).
        let mut release: Vec<(&str, u64)> = Vec::with_capacity(group.len() + 1);
        for p in std::iter::once(&first).chain(group.iter().map(|(_, p)| p)) {
            match release.iter_mut().find(|(key, _)| *key == p.key) {
                Some((_, weight)) => *weight = weight.saturating_add(p.weight),
                None => release.push((p.key.as_str(), p.weight)),
            }
        }
        for chunk in release.chunks(MAX_PERMIT_KEYS) {
            let ttl_ms = first.ttl / MILLISECOND;
            let body = permits_json(&runtime.plan.domain, first.holder, ttl_ms, chunk, &[]);
            if dispatch_permits(&runtime, &body).is_none() {
                runtime.metrics.global(GlobalEvent::LimiterUnreachable);
            }
        }
    }
}

/// Renews, from the root context of `runtime` ticking now, the permits
/// held on this VM that are due.
pub(super) fn renew_due(runtime: Option<&Runtime>) {
    let now = now();
    let due = state::holdings(|h| h.due(now));
    let mut global: Vec<Due> = Vec::new();
    for d in due {
        match d.place {
            Place::Local => {
                let _ = concurrency::renew_local(
                    &HostStore,
                    &d.key,
                    d.fingerprint,
                    d.holder,
                    now,
                    d.ttl,
                );
            }
            Place::Global => global.push(d),
        }
    }
    let Some(runtime) = runtime else {
        return;
    };
    while let Some(first) = global.pop() {
        let (group, rest): (Vec<Due>, Vec<Due>) = global
            .into_iter()
            .partition(|d| d.holder == first.holder && d.ttl == first.ttl);
        global = rest;
        renew_global(runtime, first.holder, first.ttl, &first, &group);
    }
}

fn renew_global(runtime: &Runtime, holder: Holder, ttl: Nanos, first: &Due, rest: &[Due]) {
    let keys: Vec<&str> = std::iter::once(first)
        .chain(rest)
        .map(|d| d.key.as_str())
        .collect();
    for chunk in keys.chunks(MAX_PERMIT_KEYS) {
        let body = permits_json(&runtime.plan.domain, holder, ttl / MILLISECOND, &[], chunk);
        if dispatch_permits(runtime, &body).is_none() {
            runtime.metrics.global(GlobalEvent::LimiterUnreachable);
        }
    }
}
