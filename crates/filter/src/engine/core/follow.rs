//! What the core asks of a global limit's kind about its item in a call:
//! the one interface between the answer's handling ([`super::finish`]) and
//! the kinds, implemented by the registry's follow-up
//! ([`crate::engine::kinds::FollowUp`]), so that no core module names a kind.

use super::call::{Batch, Item};
use super::env::Env;
use super::tally::{Refusal, Tally};
use crate::headers::Reported;
use crate::local::SharedStore;
use crate::metrics::MetricSink;
use sluice_core::{Decision, Nanos};
use sluice_wire::LimitResult;

/// What a kind does around the check of one of its limits.
pub(crate) trait FollowUp: Sized + std::fmt::Debug {
    /// How long the permits its call takes count after a renewal, if it
    /// takes permits.
    fn permit_ttl(&self) -> Option<Nanos>;

    /// Its call takes permits: the call carries the holder, and its answer
    /// must be read even if the request is gone, to give them back.
    fn takes_permits(&self) -> bool {
        self.permit_ttl().is_some()
    }

    /// How long a request it denies over its limit may wait for a permit
    /// instead (a concurrency limit in delay mode).
    fn wait(&self) -> Option<Nanos>;

    /// It may share its call with requests that have the same check.
    fn coalesces(&self) -> bool;

    /// Once its enforcing call admitted, the limiter counted the request
    /// in it alone: a request held in delay mode gives it back if its
    /// client leaves (limits that share calls or leases are left out).
    fn counted_alone(&self) -> bool;

    /// Settles, once its call is answered (`answer`: `None` when the call
    /// failed), what it asked for besides its decision. Returns the units
    /// this Envoy now holds for its key, which count as remaining.
    fn settle<S, M>(
        &self,
        env: &Env<'_, S, M>,
        item: &Item<Self>,
        answer: Option<&LimitResult>,
        now: Nanos,
    ) -> Option<u64>
    where
        S: SharedStore + ?Sized,
        M: MetricSink + ?Sized;

    /// Notes, in an enforcing call, what it reports once it admitted
    /// (`reported`: its own decision).
    fn admitted(&self, reported: Reported, tally: &mut Tally);

    /// What its denial in an enforcing call (`reported`) denies the request
    /// with.
    fn refusal(&self, reported: Reported) -> Refusal;

    /// Its denial may be retried by borrowing in a second call.
    fn may_borrow(&self) -> bool;

    /// Adds to the second call, where elastic limits borrow, what it checks
    /// there given its answer in the first, with `weight`.
    fn again(item: Item<Self>, answer: &LimitResult, weight: u64, batch: &mut Batch<Self>);

    /// Whether it can serve the request without the limiter (its call
    /// failed).
    fn serves_unanswered(&self) -> bool;

    /// Serves the request without the limiter, consuming `weight` (in the
    /// tally's undo log); `None` when it cannot after all (nothing taken).
    fn serve_unanswered<S, M>(
        &self,
        env: &Env<'_, S, M>,
        item: &Item<Self>,
        weight: u64,
        tally: &mut Tally,
    ) -> Option<Decision>
    where
        S: SharedStore + ?Sized,
        M: MetricSink + ?Sized;

    /// Ends what it asked for: the request is denied before its call is
    /// made.
    fn cancel<S, M>(&self, env: &Env<'_, S, M>, item: &Item<Self>)
    where
        S: SharedStore + ?Sized,
        M: MetricSink + ?Sized;
}
