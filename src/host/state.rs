//! What one VM (a worker thread) keeps between its contexts: the requests
//! it holds in delay mode, its coalescing groups and their shared calls in
//! flight, the keys its requests hold permits of, its lease renewals in flight, the outcomes its root decided for requests, how many root
//! contexts are alive, and the ids of the metrics it defined. This module alone owns those thread-locals; the
//! others reach them through its functions.

use super::runtime::Runtime;
use sluice_core::Nanos;
use sluice_filter::coalesce::Coalescer;
use sluice_filter::engine::concurrency::{Held, HeldPermit};
use sluice_filter::engine::cost_reader::GlobalSettlement;
use sluice_filter::engine::{Admitted, Delayed, PendingCheck, Renewal};
use sluice_filter::failure::Throttle;
use sluice_filter::holdings::Holdings;
use sluice_filter::owing::Owing;
use sluice_filter::queue::Queue;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::thread::LocalKey;

/// A request's headers, taken once (name, value).
pub(super) type Headers = Rc<[(String, String)]>;

thread_local! {
    /// The requests this VM holds in delay mode.
    static WAITING: RefCell<Queue> = RefCell::new(Queue::default());
    /// Root contexts alive in this VM: the last one to go resumes every
    /// waiting request rather than leave it stuck.
    static ROOTS: Cell<usize> = const { Cell::new(0) };
    /// The requests of this VM waiting for a shared global check.
    static GROUPS: RefCell<Coalescer<Member>> = RefCell::new(Coalescer::default());
    /// Shared calls in flight on this VM, with their tokens (one per busy
    /// group: a list is enough, and smaller in the wasm than a map).
    static CALLS: RefCell<Vec<(u32, SharedCall)>> = const { RefCell::new(Vec::new()) };
    /// What the root decided for requests of this VM, until their contexts
    /// take it.
    static HANDOFF: RefCell<Vec<(u32, Handoff)>> = const { RefCell::new(Vec::new()) };
    /// The keys this VM's requests hold permits of, to renew.
    static HOLDINGS: RefCell<Holdings> = RefCell::new(Holdings::default());
    /// Global settlements of ended requests, for the root to send, with
    /// the configuration that admitted them.
    static CHARGES: RefCell<Vec<Charge>> = const { RefCell::new(Vec::new()) };
    /// The limiter keys this VM's ended requests still owe charges on, and
    /// the charge calls in flight (their tokens, root and keys).
    static OWING: RefCell<Owing> = RefCell::new(Owing::default());
    static CHARGE_CALLS: RefCell<Vec<ChargeCall>> = const { RefCell::new(Vec::new()) };
    /// Global permits ended requests gave back, for the root to send, with
    /// the configuration that took them.
    static RELEASES: RefCell<Vec<(Rc<Runtime>, HeldPermit)>> = const { RefCell::new(Vec::new()) };
    /// The request headers of the request being carried out, when Envoy no
    /// longer shows them (it was decided after its body: see
    /// `request::Snapshot`).
    static REQUEST_HEADERS: RefCell<Option<Headers>> = const { RefCell::new(None) };
    /// Requests waiting for a permit of a concurrency limit in delay mode.
    static WAITERS: RefCell<Vec<Waiter>> = const { RefCell::new(Vec::new()) };
    /// Checks the root makes for waiting requests, until answered.
    static WAITER_CALLS: RefCell<Vec<WaiterCall>> = const { RefCell::new(Vec::new()) };
    /// Lease renewals for the root to send, with the configuration that
    /// started them.
    static RENEWALS_QUEUED: RefCell<Vec<(Rc<Runtime>, Renewal)>> = const { RefCell::new(Vec::new()) };
    /// The shared queue that wakes this VM's root (with the root it wakes),
    /// its name (the same for every root of the VM), and whether a wake-up
    /// is on its way.
    static WAKE_QUEUE: Cell<Option<(u32, u32)>> = const { Cell::new(None) };
    static WAKE_QUEUE_NAME: RefCell<Option<String>> = const { RefCell::new(None) };
    static WOKEN: Cell<bool> = const { Cell::new(false) };
    /// Checks taking global permits that the root makes for requests,
    /// queued or in flight.
    static ROOTED: RefCell<Vec<RootedCheck>> = const { RefCell::new(Vec::new()) };
    /// Lease renewals in flight, made by root contexts.
    static RENEWALS: RefCell<Vec<RenewalCall>> = const { RefCell::new(Vec::new()) };
    /// When this VM last logged a failed limiter call.
    static FAILURE_LOG: RefCell<Throttle> = RefCell::new(Throttle::default());
    /// The host's id of every metric this VM defined, by name: each
    /// configuration reuses them (defining a name again grew Envoy's memory
    /// at each configuration push, by about 14 KB per push with a dozen rules).
    static METRIC_IDS: RefCell<HashMap<String, u32>> = RefCell::new(HashMap::new());
}

/// The id of the metric `name`, defined by `define` the first time this
/// VM asks for it (a failed definition is asked again next time).
pub(super) fn metric_id(name: &str, define: impl FnOnce() -> Option<u32>) -> Option<u32> {
    if let Some(id) = METRIC_IDS.with(|m| m.borrow().get(name).copied()) {
        return Some(id);
    }
    let id = define()?;
    METRIC_IDS.with(|m| m.borrow_mut().insert(name.to_string(), id));
    Some(id)
}

/// Whether a limiter failure at `now` is logged (see [`Throttle::admit`]).
pub(super) fn log_failure(now: Nanos) -> Option<u64> {
    FAILURE_LOG.with(|t| t.borrow_mut().admit(now))
}

/// A request waiting for a shared global check.
pub(super) struct Member {
    pub(super) runtime: Rc<Runtime>,
    pub(super) pending: PendingCheck,
}

/// A shared call in flight.
pub(super) struct SharedCall {
    /// The root context that made it (0 for a carried call).
    pub(super) root: u32,
    /// Its token.
    pub(super) token: u32,
    pub(super) signature: Vec<u8>,
    /// The requests it carries, in arrival order.
    pub(super) members: Vec<(u32, Member)>,
}

/// An outcome the root decided for a request: what its response reports,
/// and the permits the root kept for it (counted and renewed from then on),
/// which the request gives back when its stream ends.
#[derive(Default)]
pub(super) struct Handoff {
    pub(super) admitted: Option<Admitted>,
    pub(super) held: Option<Delayed>,
    pub(super) kept: Held,
}

/// A check the root makes (or is about to make) for a request.
pub(super) struct RootedCheck {
    pub(super) context: u32,
    pub(super) runtime: Rc<Runtime>,
    pub(super) pending: PendingCheck,
    /// The request's headers, when it was decided after its body.
    pub(super) shown: Option<Headers>,
    /// The root whose calls these are, and their tokens (and call index);
    /// empty while queued.
    pub(super) root: u32,
    pub(super) tokens: Vec<(u32, usize)>,
    /// Its client left: the answer only gives back what it took.
    pub(super) gone: bool,
    /// It waits for the charges owed on its keys up to this id (0: none).
    pub(super) owed: u64,
}

/// A check the root makes for a waiting request: its calls' tokens (and
/// call index), the check, and the request.
pub(super) struct WaiterCall {
    pub(super) tokens: Vec<(u32, usize)>,
    pub(super) pending: PendingCheck,
    pub(super) waiter: Waiter,
    /// Its client left: the answer only gives back what it took.
    pub(super) gone: bool,
}

/// A lease renewal in flight: its call's token, the root context that made
/// it, and the configuration that started it.
pub(super) struct RenewalCall {
    pub(super) token: u32,
    pub(super) root: u32,
    pub(super) runtime: Rc<Runtime>,
    pub(super) renewal: Renewal,
}

/// Adds `item` to the work `list` holds for the root.
fn leave<T: 'static>(list: &'static LocalKey<RefCell<Vec<T>>>, item: T) {
    list.with(|l| l.borrow_mut().push(item));
}

/// Takes the work `list` holds for the root.
fn take_left<T: 'static>(list: &'static LocalKey<RefCell<Vec<T>>>) -> Vec<T> {
    list.with(|l| std::mem::take(&mut *l.borrow_mut()))
}

/// Leaves a renewal of `runtime` for the root to send.
pub(super) fn queue_renewal(runtime: Rc<Runtime>, renewal: Renewal) {
    leave(&RENEWALS_QUEUED, (runtime, renewal));
}

/// Takes the renewals waiting to be sent.
pub(super) fn take_queued_renewals() -> Vec<(Rc<Runtime>, Renewal)> {
    take_left(&RENEWALS_QUEUED)
}

/// The shared queue that wakes the root, while one listens.
pub(super) fn wake_queue() -> Option<u32> {
    WAKE_QUEUE.with(Cell::get).map(|(queue, _)| queue)
}

/// The root the wake-up queue wakes, once registered.
pub(super) fn woken_root() -> Option<u32> {
    WAKE_QUEUE.with(Cell::get).map(|(_, root)| root)
}

/// Notes the shared queue that wakes the root `root` (`None`: no root
/// listens).
pub(super) fn set_wake_queue(queue: Option<(u32, u32)>) {
    WAKE_QUEUE.with(|q| q.set(queue));
}

/// The name of this VM's wake-up queue, made by `name` the first time.
pub(super) fn wake_queue_name(name: impl FnOnce() -> String) -> String {
    WAKE_QUEUE_NAME.with(|n| n.borrow_mut().get_or_insert_with(name).clone())
}

/// Notes whether the root is to run for the work left it (woken, or
/// ticking soon); returns whether it was.
pub(super) fn set_woken(woken: bool) -> bool {
    WOKEN.with(|w| w.replace(woken))
}

/// Keeps a renewal in flight until its answer comes.
pub(super) fn add_renewal(call: RenewalCall) {
    RENEWALS.with(|r| r.borrow_mut().push(call));
}

/// Takes the items of `list` that `which` picks.
fn take_where<T: 'static>(
    list: &'static LocalKey<RefCell<Vec<T>>>,
    which: impl Fn(&T) -> bool,
) -> Vec<T> {
    list.with(|l| {
        let mut items = l.borrow_mut();
        let (taken, kept) = std::mem::take(&mut *items).into_iter().partition(which);
        *items = kept;
        taken
    })
}

/// Takes the renewals in flight that `which` picks.
pub(super) fn take_renewals(which: impl Fn(&RenewalCall) -> bool) -> Vec<RenewalCall> {
    take_where(&RENEWALS, which)
}

/// Keeps a check the root makes for a request, queued or in flight.
pub(super) fn add_rooted(check: RootedCheck) {
    leave(&ROOTED, check);
}

/// Takes the checks for requests that `which` picks.
pub(super) fn take_rooted(which: impl Fn(&RootedCheck) -> bool) -> Vec<RootedCheck> {
    take_where(&ROOTED, which)
}

/// Keeps a check made for a waiting request until its answers come.
pub(super) fn add_waiter_call(call: WaiterCall) {
    WAITER_CALLS.with(|c| c.borrow_mut().push(call));
}

/// Takes the check for a waiting request that call `token` is part of.
pub(super) fn take_waiter_call(token: u32) -> Option<WaiterCall> {
    WAITER_CALLS.with(|c| {
        let mut calls = c.borrow_mut();
        let at = calls
            .iter()
            .position(|w| w.tokens.iter().any(|(t, _)| *t == token))?;
        Some(calls.swap_remove(at))
    })
}

/// A request waiting for a permit: decided again at each fine tick until
/// it is admitted or `deadline` passes.
pub(super) struct Waiter {
    pub(super) context: u32,
    pub(super) runtime: Rc<Runtime>,
    /// When it first found no permit.
    pub(super) since: Nanos,
    pub(super) deadline: Nanos,
    /// The rule whose limit it waits for (its `max_queued` bounds them).
    pub(super) rule: usize,
}

/// Adds `waiter` unless its rule already has `max` waiting; returns
/// whether it was added.
pub(super) fn add_waiter(waiter: Waiter, max: usize) -> bool {
    WAITERS.with(|w| {
        let mut w = w.borrow_mut();
        if w.iter().filter(|o| o.rule == waiter.rule).count() >= max {
            return false;
        }
        w.push(waiter);
        true
    })
}

/// Takes every waiting request.
pub(super) fn take_waiters() -> Vec<Waiter> {
    WAITERS.with(|w| std::mem::take(&mut *w.borrow_mut()))
}

/// Puts back a request still waiting.
pub(super) fn keep_waiter(waiter: Waiter) {
    WAITERS.with(|w| w.borrow_mut().push(waiter));
}

/// Forgets the request of `context` if it waits (its client left), and
/// marks its check in flight, if any, as gone.
pub(super) fn remove_waiter(context: u32) {
    WAITERS.with(|w| w.borrow_mut().retain(|o| o.context != context));
    // Its context lives until the end of the worker's loop iteration: an
    // answer then must not be carried out for it.
    WAITER_CALLS.with(|c| {
        for call in c.borrow_mut().iter_mut() {
            call.gone |= call.waiter.context == context;
        }
    });
}

/// Whether some request waits for a permit.
pub(super) fn any_waiter() -> bool {
    WAITERS.with(|w| !w.borrow().is_empty())
}

/// Runs `f` on this VM's queue of held requests.
pub(super) fn queue<R>(f: impl FnOnce(&mut Queue) -> R) -> R {
    WAITING.with(|q| f(&mut q.borrow_mut()))
}

/// Runs `f` on the keys this VM's requests hold permits of.
pub(super) fn holdings<R>(f: impl FnOnce(&mut Holdings) -> R) -> R {
    HOLDINGS.with(|h| f(&mut h.borrow_mut()))
}

/// Leaves global permits `permit` of `runtime` for the root to give back.
pub(super) fn release_later(runtime: Rc<Runtime>, permit: HeldPermit) {
    leave(&RELEASES, (runtime, permit));
}

/// Leaves a global settlement for the root to send.
pub(super) fn charge_later(charge: Charge) {
    leave(&CHARGES, charge);
}

/// Runs `f` on the keys this VM's ended requests owe charges on.
pub(super) fn owing<R>(f: impl FnOnce(&mut Owing) -> R) -> R {
    OWING.with(|o| f(&mut o.borrow_mut()))
}

/// A global settlement for the root to send, with the configuration that
/// admitted its request and the id its keys are owed under.
pub(super) struct Charge {
    pub(super) runtime: Rc<Runtime>,
    pub(super) settlement: GlobalSettlement,
    pub(super) owed: u64,
}

/// The `POST /v1/charge` calls of one configuration's settlements, made by
/// root `root`: what they charge is owed until every call is answered.
pub(super) struct ChargeCall {
    pub(super) root: u32,
    pub(super) tokens: Vec<u32>,
    pub(super) owed: Vec<u64>,
}

/// Keeps charge calls in flight until their answers.
pub(super) fn add_charge_call(call: ChargeCall) {
    leave(&CHARGE_CALLS, call);
}

/// Takes the charge calls in flight that `which` picks.
pub(super) fn take_charge_calls(which: impl Fn(&ChargeCall) -> bool) -> Vec<ChargeCall> {
    take_where(&CHARGE_CALLS, which)
}

/// Takes the global settlements waiting to be sent.
pub(super) fn take_charges() -> Vec<Charge> {
    take_left(&CHARGES)
}

/// Takes the global permits waiting to be given back.
pub(super) fn take_releases() -> Vec<(Rc<Runtime>, HeldPermit)> {
    take_left(&RELEASES)
}

/// Sets the request headers shown in place of Envoy's; returns the ones
/// set before.
pub(super) fn set_request_headers(headers: Option<Headers>) -> Option<Headers> {
    REQUEST_HEADERS.with(|h| h.replace(headers))
}

/// The request headers shown in place of Envoy's, if any.
pub(super) fn request_headers() -> Option<Headers> {
    REQUEST_HEADERS.with(|h| h.borrow().clone())
}

/// Runs `f` on this VM's coalescing groups.
pub(super) fn groups<R>(f: impl FnOnce(&mut Coalescer<Member>) -> R) -> R {
    GROUPS.with(|g| f(&mut g.borrow_mut()))
}

/// Keeps the shared call `call` in flight until [`take_call`].
pub(super) fn add_call(call: SharedCall) {
    CALLS.with(|c| c.borrow_mut().push((call.token, call)));
}

/// Takes the shared call in flight with `token`, if any.
pub(super) fn take_call(token: u32) -> Option<SharedCall> {
    CALLS.with(|c| {
        let mut calls = c.borrow_mut();
        let at = calls.iter().position(|(t, _)| *t == token)?;
        Some(calls.swap_remove(at).1)
    })
}

/// Takes every shared call in flight that `gone` says ends.
pub(super) fn take_calls(gone: impl Fn(&SharedCall) -> bool) -> Vec<SharedCall> {
    CALLS.with(|c| {
        let mut calls = c.borrow_mut();
        let (gone, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut *calls)
            .into_iter()
            .partition(|(_, call)| gone(call));
        *calls = kept;
        gone.into_iter().map(|(_, call)| call).collect()
    })
}

/// Leaves `handoff` for the request of `context` to take.
pub(super) fn hand_off(context: u32, handoff: Handoff) {
    HANDOFF.with(|h| h.borrow_mut().push((context, handoff)));
}

/// Takes what the root decided for the request of `context`, if anything.
pub(super) fn take_handoff(context: u32) -> Option<Handoff> {
    HANDOFF.with(|h| {
        let mut h = h.borrow_mut();
        let at = h.iter().position(|(c, _)| *c == context)?;
        Some(h.swap_remove(at).1)
    })
}

/// Counts a root context created.
pub(super) fn root_opened() {
    ROOTS.with(|r| r.set(r.get().saturating_add(1)));
}

/// Counts a root context gone; returns whether it was the VM's last.
pub(super) fn root_closed() -> bool {
    ROOTS.with(|r| {
        r.set(r.get().saturating_sub(1));
        r.get() == 0
    })
}
