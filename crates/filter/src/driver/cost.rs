//! Costs known from the response: its headers, body chunks and trailers
//! handed to the request's [`CostReader`], the settlement when the stream
//! ends (local limits at once), and the global settlements sent by the root
//! context, woken at once ([`super::wake`]), in one `POST /v1/charge` per
//! configuration (the stream's own context is ending and could not take
//! the call's answer). The keys a charge is for are owed
//! ([`crate::owing`]) from the stream's end until the limiter answers it:
//! checks of those keys wait for it ([`super::rooted`]).

use super::host::{Buffer, Host, Map};
use super::limiter::{dispatch, dispatch_charge};
use super::parts::{Charge, ChargeCall, Runtime, ServiceCharge, Shared};
use super::wake;
use super::worker::{take_where, Worker};
use crate::engine::cost_reader::{
    charge_bodies, remember_over_limit, CostReader, GlobalSettlement,
};
use crate::engine::settle::Adjustment;
use crate::metrics::{GlobalEvent, MetricSink};
use crate::rls;
use sluice_core::Nanos;
use sluice_wire::LimitSpec;
use std::rc::Rc;

/// Reads the response headers, and its status when a limit is counted by
/// outcome (only then: other requests make no call for it).
pub(super) fn read_headers<H: Host, M>(host: &H, runtime: &Runtime<M>, reader: &mut CostReader) {
    let header = |name: &str| host.header(Map::ResponseHeaders, name);
    reader.on_headers(&runtime.plan, header);
    if reader.reads_outcome() {
        reader.on_outcome(upstream_status(host), header);
    }
}

/// The response's status, if the upstream sent it: a reply Envoy made
/// itself (an upstream reset or timeout, its 503 or 504) is no response,
/// as a stream that ended before one.
fn upstream_status<H: Host>(host: &H) -> Option<u16> {
    let details = host.property(&["response", "code_details"]);
    if details.is_some_and(|d| d != b"via_upstream") {
        return None;
    }
    host.header(Map::ResponseHeaders, ":status")?
        .trim()
        .parse()
        .ok()
}

/// Reads the chunk of the response body the host holds now.
pub(super) fn read_body<H: Host>(host: &H, reader: &mut CostReader, size: usize) {
    if let Some(chunk) = host.buffer(Buffer::ResponseBody, size) {
        reader.on_body(&chunk);
    }
}

/// Reads the response trailers.
pub(super) fn read_trailers<H: Host, M>(host: &H, runtime: &Runtime<M>, reader: &mut CostReader) {
    reader.on_trailers(&runtime.plan, |name| {
        host.header(Map::ResponseTrailers, name)
    });
}

/// Settles what a request of `runtime` owes, its stream having ended.
pub(super) fn settle<H: Host>(
    w: &mut Worker<H>,
    host: &mut H,
    runtime: &Shared<H>,
    mut reader: CostReader,
) {
    // Only sources of dynamic metadata read it.
    reader.on_end(&runtime.plan, |path| host.property(path));
    let global = reader.settle(&runtime.plan, &*host, &runtime.metrics, host.now());
    for settlement in global {
        let owed = w.owing.owe(charged_keys(std::slice::from_ref(&settlement)));
        w.charges.push(Charge {
            runtime: Rc::clone(runtime),
            settlement,
            owed,
        });
        wake::root(w, host);
    }
}

/// The limiter keys `settlements` charge (refunds are not waited for: one
/// late only admits fewer).
fn charged_keys(settlements: &[GlobalSettlement]) -> impl Iterator<Item = &str> {
    settlements
        .iter()
        .filter(|s| matches!(s.adjustment, Adjustment::Charge(_)))
        .flat_map(|s| s.limits.iter().map(|l| l.key.as_ref()))
}

/// The answer to call `token`, if it is a charge's: once every call of its
/// settlements is answered, their keys are paid. Returns whether some were.
pub(super) fn answered<H: Host>(w: &mut Worker<H>, token: u32) -> bool {
    let Some(mut call) = take_where(&mut w.charge_calls, |c| c.tokens.contains(&token)).pop()
    else {
        return false;
    };
    call.tokens.retain(|t| *t != token);
    if !call.tokens.is_empty() {
        w.charge_calls.push(call);
        return false;
    }
    pay(w, &call.owed);
    true
}

/// Root `root` is closing: its charge calls will not be answered; their
/// keys are no longer waited for.
pub(super) fn root_closing<H: Host>(w: &mut Worker<H>, root: u32) {
    take_where(&mut w.service_charges, |c| c.root == root);
    for call in take_where(&mut w.charge_calls, |c| c.root == root) {
        pay(w, &call.owed);
    }
}

fn pay<H: Host>(w: &mut Worker<H>, owed: &[u64]) {
    owed.iter().for_each(|id| w.owing.paid(*id));
}

/// The answer to call `token`, if it is a rate limit service's to the
/// stream-end charge of a limit counted by outcome: an `OVER_LIMIT` fills
/// the over-limit cache. Returns whether it was.
pub(super) fn service_answered<H: Host>(
    w: &mut Worker<H>,
    host: &H,
    token: u32,
    answer: Option<&[u8]>,
) -> bool {
    let Some(charge) = take_where(&mut w.service_charges, |c| c.token == token).pop() else {
        return false;
    };
    remember_over_limit(host, &charge.cache, answer, host.now());
    true
}

/// Charges what a rate limit service holds: one `ShouldRateLimit` per
/// settlement, its descriptors with the difference as their hits (a
/// service cannot be refunded: it keeps the estimate). The answer of a
/// charge whose over-limit is cached is read by root `root`.
fn send_to_service<H: Host>(
    w: &mut Worker<H>,
    host: &mut H,
    (runtime, root): (&Runtime<H::Metrics>, u32),
    settlements: &[GlobalSettlement],
) {
    for s in settlements.iter().filter(|s| !s.descriptors.is_empty()) {
        let Adjustment::Charge(hits) = s.adjustment else {
            continue;
        };
        // The difference is every descriptor's weight.
        let descriptors: Vec<rls::Descriptor> = s
            .descriptors
            .iter()
            .map(|d| rls::Descriptor {
                hits: None,
                ..d.clone()
            })
            .collect();
        let body = rls::encode_request(&runtime.plan.domain, &descriptors, hits);
        match (dispatch(host, runtime, &body), &s.cache) {
            (None, _) => runtime.metrics.global(GlobalEvent::LimiterUnreachable),
            (Some(token), Some(cache)) => w.service_charges.push(ServiceCharge {
                root,
                token,
                cache: cache.clone(),
            }),
            (Some(_), None) => {}
        }
    }
}

/// Gives back the global rate limits `taken` (each with its weight in
/// `hits`) a request of `runtime` was counted in as of `admitted_at`: its
/// client left while it was held.
pub(super) fn refund<H: Host>(
    w: &mut Worker<H>,
    host: &mut H,
    runtime: &Shared<H>,
    taken: Vec<LimitSpec<'static>>,
    admitted_at: Nanos,
) {
    for spec in taken {
        let units = spec.hits.unwrap_or(1);
        let settlement = GlobalSettlement {
            descriptors: Vec::new(),
            limits: vec![spec],
            adjustment: Adjustment::Refund(units),
            admitted_at,
            cache: None,
        };
        w.charges.push(Charge {
            runtime: Rc::clone(runtime),
            settlement,
            owed: 0,
        });
        wake::root(w, host);
    }
}

/// Sends, from the root context `root` running now, the global settlements
/// left for it: one call per configuration.
pub(super) fn send_charges<H: Host>(w: &mut Worker<H>, host: &mut H, root: u32) {
    let mut waiting = std::mem::take(&mut w.charges);
    while let Some(first) = waiting.pop() {
        let runtime = Rc::clone(&first.runtime);
        let (group, rest): (Vec<_>, Vec<_>) = waiting
            .into_iter()
            .partition(|c| Rc::ptr_eq(&c.runtime, &runtime));
        waiting = rest;
        let (settlements, owed): (Vec<GlobalSettlement>, Vec<u64>) = std::iter::once(first)
            .chain(group)
            .map(|c| (c.settlement, c.owed))
            .unzip();
        let owed: Vec<u64> = owed.into_iter().filter(|id| *id != 0).collect();
        let now = host.now();
        send_to_service(w, host, (&runtime, root), &settlements);
        let mut tokens = Vec::new();
        for body in charge_bodies(&runtime.plan.domain, &settlements, now) {
            match dispatch_charge(host, &runtime, &body) {
                Some(token) => tokens.push(token),
                None => runtime.metrics.global(GlobalEvent::LimiterUnreachable),
            }
        }
        if tokens.is_empty() {
            pay(w, &owed);
        } else if !owed.is_empty() {
            w.charge_calls.push(ChargeCall { root, tokens, owed });
        }
    }
}
