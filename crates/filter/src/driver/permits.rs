//! The permits of concurrency limits on the worker: kept by a request once
//! it is admitted, given back when its stream ends (whichever way), and
//! renewed from the root context's ticks while some request holds them
//! (see [`crate::engine::concurrency`]).
//!
//! Local permits go back at once, by compare-and-swap. Global ones are given
//! back by the root context, woken at once ([`super::wake`]), all of a
//! configuration's in one `POST /v1/permits`: the stream's own context is
//! ending and could not take the call's answer.

use super::host::{Host, WorkerMetrics};
use super::limiter::dispatch_permits;
use super::parts::{Runtime, Shared};
use super::wake;
use super::worker::Worker;
use crate::engine::concurrency::{self, Held, HeldPermit};
use crate::holdings::{Due, Place};
use crate::metrics::{GlobalEvent, MetricSink};
use sluice_core::{Holder, Nanos, MILLISECOND};
use sluice_wire::{permits_json, MAX_PERMIT_KEYS};
use std::rc::Rc;

/// Counts the permits `held` as held by a request of `runtime` from now.
pub(super) fn keep<H: Host>(w: &mut Worker<H>, host: &H, runtime: &Shared<H>, held: &Held) {
    if held.is_empty() {
        return;
    }
    let now = host.now();
    for permit in &held.local {
        w.holdings.add(Place::Local, permit, now);
    }
    for permit in &held.global {
        w.holdings.add(Place::Global, permit, now);
    }
    for permit in held.local.iter().chain(&held.global) {
        runtime.metrics.permits(permit.rule, permit.weight, true);
    }
}

/// Gives back every permit of `held`, kept by a request of `runtime`
/// ([`keep`]): no longer renewed nor counted in the gauges.
pub(super) fn release<H: Host>(w: &mut Worker<H>, host: &mut H, runtime: &Shared<H>, held: Held) {
    if held.is_empty() {
        return;
    }
    for permit in &held.local {
        w.holdings.remove(Place::Local, permit);
    }
    for permit in &held.global {
        w.holdings.remove(Place::Global, permit);
    }
    for permit in held.local.iter().chain(&held.global) {
        runtime.metrics.permits(permit.rule, permit.weight, false);
    }
    give_back(w, host, runtime, held);
}

/// Gives back the permits `held` took for a request of `runtime` (never
/// kept, as those of a request denied after they were taken, or once
/// [`release`] forgot them): local ones at once, global ones by the root.
pub(super) fn give_back<H: Host>(w: &mut Worker<H>, host: &mut H, runtime: &Shared<H>, held: Held) {
    // The clock only for local permits: most denials hold none.
    if !held.local.is_empty() {
        let now = host.now();
        for permit in &held.local {
            if concurrency::release_local(&*host, permit, now).is_err() {
                runtime.metrics.global(GlobalEvent::CasExhausted);
            }
        }
    }
    for permit in held.global {
        w.releases.push((Rc::clone(runtime), permit));
        wake::root(w, host);
    }
}

/// Sends, from the root context running now, the global permits given back
/// since: one call per configuration, holder and ttl.
pub(super) fn send_releases<H: Host>(w: &mut Worker<H>, host: &mut H) {
    let mut waiting = std::mem::take(&mut w.releases);
    while let Some((runtime, first)) = waiting.pop() {
        let same = |(r, p): &(Shared<H>, HeldPermit)| {
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
            if dispatch_permits(host, &runtime, &body).is_none() {
                runtime.metrics.global(GlobalEvent::LimiterUnreachable);
            }
        }
    }
}

/// Renews, from the root context of `runtime` ticking now, the permits
/// held on this worker that are due.
pub(super) fn renew_due<H: Host>(w: &mut Worker<H>, host: &mut H, runtime: Option<&Shared<H>>) {
    let now = host.now();
    let due = w.holdings.due(now);
    let mut global: Vec<Due> = Vec::new();
    for d in due {
        match d.place {
            Place::Local => {
                let _ =
                    concurrency::renew_local(&*host, &d.key, d.fingerprint, d.holder, now, d.ttl);
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
        renew_global(host, runtime, first.holder, first.ttl, &first, &group);
    }
}

fn renew_global<H: Host, M: WorkerMetrics>(
    host: &mut H,
    runtime: &Runtime<M>,
    holder: Holder,
    ttl: Nanos,
    first: &Due,
    rest: &[Due],
) {
    let keys: Vec<&str> = std::iter::once(first)
        .chain(rest)
        .map(|d| d.key.as_str())
        .collect();
    for chunk in keys.chunks(MAX_PERMIT_KEYS) {
        let body = permits_json(&runtime.plan.domain, holder, ttl / MILLISECOND, &[], chunk);
        if dispatch_permits(host, runtime, &body).is_none() {
            runtime.metrics.global(GlobalEvent::LimiterUnreachable);
        }
    }
}
