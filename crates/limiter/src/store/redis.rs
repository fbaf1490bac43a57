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

use super::connect::{connect, explain, is_auth_error, jittered, Conn};
pub use super::connect::{ConnectError, ConnectOptions, SentinelTarget, Target};
use super::{Store, StoreError, StoreItem, StoreStatus, Verdict};
use crate::metrics::Histogram;
use futures_util::future::join_all;
use redis::Script;
use sluice_core::{Algorithm, Decision, Denial, Nanos};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// The decision code: a Lua chunk returning `main(KEYS, ARGV)`; see the
/// module documentation. The store runs it after defining `CODE`, each
/// algorithm's name mapped to its [`Algorithm::code`].
pub const DECIDE_LUA: &str = include_str!("decide.lua");

/// The decision code as it runs: [`DECIDE_LUA`] after `CODE`, a table of
/// every algorithm's name and [`Algorithm::code`], so that the script and
/// sluice-core number the algorithms alike.
fn lua_source() -> String {
    let codes: Vec<String> = Algorithm::ALL
        .iter()
        .map(|a| format!("{} = {}", a.name(), a.code()))
        .collect();
    format!("local CODE = {{{}}}\n{DECIDE_LUA}", codes.join(", "))
}

/// The decision code packaged for Redis: as a function library (Redis 7+;
/// its closures are built once, not on every call) and as an EVAL script
/// for older servers.
#[derive(Debug)]
struct Packaged {
    /// `FUNCTION LOAD` text.
    library: String,
    /// The function to `FCALL`; named after a hash of the code, so
    /// limiters of different versions sharing a Redis never clash.
    function: String,
    /// The EVAL form.
    script: Script,
}

impl Packaged {
    fn new() -> Packaged {
        let source = lua_source();
        // FNV-1a: only to tell versions of the code apart.
        let hash = source.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        let function = format!("sluice_{hash:016x}");
        // Libraries may not touch globals such as `math` while loading, so
        // the code is built on the first call and kept.
        let library = format!(
            "#!lua name={function}\nlocal function build()\n{source}\nend\n\
             local main\n\
             redis.register_function('{function}', function(keys, args)\n\
             if not main then main = build() end\n\
             return main(keys, args)\n\
             end)\n"
        );
        let script = Script::new(&format!(
            "local function build()\n{source}\nend\nreturn build()(KEYS, ARGV)\n"
        ));
        Packaged {
            library,
            function,
            script,
        }
    }
}

/// Nanoseconds per microsecond, the script's time unit.
const MICROS: u64 = 1_000;

/// Values the script returns per limit.
const FIELDS_PER_LIMIT: usize = 8;

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

/// Appends one item's script arguments (times in microseconds).
fn push_item_args(args: &mut Vec<String>, item: &StoreItem) {
    let limit = &item.limit;
    args.extend([
        limit.algorithm.code().to_string(),
        limit.requests.to_string(),
        (limit.window / MICROS).to_string(),
        limit.burst.to_string(),
        limit.precision.to_string(),
        limit.soft_percent.to_string(),
        item.hits.to_string(),
        // Rounded up, so that a delay never ends before the request conforms.
        limit
            .max_delay
            .map(|d| d.div_ceil(MICROS).to_string())
            .unwrap_or_default(),
        item.lease.to_string(),
        item.returned.to_string(),
        // Ages come in whole milliseconds: exact in microseconds.
        (item.returned_age / MICROS).to_string(),
    ]);
}

/// Whether `e` is the server saying `what` (case-insensitive).
fn missing(e: &redis::RedisError, what: &str) -> bool {
    e.to_string().to_ascii_lowercase().contains(what)
}

/// What one script call decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScriptOutcome {
    /// True when every request of the call was admitted by every limit
    /// (and states were written).
    pub allowed: bool,
    /// The script's clock, microseconds since the epoch.
    pub now_us: u64,
    /// How many of the call's requests were admitted (the first ones);
    /// 0 for a refund.
    pub admitted: u32,
    /// One decision per key, of the last request decided (see
    /// [`Verdict::decisions`]), times in nanoseconds (whole microseconds).
    pub decisions: Vec<Decision>,
    /// Delay mode: the wait of each admitted request, in nanoseconds (whole
    /// microseconds); empty when none waits.
    pub delays: Vec<Nanos>,
    /// Leases: the units granted per key (0 when none, or not admitted).
    pub leased: Vec<u64>,
}

fn denial_from_code(code: i64) -> Option<Denial> {
    match code {
        1 => Some(Denial::OverLimit),
        2 => Some(Denial::CostExceedsCapacity),
        3 => Some(Denial::DelayTooLong),
        _ => None,
    }
}

fn to_u64(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

/// Reads the script's reply: `allowed, now_us, admitted, delays`, then per
/// limit `allowed, limit, remaining, reset_us, retry_after_us, denial,
/// delay_us, leased`, then `delays` waits (0, or one per admitted request).
pub fn parse_reply(reply: &[i64], n: usize) -> Result<ScriptOutcome, StoreError> {
    let (allowed, now_us, admitted, waits, rest) = match reply {
        [a, t, k, w, rest @ ..] => (*a == 1, to_u64(*t), to_u64(*k), to_u64(*w), rest),
        _ => return Err(StoreError::Protocol("short reply".into())),
    };
    let per_limit = n.saturating_mul(FIELDS_PER_LIMIT);
    let waits = usize::try_from(waits).unwrap_or(usize::MAX);
    let expected = per_limit.saturating_add(waits).saturating_add(4);
    if reply.len() != expected {
        return Err(StoreError::Protocol(format!(
            "script returned {} values, expected {expected}",
            reply.len()
        )));
    }
    let admitted = u32::try_from(admitted)
        .map_err(|_| StoreError::Protocol(format!("admitted {admitted}")))?;
    if waits != 0 && u32::try_from(waits) != Ok(admitted) {
        return Err(StoreError::Protocol(format!(
            "{waits} delays for {admitted} admitted requests"
        )));
    }
    let (limits, delays) = rest.split_at(per_limit.min(rest.len()));
    let leased = limits
        .chunks_exact(FIELDS_PER_LIMIT)
        .map(|c| c.last().copied().map_or(0, to_u64))
        .collect();
    let decisions = limits
        .chunks_exact(FIELDS_PER_LIMIT)
        .map(|c| match c {
            [a, l, rem, reset, retry, denial, delay, _] => Decision {
                allowed: *a == 1,
                limit: to_u64(*l),
                remaining: to_u64(*rem),
                reset: to_u64(*reset).saturating_mul(MICROS),
                retry_after: to_u64(*retry).saturating_mul(MICROS),
                delay: to_u64(*delay).saturating_mul(MICROS),
                denial: denial_from_code(*denial),
            },
            _ => Decision {
                allowed: false,
                limit: 0,
                remaining: 0,
                reset: 0,
                retry_after: 0,
                delay: 0,
                denial: None,
            },
        })
        .collect();
    Ok(ScriptOutcome {
        allowed,
        now_us,
        admitted,
        decisions,
        delays: delays
            .iter()
            .map(|&d| to_u64(d).saturating_mul(MICROS))
            .collect(),
        leased,
    })
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
        let keys: Vec<String> = items.iter().map(|i| redis_key(&i.id)).collect();
        let mut args = vec![
            "check".to_string(),
            now_us.map(|t| t.to_string()).unwrap_or_default(),
            String::new(),
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

    /// Gives back what `requests` requests of a check admitted at
    /// `admitted_us` took from `items` (all in one slot; each its own
    /// weight, plus its [`StoreItem::lease`] units granted), and decides them again for one request without consuming
    /// (what a denied check reports for its admitting limits). `now_us`
    /// overrides the server clock (tests).
    pub async fn run_refund(
        &self,
        items: &[&StoreItem],
        admitted_us: u64,
        requests: u32,
        now_us: Option<u64>,
    ) -> Result<ScriptOutcome, StoreError> {
        let keys: Vec<String> = items.iter().map(|i| redis_key(&i.id)).collect();
        let mut args = vec![
            "refund".to_string(),
            now_us.map(|t| t.to_string()).unwrap_or_default(),
            admitted_us.to_string(),
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
}

impl Store for RedisStore {
    async fn check_batch(&self, items: &[StoreItem], requests: u32) -> Result<Verdict, StoreError> {
        let requests = requests.max(1);
        if !self.cluster {
            let refs: Vec<&StoreItem> = items.iter().collect();
            let out = self.run_check(&refs, requests, None).await?;
            return Ok(Verdict {
                allowed: out.allowed,
                admitted: out.admitted,
                decisions: out.decisions,
                delays: out.delays,
                capacity_denied: false,
                leased: granted(out.leased),
            });
        }
        // Group by slot, keeping each item's position.
        let mut groups: BTreeMap<u16, Vec<usize>> = BTreeMap::new();
        for (i, item) in items.iter().enumerate() {
            groups
                .entry(hash_slot(redis_key(&item.id).as_bytes()))
                .or_default()
                .push(i);
        }
        let groups: Vec<Vec<&StoreItem>> = groups
            .into_values()
            .map(|idx| idx.iter().filter_map(|&i| items.get(i)).collect())
            .collect();
        let mut outcomes = join_all(groups.iter().map(|g| self.run_check(g, requests, None))).await;
        // A request is admitted when every slot admitted it: the fewest
        // that any slot admitted (none when a slot failed).
        let admitted = outcomes
            .iter()
            .map(|o| o.as_ref().map_or(0, |o| o.admitted))
            .min()
            .unwrap_or(0);
        if admitted < requests {
            // Give back what the slots admitted beyond that, so a refused
            // request consumes nothing; see the module documentation for
            // the race.
            let refunds =
                groups
                    .iter()
                    .zip(&outcomes)
                    .enumerate()
                    .filter_map(|(i, (g, o))| match o {
                        Ok(o) if o.admitted > admitted => {
                            let extra = o.admitted - admitted;
                            // The slot's leases go back with the request.
                            let back: Vec<StoreItem> = g
                                .iter()
                                .zip(o.leased.iter().chain(std::iter::repeat(&0)))
                                .map(|(item, &k)| StoreItem {
                                    lease: k,
                                    returned: 0,
                                    returned_age: 0,
                                    ..(*item).clone()
                                })
                                .collect();
                            Some(async move {
                                let refs: Vec<&StoreItem> = back.iter().collect();
                                (i, self.run_refund(&refs, o.now_us, extra, None).await)
                            })
                        }
                        _ => None,
                    });
            for (i, r) in join_all(refunds).await {
                match r {
                    // Report the refunded state, as the other stores do.
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
        let mut decisions: Vec<Option<Decision>> = vec![None; items.len()];
        let mut leased = vec![0u64; items.len()];
        let mut delays: Vec<Nanos> = Vec::new();
        for (g, o) in groups.iter().zip(outcomes) {
            let o = o?;
            let granted = o.leased.iter().chain(std::iter::repeat(&0));
            for ((item, d), &k) in g.iter().zip(o.decisions).zip(granted) {
                let Some(p) = items.iter().position(|x| std::ptr::eq(x, *item)) else {
                    continue;
                };
                if let Some(slot) = decisions.get_mut(p) {
                    *slot = Some(d);
                }
                // Refunded with the request when another slot denied.
                if let (Some(l), true) = (leased.get_mut(p), admitted == requests) {
                    *l = k;
                }
            }
            // Each admitted request waits for the longest of its slots.
            if !o.delays.is_empty() {
                delays.resize(admitted as usize, 0);
                for (all, d) in delays.iter_mut().zip(o.delays) {
                    *all = (*all).max(d);
                }
            }
        }
        if delays.iter().all(|&d| d == 0) {
            delays.clear();
        }
        let decisions: Option<Vec<Decision>> = decisions.into_iter().collect();
        let decisions = decisions.ok_or_else(|| StoreError::Protocol("missing decision".into()))?;
        Ok(Verdict {
            allowed: admitted == requests,
            admitted,
            decisions,
            delays,
            capacity_denied: false,
            leased: granted(leased),
        })
    }

    async fn healthy(&self) -> bool {
        self.ping().await
    }

    fn status(&self) -> StoreStatus {
        StoreStatus {
            up: self.up.load(Ordering::Relaxed),
            keys: None,
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

/// The per-item grants of a verdict: empty when none was granted.
fn granted(leased: Vec<u64>) -> Vec<u64> {
    if leased.iter().any(|&k| k > 0) {
        leased
    } else {
        Vec::new()
    }
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

    #[test]
    fn replies_are_checked() {
        assert!(parse_reply(&[], 0).is_err());
        assert!(parse_reply(&[1, 5, 1, 0], 1).is_err());
        let out = parse_reply(&[0, 7, 0, 0, 0, 10, 0, 5, 6, 1, 0, 0], 1).unwrap();
        assert!(!out.allowed);
        assert_eq!((out.now_us, out.admitted), (7, 0));
        let d = out.decisions[0];
        assert_eq!((d.limit, d.reset, d.retry_after), (10, 5_000, 6_000));
        assert_eq!(d.denial, Some(Denial::OverLimit));
        let out = parse_reply(&[1, 7, 1, 0, 1, 10, 0, 300, 0, 0, 200, 0], 1).unwrap();
        let d = out.decisions[0];
        assert_eq!((d.allowed, d.delay, d.denial), (true, 200_000, None));
        let out = parse_reply(&[0, 7, 0, 0, 0, 10, 0, 5, 1_200, 3, 0, 0], 1).unwrap();
        assert_eq!(out.decisions[0].denial, Some(Denial::DelayTooLong));
        // A batch: two of three admitted, with their waits.
        let out = parse_reply(&[0, 7, 2, 2, 0, 10, 0, 5, 6, 3, 0, 0, 0, 100], 1).unwrap();
        assert_eq!((out.admitted, &out.delays[..]), (2, &[0, 100_000][..]));
        // Delays that are not one per admitted request, or missing.
        assert!(parse_reply(&[0, 7, 2, 1, 0, 10, 0, 5, 6, 3, 0, 0, 0], 1).is_err());
        assert!(parse_reply(&[0, 7, 2, 2, 0, 10, 0, 5, 6, 3, 0, 0, 0], 1).is_err());
        // A lease: 4 units granted on the second limit.
        let reply = [
            1, 7, 1, 0, 1, 10, 9, 100, 0, 0, 0, 0, 1, 10, 5, 500, 0, 0, 0, 4,
        ];
        let out = parse_reply(&reply, 2).unwrap();
        assert_eq!(out.leased, [0, 4]);
        assert_eq!(out.decisions[1].remaining, 5);
    }

    #[test]
    fn the_library_is_named_after_its_code() {
        let p = Packaged::new();
        assert!(p.function.starts_with("sluice_"));
        assert!(p
            .library
            .starts_with(&format!("#!lua name={}\n", p.function)));
        assert_eq!(Packaged::new().function, p.function);
    }
}
