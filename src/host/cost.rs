//! Costs known from the response on the host side: the response's headers,
//! body chunks and trailers handed to the request's [`CostReader`], the
//! settlement when the stream ends (local limits at once), and the global
//! settlements sent by the root context, woken at once ([`super::wake`]),
//! in one `POST /v1/charge` per configuration (the stream's own context is
//! ending and could not take the call's answer). The keys a charge is for
//! are owed ([`sluice_filter::owing`]) from the stream's end until the
//! limiter answers it: checks of those keys wait for it ([`super::rooted`]).

use super::clock::now;
use super::limiter::{dispatch, dispatch_charge};
use super::runtime::Runtime;
use super::shared_data::HostStore;
use super::state::{self, Charge, ChargeCall};
use super::wake;
use proxy_wasm::hostcalls;
use proxy_wasm::types::{BufferType, MapType};
use sluice_core::Nanos;
use sluice_filter::engine::cost_reader::{CostReader, GlobalSettlement};
use sluice_filter::engine::settle::Adjustment;
use sluice_filter::metrics::{GlobalEvent, MetricSink};
use sluice_filter::rls;
use sluice_wire::LimitSpec;
use std::rc::Rc;

/// Reads the response headers.
pub(super) fn read_headers(runtime: &Runtime, reader: &mut CostReader) {
    reader.on_headers(&runtime.plan, |name| {
        super::request::map_value(MapType::HttpResponseHeaders, name)
    });
}

/// Reads the chunk of the response body the host holds now.
pub(super) fn read_body(reader: &mut CostReader, size: usize) {
    if let Ok(Some(chunk)) = hostcalls::get_buffer(BufferType::HttpResponseBody, 0, size) {
        reader.on_body(&chunk);
    }
}

/// Reads the response trailers.
pub(super) fn read_trailers(runtime: &Runtime, reader: &mut CostReader) {
    reader.on_trailers(&runtime.plan, |name| {
        super::request::map_value(MapType::HttpResponseTrailers, name)
    });
}

/// Settles what a request of `runtime` owes, its stream having ended.
pub(super) fn settle(runtime: &Rc<Runtime>, reader: CostReader) {
    let global = reader.settle(&HostStore, &runtime.metrics, now());
    for settlement in global {
        let owed = state::owing(|o| o.owe(charged_keys(std::slice::from_ref(&settlement))));
        state::charge_later(Charge {
            runtime: Rc::clone(runtime),
            settlement,
            owed,
        });
        wake::root();
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
pub(super) fn answered(token: u32) -> bool {
    let Some(mut call) = state::take_charge_calls(|c| c.tokens.contains(&token)).pop() else {
        return false;
    };
    call.tokens.retain(|t| *t != token);
    if !call.tokens.is_empty() {
        state::add_charge_call(call);
        return false;
    }
    pay(&call.owed);
    true
}

/// Root `root` is closing: its charge calls will not be answered; their
/// keys are no longer waited for.
pub(super) fn root_closing(root: u32) {
    for call in state::take_charge_calls(|c| c.root == root) {
        pay(&call.owed);
    }
}

fn pay(owed: &[u64]) {
    state::owing(|o| owed.iter().for_each(|id| o.paid(*id)));
}

/// Charges what a rate limit service holds: one `ShouldRateLimit` per
/// settlement, its descriptors with the difference as their hits (a
/// service cannot be refunded: it keeps the estimate).
fn send_to_service(runtime: &Runtime, settlements: &[GlobalSettlement]) {
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
        if dispatch(runtime, &body).is_none() {
            runtime.metrics.global(GlobalEvent::LimiterUnreachable);
        }
    }
}

/// Gives back the global rate limits `taken` (each with its weight in
/// `hits`) a request of `runtime` was counted in as of `admitted_at`: its
/// client left while it was held.
pub(super) fn refund(runtime: &Rc<Runtime>, taken: Vec<LimitSpec<'static>>, admitted_at: Nanos) {
    for spec in taken {
        let units = spec.hits.unwrap_or(1);
        let settlement = GlobalSettlement {
            descriptors: Vec::new(),
            limits: vec![spec],
            adjustment: Adjustment::Refund(units),
            admitted_at,
        };
        state::charge_later(Charge {
            runtime: Rc::clone(runtime),
            settlement,
            owed: 0,
        });
        wake::root();
    }
}

/// Sends, from the root context `root` running now, the global settlements
/// left for it: one call per configuration.
pub(super) fn send_charges(root: u32) {
    let mut waiting = state::take_charges();
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
        let now = now();
        send_to_service(&runtime, &settlements);
        let mut tokens = Vec::new();
        for body in sluice_filter::engine::cost_reader::charge_bodies(
            &runtime.plan.domain,
            &settlements,
            now,
        ) {
            match dispatch_charge(&runtime, &body) {
                Some(token) => tokens.push(token),
                None => runtime.metrics.global(GlobalEvent::LimiterUnreachable),
            }
        }
        if tokens.is_empty() {
            pay(&owed);
        } else if !owed.is_empty() {
            state::add_charge_call(ChargeCall { root, tokens, owed });
        }
    }
}
