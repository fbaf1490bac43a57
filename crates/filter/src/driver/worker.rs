//! What one worker keeps between its callbacks: its root contexts, its
//! requests, the requests it holds in delay mode or waiting for a permit,
//! its coalescing groups and their shared calls in flight, the checks and
//! calls its root makes for requests, the keys its requests hold permits
//! of, the settlements and renewals left for the root, and the charges it
//! still owes. The driver's modules reach it through their functions.

use super::host::Host;
use super::parts::{
    Charge, ChargeCall, Member, RenewalCall, RootedCheck, ServiceCharge, Shared, SharedCall,
};
use super::request::Request;
use crate::coalesce::Coalescer;
use crate::engine::concurrency::HeldPermit;
use crate::engine::Renewal;
use crate::failure::Throttle;
use crate::holdings::Holdings;
use crate::owing::Owing;
use crate::queue::Queue;
use rustc_hash::FxBuildHasher;
use sluice_core::Nanos;
use std::collections::HashMap;

/// One worker: its root contexts, its requests and what they left.
pub struct Worker<H: Host> {
    pub(super) roots: Vec<RootState<H>>,
    /// By context id, hashed with FxHash: Envoy's ids are small integers
    /// no client chooses, and SipHash costs the VM more per request. Boxed:
    /// each callback takes its request out of the map and puts it back,
    /// which moves a pointer instead of the record (about 0.25 µs less of
    /// the module's time per global request in V8).
    pub(super) requests: HashMap<u32, Box<Request<H>>, FxBuildHasher>,
    /// The requests held in delay mode.
    pub(super) queue: Queue,
    /// The requests waiting for a shared global check.
    pub(super) groups: Coalescer<Member<H>>,
    /// Shared calls in flight (one per busy group).
    pub(super) calls: Vec<SharedCall<H>>,
    /// The keys the requests hold permits of, to renew.
    pub(super) holdings: Holdings,
    /// Global settlements of ended requests, for the root to send.
    pub(super) charges: Vec<Charge<H>>,
    /// The limiter keys ended requests still owe charges on, and the charge
    /// calls in flight.
    pub(super) owing: Owing,
    pub(super) charge_calls: Vec<ChargeCall>,
    /// Rate limit services' stream-end charges whose answers fill the
    /// over-limit cache.
    pub(super) service_charges: Vec<ServiceCharge>,
    /// Global permits ended requests gave back, for the root to send.
    pub(super) releases: Vec<(Shared<H>, HeldPermit)>,
    /// Requests waiting for a permit of a concurrency limit in delay mode
    /// (context, rule).
    pub(super) waiters: Vec<(u32, usize)>,
    /// Lease renewals for the root to send, and those in flight.
    pub(super) renewals_queued: Vec<(Shared<H>, Renewal)>,
    pub(super) renewals: Vec<RenewalCall<H>>,
    /// Checks the root makes for requests, queued or in flight.
    pub(super) rooted: Vec<RootedCheck<H>>,
    pub(super) wake: Wake,
    /// When a failed limiter call was last logged.
    pub(super) failure_log: Throttle,
}

impl<H: Host> Default for Worker<H> {
    fn default() -> Self {
        Worker {
            roots: Vec::new(),
            requests: HashMap::default(),
            queue: Queue::default(),
            groups: Coalescer::default(),
            calls: Vec::new(),
            holdings: Holdings::default(),
            charges: Vec::new(),
            owing: Owing::default(),
            charge_calls: Vec::new(),
            service_charges: Vec::new(),
            releases: Vec::new(),
            waiters: Vec::new(),
            renewals_queued: Vec::new(),
            renewals: Vec::new(),
            rooted: Vec::new(),
            wake: Wake::default(),
            failure_log: Throttle::default(),
        }
    }
}

/// A root context.
pub(super) struct RootState<H: Host> {
    pub(super) id: u32,
    pub(super) runtime: Option<Shared<H>>,
    /// Whether the flush timer is set.
    pub(super) ticking: bool,
    /// When it last ticked, and last flushed its metrics.
    pub(super) last_tick: Nanos,
    pub(super) last_flush: Nanos,
}

/// The shared queue that wakes the root (with the root it wakes), its name
/// (the same for every root of the worker), and whether a wake-up is on
/// its way.
#[derive(Default)]
pub(super) struct Wake {
    pub(super) queue: Option<(u32, u32)>,
    pub(super) name: Option<String>,
    pub(super) woken: bool,
}

/// Takes the items of `list` that `which` picks.
pub(super) fn take_where<T>(list: &mut Vec<T>, which: impl Fn(&T) -> bool) -> Vec<T> {
    let (taken, kept) = std::mem::take(list).into_iter().partition(which);
    *list = kept;
    taken
}

impl<H: Host> Worker<H> {
    /// Whether the request of `context` is still there (its stream has not
    /// ended).
    pub(super) fn alive(&self, context: u32) -> bool {
        self.requests.contains_key(&context)
    }
}

#[cfg(test)]
impl<H: Host> Worker<H> {
    /// The names of the lists that still hold work (none once the worker
    /// has settled with no request open).
    pub(crate) fn left(&self) -> Vec<&'static str> {
        let lists = [
            ("requests", self.requests.is_empty()),
            ("queue", self.queue.is_empty()),
            ("groups", self.groups.is_empty()),
            ("calls", self.calls.is_empty()),
            ("holdings", self.holdings.is_empty()),
            ("charges", self.charges.is_empty()),
            ("owing", self.owing.is_empty()),
            ("charge_calls", self.charge_calls.is_empty()),
            ("service_charges", self.service_charges.is_empty()),
            ("releases", self.releases.is_empty()),
            ("waiters", self.waiters.is_empty()),
            ("renewals_queued", self.renewals_queued.is_empty()),
            ("renewals", self.renewals.is_empty()),
            ("rooted", self.rooted.is_empty()),
        ];
        lists
            .into_iter()
            .filter(|(_, empty)| !empty)
            .map(|(name, _)| name)
            .collect()
    }
}
