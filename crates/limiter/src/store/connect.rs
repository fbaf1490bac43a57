//! Connections to Redis: one server, a Redis Cluster, or the primary that
//! Redis Sentinel names; TLS (rustls) and credentials; and what an operator
//! is told when a connection cannot be made.
//!
//! Every target keeps **one multiplexed connection** per store (calls are
//! pipelined on it, one round trip per check), and reconnects in the
//! background, never from the request path: a request while there is no
//! connection fails at once (the filter applies its failure mode), so an
//! outage does not turn into a herd of connection attempts.
//!
//! * One server: a [`Single`]: drops the connection when a call finds it
//!   gone and connects again in the background, at once and then every
//!   50 ms doubling to 250 ms (with jitter) until the server answers.
//! * Cluster: redis's cluster client (per node connections, refreshes the
//!   slot map on `MOVED` or a lost node).
//! * Sentinel: a [`Follower`]: asks the sentinels for the primary (and checks
//!   that it says `ROLE master`), keeps a connection to it, drops it when it
//!   fails or answers `READONLY` (a demoted primary), and asks again with
//!   backoff (50 ms doubling to 250 ms, with jitter) until a primary answers.

use super::jitter::jittered;
use super::single::Single;
use redis::aio::MultiplexedConnection;
use redis::cluster_async::ClusterConnection;
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{
    AsyncConnectionConfig, ClientTlsConfig, ConnectionAddr, ErrorKind, IntoConnectionInfo,
    RedisError, RedisResult, TlsCertificates, TlsMode,
};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock, Weak};
use std::time::Duration;

/// Where a store connects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// `redis[s]://[user:password@]host:port[/db]`.
    Single(String),
    /// Seed nodes of a cluster, each `redis[s]://[user:password@]host:port`.
    Cluster(Vec<String>),
    /// The primary that Redis Sentinel names.
    Sentinel(SentinelTarget),
}

/// `redis[s]+sentinel://[user:password@]host:port,.../master-name[/db]`.
#[derive(Clone, PartialEq, Eq)]
pub struct SentinelTarget {
    /// The sentinels, `(host, port)`.
    pub sentinels: Vec<(String, u16)>,
    /// The name the sentinels monitor the primary under.
    pub master: String,
    /// TLS to the sentinels and to the Redis nodes.
    pub tls: bool,
    /// ACL user on the Redis nodes.
    pub username: Option<String>,
    /// Password on the Redis nodes.
    pub password: Option<String>,
    /// Database number.
    pub db: i64,
}

impl fmt::Display for SentinelTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = if self.tls { "rediss" } else { "redis" };
        let user = match (&self.username, &self.password) {
            (Some(u), Some(_)) => format!("{u}:***@"),
            (None, Some(_)) => ":***@".to_string(),
            (Some(u), None) => format!("{u}@"),
            (None, None) => String::new(),
        };
        let hosts: Vec<String> = self
            .sentinels
            .iter()
            .map(|(h, p)| format!("{h}:{p}"))
            .collect();
        write!(
            f,
            "{scheme}+sentinel://{user}{}/{}/{}",
            hosts.join(","),
            self.master,
            self.db
        )
    }
}

impl fmt::Debug for SentinelTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// TLS material and a password for every connection of a store; the URL
/// says whether TLS is used (`rediss`).
#[derive(Clone, Default)]
pub struct ConnectOptions {
    /// PEM certificates to trust instead of the system's roots (`--redis-ca`).
    pub ca: Option<Vec<u8>>,
    /// PEM client certificate chain for mutual TLS (`--redis-cert`).
    pub client_cert: Option<Vec<u8>>,
    /// PEM private key of the client certificate (`--redis-key`).
    pub client_key: Option<Vec<u8>>,
    /// Replaces the URL's password (`SLUICE_REDIS_PASSWORD`,
    /// `--redis-password-file`).
    pub password: Option<String>,
}

impl fmt::Debug for ConnectOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnectOptions")
            .field("ca", &self.ca.is_some())
            .field("client_cert", &self.client_cert.is_some())
            .field("password", &self.password.as_ref().map(|_| "***"))
            .finish()
    }
}

impl ConnectOptions {
    /// The certificates for redis's rustls set-up; `None` for the system
    /// roots and no client certificate.
    fn certs(&self) -> Option<TlsCertificates> {
        if self.ca.is_none() && self.client_cert.is_none() {
            return None;
        }
        let client_tls = match (&self.client_cert, &self.client_key) {
            (Some(cert), Some(key)) => Some(ClientTlsConfig {
                client_cert: cert.clone(),
                client_key: key.clone(),
            }),
            _ => None,
        };
        Some(TlsCertificates {
            client_tls,
            root_cert: self.ca.clone(),
        })
    }
}

/// A connection to Redis, a Redis Cluster or Sentinel's primary; each
/// reconnects by itself.
#[derive(Clone)]
pub enum Conn {
    /// One server, reconnected in the background.
    Single(Arc<Single>),
    /// A cluster.
    Cluster(ClusterConnection),
    /// The primary Sentinel names, followed through failovers.
    Sentinel(Arc<Follower>),
}

impl Conn {
    /// Sends `cmd`.
    pub async fn query<T: redis::FromRedisValue>(&mut self, cmd: &redis::Cmd) -> RedisResult<T> {
        match self {
            Conn::Single(s) => {
                let (generation, mut c) = s.current()?;
                let r = cmd.query_async(&mut c).await;
                if let Err(e) = &r {
                    s.failed(generation, e);
                }
                r
            }
            Conn::Cluster(c) => cmd.query_async(c).await,
            Conn::Sentinel(f) => {
                let (generation, mut c) = f.current()?;
                let r = cmd.query_async(&mut c).await;
                if let Err(e) = &r {
                    f.failed(generation, e);
                }
                r
            }
        }
    }

    /// Runs a script (`EVALSHA`, loading it when missing).
    pub async fn eval(&mut self, inv: &redis::ScriptInvocation<'_>) -> RedisResult<Vec<i64>> {
        match self {
            Conn::Single(s) => {
                let (generation, mut c) = s.current()?;
                let r = inv.invoke_async(&mut c).await;
                if let Err(e) = &r {
                    s.failed(generation, e);
                }
                r
            }
            Conn::Cluster(c) => inv.invoke_async(c).await,
            Conn::Sentinel(f) => {
                let (generation, mut c) = f.current()?;
                let r = inv.invoke_async(&mut c).await;
                if let Err(e) = &r {
                    f.failed(generation, e);
                }
                r
            }
        }
    }

    /// A call timed out: Sentinel's follower asks whether the primary moved.
    pub fn timed_out(&self) {
        if let Conn::Sentinel(f) = self {
            f.wake.notify_one();
        }
    }
}

/// Whether `e` is the server refusing the credentials or the user's rights.
pub fn is_auth_error(e: &RedisError) -> bool {
    e.kind() == ErrorKind::AuthenticationFailed
        || matches!(e.code(), Some("NOAUTH" | "WRONGPASS" | "NOPERM"))
        || {
            let m = e.to_string();
            m.contains("WRONGPASS") || m.contains("NOAUTH") || m.contains("NOPERM")
        }
}

/// Whether `e` is a TLS failure (certificate, name, handshake).
fn is_tls_error(e: &RedisError) -> bool {
    let m = e.to_string().to_ascii_lowercase();
    [
        "certificate",
        "tls",
        "handshake",
        "unknownissuer",
        "notvalidforname",
        "corrupt message",
        "pem",
    ]
    .iter()
    .any(|w| m.contains(w))
}

/// What a failed connection attempt means for the operator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectError {
    /// True when retrying cannot help (bad credentials, certificate or
    /// configuration): the limiter refuses to start.
    pub fatal: bool,
    /// An explanation naming what to check.
    pub message: String,
}

impl fmt::Display for ConnectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// Explains `e`, met while connecting to `what`.
pub fn explain(what: &str, e: &RedisError) -> ConnectError {
    let raw = e.to_string();
    if is_auth_error(e) {
        return ConnectError {
            fatal: true,
            message: format!(
                "{what}: Redis refused the credentials (check the user in the URL and the password: \
                 URL, SLUICE_REDIS_PASSWORD or --redis-password-file): {raw}"
            ),
        };
    }
    if is_tls_error(e) {
        let lower = raw.to_ascii_lowercase();
        let hint = if lower.contains("notvalidforname") || lower.contains("not valid for name") {
            "the server's certificate does not name the host in the URL"
        } else if lower.contains("unknownissuer")
            || lower.contains("unknown ca")
            || lower.contains("issuer")
        {
            "the server's certificate is not signed by a trusted CA (--redis-ca, or the system roots)"
        } else if lower.contains("certificaterequired") || lower.contains("certificate required") {
            "the server wants a client certificate (--redis-cert and --redis-key)"
        } else if lower.contains("expired") {
            "a certificate has expired"
        } else if lower.contains("corrupt message") || lower.contains("invalidcontenttype") {
            "the server does not speak TLS on this port (rediss:// to a plain port?)"
        } else {
            "the TLS handshake failed"
        };
        return ConnectError {
            fatal: true,
            message: format!("{what}: TLS: {hint}: {raw}"),
        };
    }
    if e.kind() == ErrorKind::InvalidClientConfig {
        return ConnectError {
            fatal: true,
            message: format!("{what}: bad Redis configuration: {raw}"),
        };
    }
    if e.kind() == ErrorKind::MasterNameNotFoundBySentinel {
        return ConnectError {
            fatal: false,
            message: format!(
                "{what}: the sentinels name no healthy primary for this master name (a failover in \
                 progress, or a wrong name): {raw}"
            ),
        };
    }
    ConnectError {
        fatal: false,
        message: format!("{what}: cannot reach Redis: {raw}"),
    }
}

/// Whether `url` asks for TLS.
fn is_tls_url(url: &str) -> bool {
    url.starts_with("rediss://")
}

fn client_for(url: &str, opts: &ConnectOptions) -> RedisResult<redis::Client> {
    let mut info = url.into_connection_info()?;
    if let Some(pw) = &opts.password {
        info.redis.password = Some(pw.clone());
    }
    match (is_tls_url(url), opts.certs()) {
        (true, Some(certs)) => redis::Client::build_with_tls(info, certs),
        _ => redis::Client::open(info),
    }
}

/// Opens a connection to `target` (Sentinel: to the primary it names),
/// within `timeout` per step.
pub async fn connect(
    target: &Target,
    opts: &ConnectOptions,
    timeout: Duration,
) -> RedisResult<Conn> {
    let mut conn = open(target, opts, timeout).await?;
    // A server that wants a password lets an unauthenticated client
    // connect and refuses its first command: ask one now.
    let bound = timeout.max(Duration::from_secs(2));
    tokio::time::timeout(bound, conn.query::<redis::Value>(&redis::cmd("PING")))
        .await
        .map_err(|_| RedisError::from((ErrorKind::IoError, "timed out waiting for PING")))??;
    Ok(conn)
}

async fn open(target: &Target, opts: &ConnectOptions, timeout: Duration) -> RedisResult<Conn> {
    let connect_timeout = timeout.max(Duration::from_millis(500));
    let bound = timeout.max(Duration::from_secs(2));
    let timed_out = || RedisError::from((ErrorKind::IoError, "timed out connecting"));
    match target {
        Target::Single(url) => {
            let client = client_for(url, opts)?;
            let config = AsyncConnectionConfig::new()
                .set_connection_timeout(connect_timeout)
                .set_response_timeout(timeout);
            Ok(Conn::Single(Single::open(client, config, bound).await?))
        }
        Target::Cluster(nodes) => {
            let mut infos = Vec::with_capacity(nodes.len());
            for n in nodes {
                infos.push(n.as_str().into_connection_info()?);
            }
            let mut builder = redis::cluster::ClusterClientBuilder::new(infos)
                .connection_timeout(connect_timeout)
                .response_timeout(timeout)
                .retries(1);
            if let Some(pw) = &opts.password {
                builder = builder.password(pw.clone());
            }
            if nodes.first().is_some_and(|n| is_tls_url(n)) {
                builder = builder.tls(TlsMode::Secure);
                if let Some(certs) = opts.certs() {
                    builder = builder.certs(certs);
                }
            }
            let client = builder.build()?;
            let conn = tokio::time::timeout(bound, client.get_async_connection())
                .await
                .map_err(|_| timed_out())??;
            Ok(Conn::Cluster(conn))
        }
        Target::Sentinel(t) => {
            let follower = Arc::new(Follower::new(t, opts, timeout)?);
            let (addr, conn) = tokio::time::timeout(bound, follower.resolve())
                .await
                .map_err(|_| timed_out())??;
            follower.install(addr, conn);
            tokio::spawn(follow(Arc::downgrade(&follower)));
            Ok(Conn::Sentinel(follower))
        }
    }
}

/// The current connection to the primary.
struct Current {
    generation: u64,
    addr: String,
    conn: MultiplexedConnection,
}

/// Follows the primary that Redis Sentinel names: one connection at a time,
/// replaced after a failover.
pub struct Follower {
    client: tokio::sync::Mutex<SentinelClient>,
    current: RwLock<Option<Current>>,
    generations: AtomicU64,
    wake: tokio::sync::Notify,
    config: AsyncConnectionConfig,
    timeout: Duration,
    master: String,
}

/// The shortest and the longest wait between two attempts to find the primary.
const FOLLOW_MIN: Duration = Duration::from_millis(50);
const FOLLOW_MAX: Duration = Duration::from_millis(250);
/// How often the sentinels are asked whether the primary moved, besides
/// after a failed or timed-out call.
const RECHECK_EVERY: Duration = Duration::from_secs(5);

impl Follower {
    fn new(t: &SentinelTarget, opts: &ConnectOptions, timeout: Duration) -> RedisResult<Follower> {
        let addrs = t.sentinels.iter().map(|(host, port)| {
            if t.tls {
                ConnectionAddr::TcpTls {
                    host: host.clone(),
                    port: *port,
                    insecure: false,
                    tls_params: None,
                }
            } else {
                ConnectionAddr::Tcp(host.clone(), *port)
            }
        });
        let mut b =
            SentinelClientBuilder::new(addrs, t.master.clone(), SentinelServerType::Master)?
                .set_client_to_redis_db(t.db);
        if let Some(u) = &t.username {
            b = b.set_client_to_redis_username(u.clone());
        }
        if let Some(pw) = opts.password.as_ref().or(t.password.as_ref()) {
            b = b.set_client_to_redis_password(pw.clone());
        }
        if t.tls {
            b = b
                .set_client_to_redis_tls_mode(TlsMode::Secure)
                .set_client_to_sentinel_tls_mode(TlsMode::Secure);
            if let Some(certs) = opts.certs() {
                b = b
                    .set_client_to_redis_certificates(certs.clone())
                    .set_client_to_sentinel_certificates(certs);
            }
        }
        Ok(Follower {
            client: tokio::sync::Mutex::new(b.build()?),
            current: RwLock::new(None),
            generations: AtomicU64::new(0),
            wake: tokio::sync::Notify::new(),
            config: AsyncConnectionConfig::new()
                .set_connection_timeout(timeout.max(Duration::from_millis(500)))
                .set_response_timeout(timeout),
            timeout,
            master: t.master.clone(),
        })
    }

    /// The connection to the primary, with its generation.
    fn current(&self) -> RedisResult<(u64, MultiplexedConnection)> {
        let cur = self.current.read().unwrap_or_else(|e| e.into_inner());
        match cur.as_ref() {
            Some(c) => Ok((c.generation, c.conn.clone())),
            None => Err(RedisError::from((
                ErrorKind::IoError,
                "no redis primary",
                format!("the sentinels name none for {} yet", self.master),
            ))),
        }
    }

    /// The address of the primary followed now.
    pub fn primary(&self) -> Option<String> {
        let cur = self.current.read().unwrap_or_else(|e| e.into_inner());
        cur.as_ref().map(|c| c.addr.clone())
    }

    /// A call on generation `generation` failed with `e`: a connection that
    /// is gone, or a primary that was demoted, is dropped.
    fn failed(&self, generation: u64, e: &RedisError) {
        if e.is_timeout() {
            // A slow answer is no lost connection: ask whether the primary
            // moved, keep the connection meanwhile.
            self.wake.notify_one();
            return;
        }
        let lost = e.is_connection_dropped()
            || e.is_io_error()
            || e.is_unrecoverable_error()
            || e.is_connection_refusal()
            || e.kind() == ErrorKind::ReadOnly
            || e.code() == Some("READONLY");
        if !lost {
            return;
        }
        let mut cur = self.current.write().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = cur.as_ref().filter(|c| c.generation == generation) {
            tracing::warn!(primary = %c.addr, master = %self.master, error = %e,
                "lost the redis primary; asking the sentinels");
            *cur = None;
        }
        drop(cur);
        self.wake.notify_one();
    }

    fn install(&self, addr: String, conn: MultiplexedConnection) {
        let generation = self.generations.fetch_add(1, Ordering::Relaxed);
        let mut cur = self.current.write().unwrap_or_else(|e| e.into_inner());
        let moved = cur.as_ref().is_none_or(|c| c.addr != addr);
        if moved {
            tracing::info!(primary = %addr, master = %self.master, "following the redis primary");
        }
        *cur = Some(Current {
            generation,
            addr,
            conn,
        });
    }

    /// Asks the sentinels for the primary (checked with `ROLE`) and its address.
    async fn find(&self) -> RedisResult<redis::Client> {
        let mut client = self.client.lock().await;
        client.async_get_client().await
    }

    /// Finds the primary and connects to it.
    async fn resolve(&self) -> RedisResult<(String, MultiplexedConnection)> {
        let client = self.find().await?;
        let addr = client.get_connection_info().addr.to_string();
        let conn = client
            .get_multiplexed_async_connection_with_config(&self.config)
            .await?;
        Ok((addr, conn))
    }
}

/// The follower's task: reconnects when the connection is gone, and moves
/// to a new primary when the sentinels name one.
async fn follow(follower: Weak<Follower>) {
    let mut wait = FOLLOW_MIN;
    loop {
        let Some(f) = follower.upgrade() else { return };
        let bound = f.timeout.max(Duration::from_secs(1));
        if f.primary().is_none() {
            match tokio::time::timeout(bound, f.resolve()).await {
                Ok(Ok((addr, conn))) => {
                    f.install(addr, conn);
                    wait = FOLLOW_MIN;
                }
                Ok(Err(e)) => {
                    crate::warn_throttled!(master = %f.master, error = %e,
                        "no redis primary yet; asking the sentinels again");
                    drop(f);
                    tokio::time::sleep(jittered(wait)).await;
                    wait = wait.saturating_mul(2).min(FOLLOW_MAX);
                }
                Err(_) => {
                    crate::warn_throttled!(master = %f.master,
                        "no redis primary yet (timed out); asking the sentinels again");
                    drop(f);
                    tokio::time::sleep(jittered(wait)).await;
                    wait = wait.saturating_mul(2).min(FOLLOW_MAX);
                }
            }
            continue;
        }
        // Connected: wait for a failed call or the periodic check, then ask
        // whether the primary moved.
        let _ = tokio::time::timeout(RECHECK_EVERY, f.wake.notified()).await;
        let Some(before) = f.primary() else { continue };
        if let Ok(Ok(client)) = tokio::time::timeout(bound, f.find()).await {
            let addr = client.get_connection_info().addr.to_string();
            if addr != before {
                if let Ok(Ok(conn)) = tokio::time::timeout(
                    bound,
                    client.get_multiplexed_async_connection_with_config(&f.config),
                )
                .await
                {
                    f.install(addr, conn);
                }
            }
        }
        // A burst of failed calls wakes this task once per check, not per call.
        tokio::time::sleep(FOLLOW_MIN).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_are_explained() {
        let auth = RedisError::from((
            ErrorKind::AuthenticationFailed,
            "Password authentication failed",
        ));
        let e = explain("redis", &auth);
        assert!(
            e.fatal && e.message.contains("--redis-password-file"),
            "{e}"
        );
        let tls = RedisError::from(std::io::Error::other(
            "invalid peer certificate: UnknownIssuer",
        ));
        let e = explain("redis", &tls);
        assert!(e.fatal && e.message.contains("--redis-ca"), "{e}");
        let name = RedisError::from(std::io::Error::other(
            "invalid peer certificate: NotValidForName",
        ));
        assert!(explain("redis", &name).message.contains("does not name"));
        let refused = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        assert!(!explain("redis", &refused).fatal);
    }

    #[test]
    fn options_hide_the_password() {
        let o = ConnectOptions {
            password: Some("hunter2".into()),
            ..ConnectOptions::default()
        };
        assert!(!format!("{o:?}").contains("hunter2"));
        assert!(o.certs().is_none());
    }
}
