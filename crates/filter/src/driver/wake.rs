//! Wakes the worker's root context for the work requests leave it: lease
//! renewals, the next calls of coalescing groups, checks it makes for
//! requests, global settlements and permits given back. The root makes
//! those calls so that their answers come to it (an answer goes to the
//! context that was running when its call was made), whether or not the
//! request that left the work is still there.
//!
//! The wake-up goes through a shared queue of the worker's own: Envoy runs
//! the root's `on_queue_ready` in the worker's next loop iteration, where a
//! tick would come a millisecond later at best. Should the queue fail, the
//! root's fine tick does the work.

use super::host::Host;
use super::parts::Runtime;
use super::worker::Worker;
use super::HOLD_TICK;

/// Wakes the root to do the work just left for it (once until it runs:
/// through the queue, or else at its next fine tick).
pub(super) fn root<H: Host>(w: &mut Worker<H>, host: &mut H) {
    if std::mem::replace(&mut w.wake.woken, true) {
        return;
    }
    let woken = w.wake.queue.is_some_and(|(queue, _)| host.enqueue(queue));
    if !woken {
        host.set_tick_period(HOLD_TICK);
    }
}

/// Makes the running root `root`, of configuration `runtime`, the one
/// woken for this worker: the worker's queue, named once after the first
/// configuration's permit holder (unique among Envoy's workers).
pub(super) fn listen<H: Host, M>(w: &mut Worker<H>, host: &mut H, root: u32, runtime: &Runtime<M>) {
    let name = w
        .wake
        .name
        .get_or_insert_with(|| {
            let mut name = String::from("sluice.wake.");
            crate::decimal::push_u64(&mut name, runtime.holder);
            name
        })
        .clone();
    // A name registered again moves its wake-ups to the root registering.
    if let Some(queue) = host.register_queue(&name) {
        w.wake.queue = Some((queue, root));
    }
    // A wake-up sent to a root gone would be lost: the next one is sent.
    w.wake.woken = false;
}

/// Root `root` is closing: if it is the one woken, wake-ups would be lost,
/// so the work left turns the ticks fine until another root listens (at
/// its next tick, see [`listen_if_unheard`]).
pub(super) fn root_closing<H: Host>(w: &mut Worker<H>, root: u32) {
    if w.wake.queue.is_some_and(|(_, r)| r == root) {
        w.wake.queue = None;
        w.wake.woken = false;
    }
}

/// Makes root `root` the one woken if none is.
pub(super) fn listen_if_unheard<H: Host, M>(
    w: &mut Worker<H>,
    host: &mut H,
    root: u32,
    runtime: Option<&Runtime<M>>,
) {
    if let (None, Some(runtime)) = (w.wake.queue, runtime) {
        listen(w, host, root, runtime);
    }
}

/// The root was woken through `queue` (or is about to do the work anyway):
/// empties it, so that the work left from now on wakes it again.
pub(super) fn woken<H: Host>(w: &mut Worker<H>, host: &mut H, queue: Option<u32>) {
    w.wake.woken = false;
    if let Some(queue) = queue {
        while host.dequeue(queue) {}
    }
}
