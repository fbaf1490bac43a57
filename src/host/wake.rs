//! Wakes the worker's root context for the work requests leave it: lease
//! renewals, the next calls of coalescing groups, global settlements and
//! permits given back. The root makes those calls so that their answers
//! come to it (an answer goes to the context that was running when its call
//! was made), whether or not the request that left the work is still there.
//!
//! The wake-up goes through a shared queue of the VM's own: Envoy runs the
//! root's `on_queue_ready` in the worker's next loop iteration, where a
//! tick would come a millisecond later at best. Should the queue fail, the
//! root's fine tick does the work.

use super::clock::HOLD_TICK;
use super::runtime::Runtime;
use super::state;
use proxy_wasm::hostcalls;

/// What a wake-up carries (anything: the work waits in the VM's state).
const WAKE: &[u8] = b"w";

/// Wakes the root to do the work just left for it (once until it runs:
/// through the queue, or else at its next fine tick).
pub(super) fn root() {
    if state::set_woken(true) {
        return;
    }
    let woken = state::wake_queue()
        .is_some_and(|queue| hostcalls::enqueue_shared_queue(queue, Some(WAKE)).is_ok());
    if !woken {
        let _ = hostcalls::set_tick_period(HOLD_TICK);
    }
}

/// Makes the running root `root`, of configuration `runtime`, the one
/// woken for this VM: the VM's queue, named once per VM after the first
/// configuration's permit holder (unique among Envoy's workers).
pub(super) fn listen(root: u32, runtime: &Runtime) {
    let name = state::wake_queue_name(|| {
        let mut name = String::from("sluice.wake.");
        sluice_filter::decimal::push_u64(&mut name, runtime.holder);
        name
    });
    // A name registered again moves its wake-ups to the root registering.
    if let Ok(queue) = hostcalls::register_shared_queue(&name) {
        state::set_wake_queue(Some((queue, root)));
    }
    // A wake-up sent to a root gone would be lost: the next one is sent.
    state::set_woken(false);
}

/// Root `root` is closing: if it is the one woken, wake-ups would be lost,
/// so the work left turns the ticks fine until another root listens (at
/// its next tick, see [`listen_if_unheard`]).
pub(super) fn root_closing(root: u32) {
    if state::woken_root() == Some(root) {
        state::set_wake_queue(None);
        state::set_woken(false);
    }
}

/// Makes root `root` the one woken if none is.
pub(super) fn listen_if_unheard(root: u32, runtime: Option<&Runtime>) {
    if let (None, Some(runtime)) = (state::woken_root(), runtime) {
        listen(root, runtime);
    }
}

/// The root was woken through `queue` (or is about to do the work anyway):
/// empties it, so that the work left from now on wakes it again.
pub(super) fn woken(queue: Option<u32>) {
    state::set_woken(false);
    if let Some(queue) = queue {
        while let Ok(Some(_)) = hostcalls::dequeue_shared_queue(queue) {}
    }
}
