//! Where key states live, behind one contract: [`Store`].
//!
//! [`memory::MemoryStore`] keeps them in this process (one instance);
//! [`redis::RedisStore`] keeps them in Redis or a Redis Cluster (any number of
//! instances). `--store` picks one as an [`AnyStore`]. `tests/conformance.rs`
//! holds the one suite every store passes.

pub mod connect;
mod id;
pub mod memory;
pub mod redis;

pub use id::state_id;
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
}

impl Default for StoreStatus {
    fn default() -> Self {
        StoreStatus {
            up: true,
            keys: None,
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
    /// The store refused the credentials or the user's permissions
    /// (`WRONGPASS`, `NOAUTH`, `NOPERM`).
    Auth(String),
}

impl StoreError {
    /// The reason as `/metrics` labels it: `timeout`, `unavailable`,
    /// `protocol` or `auth`.
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

/// Which store to use, as given by `--store`.
#[derive(Clone, PartialEq, Eq)]
pub enum StoreSpec {
    /// `memory`: the embedded store.
    Memory,
    /// `redis://[user:password@]host:port[/db]` (or `rediss://` for TLS):
    /// one Redis server.
    Redis(String),
    /// `redis-cluster://[user:password@]host:port,host:port` (or
    /// `rediss-cluster://` for TLS): a Redis Cluster, by seed nodes, each
    /// held as `redis[s]://[user:password@]host:port`.
    RedisCluster(Vec<String>),
    /// `redis+sentinel://[user:password@]host:port,host:port/master-name[/db]`
    /// (or `rediss+sentinel://`): the primary that Redis Sentinel names.
    RedisSentinel(redis::SentinelTarget),
}

/// `url` with the password of its user information (if any) replaced by
/// `***`, for logs.
pub fn redact(url: &str) -> String {
    let Some(scheme_end) = url.find("://").map(|i| i + 3) else {
        return url.to_string();
    };
    let (head, rest) = url.split_at(scheme_end);
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let Some(at) = rest[..authority_end].rfind('@') else {
        return url.to_string();
    };
    let user = &rest[..at];
    match user.find(':') {
        Some(colon) => format!("{head}{}:***{}", &user[..colon], &rest[at..]),
        None => url.to_string(),
    }
}

impl fmt::Debug for StoreSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for StoreSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreSpec::Memory => f.write_str("memory"),
            StoreSpec::Redis(url) => f.write_str(&redact(url)),
            StoreSpec::RedisCluster(nodes) => {
                let nodes: Vec<String> = nodes.iter().map(|n| redact(n)).collect();
                write!(f, "redis cluster {}", nodes.join(","))
            }
            StoreSpec::RedisSentinel(t) => write!(f, "{t}"),
        }
    }
}

/// Splits `user:password@rest` into the user information and the rest.
fn split_userinfo(rest: &str) -> (Option<&str>, &str) {
    let authority_end = rest.find('/').unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => (Some(&rest[..at]), &rest[at + 1..]),
        None => (None, rest),
    }
}

/// `host:port` pairs separated by commas.
fn host_ports(list: &str, what: &str) -> Result<Vec<(String, u16)>, String> {
    let mut out = Vec::new();
    for node in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let (host, port) = node
            .rsplit_once(':')
            .ok_or_else(|| format!("{what}: expected host:port, got {node:?}"))?;
        let port = port
            .parse::<u16>()
            .map_err(|_| format!("{what}: bad port in {node:?}"))?;
        out.push((host.trim_matches(['[', ']']).to_string(), port));
    }
    if out.is_empty() {
        return Err(format!("{what} needs at least one host:port"));
    }
    Ok(out)
}

/// Percent-decodes user information (`%40` for `@`, and so on).
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: Option<&u8>| b.and_then(|&b| (b as char).to_digit(16));
        match (bytes[i], hex(bytes.get(i + 1)), hex(bytes.get(i + 2))) {
            (b'%', Some(h), Some(l)) => {
                out.push(u8::try_from(h * 16 + l).unwrap_or(b'?'));
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

impl std::str::FromStr for StoreSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s == "memory" {
            Ok(StoreSpec::Memory)
        } else if s.starts_with("redis://") || s.starts_with("rediss://") {
            Ok(StoreSpec::Redis(s.to_string()))
        } else if let Some((scheme, rest)) = s
            .strip_prefix("redis-cluster://")
            .map(|r| ("redis", r))
            .or_else(|| s.strip_prefix("rediss-cluster://").map(|r| ("rediss", r)))
        {
            cluster_spec(scheme, rest)
        } else if let Some((tls, rest)) = s
            .strip_prefix("redis+sentinel://")
            .map(|r| (false, r))
            .or_else(|| s.strip_prefix("rediss+sentinel://").map(|r| (true, r)))
        {
            sentinel_spec(tls, rest)
        } else {
            Err(format!(
                "unknown store {:?} (expected memory, redis[s]://host:port, \
                 redis[s]-cluster://host:port,host:port or \
                 redis[s]+sentinel://host:port,host:port/master-name)",
                redact(s)
            ))
        }
    }
}

/// `redis[s]-cluster://[userinfo@]host:port,...`: one node URL per host.
fn cluster_spec(scheme: &str, rest: &str) -> Result<StoreSpec, String> {
    let (userinfo, hosts) = split_userinfo(rest);
    let prefix = match userinfo {
        Some(u) => format!("{scheme}://{u}@"),
        None => format!("{scheme}://"),
    };
    let nodes = host_ports(hosts.trim_end_matches('/'), &format!("{scheme}-cluster://"))?
        .into_iter()
        .map(|(h, p)| {
            if h.contains(':') {
                format!("{prefix}[{h}]:{p}")
            } else {
                format!("{prefix}{h}:{p}")
            }
        })
        .collect();
    Ok(StoreSpec::RedisCluster(nodes))
}

/// `redis[s]+sentinel://[userinfo@]host:port,.../master-name[/db]`.
fn sentinel_spec(tls: bool, rest: &str) -> Result<StoreSpec, String> {
    let what = if tls {
        "rediss+sentinel://"
    } else {
        "redis+sentinel://"
    };
    let no_master = || format!("{what}host:port,.../master-name: the master name is missing");
    let (userinfo, rest) = split_userinfo(rest);
    let (hosts, path) = rest.split_once('/').ok_or_else(no_master)?;
    let sentinels = host_ports(hosts, what)?;
    let mut parts = path.split('/').filter(|p| !p.is_empty());
    let master = parts.next().ok_or_else(no_master)?.to_string();
    let db = match parts.next() {
        Some(db) => db
            .parse::<i64>()
            .map_err(|_| format!("{what}: bad database number {db:?}"))?,
        None => 0,
    };
    let (username, password) = match userinfo {
        None => (None, None),
        Some(u) => match u.split_once(':') {
            Some((user, pass)) => (
                Some(percent_decode(user)).filter(|u| !u.is_empty()),
                Some(percent_decode(pass)),
            ),
            None => (Some(percent_decode(u)).filter(|u| !u.is_empty()), None),
        },
    };
    Ok(StoreSpec::RedisSentinel(redis::SentinelTarget {
        sentinels,
        master,
        tls,
        username,
        password,
        db,
    }))
}

impl StoreSpec {
    /// Where to connect for a Redis spec; `None` for `memory`.
    pub fn redis_target(&self) -> Option<redis::Target> {
        match self {
            StoreSpec::Memory => None,
            StoreSpec::Redis(url) => Some(redis::Target::Single(url.clone())),
            StoreSpec::RedisCluster(nodes) => Some(redis::Target::Cluster(nodes.clone())),
            StoreSpec::RedisSentinel(t) => Some(redis::Target::Sentinel(t.clone())),
        }
    }

    /// The kind of store, as `/metrics` reports it: `memory`, `redis`,
    /// `redis_cluster` or `redis_sentinel`.
    pub fn kind(&self) -> &'static str {
        match self {
            StoreSpec::Memory => "memory",
            StoreSpec::Redis(_) => "redis",
            StoreSpec::RedisCluster(_) => "redis_cluster",
            StoreSpec::RedisSentinel(_) => "redis_sentinel",
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
        assert_eq!(
            "rediss-cluster://u:p%40ss@a:1,b:2".parse::<StoreSpec>(),
            Ok(StoreSpec::RedisCluster(vec![
                "rediss://u:p%40ss@a:1".into(),
                "rediss://u:p%40ss@b:2".into()
            ]))
        );
        let spec = "redis+sentinel://app:s%40cret@s1:26379,s2:26380/mymaster/2"
            .parse::<StoreSpec>()
            .unwrap();
        assert_eq!(
            spec,
            StoreSpec::RedisSentinel(redis::SentinelTarget {
                sentinels: vec![("s1".into(), 26379), ("s2".into(), 26380)],
                master: "mymaster".into(),
                tls: false,
                username: Some("app".into()),
                password: Some("s@cret".into()),
                db: 2,
            })
        );
        assert!(!format!("{spec} {spec:?}").contains("cret"));
        assert!("redis+sentinel://s1:26379".parse::<StoreSpec>().is_err());
        assert!("redis+sentinel://s1/m".parse::<StoreSpec>().is_err());
        assert_eq!(
            redact("rediss://default:hunter2@host:6380/0"),
            "rediss://default:***@host:6380/0"
        );
        assert_eq!(redact("redis://host:6379"), "redis://host:6379");
        assert!(!format!("{:?}", "redis://u:pw@h:1".parse::<StoreSpec>()).contains("pw"));
        assert!("postgres://x".parse::<StoreSpec>().is_err());
    }
}
