//! What a request is decided with: the plan, shared data and metrics.

use crate::config::Plan;

/// The plan, shared data and metrics a request is decided with.
pub(crate) struct Env<'a, S: ?Sized, M: ?Sized> {
    pub(crate) plan: &'a Plan,
    pub(crate) store: &'a S,
    pub(crate) metrics: &'a M,
}

impl<'a, S: ?Sized, M: ?Sized> Env<'a, S, M> {
    pub(crate) fn new(plan: &'a Plan, store: &'a S, metrics: &'a M) -> Self {
        Env {
            plan,
            store,
            metrics,
        }
    }
}
