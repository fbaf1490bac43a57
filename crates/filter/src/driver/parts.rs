//! The pieces of work the worker keeps for its parts of a request's life:
//! the configuration in force, a coalescing group's members and shared
//! calls, the checks the root makes for requests, requests waiting for a
//! permit, renewals and charges in flight.

use super::host::Host;
use crate::config::Plan;
use crate::engine::core::call::CacheSlot;
use crate::engine::cost_reader::GlobalSettlement;
use crate::engine::{PendingCheck, Renewal};
use crate::slots::SlotHasher;
use sluice_core::Holder;
use std::rc::Rc;

/// Everything a request needs from its configuration, replaced as a whole
/// on reconfiguration.
pub struct Runtime<M> {
    pub plan: Plan,
    pub hasher: SlotHasher,
    pub metrics: M,
    /// Who holds the permits this configuration's requests take.
    pub holder: Holder,
    /// This worker's refusals by key since its last fold
    /// (`top_limited_keys`).
    pub top: crate::topkeys::Counts,
}

/// A configuration in force, shared by the requests it admitted.
pub(super) type Shared<H> = Rc<Runtime<<H as Host>::Metrics>>;

/// A request's headers, taken once (name, value).
pub(super) type Headers = Rc<[(String, String)]>;

/// A request waiting for a shared global check.
pub(super) struct Member<H: Host> {
    pub(super) runtime: Shared<H>,
    pub(super) pending: Box<PendingCheck>,
}

/// A shared call in flight.
pub(super) struct SharedCall<H: Host> {
    /// The root context that made it (0 for a carried call).
    pub(super) root: u32,
    pub(super) token: u32,
    pub(super) signature: Vec<u8>,
    /// The requests it carries, in arrival order.
    pub(super) members: Vec<(u32, Member<H>)>,
}

/// A check the root makes (or is about to make) for a request.
pub(super) struct RootedCheck<H: Host> {
    pub(super) context: u32,
    pub(super) runtime: Shared<H>,
    pub(super) pending: PendingCheck,
    /// The root whose calls these are, and their tokens (and call index);
    /// empty while queued.
    pub(super) root: u32,
    pub(super) tokens: Vec<(u32, usize)>,
    /// It waits for the charges owed on its keys up to this id (0: none).
    pub(super) owed: u64,
}

/// A lease renewal in flight.
pub(super) struct RenewalCall<H: Host> {
    pub(super) token: u32,
    pub(super) root: u32,
    pub(super) runtime: Shared<H>,
    pub(super) renewal: Renewal,
}

/// A global settlement for the root to send, with the id its keys are
/// owed under (0: none).
pub(super) struct Charge<H: Host> {
    pub(super) runtime: Shared<H>,
    pub(super) settlement: GlobalSettlement,
    pub(super) owed: u64,
}

/// A rate limit service's stream-end charge of a limit counted by outcome,
/// made by root `root`: its `OVER_LIMIT` answer is cached in `cache`.
pub(super) struct ServiceCharge {
    pub(super) root: u32,
    pub(super) token: u32,
    pub(super) cache: CacheSlot,
}

/// The `POST /v1/charge` calls of one configuration's settlements, made by
/// root `root`: what they charge is owed until every call is answered.
pub(super) struct ChargeCall {
    pub(super) root: u32,
    pub(super) tokens: Vec<u32>,
    pub(super) owed: Vec<u64>,
}

/// A poll of the quota endpoint waiting for the limiter's answer: its
/// call, the quotas found (the global ones to fill in), and when it came.
pub(super) struct Asking {
    pub(super) token: u32,
    pub(super) quotas: Vec<crate::engine::quota::Quota>,
    pub(super) now: sluice_core::Nanos,
}
