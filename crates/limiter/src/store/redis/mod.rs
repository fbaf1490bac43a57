//! The shared store: Redis or Redis Cluster, one Lua script per check.
//!
//! The script (`decide.lua`) runs the six algorithms with sluice-core's integer
//! arithmetic, in **microseconds** (Lua numbers are doubles; nanoseconds since
//! the epoch do not fit in 53 bits, microseconds do), and reads the clock from
//! the server's `TIME`, so every limiter instance agrees on "now" (and, in
//! delay mode, on each request's wait). Each key expires when its state is
//! back to full.
//!
//! Every limit key gets its own hash tag (`sluice:{domain/key|algorithm|window}`),
//! so load spreads over a cluster's slots. On a single server a check is one
//! script call. On a cluster a check is one script call per slot, run
//! concurrently; when one slot denies, the slots that admitted are refunded
//! (`refund` mode of the same script, each limit its own weight). Between the admit and the refund
//! another request may see the briefly consumed quota and be denied: a refund
//! race errs on the side of limiting, never of admitting too much.
//!
//! A concurrency limit's key is a hash of its holders (`permits` in the
//! script's header); a check decides it with the rate limits of its slot in
//! the same call, and a slot's refund gives its permits back (a release).
//! `POST /v1/permits` is one call of the script's `permits` mode per slot,
//! and `POST /v1/charge` one call of its `adjust` mode per slot
//! (`adjust.rs`).

mod adjust;
mod cluster;
mod script;

use super::connect::{connect, explain, is_auth_error, Conn};
pub use super::connect::{ConnectError, ConnectOptions, SentinelTarget, Target};
use super::jitter::jittered;
use super::memory::refuse_batched_permits;
use super::{AdjustItem, PermitsOutcome, Store, StoreError, StoreItem, StoreStatus, Verdict};
use crate::metrics::Histogram;
use cluster::{by_slot, granted, merge, with_leases_back};
use futures_util::future::join_all;
pub use script::{parse_permits_reply, parse_reply, ScriptOutcome, DECIDE_LUA};
use script::{push_item_args, Packaged};
use sluice_core::{Decision, Holder, Nanos};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
/// The Redis-backed store.
pub struct RedisStore {
    conn: OnceLock<Conn>,
    code: Packaged,
    /// Set once the server turned out to have no functions (before Redis 7).
    eval_only: AtomicBool,
    timeout: Duration,
    cluster: bool,
    /// `redis`, `redis_cluster` or `redis_sentinel`.
    kind: &'static str,
    /// Last known state: the last call or probe got an answer.
    up: AtomicBool,
    /// Time of each decision call that got an answer.
    round_trips: Histogram,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("connected", &self.conn.get().is_some())
            .field("timeout", &self.timeout)
            .field("cluster", &self.cluster)
            .finish()
    }
}

/// The Redis key holding the state `id`: the whole id is the hash tag.
pub fn redis_key(id: &str) -> String {
    format!("sluice:{{{id}}}")
}

/// The Redis Cluster slot of `key` (CRC16 of its hash tag, modulo 16384).
pub fn hash_slot(key: &[u8]) -> u16 {
    let tagged = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = key.get(open.saturating_add(1)..)?;
            let close = rest.iter().position(|&b| b == b'}')?;
            rest.get(..close).filter(|t| !t.is_empty())
        })
        .unwrap_or(key);
    crc16::State::<crc16::XMODEM>::calculate(tagged) % 16384
}
/// Whether `e` is the server saying `what` (case-insensitive).
fn missing(e: &redis::RedisError, what: &str) -> bool {
    e.to_string().to_ascii_lowercase().contains(what)
}
impl RedisStore {
    fn empty(target: &Target, timeout: Duration) -> RedisStore {
        RedisStore {
            conn: OnceLock::new(),
            code: Packaged::new(),
            eval_only: AtomicBool::new(false),
            timeout,
            cluster: matches!(target, Target::Cluster(_)),
            kind: match target {
                Target::Single(_) => "redis",
                Target::Cluster(_) => "redis_cluster",
                Target::Sentinel(_) => "redis_sentinel",
            },
            up: AtomicBool::new(false),
            round_trips: Histogram::default(),
        }
    }

    /// A store for `target` that connects in the background (retrying every
    /// `timeout` at least) and answers [`StoreError::Unavailable`] until then.
    pub fn start(target: Target, timeout: Duration) -> Arc<RedisStore> {
        Self::start_with(target, ConnectOptions::default(), timeout)
    }

    /// As [`RedisStore::start`], with TLS material and a password.
    pub fn start_with(target: Target, opts: ConnectOptions, timeout: Duration) -> Arc<RedisStore> {
        let store = Arc::new(Self::empty(&target, timeout));
        let weak = Arc::downgrade(&store);
        tokio::spawn(async move {
            let mut wait = Duration::from_millis(100);
            loop {
                match connect(&target, &opts, timeout).await {
                    Ok(conn) => {
                        if let Some(store) = weak.upgrade() {
                            let _ = store.conn.set(conn);
                            store.mark(None);
                            spawn_prober(&store);
                        }
                        return;
                    }
                    Err(e) => {
                        let e = explain("redis", &e);
                        crate::warn_throttled!(error = %e, "cannot connect to redis; retrying");
                        if weak.strong_count() == 0 {
                            return;
                        }
                        tokio::time::sleep(jittered(wait)).await;
                        wait = wait.saturating_mul(2).min(Duration::from_secs(2));
                    }
                }
            }
        });
        store
    }

    /// Connects once at start-up: `Err` when retrying cannot help (refused
    /// credentials, a certificate that does not verify, a bad URL), so the
    /// limiter refuses to start with that message; a store already
    /// connected when Redis answers; otherwise (Redis down) a store that
    /// keeps connecting in the background and answers
    /// [`StoreError::Unavailable`] meanwhile.
    pub async fn open(
        target: Target,
        opts: ConnectOptions,
        timeout: Duration,
    ) -> Result<Arc<RedisStore>, ConnectError> {
        match connect(&target, &opts, timeout).await {
            Ok(conn) => {
                let store = Arc::new(Self::empty(&target, timeout));
                let _ = store.conn.set(conn);
                store.mark(None);
                spawn_prober(&store);
                Ok(store)
            }
            Err(e) => {
                let e = explain("redis", &e);
                if e.fatal {
                    return Err(e);
                }
                tracing::warn!(error = %e, "redis is not answering yet; serving per failure mode until it does");
                Ok(Self::start_with(target, opts, timeout))
            }
        }
    }

    /// Connects at once (for tests and tools), failing when Redis is down.
    pub async fn connect_now(target: Target, timeout: Duration) -> Result<RedisStore, StoreError> {
        Self::connect_now_with(target, ConnectOptions::default(), timeout).await
    }

    /// As [`RedisStore::connect_now`], with TLS material and a password.
    pub async fn connect_now_with(
        target: Target,
        opts: ConnectOptions,
        timeout: Duration,
    ) -> Result<RedisStore, StoreError> {
        let conn = connect(&target, &opts, timeout)
            .await
            .map_err(|e| StoreError::Unavailable(explain("redis", &e).message))?;
        let store = Self::empty(&target, timeout);
        let _ = store.conn.set(conn);
        store.mark(None);
        Ok(store)
    }

    /// Records whether the store answered (`None`) or not, logging a change.
    fn mark(&self, error: Option<&StoreError>) {
        let up = error.is_none();
        if self.up.swap(up, Ordering::Relaxed) != up {
            match error {
                None => tracing::info!(store = self.kind, "store up"),
                Some(e) => tracing::warn!(store = self.kind, error = %e, "store down"),
            }
        }
    }

    /// Redis: the primary followed now (Sentinel only).
    pub fn sentinel_primary(&self) -> Option<String> {
        match self.conn.get() {
            Some(Conn::Sentinel(f)) => f.primary(),
            _ => None,
        }
    }

    /// Decides with `EVALSHA` even when the server has functions (as with
    /// servers before Redis 7); for tests of that path.
    pub fn use_eval_only(&self) {
        self.eval_only.store(true, Ordering::Relaxed);
    }

    fn conn(&self) -> Result<Conn, StoreError> {
        self.conn
            .get()
            .cloned()
            .ok_or_else(|| StoreError::Unavailable("not connected yet".into()))
    }

    async fn bounded<T>(
        &self,
        fut: impl std::future::Future<Output = redis::RedisResult<T>>,
    ) -> Result<T, StoreError> {
        match tokio::time::timeout(self.timeout, fut).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) if is_auth_error(&e) => {
                let err = StoreError::Auth(e.to_string());
                self.mark(Some(&err));
                Err(err)
            }
            Ok(Err(e)) => {
                let err = StoreError::Unavailable(e.to_string());
                if e.is_io_error()
                    || e.is_connection_dropped()
                    || e.is_connection_refusal()
                    || e.is_unrecoverable_error()
                {
                    self.mark(Some(&err));
                }
                Err(err)
            }
            Err(_) => {
                if let Some(conn) = self.conn.get() {
                    conn.timed_out();
                }
                Err(StoreError::Timeout)
            }
        }
    }

    /// True when Redis answers `PING` within the timeout.
    pub async fn ping(&self) -> bool {
        let Ok(mut conn) = self.conn() else {
            return false;
        };
        let cmd = redis::cmd("PING");
        match self.bounded(conn.query::<String>(&cmd)).await {
            Ok(_) => {
                self.mark(None);
                true
            }
            Err(e) => {
                self.mark(Some(&e));
                false
            }
        }
    }

    /// Reads fields `keys` of the hash `hash` (one value per key, `None` when absent).
    pub async fn hmget(
        &self,
        hash: &str,
        keys: &[&str],
    ) -> Result<Vec<Option<String>>, StoreError> {
        let mut conn = self.conn()?;
        let mut cmd = redis::cmd("HMGET");
        cmd.arg(hash);
        for k in keys {
            cmd.arg(*k);
        }
        self.bounded(conn.query(&cmd)).await
    }

    /// Runs the decision code with `keys` and `args`: `FCALL`, loading the
    /// library when the server lacks it, or `EVALSHA` on servers without
    /// functions.
    async fn call(&self, keys: &[String], args: &[String]) -> redis::RedisResult<Vec<i64>> {
        let mut conn = self.conn().map_err(|e| {
            redis::RedisError::from((redis::ErrorKind::IoError, "redis", e.to_string()))
        })?;
        if !self.eval_only.load(Ordering::Relaxed) {
            let mut fcall = redis::cmd("FCALL");
            fcall
                .arg(&self.code.function)
                .arg(keys.len())
                .arg(keys)
                .arg(args);
            match conn.query::<Vec<i64>>(&fcall).await {
                Ok(v) => return Ok(v),
                Err(e) if missing(&e, "function not found") => {
                    let mut load = redis::cmd("FUNCTION");
                    load.arg("LOAD").arg("REPLACE").arg(&self.code.library);
                    match conn.query::<redis::Value>(&load).await {
                        Ok(_) => return conn.query(&fcall).await,
                        Err(e) if missing(&e, "unknown command") => {}
                        Err(e) => return Err(e),
                    }
                }
                Err(e) if missing(&e, "unknown command") => {}
                Err(e) => return Err(e),
            }
            tracing::info!("redis has no functions; deciding with EVALSHA");
            self.eval_only.store(true, Ordering::Relaxed);
        }
        let mut inv = self.code.script.prepare_invoke();
        inv.key(keys).arg(args);
        conn.eval(&inv).await
    }

    /// Runs the decision code on `requests` identical requests over `items`
    /// (all in one slot). `now_us` overrides the server clock (tests);
    /// `None` uses `TIME`.
    pub async fn run_check(
        &self,
        items: &[&StoreItem],
        requests: u32,
        now_us: Option<u64>,
    ) -> Result<ScriptOutcome, StoreError> {
        self.run_script("check", items, None, requests, now_us)
            .await
    }

    /// Gives back what `requests` requests of a check admitted at
    /// `admitted_us` took from `items` (all in one slot; each its own
    /// weight, plus its [`StoreItem::lease`] units granted), and decides
    /// them again for one request without consuming (what a denied check
    /// reports for its admitting limits). `now_us` overrides the server
    /// clock (tests).
    pub async fn run_refund(
        &self,
        items: &[&StoreItem],
        admitted_us: u64,
        requests: u32,
        now_us: Option<u64>,
    ) -> Result<ScriptOutcome, StoreError> {
        self.run_script("refund", items, Some(admitted_us), requests, now_us)
            .await
    }

    /// One call of the decision code in `mode` (`check` or `refund`).
    async fn run_script(
        &self,
        mode: &str,
        items: &[&StoreItem],
        admitted_us: Option<u64>,
        requests: u32,
        now_us: Option<u64>,
    ) -> Result<ScriptOutcome, StoreError> {
        let keys: Vec<String> = items.iter().map(|i| redis_key(i.id())).collect();
        let mut args = vec![
            mode.to_string(),
            now_us.map(|t| t.to_string()).unwrap_or_default(),
            admitted_us.map(|t| t.to_string()).unwrap_or_default(),
            requests.to_string(),
        ];
        for item in items {
            push_item_args(&mut args, item);
        }
        let started = Instant::now();
        let reply = self.bounded(self.call(&keys, &args)).await?;
        self.round_trips.observe(started.elapsed());
        self.mark(None);
        parse_reply(&reply, items.len())
    }

    /// One call of the script's `permits` mode for `holder` over `keys`
    /// (state ids in one slot, each with the units to release and whether
    /// to renew): per key, whether the holder held permits to release and
    /// to renew. `now_us` overrides the server clock (tests).
    pub async fn run_permits(
        &self,
        holder: Holder,
        ttl: Nanos,
        keys: &[(&str, u64, bool)],
        now_us: Option<u64>,
    ) -> Result<Vec<(bool, bool)>, StoreError> {
        let names: Vec<String> = keys.iter().map(|(id, _, _)| redis_key(id)).collect();
        let mut args = vec![
            "permits".to_string(),
            now_us.map(|t| t.to_string()).unwrap_or_default(),
            holder.to_string(),
            (ttl / script::MICROS).to_string(),
        ];
        for (_, back, again) in keys {
            args.push(back.to_string());
            args.push(if *again { "1" } else { "0" }.to_string());
        }
        let started = Instant::now();
        let reply = self.bounded(self.call(&names, &args)).await?;
        self.round_trips.observe(started.elapsed());
        self.mark(None);
        parse_permits_reply(&reply, keys.len())
    }

    /// A check on a cluster: one call per slot, run concurrently; the slots
    /// that admitted more than another are refunded the difference.
    async fn check_cluster(
        &self,
        items: &[StoreItem],
        requests: u32,
    ) -> Result<Verdict, StoreError> {
        let groups = by_slot(items);
        let mut outcomes = join_all(groups.iter().map(|g| self.run_check(g, requests, None))).await;
        // A request is admitted when every slot admitted it: the fewest
        // that any slot admitted (none when a slot failed).
        let admitted = outcomes
            .iter()
            .map(|o| o.as_ref().map_or(0, |o| o.admitted))
            .min()
            .unwrap_or(0);
        if admitted < requests {
            self.refund_excess(&groups, &mut outcomes, admitted).await;
        }
        merge(items, &groups, outcomes, admitted, requests)
    }

    /// Gives back what each slot admitted beyond `admitted`, so a refused
    /// request consumes nothing (see the module documentation for the
    /// race), and reports the refunded state, as the other stores do.
    async fn refund_excess(
        &self,
        groups: &[Vec<&StoreItem>],
        outcomes: &mut [Result<ScriptOutcome, StoreError>],
        admitted: u32,
    ) {
        let refunds = groups
            .iter()
            .zip(outcomes.iter())
            .enumerate()
            .filter_map(|(i, (g, o))| match o {
                Ok(o) if o.admitted > admitted => {
                    let back = with_leases_back(g, &o.leased);
                    let extra = o.admitted - admitted;
                    Some(async move {
                        let refs: Vec<&StoreItem> = back.iter().collect();
                        (i, self.run_refund(&refs, o.now_us, extra, None).await)
                    })
                }
                _ => None,
            });
        for (i, r) in join_all(refunds).await {
            match r {
                Ok(refunded) => {
                    if let Some(Ok(o)) = outcomes.get_mut(i) {
                        o.decisions = refunded.decisions;
                    }
                }
                Err(e) => tracing::warn!(
                    error = %e,
                    "refund failed; quota stays consumed until it refills"
                ),
            }
        }
    }
}

impl Store for RedisStore {
    async fn check_batch(&self, items: &[StoreItem], requests: u32) -> Result<Verdict, StoreError> {
        refuse_batched_permits(items, requests)?;
        let requests = requests.max(1);
        if self.cluster {
            return self.check_cluster(items, requests).await;
        }
        let refs: Vec<&StoreItem> = items.iter().collect();
        let out = self.run_check(&refs, requests, None).await?;
        Ok(Verdict {
            allowed: out.allowed,
            admitted: out.admitted,
            decisions: out.decisions,
            delays: out.delays,
            capacity_denied: false,
            leased: granted(out.leased),
        })
    }

    async fn permits(
        &self,
        holder: Holder,
        ttl: Nanos,
        release: &[(String, u64)],
        renew: &[String],
    ) -> Result<PermitsOutcome, StoreError> {
        // Each key once (an id may be both released and renewed), by slot.
        let mut keys: BTreeMap<&str, (u64, bool)> = BTreeMap::new();
        for (id, hits) in release {
            let e = keys.entry(id.as_str()).or_default();
            e.0 = e.0.saturating_add(*hits);
        }
        for id in renew {
            keys.entry(id.as_str()).or_default().1 = true;
        }
        let mut slots: BTreeMap<u16, Vec<(&str, u64, bool)>> = BTreeMap::new();
        for (id, (back, again)) in keys {
            let slot = if self.cluster {
                hash_slot(redis_key(id).as_bytes())
            } else {
                0
            };
            slots.entry(slot).or_default().push((id, back, again));
        }
        let calls = slots
            .values()
            .map(|group| self.run_permits(holder, ttl, group, None));
        let mut found: BTreeMap<&str, (bool, bool)> = BTreeMap::new();
        for (group, reply) in slots.values().zip(join_all(calls).await) {
            for (&(id, _, _), flags) in group.iter().zip(reply?) {
                found.insert(id, flags);
            }
        }
        let flag =
            |id: &str, which: fn((bool, bool)) -> bool| found.get(id).is_some_and(|&f| which(f));
        Ok(PermitsOutcome {
            released: release.iter().map(|(id, _)| flag(id, |f| f.0)).collect(),
            renewed: renew.iter().map(|id| flag(id, |f| f.1)).collect(),
        })
    }

    async fn adjust(&self, items: &[AdjustItem]) -> Result<Vec<Decision>, StoreError> {
        self.adjust_items(items).await
    }

    async fn healthy(&self) -> bool {
        self.ping().await
    }

    fn status(&self) -> StoreStatus {
        StoreStatus {
            up: self.up.load(Ordering::Relaxed),
            keys: None,
            blocked: None,
        }
    }

    fn kind(&self) -> &'static str {
        self.kind
    }

    fn round_trips(&self) -> Option<&Histogram> {
        Some(&self.round_trips)
    }
}

/// How often a connected store is probed (`PING`), so that `/metrics` and
/// the log know it is down or back without traffic.
const PROBE_EVERY: Duration = Duration::from_secs(1);

fn spawn_prober(store: &Arc<RedisStore>) {
    let weak = Arc::downgrade(store);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(PROBE_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let Some(store) = weak.upgrade() else { return };
            store.ping().await;
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_follow_redis_cluster() {
        // Values from the Redis Cluster specification and `CLUSTER KEYSLOT`.
        assert_eq!(hash_slot(b"foo"), 12182);
        // CRC16/XMODEM check value 0x31C3, below 16384.
        assert_eq!(hash_slot(b"123456789"), 0x31C3);
        assert_eq!(hash_slot(b"{user1000}.following"), hash_slot(b"user1000"));
        // An empty tag hashes the whole key.
        assert_eq!(hash_slot(b"foo{}{bar}"), {
            crc16::State::<crc16::XMODEM>::calculate(b"foo{}{bar}") % 16384
        });
        assert_eq!(hash_slot(b"foo{{bar}}zap"), hash_slot(b"{bar"));
    }

    #[test]
    fn every_limit_key_is_its_own_tag() {
        let key = redis_key("demo/per-ip/0/203.0.113.7|gcra|60000");
        assert_eq!(key, "sluice:{demo/per-ip/0/203.0.113.7|gcra|60000}");
        assert_eq!(
            hash_slot(key.as_bytes()),
            hash_slot(b"demo/per-ip/0/203.0.113.7|gcra|60000")
        );
    }
}
