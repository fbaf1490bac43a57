//! Command-line flags; each can also come from an environment variable.

use crate::store::StoreSpec;
use clap::{Parser, ValueEnum};
use std::net::SocketAddr;
use std::path::PathBuf;

/// Sluice's global rate-limit service.
#[derive(Debug, Clone, Parser)]
#[command(name = "sluice-limiter", version, about)]
pub struct Args {
    /// Address to listen on (HTTP/1.1 and h2c; over TLS with `--tls-cert`).
    #[arg(long, env = "SLUICE_LISTEN", default_value = "127.0.0.1:8081")]
    pub listen: SocketAddr,

    /// Where state lives: `memory`; `redis://[user:password@]host:port[/db]`
    /// (`rediss://` for TLS); `redis-cluster://host:port,host:port`
    /// (`rediss-cluster://`); or
    /// `redis+sentinel://host:port,host:port/master-name[/db]`
    /// (`rediss+sentinel://`).
    #[arg(long, env = "SLUICE_STORE", default_value = "memory")]
    pub store: StoreSpec,

    /// Redis TLS: PEM file of the CA certificates to trust (default: the
    /// system's roots).
    #[arg(long = "redis-ca", env = "SLUICE_REDIS_CA")]
    pub redis_ca: Option<PathBuf>,

    /// Redis mutual TLS: PEM file of the client certificate (chain);
    /// needs `--redis-key`.
    #[arg(long = "redis-cert", env = "SLUICE_REDIS_CERT", requires = "redis_key")]
    pub redis_cert: Option<PathBuf>,

    /// Redis mutual TLS: PEM file of the client certificate's private key.
    #[arg(long = "redis-key", env = "SLUICE_REDIS_KEY", requires = "redis_cert")]
    pub redis_key: Option<PathBuf>,

    /// Redis password read from this file (trailing newline ignored); it
    /// replaces the URL's. `SLUICE_REDIS_PASSWORD` gives it from the
    /// environment instead (the file wins when both are set).
    #[arg(long = "redis-password-file", env = "SLUICE_REDIS_PASSWORD_FILE")]
    pub redis_password_file: Option<PathBuf>,

    /// A Redis password given by envoyproxy/ratelimit's `REDIS_AUTH` (see
    /// [`crate::ratelimit_env`]); never a flag.
    #[arg(skip)]
    pub redis_password: Option<String>,

    /// Log filter (`error`, `warn`, `info`, `debug`, `trace`, or a tracing directive).
    #[arg(long = "log-level", env = "SLUICE_LOG", default_value = "info")]
    pub log_level: String,

    /// Log lines as `text` or `json` (one JSON object per line).
    #[arg(long = "log-format", env = "SLUICE_LOG_FORMAT", default_value = "text")]
    pub log_format: LogFormat,

    /// On SIGTERM or SIGINT: stop accepting at once, finish the checks in
    /// flight, and exit after at most this many ms even if some are not done.
    #[arg(
        long = "shutdown-timeout-ms",
        env = "SLUICE_SHUTDOWN_TIMEOUT_MS",
        default_value_t = 10_000
    )]
    pub shutdown_timeout_ms: u64,

    /// JSON file of per-key limits: `{"domain/key": {"requests":..,"window_ms":..,"burst":..}}`.
    #[arg(long, env = "SLUICE_OVERRIDES")]
    pub overrides: Option<PathBuf>,

    /// Also read per-key limits from Redis hashes `sluice:overrides:<domain>`
    /// on the store's Redis.
    #[arg(long = "redis-overrides", env = "SLUICE_REDIS_OVERRIDES")]
    pub redis_overrides: bool,

    /// Read the override hashes from this Redis (`redis://host:port[/db]`)
    /// or Redis Cluster (`redis-cluster://host:port,...`) instead, whatever
    /// the store; implies `--redis-overrides`.
    #[arg(long = "overrides-redis", env = "SLUICE_OVERRIDES_REDIS")]
    pub overrides_redis: Option<StoreSpec>,

    /// How long an answer from the Redis override hash is reused, in ms.
    #[arg(
        long = "overrides-ttl-ms",
        env = "SLUICE_OVERRIDES_TTL_MS",
        default_value_t = 10_000
    )]
    pub overrides_ttl_ms: u64,

    /// Memory store: most keys held at once.
    #[arg(
        long = "max-keys",
        env = "SLUICE_MAX_KEYS",
        default_value_t = 1_000_000
    )]
    pub max_keys: usize,

    /// Memory store: number of shards.
    #[arg(long, env = "SLUICE_SHARDS", default_value_t = 64)]
    pub shards: usize,

    /// Threads serving requests (0: one per CPU the process may use): as
    /// many connection threads (see `spread`), and as many workers
    /// for the rest. Give the limiter as many as it has cores to itself:
    /// extra threads on a shared core cost context switches and tail latency.
    #[arg(long, env = "SLUICE_THREADS", default_value_t = 0)]
    pub threads: usize,

    /// Redis: longest wait for an answer before `/v1/check` answers 503, in ms.
    #[arg(
        long = "store-timeout-ms",
        env = "SLUICE_STORE_TIMEOUT_MS",
        default_value_t = 100
    )]
    pub store_timeout_ms: u64,

    /// Also serve `/metrics` and the health probes (`/healthz`, `/readyz`,
    /// `/livez`, `/healthcheck`) on this address, in plain HTTP, and nothing
    /// else: a scrape port apart from the API, as Envoy Gateway's ratelimit
    /// deployment scrapes `:19001`.
    #[arg(long = "metrics-listen", env = "SLUICE_METRICS_LISTEN")]
    pub metrics_listen: Option<SocketAddr>,

    /// With `--tls-cert`: keep `--listen` in plain HTTP, TLS on the gRPC
    /// listeners only (for probes and scrapers that speak plain HTTP, as
    /// Envoy Gateway probes its ratelimit deployment's `:8080/healthcheck`).
    #[arg(long = "plain-http", env = "SLUICE_PLAIN_HTTP", requires = "tls_cert")]
    pub plain_http: bool,

    /// Also serve Envoy's rate limit service protocol
    /// (`envoy.service.ratelimit.v3.RateLimitService`, gRPC over h2c, or TLS
    /// with `--tls-cert`) on this address; needs `--descriptors`.
    #[arg(long = "grpc-listen", env = "SLUICE_GRPC_LISTEN")]
    pub grpc_listen: Option<SocketAddr>,

    /// Also serve Envoy's rate limit quota service
    /// (`envoy.service.rate_limit_quota.v3.RateLimitQuotaService`, gRPC over
    /// h2c, for the `rate_limit_quota` filter) on this address; needs
    /// `--descriptors`.
    #[arg(long = "rlqs-listen", env = "SLUICE_RLQS_LISTEN")]
    pub rlqs_listen: Option<SocketAddr>,

    /// RLQS: the `assignment_time_to_live` of every assignment, in ms (at
    /// least a second; keep it above Envoy's `reporting_interval`). Also the
    /// window over which the Envoys reporting a bucket are counted.
    #[arg(
        long = "rlqs-assignment-ttl-ms",
        env = "SLUICE_RLQS_ASSIGNMENT_TTL_MS",
        default_value_t = 10_000,
        value_parser = clap::value_parser!(u64).range(1_000..)
    )]
    pub rlqs_assignment_ttl_ms: u64,

    /// RLQS: a bucket with no request reported for this long, in ms, is
    /// abandoned (Envoy forgets it until its next request).
    #[arg(
        long = "rlqs-abandon-after-ms",
        env = "SLUICE_RLQS_ABANDON_AFTER_MS",
        default_value_t = 300_000
    )]
    pub rlqs_abandon_after_ms: u64,

    /// The RLS descriptor configuration: a YAML file in envoyproxy/ratelimit's
    /// format (one domain), or a directory of them. Re-read when it changes
    /// and on SIGHUP. Serves `--grpc-listen` and `--rlqs-listen`.
    #[arg(long, env = "SLUICE_DESCRIPTORS")]
    pub descriptors: Option<PathBuf>,

    /// A domain named in several `--descriptors` files is one domain, the
    /// files' descriptors joined (envoyproxy/ratelimit's
    /// `MERGE_DOMAIN_CONFIG=true`); a descriptor in two of them is refused.
    /// Off: a domain in two files is refused.
    #[arg(long = "merge-domains", env = "SLUICE_MERGE_DOMAINS")]
    pub merge_domains: bool,

    /// The descriptors from an xDS server (`--descriptors-xds URL`).
    #[command(flatten)]
    pub xds: crate::rls::xds::XdsArgs,

    /// Connections open at once on each listener (HTTP and gRPC); more are
    /// closed as they arrive. Keep it below the process's file descriptor
    /// limit (`ulimit -n`), which the Redis connections share.
    #[arg(
        long = "max-connections",
        env = "SLUICE_MAX_CONNECTIONS",
        default_value_t = 10_000,
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    pub max_connections: u32,

    /// A connection with no byte read or written for this long is closed,
    /// in ms (HTTP/2 peers, Envoy's included, are pinged every 20 s and so
    /// stay open while they answer).
    #[arg(
        long = "idle-timeout-ms",
        env = "SLUICE_IDLE_TIMEOUT_MS",
        default_value_t = 60_000,
        value_parser = clap::value_parser!(u64).range(1..)
    )]
    pub idle_timeout_ms: u64,

    /// The longest time to receive one request, in ms: HTTP/1 headers slower
    /// than this close the connection (as does an HTTP/1.1 keep-alive
    /// connection waiting longer for its next request); a check or RLS call
    /// whose body is not complete by then is answered 408 (HTTP) or
    /// CANCELLED (gRPC).
    #[arg(
        long = "request-timeout-ms",
        env = "SLUICE_REQUEST_TIMEOUT_MS",
        default_value_t = 10_000,
        value_parser = clap::value_parser!(u64).range(1..)
    )]
    pub request_timeout_ms: u64,

    /// TLS on every listener (HTTP and gRPC): PEM file of the server's
    /// certificate chain, its certificate first; needs `--tls-key`. Re-read
    /// when it changes and on SIGHUP.
    #[arg(long = "tls-cert", env = "SLUICE_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,

    /// PEM file of the private key of `--tls-cert` (PKCS#8, PKCS#1 or SEC1).
    #[arg(long = "tls-key", env = "SLUICE_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,

    /// Mutual TLS: PEM file of the CA certificates that client certificates
    /// must chain to; a client without one is refused at the handshake.
    /// Needs `--tls-cert`.
    #[arg(
        long = "tls-client-ca",
        env = "SLUICE_TLS_CLIENT_CA",
        requires = "tls_cert"
    )]
    pub tls_client_ca: Option<PathBuf>,

    /// How often the TLS files are checked for changes, in ms.
    #[arg(
        long = "tls-poll-ms",
        env = "SLUICE_TLS_POLL_MS",
        default_value_t = 1_000
    )]
    pub tls_poll_ms: u64,

    /// How often the descriptor files are checked for changes, in ms.
    #[arg(
        long = "descriptors-poll-ms",
        env = "SLUICE_DESCRIPTORS_POLL_MS",
        default_value_t = 1_000
    )]
    pub descriptors_poll_ms: u64,

    /// Every RLS descriptor in quota mode (envoyproxy/ratelimit's
    /// `QUOTA_MODE`): a call is over the limit only when all its
    /// descriptors are. Needs `--grpc-listen`.
    #[arg(
        long = "quota-mode",
        env = "SLUICE_QUOTA_MODE",
        requires = "grpc_listen"
    )]
    pub quota_mode: bool,

    /// Answer `OK` to every RLS call over the limit, each descriptor's
    /// status unchanged, and count it (envoyproxy/ratelimit's
    /// `SHADOW_MODE`). Needs `--grpc-listen`.
    #[arg(
        long = "shadow-mode",
        env = "SLUICE_SHADOW_MODE",
        requires = "grpc_listen"
    )]
    pub shadow_mode: bool,

    /// Serve the read-only introspection API (`GET /v1/limits`,
    /// `/v1/keys`, `/v1/top`) on the HTTP listener, count the top limited
    /// keys and show them on `/metrics`. Off: those paths answer 404.
    #[arg(long, env = "SLUICE_INTROSPECTION")]
    pub introspection: bool,

    /// How the introspection API and the metric show keys: `hashed` (the
    /// first 16 hex digits of the key's SHA-256) or `clear`.
    #[arg(
        long = "introspection-keys",
        env = "SLUICE_INTROSPECTION_KEYS",
        default_value = "hashed"
    )]
    pub introspection_keys: IntrospectionKeys,

    /// Top limited keys on `/metrics` per domain (1 to 256).
    #[arg(
        long = "top-keys",
        env = "SLUICE_TOP_KEYS",
        default_value_t = 10,
        value_parser = clap::value_parser!(u16).range(1..=256)
    )]
    pub top_keys: u16,

    /// Most domains whose top limited keys are counted (refusals in
    /// further domains are not).
    #[arg(
        long = "top-domains",
        env = "SLUICE_TOP_DOMAINS",
        default_value_t = 16,
        value_parser = clap::value_parser!(u16).range(1..)
    )]
    pub top_domains: u16,

    /// The top limited keys count refusals over two windows of this many
    /// seconds: the current one and the one before.
    #[arg(
        long = "top-window-s",
        env = "SLUICE_TOP_WINDOW_S",
        default_value_t = 300,
        value_parser = clap::value_parser!(u64).range(1..=86_400)
    )]
    pub top_window_s: u64,
}

impl Args {
    /// The connection limits of every listener.
    pub fn connection_limits(&self) -> crate::server::Limits {
        crate::server::Limits {
            max_connections: usize::try_from(self.max_connections).unwrap_or(usize::MAX),
            idle_timeout: std::time::Duration::from_millis(self.idle_timeout_ms),
            request_timeout: std::time::Duration::from_millis(self.request_timeout_ms),
        }
    }

    /// The TLS files of the listeners, when `--tls-cert` is given.
    pub fn tls_files(&self) -> Option<crate::tls::TlsFiles> {
        Some(crate::tls::TlsFiles {
            cert: self.tls_cert.clone()?,
            key: self.tls_key.clone()?,
            client_ca: self.tls_client_ca.clone(),
        })
    }

    /// How the RLQS service sends assignments.
    pub fn rlqs_settings(&self) -> crate::rlqs::service::Settings {
        crate::rlqs::service::Settings {
            ttl: std::time::Duration::from_millis(self.rlqs_assignment_ttl_ms),
            abandon_after: std::time::Duration::from_millis(self.rlqs_abandon_after_ms),
        }
    }
}

/// How keys are shown by the introspection API and the metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum IntrospectionKeys {
    /// As the checks name them.
    Clear,
    /// The first 16 hex digits of their SHA-256.
    Hashed,
}

impl IntrospectionKeys {
    /// The display the summaries keep.
    pub fn display(self) -> crate::top::KeyDisplay {
        match self {
            IntrospectionKeys::Clear => crate::top::KeyDisplay::Clear,
            IntrospectionKeys::Hashed => crate::top::KeyDisplay::Hashed,
        }
    }
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line (tracing's JSON format).
    Json,
}
