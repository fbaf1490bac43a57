use crate::algo::Mode;
use crate::{decide_in, decide_reserving, Decision, Encoded, Limit, Nanos};

/// One limit of a multi-limit check, with its key's stored state and the
/// request's weight under this limit.
#[derive(Debug, Clone, Copy)]
pub struct Check<'a> {
    /// The limit.
    pub limit: &'a Limit,
    /// The key's stored state, if any.
    pub state: Option<&'a [u8]>,
    /// The request's weight under this limit (rules may weigh one request
    /// differently); 0 asks without consuming, as in [`decide`](crate::decide).
    pub cost: u64,
    /// Units that must still fit beside `cost` for the request to pass (a
    /// priority class's reserve for the classes above it), not consumed:
    /// see [`decide_reserving`](crate::decide_reserving). 0: none.
    pub reserve: u64,
}

impl<'a> Check<'a> {
    /// A check of `limit` at `cost` on `state`, without reserve.
    #[inline]
    pub fn new(limit: &'a Limit, state: Option<&'a [u8]>, cost: u64) -> Check<'a> {
        Check {
            limit,
            state,
            cost,
            reserve: 0,
        }
    }
}

/// The result of deciding several limits together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MultiOutcome {
    /// True when every limit allowed.
    pub allowed: bool,
    /// One decision per check, in order. When the check is denied, the
    /// limits that would have admitted report `allowed: true` with what
    /// remains *without* this request (nothing was consumed).
    pub decisions: Vec<Decision>,
    /// One new state per check. When any limit denied, nothing is consumed:
    /// every entry is `None` except a state rebased after a clock step (see
    /// [`Outcome::new_state`](crate::Outcome::new_state)), which consumes nothing.
    pub new_states: Vec<Option<Encoded>>,
}

impl MultiOutcome {
    /// Delay mode: how long to hold the request, the longest of the limits'
    /// delays (each limit's state is updated as if the request arrived after
    /// its own delay).
    pub fn delay(&self) -> Nanos {
        self.decisions.iter().map(|d| d.delay).max().unwrap_or(0)
    }
}

/// Decides `checks` together, each at its own cost (and with its reserve):
/// the request passes only if every limit allows it, and a denied request
/// consumes nothing.
pub fn decide_all(checks: &[Check<'_>], now: Nanos) -> MultiOutcome {
    let mode = |cost: u64| if cost == 0 { Mode::Peek } else { Mode::Commit };
    let mut outcomes: Vec<_> = checks
        .iter()
        .map(|c| match c.reserve {
            0 => decide_in(c.limit, c.state, now, c.cost, mode(c.cost)),
            reserve => decide_reserving(c.limit, c.state, now, c.cost, reserve),
        })
        .collect();
    let allowed = outcomes.iter().all(|o| o.decision.allowed);
    if !allowed {
        for (o, c) in outcomes.iter_mut().zip(checks) {
            if o.decision.allowed && c.cost != 0 {
                // Decide again without consuming: what remains is unchanged.
                *o = decide_in(c.limit, c.state, now, c.cost, Mode::Peek);
            }
        }
    }
    let (decisions, new_states) = outcomes
        .into_iter()
        .map(|o| (o.decision, o.new_state))
        .unzip();
    MultiOutcome {
        allowed,
        decisions,
        new_states,
    }
}

/// The index of the decision closest to exhaustion (the one to report in
/// headers): a denial with the longest `retry_after` first, otherwise the
/// fewest `remaining` (then the longest `reset`). `None` for no decisions.
pub fn most_restrictive(decisions: &[Decision]) -> Option<usize> {
    decisions
        .iter()
        .enumerate()
        // Reversed so that ties go to the first decision.
        .rev()
        .max_by(|(_, a), (_, b)| {
            (!a.allowed)
                .cmp(&!b.allowed)
                .then(a.retry_after.cmp(&b.retry_after))
                .then(b.remaining.cmp(&a.remaining))
                .then(a.reset.cmp(&b.reset))
        })
        .map(|(i, _)| i)
}
