//! Where key states live, behind one contract: [`Store`].
//!
//! [`memory::MemoryStore`] keeps them in this process (one instance);
//! [`redis::RedisStore`] keeps them in Redis or a Redis Cluster (any number of
//! instances). `--store` picks one as an [`AnyStore`]. `tests/conformance.rs`
//! holds the one suite every store passes.

pub mod connect;
mod id;
mod item;
mod jitter;
pub mod memory;
pub mod redis;
mod single;
mod spec;

pub use id::{permits_id, state_id};
pub use item::{AdjustItem, PermitItem, PermitsOutcome, RateItem, StoreItem};
use sluice_core::{Decision, Holder, Nanos};
pub use spec::{redact, StoreSpec};
use std::fmt;
use std::future::Future;
use std::sync::Arc;

/// The contract of a store: how it decides a check, reads time, forgets
/// state, bounds memory and fails.
///
/// # Deciding
///
/// * **All limits of a check are decided together**, with sluice-core's
///   algorithms, each at its item's weight ([`StoreItem::hits`]): the check
///   is allowed only when every limit allows it, and the [`Verdict`] carries
///   one decision per item, in order.
/// * **Batches** ([`Store::check_batch`]): a check may carry `n` identical
///   requests (a filter coalescing the requests for one key that arrive
///   while a check is in flight). They are decided one by one in arrival
///   order, each all-or-nothing across the limits as above, at the one
///   clock reading: the result is exactly that of `n` checks in a row
///   (sluice-core's `decide_batch`). [`Verdict::admitted`] says how many
///   passed (the first ones; a refused request consumes nothing, and at one
///   instant every request after a refused one is refused too),
///   [`Verdict::decisions`] describe the last request decided, and
///   [`Verdict::delays`] the wait of each admitted one. A check of one
///   request ([`Store::check`]) is a batch of 1.
/// * **Delay mode** (a limit with `max_delay`, GCRA and leaky bucket): a
///   request that conforms within `max_delay` is admitted with the wait in
///   its decision's `delay`, and its state is written as sluice-core writes
///   it (counted as admitted at the time it conforms); one that would wait
///   longer is denied ([`Denial::DelayTooLong`](sluice_core::Denial)). The
///   wait is measured on the store's clock (below). In a batch each
///   admitted request has its own wait, the later ones longer.
/// * **Leases** (an item's [`StoreItem::lease`], in a check of one
///   request): once the check is admitted, each such item also takes the
///   largest `k` in `0..=lease` such that the request's weight plus `k`
///   fits now, as one decision of cost `hits + k` (sluice-core's
///   `decide_all_leased`), debited at once with the request;
///   [`Verdict::leased`] says how many, and the item's decision describes
///   the state after the request and its lease. A denied check grants
///   nothing. **Returns** ([`StoreItem::returned`]) are given back before
///   deciding, as consumed [`StoreItem::returned_age`] before the store's
///   clock reading, with sluice-core's `refund_at` (never more permissive
///   than if they had not been consumed), whether or not the check is then
///   admitted: returning is not consuming. On a Redis Cluster each return
///   goes to its key's slot; a slot refunded because another denied gives
///   back its lease with the request.
/// * **Reserves** (a rate item's `reserve`, priority classes): a request
///   passes that limit only while its weight plus the reserve fits now,
///   and consumes its weight alone (sluice-core's `decide_reserving`); in a
///   batch, the requests after which the reserve still fits. A refusal is
///   reported as the wait until weight and reserve fit.
/// * **Concurrency limits** ([`StoreItem::Permits`], in a check of one
///   request): decided with the others, all or nothing, by sluice-core's
///   `permits::acquire` at the item's weight for its holder; the decision
///   reported is `acquire`'s (limit = the permits, remaining = the free
///   units, `retry_after` a second on refusal). A concurrency limit that
///   refuses means no rate limit of the check consumes, and a rate limit
///   that refuses means no permit is taken. A batch (`requests` above 1)
///   carrying one is not decided: [`StoreError::Protocol`].
/// * **Permits given back and renewed** ([`Store::permits`]): for one
///   holder, over a list of keys, at one clock reading, releases first
///   (`permits::release`: no more than the holder holds), then renewals
///   (`permits::renew`: a holder's permits count `ttl` from now, never
///   less than before); each key's state is read and written atomically.
/// * **Charges and refunds after the response** ([`Store::adjust`]): each
///   item applied on its own (no all or nothing: a charge is never
///   refused), each key's read-modify-write atomic, at one clock reading:
///   a charge by sluice-core's `charge` (unconditional; it may take the key
///   beyond its quota, into debt, and then checks deny until it drained,
///   their `retry_after` saying when), a refund by `refund_at` of units
///   consumed `age` before the clock reading. Each item is answered with
///   the decision of a query on its key after it (`allowed`: one more unit
///   would pass). Two items with one state id are applied in order. A
///   charge of an algorithm that carries no debt (sliding log) changes
///   nothing and is answered with the query.
/// * **A denied check consumes nothing** from any of its limits; when a
///   limit denies, the limits that would admit report what remains without
///   this request. (A state that an algorithm rebases after the clock
///   stepped back is written either way; that consumes nothing.)
/// * Each key's state is read and written atomically: however many callers
///   and limiter instances share a store, no limit admits more than its
///   quota. (On a Redis Cluster a check whose keys span slots is decided slot
///   by slot; the [`redis`] module describes the refund race, which can only
///   deny too much.)
///
/// # Time
///
/// Each check reads the clock once and decides every limit at that instant.
/// The memory store reads its [`Clock`](crate::clock::Clock) (the system
/// clock in production). Redis reads the server's `TIME` inside the script,
/// so every limiter sharing a Redis agrees on "now"; on a Redis Cluster a
/// check whose keys span slots reads it once per slot, on each slot's node.
///
/// # Expiry
///
/// A key's state goes once it would be back to full (its `reset` has
/// passed), which reads the same as no state. The memory store drops such
/// entries by sweeping (every second, and a full shard before refusing a
/// key); Redis expires each key with `PX` set to its `reset`. A concurrency
/// limit's state may go once `permits::expires_at` passes (no holder's
/// permits count any more): the memory store sweeps it then, Redis sets
/// `PX` to the latest expiry of its holders at each write. A key in debt
/// is full again only once its debt drained and its quota refilled (its
/// `reset` counts the debt): the memory store's `full_at` and Redis' `PX`
/// cover it, so debt is never forgotten early.
///
/// # Capacity
///
/// The memory store holds at most `--max-keys` keys. A check that needs a
/// new key in a full shard is **denied** (nothing consumed, `retry_after`
/// [`memory::FULL_RETRY_AFTER`], [`Verdict::capacity_denied`] set): a key is
/// never admitted uncounted. Redis has no bound of its own; its `maxmemory`
/// policy decides: with `noeviction` a full Redis fails the writes (an
/// error, below), while an evicting policy drops states, and a key whose
/// state was dropped starts from a full quota again.
///
/// # Errors and timeouts
///
/// `Err` means **no decision**: the service answers `503 {"error": "store
/// ..."}` and the filter applies its `failure_mode`, as for any failed
/// call. An error never admits a request, but it may have consumed quota:
///
/// * The memory store never fails. A charge that needs a new key in a
///   shard that stays full is not recorded (answered as a check denied for
///   lack of room would be).
/// * [`Store::adjust`]: an `Err` says nothing of which items applied (on a
///   Redis Cluster, each slot's call applies or fails on its own); a caller
///   that retries may charge or refund twice, so the filter does not.
/// * Redis: a call that fails before it is sent (not connected yet,
///   connection refused) decided nothing. After a [`StoreError::Timeout`]
///   (no answer within `--store-timeout-ms`), or a connection lost once the
///   call was sent, whether the script ran is unknown; if it did, it applied
///   whole (the script is atomic) and its limits keep what it consumed. The
///   Redis Cluster client resends a call once after a connection error or
///   its own response timeout, so such a call may have applied twice.
/// * Redis Cluster: when one slot of a check fails or denies, the slots that
///   admitted are refunded; only the failing slot's outcome stays unknown.
///   For a batch, each slot decides how many requests its limits admit;
///   the batch admits the fewest of them, and the slots that admitted more
///   are refunded the difference (none admitted when a slot fails).
pub trait Store: Send + Sync + 'static {
    /// Decides `requests` identical requests over `items` (each request at
    /// each item's weight) in arrival order; `requests` of 0 counts as 1.
    fn check_batch(
        &self,
        items: &[StoreItem],
        requests: u32,
    ) -> impl Future<Output = Result<Verdict, StoreError>> + Send;

    /// For `holder`, gives back `release` (state id, units; each id once)
    /// then renews `renew` (state ids, each once) for `ttl` from now, at
    /// one clock reading. Says, per entry, whether the holder held permits
    /// there (and gave some back, or had them renewed).
    fn permits(
        &self,
        holder: Holder,
        ttl: Nanos,
        release: &[(String, u64)],
        renew: &[String],
    ) -> impl Future<Output = Result<PermitsOutcome, StoreError>> + Send;

    /// Applies each item's charge or refund at one clock reading, each key
    /// on its own (see the contract above); one decision per item, in
    /// order: a query of the key after its adjustment.
    fn adjust(
        &self,
        items: &[AdjustItem],
    ) -> impl Future<Output = Result<Vec<Decision>, StoreError>> + Send;

    /// Decides one request over `items` together, each at its own weight:
    /// a batch of 1.
    fn check(
        &self,
        items: &[StoreItem],
    ) -> impl Future<Output = Result<Verdict, StoreError>> + Send {
        self.check_batch(items, 1)
    }

    /// True when the store answers (Redis: `PING` within the timeout).
    fn healthy(&self) -> impl Future<Output = bool> + Send;

    /// What `/metrics` reports about the store, without calling it: last
    /// known up/down, keys held. The default: up, nothing more.
    fn status(&self) -> StoreStatus {
        StoreStatus::default()
    }

    /// The kind of store for `/metrics` (see [`StoreSpec::kind`]).
    fn kind(&self) -> &'static str {
        "custom"
    }

    /// Redis: the round-trip times of its decision calls.
    fn round_trips(&self) -> Option<&crate::metrics::Histogram> {
        None
    }
}

/// The store's gauges on `/metrics`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreStatus {
    /// Last known state: the last call or probe got an answer.
    pub up: bool,
    /// Memory store: keys held now, and at most (`--max-keys`).
    pub keys: Option<(usize, usize)>,
    /// Memory store: keys a penalty box holds (a block gone within a
    /// sweep, a second, of its end).
    pub blocked: Option<usize>,
}

impl Default for StoreStatus {
    fn default() -> Self {
        StoreStatus {
            up: true,
            keys: None,
            blocked: None,
        }
    }
}

impl<S: Store> Store for Arc<S> {
    fn check_batch(
        &self,
        items: &[StoreItem],
        requests: u32,
    ) -> impl Future<Output = Result<Verdict, StoreError>> + Send {
        S::check_batch(self, items, requests)
    }

    fn permits(
        &self,
        holder: Holder,
        ttl: Nanos,
        release: &[(String, u64)],
        renew: &[String],
    ) -> impl Future<Output = Result<PermitsOutcome, StoreError>> + Send {
        S::permits(self, holder, ttl, release, renew)
    }

    fn adjust(
        &self,
        items: &[AdjustItem],
    ) -> impl Future<Output = Result<Vec<Decision>, StoreError>> + Send {
        S::adjust(self, items)
    }

    fn healthy(&self) -> impl Future<Output = bool> + Send {
        S::healthy(self)
    }

    fn status(&self) -> StoreStatus {
        S::status(self)
    }

    fn kind(&self) -> &'static str {
        S::kind(self)
    }

    fn round_trips(&self) -> Option<&crate::metrics::Histogram> {
        S::round_trips(self)
    }
}

/// The result of one check against a store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// True when every limit allowed every request; then every state was
    /// updated.
    pub allowed: bool,
    /// How many requests were admitted: the first ones in arrival order
    /// (0 or 1 for a single request).
    pub admitted: u32,
    /// One decision per item, in order: that of the last request decided,
    /// the last one when all were admitted, else the first refused one
    /// (decided after the admitted ones; the limits that would admit it
    /// report what remains without it).
    pub decisions: Vec<Decision>,
    /// Delay mode: how long to hold each admitted request, in arrival order
    /// (the longest of its limits' waits); empty when none waits.
    pub delays: Vec<Nanos>,
    /// True when the memory store denied because it was full.
    pub capacity_denied: bool,
    /// Leases: the units granted per item, in order, already debited;
    /// empty when none was granted.
    pub leased: Vec<u64>,
}

/// Why a store could not decide.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreError {
    /// No answer within the store timeout.
    Timeout,
    /// The store is unreachable or answered with an error.
    Unavailable(String),
    /// The store answered something this service cannot read.
    Protocol(String),
    /// The store refused the credentials or the user's permissions
    /// (`WRONGPASS`, `NOAUTH`, `NOPERM`).
    Auth(String),
}

impl StoreError {
    /// The reason as `/metrics` labels it: one of
    /// [`STORE_ERROR_REASONS`](crate::metrics::STORE_ERROR_REASONS), which
    /// it shows from the start.
    pub fn reason(&self) -> &'static str {
        match self {
            StoreError::Timeout => "timeout",
            StoreError::Unavailable(_) => "unavailable",
            StoreError::Protocol(_) => "protocol",
            StoreError::Auth(_) => "auth",
        }
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::Timeout => f.write_str("store timed out"),
            StoreError::Unavailable(m) => write!(f, "store unavailable: {m}"),
            StoreError::Protocol(m) => write!(f, "store protocol error: {m}"),
            StoreError::Auth(m) => write!(f, "store refused the credentials: {m}"),
        }
    }
}

impl std::error::Error for StoreError {}

/// The store chosen by `--store`.
#[derive(Debug, Clone)]
pub enum AnyStore {
    /// The embedded store.
    Memory(Arc<memory::MemoryStore>),
    /// Redis or Redis Cluster.
    Redis(Arc<redis::RedisStore>),
}

impl Store for AnyStore {
    async fn check_batch(&self, items: &[StoreItem], requests: u32) -> Result<Verdict, StoreError> {
        match self {
            AnyStore::Memory(m) => m.check_batch(items, requests).await,
            AnyStore::Redis(r) => r.check_batch(items, requests).await,
        }
    }

    async fn permits(
        &self,
        holder: Holder,
        ttl: Nanos,
        release: &[(String, u64)],
        renew: &[String],
    ) -> Result<PermitsOutcome, StoreError> {
        match self {
            AnyStore::Memory(m) => m.permits(holder, ttl, release, renew).await,
            AnyStore::Redis(r) => r.permits(holder, ttl, release, renew).await,
        }
    }

    async fn adjust(&self, items: &[AdjustItem]) -> Result<Vec<Decision>, StoreError> {
        match self {
            AnyStore::Memory(m) => m.adjust(items).await,
            AnyStore::Redis(r) => r.adjust(items).await,
        }
    }

    async fn healthy(&self) -> bool {
        match self {
            AnyStore::Memory(m) => m.healthy().await,
            AnyStore::Redis(r) => r.healthy().await,
        }
    }

    fn status(&self) -> StoreStatus {
        match self {
            AnyStore::Memory(m) => m.status(),
            AnyStore::Redis(r) => r.status(),
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            AnyStore::Memory(m) => m.kind(),
            AnyStore::Redis(r) => r.kind(),
        }
    }

    fn round_trips(&self) -> Option<&crate::metrics::Histogram> {
        match self {
            AnyStore::Memory(_) => None,
            AnyStore::Redis(r) => r.round_trips(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::StoreError;
    use crate::metrics::STORE_ERROR_REASONS;

    #[test]
    fn the_store_error_reasons_are_every_reason() {
        let errors = [
            StoreError::Timeout,
            StoreError::Unavailable(String::new()),
            StoreError::Protocol(String::new()),
            StoreError::Auth(String::new()),
        ];
        let reasons: Vec<_> = errors.iter().map(StoreError::reason).collect();
        assert_eq!(reasons, STORE_ERROR_REASONS);
    }
}
