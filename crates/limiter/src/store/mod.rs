//! Where key states live, behind one contract: [`Store`].
//!
//! [`memory::MemoryStore`] keeps them in this process (one instance);
//! [`redis::RedisStore`] keeps them in Redis or a Redis Cluster (any number of
//! instances). `--store` picks one as an [`AnyStore`]. `tests/conformance.rs`
//! holds the one suite every store passes.

pub mod memory;
pub mod redis;

use sluice_core::{Decision, Limit, Nanos};
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
/// key); Redis expires each key with `PX` set to its `reset`.
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
/// * The memory store never fails.
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
}

impl<S: Store> Store for Arc<S> {
    fn check_batch(
        &self,
        items: &[StoreItem],
        requests: u32,
    ) -> impl Future<Output = Result<Verdict, StoreError>> + Send {
        S::check_batch(self, items, requests)
    }

    fn healthy(&self) -> impl Future<Output = bool> + Send {
        S::healthy(self)
    }
}

/// One limit to decide, with the identity of its stored state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreItem {
    /// The state's identity (`domain/key|algorithm|window_ms`).
    pub id: String,
    /// The limit.
    pub limit: Limit,
    /// The request's weight under this limit.
    pub hits: u64,
    /// Leases: when the check is admitted, the most units to take beyond
    /// `hits` (0: none; only in a check of one request).
    pub lease: u64,
    /// Leases: units to give back before deciding (0: none; only in a
    /// check of one request).
    pub returned: u64,
    /// How long before the check the `returned` units were consumed, on
    /// the store's clock.
    pub returned_age: Nanos,
}

impl StoreItem {
    /// An item weighing `hits`, without lease or returns.
    pub fn new(id: String, limit: Limit, hits: u64) -> StoreItem {
        StoreItem {
            id,
            limit,
            hits,
            lease: 0,
            returned: 0,
            returned_age: 0,
        }
    }

    /// Whether this item takes a lease or gives units back.
    pub fn leases(&self) -> bool {
        self.lease != 0 || self.returned != 0
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
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::Timeout => f.write_str("store timed out"),
            StoreError::Unavailable(m) => write!(f, "store unavailable: {m}"),
            StoreError::Protocol(m) => write!(f, "store protocol error: {m}"),
        }
    }
}

impl std::error::Error for StoreError {}

/// Which store to use, as given by `--store`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreSpec {
    /// `memory`: the embedded store.
    Memory,
    /// `redis://host:port[/db]`: one Redis server.
    Redis(String),
    /// `redis-cluster://host:port,host:port`: a Redis Cluster, by seed nodes.
    RedisCluster(Vec<String>),
}

impl std::str::FromStr for StoreSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s == "memory" {
            Ok(StoreSpec::Memory)
        } else if s.starts_with("redis://") || s.starts_with("rediss://") {
            Ok(StoreSpec::Redis(s.to_string()))
        } else if let Some(rest) = s.strip_prefix("redis-cluster://") {
            let nodes: Vec<String> = rest
                .split(',')
                .map(str::trim)
                .filter(|n| !n.is_empty())
                .map(|n| format!("redis://{n}"))
                .collect();
            if nodes.is_empty() {
                return Err("redis-cluster:// needs at least one host:port".into());
            }
            Ok(StoreSpec::RedisCluster(nodes))
        } else {
            Err(format!(
                "unknown store {s:?} (expected memory, redis://host:port or redis-cluster://host:port,host:port)"
            ))
        }
    }
}

impl StoreSpec {
    /// Where to connect for a Redis spec; `None` for `memory`.
    pub fn redis_target(&self) -> Option<redis::Target> {
        match self {
            StoreSpec::Memory => None,
            StoreSpec::Redis(url) => Some(redis::Target::Single(url.clone())),
            StoreSpec::RedisCluster(nodes) => Some(redis::Target::Cluster(nodes.clone())),
        }
    }
}

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

    async fn healthy(&self) -> bool {
        match self {
            AnyStore::Memory(m) => m.healthy().await,
            AnyStore::Redis(r) => r.healthy().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_specs() {
        assert_eq!("memory".parse::<StoreSpec>(), Ok(StoreSpec::Memory));
        assert_eq!(
            "redis://127.0.0.1:6379".parse::<StoreSpec>(),
            Ok(StoreSpec::Redis("redis://127.0.0.1:6379".into()))
        );
        assert_eq!(
            "redis-cluster://a:1, b:2".parse::<StoreSpec>(),
            Ok(StoreSpec::RedisCluster(vec![
                "redis://a:1".into(),
                "redis://b:2".into()
            ]))
        );
        assert!("redis-cluster://".parse::<StoreSpec>().is_err());
        assert!("postgres://x".parse::<StoreSpec>().is_err());
    }
}
