use crate::{Decision, Encoded, Limit, Nanos};

/// One limit of a multi-limit check, with its key's stored state.
#[derive(Debug, Clone, Copy)]
pub struct Check<'a> {
    /// The limit.
    pub limit: &'a Limit,
    /// The key's stored state, if any.
    pub state: Option<&'a [u8]>,
}

/// The result of deciding several limits together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MultiOutcome {
    /// True when every limit allowed.
    pub allowed: bool,
    /// One decision per check, in order.
    pub decisions: Vec<Decision>,
    /// One new state per check; all `None` when any limit denied, so a denied
    /// request consumes nothing.
    pub new_states: Vec<Option<Encoded>>,
}

/// Decides `checks` together: the request passes only if every limit allows it.
pub fn decide_all(checks: &[Check<'_>], now: Nanos, cost: u64) -> MultiOutcome {
    todo!("{checks:?} {now} {cost}")
}

/// The index of the decision closest to exhaustion (the one to report in headers).
pub fn most_restrictive(decisions: &[Decision]) -> Option<usize> {
    todo!("{decisions:?}")
}
