//! envoyproxy/ratelimit's environment, read as `sluice-limiter` flags: run
//! as `ratelimit` (Envoy Gateway starts `/bin/ratelimit` in its ratelimit
//! deployment) or with `SLUICE_RATELIMIT_ENV=1`, the limiter takes the
//! peer's variables (`PORT`, `GRPC_PORT`, `REDIS_URL`, `RUNTIME_ROOT`, ...)
//! and turns them into the flags that mean the same, then parses those as
//! any command line (so they are validated once, by the flags).
//!
//! A variable whose meaning Sluice does not have is refused, naming it,
//! when it would change what is limited or loosen security (a second Redis
//! for per-second limits, a Unix socket, skipping TLS verification); one
//! that only tunes the peer's own machinery (pool sizes, statsd, the local
//! cache) is ignored with a warning. `docs/guides/migrating.md` lists each.

use sluice_core::parse_duration;
use std::net::SocketAddr;

mod xds;

/// The flags the environment means, and what it says that Sluice ignores.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Translated {
    /// Command-line arguments, without the program's name.
    pub args: Vec<String>,
    /// `REDIS_AUTH`'s password (kept off the arguments).
    pub redis_password: Option<String>,
    /// One warning per variable set and ignored.
    pub ignored: Vec<String>,
}

/// Whether the process was started to read the peer's environment: run
/// as `ratelimit`, or with `SLUICE_RATELIMIT_ENV` set to `1` or `true`.
pub fn wanted(program: Option<&std::ffi::OsStr>, flag: Option<&str>) -> bool {
    let name = program
        .map(std::path::Path::new)
        .and_then(|p| p.file_name())
        .and_then(|n| n.to_str());
    name == Some("ratelimit") || matches!(flag, Some("1" | "true"))
}

/// Variables that only tune envoyproxy/ratelimit's own machinery: set, they
/// are ignored with a warning.
const IGNORED: &[(&str, &str)] = &[
    ("DEBUG_HOST", "no debug listener"),
    ("DEBUG_PORT", "no debug listener"),
    (
        "GRPC_MAX_CONNECTION_AGE",
        "connections live until idle (--idle-timeout-ms)",
    ),
    (
        "GRPC_MAX_CONNECTION_AGE_GRACE",
        "connections live until idle (--idle-timeout-ms)",
    ),
    (
        "PROMETHEUS_MAPPER_YAML",
        "Sluice's metrics have their own names",
    ),
    (
        "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS",
        "Sluice's metrics have their own names",
    ),
    ("STATSD_HOST", "no statsd: metrics are on /metrics"),
    ("STATSD_PORT", "no statsd: metrics are on /metrics"),
    ("EXTRA_TAGS", "no statsd: metrics are on /metrics"),
    ("STATS_FLUSH_INTERVAL", "metrics are read when scraped"),
    ("DISABLE_STATS", "metrics are read when scraped"),
    (
        "RUNTIME_IGNOREDOTFILES",
        "files starting with a dot are always ignored",
    ),
    (
        "RUNTIME_WATCH_ROOT",
        "the directory is polled (--descriptors-poll-ms)",
    ),
    (
        "EXPIRATION_JITTER_MAX_SECONDS",
        "keys expire when their quota is whole again",
    ),
    (
        "LOCAL_CACHE_SIZE_IN_BYTES",
        "no local over-limit cache: every call is decided by the store",
    ),
    ("NEAR_LIMIT_RATIO", "no near-limit statistics"),
    ("CACHE_KEY_PREFIX", "Sluice's store keys are its own"),
    (
        "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT",
        "a call over the limit never consumes",
    ),
    (
        "REDIS_POOL_SIZE",
        "one multiplexed connection per Redis node",
    ),
    (
        "REDIS_PIPELINE_WINDOW",
        "calls are pipelined on the multiplexed connection",
    ),
    (
        "REDIS_PIPELINE_LIMIT",
        "calls are pipelined on the multiplexed connection",
    ),
    (
        "REDIS_CLUSTER_PIPELINE_PARALLELISM",
        "calls are pipelined on the multiplexed connection",
    ),
    (
        "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION",
        "/healthz asks the store",
    ),
    (
        "REDIS_POOL_ON_EMPTY_BEHAVIOR",
        "one multiplexed connection per Redis node",
    ),
    (
        "REDIS_STARTUP_INITIAL_INTERVAL",
        "Redis is reconnected with its own backoff",
    ),
    (
        "REDIS_STARTUP_MAX_INTERVAL",
        "Redis is reconnected with its own backoff",
    ),
    (
        "REDIS_STARTUP_MAX_ELAPSED_TIME",
        "Redis is reconnected with its own backoff",
    ),
    (
        "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED",
        "the limiter listens once a configuration is loaded (unless FORCE_START_WITHOUT_INITIAL_CONFIG)",
    ),
    (
        "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL",
        "reconnections follow XDS_CLIENT_BACKOFF_INITIAL_INTERVAL and _MAX_INTERVAL",
    ),
    (
        "XDS_CLIENT_BACKOFF_RANDOM_FACTOR",
        "each delay is jittered between half of it and all of it",
    ),
    (
        "XDS_CLIENT_BACKOFF_JITTER",
        "each delay is jittered between half of it and all of it",
    ),
    ("TRACING_SERVICE_NAME", "no tracing"),
    ("TRACING_SERVICE_NAMESPACE", "no tracing"),
    ("TRACING_SERVICE_INSTANCE_ID", "no tracing"),
    ("TRACING_EXPORTER_PROTOCOL", "no tracing"),
    ("TRACING_SAMPLING_RATE", "no tracing"),
    ("OTEL_EXPORTER_OTLP_ENDPOINT", "no tracing"),
];

/// Switches that ask for what Sluice does not do: refused when true.
const REFUSED_WHEN_TRUE: &[(&str, &str)] = &[
    (
        "REDIS_PERSECOND",
        "one store serves every limit (no second Redis for per-second limits)",
    ),
    (
        "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION",
        "Redis TLS always verifies the host name",
    ),
    (
        "MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION",
        "no Memcached backend",
    ),
    (
        "LIMIT_RESPONSE_HEADERS_ENABLED",
        "set Envoy's enable_x_ratelimit_headers instead",
    ),
    (
        "RESPONSE_DYNAMIC_METADATA",
        "no dynamic metadata is returned",
    ),
    ("TRACING_ENABLED", "no tracing"),
    ("USE_DOG_STATSD", "no statsd: metrics are on /metrics"),
];

/// Variables that are refused whenever set (non-empty).
const REFUSED_WHEN_SET: &[(&str, &str)] = &[
    (
        "GRPC_UDS",
        "no Unix socket listener: set GRPC_HOST and GRPC_PORT",
    ),
    (
        "GRPC_CLIENT_TLS_SAN",
        "client certificates are checked against the CA, not a SAN",
    ),
    (
        "REDIS_SENTINEL_AUTH",
        "put the sentinels' password in REDIS_AUTH",
    ),
    ("MEMCACHE_HOST_PORT", "no Memcached backend"),
    ("MEMCACHE_SRV", "no Memcached backend"),
];

/// The peer's booleans, as Go's `strconv.ParseBool` reads them.
fn boolean(name: &str, value: &str) -> Result<bool, String> {
    match value {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Ok(false),
        other => Err(format!("{name}: expected a boolean, got {other:?}")),
    }
}

/// Reads the environment through `get`.
struct Env<'a> {
    get: &'a dyn Fn(&str) -> Option<String>,
}

impl Env<'_> {
    /// The variable, when set and not empty.
    fn value(&self, name: &str) -> Option<String> {
        (self.get)(name).filter(|v| !v.is_empty())
    }

    fn or(&self, name: &str, default: &str) -> String {
        self.value(name).unwrap_or_else(|| default.to_string())
    }

    fn flag(&self, name: &str, default: bool) -> Result<bool, String> {
        match self.value(name) {
            Some(v) => boolean(name, &v),
            None => Ok(default),
        }
    }
}

/// `host:port` (an empty host: every address) as a socket address.
fn address(names: &str, host: &str, port: &str) -> Result<String, String> {
    let host = match host {
        "" => "0.0.0.0",
        "localhost" => "127.0.0.1",
        h => h,
    };
    let text = if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    text.parse::<SocketAddr>()
        .map(|a| a.to_string())
        .map_err(|_| format!("{names}: expected an IP address and a port, got {text:?}"))
}

/// Translates envoyproxy/ratelimit's environment, read through `get`.
pub fn translate(get: &dyn Fn(&str) -> Option<String>) -> Result<Translated, String> {
    let env = Env { get };
    let mut out = Translated::default();
    for (name, why) in REFUSED_WHEN_SET {
        if env.value(name).is_some() {
            return Err(format!("{name}: not supported: {why}"));
        }
    }
    for (name, why) in REFUSED_WHEN_TRUE {
        if env.flag(name, false)? {
            return Err(format!("{name}: not supported: {why}"));
        }
    }
    for (name, why) in IGNORED {
        if env.value(name).is_some() {
            out.ignored.push(format!("{name} ignored: {why}"));
        }
    }
    listeners(&env, &mut out)?;
    if env.flag("SHADOW_MODE", false)? {
        out.args.push("--shadow-mode".into());
    }
    logging(&env, &mut out)?;
    configuration(&env, &mut out)?;
    store(&env, &mut out)?;
    metrics(&env, &mut out)?;
    Ok(out)
}

/// `HOST`/`PORT` (the HTTP API and probes), `GRPC_HOST`/`GRPC_PORT` (the
/// rate limit service) and the gRPC listener's TLS.
fn listeners(env: &Env<'_>, out: &mut Translated) -> Result<(), String> {
    let http = address(
        "HOST/PORT",
        &env.or("HOST", "0.0.0.0"),
        &env.or("PORT", "8080"),
    )?;
    let grpc = address(
        "GRPC_HOST/GRPC_PORT",
        &env.or("GRPC_HOST", "0.0.0.0"),
        &env.or("GRPC_PORT", "8081"),
    )?;
    out.args
        .extend(["--listen".into(), http, "--grpc-listen".into(), grpc]);
    if env.flag("GRPC_SERVER_USE_TLS", false)? {
        let cert = env
            .value("GRPC_SERVER_TLS_CERT")
            .ok_or("GRPC_SERVER_TLS_CERT: required with GRPC_SERVER_USE_TLS")?;
        let key = env
            .value("GRPC_SERVER_TLS_KEY")
            .ok_or("GRPC_SERVER_TLS_KEY: required with GRPC_SERVER_USE_TLS")?;
        out.args
            .extend(["--tls-cert".into(), cert, "--tls-key".into(), key]);
        // The peer reads GRPC_CLIENT_TLS_CACERT; Envoy Gateway sets
        // GRPC_SERVER_TLS_CA_CERT.
        let ca = env
            .value("GRPC_CLIENT_TLS_CACERT")
            .or_else(|| env.value("GRPC_SERVER_TLS_CA_CERT"));
        if let Some(ca) = ca {
            out.args.extend(["--tls-client-ca".into(), ca]);
        }
        // The peer's HTTP port stays plain (its probes).
        out.args.push("--plain-http".into());
    }
    Ok(())
}

/// `LOG_LEVEL` (the peer's default: warn) and `LOG_FORMAT`.
fn logging(env: &Env<'_>, out: &mut Translated) -> Result<(), String> {
    let level = env.or("LOG_LEVEL", "warn").to_ascii_lowercase();
    let level = match level.as_str() {
        "trace" | "debug" | "info" | "warn" | "error" => level,
        "warning" => "warn".into(),
        "fatal" | "panic" => "error".into(),
        other => return Err(format!("LOG_LEVEL: unknown level {other:?}")),
    };
    let format = env.or("LOG_FORMAT", "text").to_ascii_lowercase();
    if format != "text" && format != "json" {
        return Err(format!("LOG_FORMAT: expected text or json, got {format:?}"));
    }
    out.args
        .extend(["--log-level".into(), level, "--log-format".into(), format]);
    Ok(())
}

/// `CONFIG_TYPE=FILE`: the runtime directory
/// `RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY`;
/// `CONFIG_TYPE=GRPC_XDS_SOTW`: the xDS server ([`xds`]); `QUOTA_MODE`;
/// `MERGE_DOMAIN_CONFIG`.
fn configuration(env: &Env<'_>, out: &mut Translated) -> Result<(), String> {
    match env.or("CONFIG_TYPE", "FILE").as_str() {
        "FILE" => {}
        "GRPC_XDS_SOTW" => return xds::xds(env, out).and_then(|()| modes(env, out)),
        other => {
            return Err(format!(
                "CONFIG_TYPE: {other:?} is not supported (FILE and GRPC_XDS_SOTW are)"
            ))
        }
    }
    let mut dir = std::path::PathBuf::from(env.or("RUNTIME_ROOT", "/srv/runtime_data/current"));
    if let Some(sub) = env.value("RUNTIME_SUBDIRECTORY") {
        dir.push(sub);
    }
    dir.push(env.or("RUNTIME_APPDIRECTORY", "config"));
    out.args
        .extend(["--descriptors".into(), dir.display().to_string()]);
    modes(env, out)
}

/// `QUOTA_MODE` and `MERGE_DOMAIN_CONFIG`, whatever the source.
fn modes(env: &Env<'_>, out: &mut Translated) -> Result<(), String> {
    if env.flag("QUOTA_MODE", false)? {
        out.args.push("--quota-mode".into());
    }
    if env.flag("MERGE_DOMAIN_CONFIG", false)? {
        out.args.push("--merge-domains".into());
    }
    Ok(())
}

/// `BACKEND_TYPE`, `REDIS_TYPE`, `REDIS_URL`, `REDIS_AUTH`, `REDIS_TLS*`,
/// `REDIS_TIMEOUT`.
fn store(env: &Env<'_>, out: &mut Translated) -> Result<(), String> {
    match env
        .or("BACKEND_TYPE", "redis")
        .to_ascii_lowercase()
        .as_str()
    {
        "redis" => {}
        other => {
            return Err(format!(
                "BACKEND_TYPE: {other:?} is not supported (redis is)"
            ))
        }
    }
    if !env
        .or("REDIS_SOCKET_TYPE", "unix")
        .eq_ignore_ascii_case("tcp")
    {
        return Err("REDIS_SOCKET_TYPE: only tcp is supported (set REDIS_SOCKET_TYPE=tcp)".into());
    }
    let hosts = env.value("REDIS_URL").ok_or("REDIS_URL: required")?;
    // `REDIS_AUTH` is a password, or `user:password` (an ACL user), as the
    // peer cuts it: the user goes in the URL, the password apart.
    let auth = env.value("REDIS_AUTH");
    let (user, password) = match auth.as_deref().map(|a| a.split_once(':')) {
        Some(Some((user, password))) => (format!("{user}@"), Some(password.to_string())),
        Some(None) => (String::new(), auth.clone()),
        None => (String::new(), None),
    };
    let url = format!("{user}{hosts}");
    let tls = env.flag("REDIS_TLS", false)?;
    let s = if tls { "s" } else { "" };
    let spec = match env.or("REDIS_TYPE", "SINGLE").to_ascii_uppercase().as_str() {
        "SINGLE" => format!("redis{s}://{url}"),
        "CLUSTER" => format!("redis{s}-cluster://{url}"),
        "SENTINEL" => match url.split_once(',') {
            Some((master, sentinels)) => format!("redis{s}+sentinel://{sentinels}/{master}"),
            None => return Err("REDIS_URL: a sentinel URL is MASTER,HOST:PORT,...".into()),
        },
        other => return Err(format!("REDIS_TYPE: {other:?} is not supported")),
    };
    out.args.extend(["--store".into(), spec]);
    out.redis_password = password;
    let files = [
        ("REDIS_TLS_CACERT", "--redis-ca"),
        ("REDIS_TLS_CLIENT_CERT", "--redis-cert"),
        ("REDIS_TLS_CLIENT_KEY", "--redis-key"),
    ];
    for (name, flag) in files {
        if let Some(path) = env.value(name) {
            out.args.extend([flag.into(), path]);
        }
    }
    if let Some(timeout) = env.value("REDIS_TIMEOUT") {
        let ns = parse_duration(&timeout).map_err(|e| format!("REDIS_TIMEOUT: {e}"))?;
        let ms = ns.div_ceil(sluice_core::MILLISECOND).max(1);
        out.args
            .extend(["--store-timeout-ms".into(), ms.to_string()]);
    }
    Ok(())
}

/// `USE_PROMETHEUS`/`PROMETHEUS_ADDR`/`PROMETHEUS_PATH`, and `USE_STATSD`
/// (the peer's default: on).
fn metrics(env: &Env<'_>, out: &mut Translated) -> Result<(), String> {
    if env.flag("USE_STATSD", true)? {
        out.ignored
            .push("USE_STATSD ignored: no statsd: metrics are on /metrics".into());
    }
    if !env.flag("USE_PROMETHEUS", false)? {
        return Ok(());
    }
    let path = env.or("PROMETHEUS_PATH", "/metrics");
    if path != "/metrics" {
        return Err(format!(
            "PROMETHEUS_PATH: only /metrics is served, got {path:?}"
        ));
    }
    let addr = env.or("PROMETHEUS_ADDR", ":9090");
    let (host, port) = addr
        .rsplit_once(':')
        .ok_or_else(|| format!("PROMETHEUS_ADDR: expected HOST:PORT, got {addr:?}"))?;
    let bound = address("PROMETHEUS_ADDR", host.trim_matches(['[', ']']), port)?;
    out.args.extend(["--metrics-listen".into(), bound]);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// The translation of these variables alone.
    pub(super) fn run(vars: &[(&str, &str)]) -> Result<Translated, String> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        translate(&|name| map.get(name).cloned())
    }

    /// Envoy Gateway's ratelimit deployment (its test data,
    /// `testdata/deployments/default.yaml`, with a file configuration in
    /// place of xDS).
    #[test]
    fn envoy_gateways_environment() {
        let t = run(&[
            ("RUNTIME_ROOT", "/data"),
            ("RUNTIME_SUBDIRECTORY", "ratelimit"),
            ("RUNTIME_IGNOREDOTFILES", "true"),
            ("RUNTIME_WATCH_ROOT", "false"),
            ("LOG_LEVEL", "info"),
            ("USE_STATSD", "false"),
            ("GRPC_SERVER_USE_TLS", "true"),
            ("GRPC_SERVER_TLS_CERT", "/certs/tls.crt"),
            ("GRPC_SERVER_TLS_KEY", "/certs/tls.key"),
            ("GRPC_SERVER_TLS_CA_CERT", "/certs/ca.crt"),
            ("REDIS_SOCKET_TYPE", "tcp"),
            ("REDIS_URL", "redis.redis.svc:6379"),
            ("USE_PROMETHEUS", "true"),
            ("PROMETHEUS_ADDR", ":19001"),
            ("PROMETHEUS_MAPPER_YAML", "/etc/statsd-exporter/conf.yaml"),
        ])
        .unwrap();
        let args = t.args.join(" ");
        assert_eq!(
            args,
            "--listen 0.0.0.0:8080 --grpc-listen 0.0.0.0:8081 \
             --tls-cert /certs/tls.crt --tls-key /certs/tls.key --tls-client-ca /certs/ca.crt \
             --plain-http --log-level info --log-format text \
             --descriptors /data/ratelimit/config --store redis://redis.redis.svc:6379 \
             --metrics-listen 0.0.0.0:19001"
        );
        assert_eq!(t.ignored.len(), 3, "{:?}", t.ignored);
    }

    #[test]
    fn quota_mode_is_the_global_quota_mode() {
        let base = [("REDIS_SOCKET_TYPE", "tcp"), ("REDIS_URL", "r:6379")];
        let args = |extra: (&str, &str)| {
            let mut vars = base.to_vec();
            vars.push(extra);
            run(&vars).map(|t| t.args.contains(&"--quota-mode".to_string()))
        };
        assert_eq!(args(("QUOTA_MODE", "true")), Ok(true));
        assert_eq!(args(("QUOTA_MODE", "false")), Ok(false));
        assert!(args(("QUOTA_MODE", "often"))
            .unwrap_err()
            .starts_with("QUOTA_MODE"));
    }

    #[test]
    fn merge_domain_config_merges_domains() {
        let base = [("REDIS_SOCKET_TYPE", "tcp"), ("REDIS_URL", "r:6379")];
        let args = |value: &str| {
            let mut vars = base.to_vec();
            vars.push(("MERGE_DOMAIN_CONFIG", value));
            run(&vars).map(|t| t.args.contains(&"--merge-domains".to_string()))
        };
        assert_eq!(args("true"), Ok(true));
        assert_eq!(args("false"), Ok(false));
    }

    #[test]
    fn redis_kinds_auth_and_timeouts() {
        let base = [("REDIS_SOCKET_TYPE", "tcp")];
        let store = |extra: &[(&str, &str)]| {
            let vars: Vec<_> = base.iter().chain(extra).copied().collect();
            let t = run(&vars).unwrap();
            let at = t.args.iter().position(|a| a == "--store").unwrap();
            (t.args[at + 1].clone(), t)
        };
        let (spec, t) = store(&[
            ("REDIS_URL", "a:1,b:2"),
            ("REDIS_TYPE", "cluster"),
            ("REDIS_TLS", "true"),
        ]);
        assert_eq!(spec, "rediss-cluster://a:1,b:2");
        assert_eq!(t.redis_password, None);
        let (spec, t) = store(&[
            ("REDIS_URL", "mymaster,s1:26379,s2:26379"),
            ("REDIS_TYPE", "SENTINEL"),
            ("REDIS_AUTH", "pw"),
        ]);
        assert_eq!(spec, "redis+sentinel://s1:26379,s2:26379/mymaster");
        assert_eq!(t.redis_password.as_deref(), Some("pw"));
        let (spec, t) = store(&[("REDIS_URL", "r:6379"), ("REDIS_AUTH", "app:s3:cret")]);
        assert_eq!(spec, "redis://app@r:6379");
        assert_eq!(t.redis_password.as_deref(), Some("s3:cret"));
        let (_, t) = store(&[("REDIS_URL", "r:6379"), ("REDIS_TIMEOUT", "1500ms")]);
        assert!(
            t.args.join(" ").ends_with("--store-timeout-ms 1500"),
            "{:?}",
            t.args
        );
    }

    /// What would change the limits or loosen security is refused, naming
    /// the variable.
    #[test]
    fn refusals_name_the_variable() {
        let tcp = ("REDIS_SOCKET_TYPE", "tcp");
        let url = ("REDIS_URL", "r:6379");
        for (vars, field) in [
            (vec![url], "REDIS_SOCKET_TYPE"),
            (vec![tcp], "REDIS_URL"),
            (
                vec![tcp, url, ("REDIS_PERSECOND", "true")],
                "REDIS_PERSECOND",
            ),
            (vec![tcp, url, ("BACKEND_TYPE", "memcache")], "BACKEND_TYPE"),
            (vec![tcp, url, ("GRPC_UDS", "/tmp/s")], "GRPC_UDS"),
            (
                vec![tcp, url, ("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "1")],
                "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION",
            ),
            (vec![tcp, url, ("PORT", "http")], "HOST/PORT"),
            (vec![tcp, url, ("LOG_LEVEL", "loud")], "LOG_LEVEL"),
            (vec![tcp, url, ("USE_PROMETHEUS", "yes")], "USE_PROMETHEUS"),
            (
                vec![tcp, url, ("GRPC_SERVER_USE_TLS", "true")],
                "GRPC_SERVER_TLS_CERT",
            ),
            (vec![tcp, url, ("CONFIG_TYPE", "CONSUL")], "CONFIG_TYPE"),
        ] {
            let e = run(&vars).unwrap_err();
            assert!(e.starts_with(field), "{field}: {e}");
        }
    }

    #[test]
    fn started_as_ratelimit_or_by_the_variable() {
        let os = |s: &str| std::ffi::OsString::from(s);
        assert!(wanted(Some(&os("/bin/ratelimit")), None));
        assert!(wanted(Some(&os("sluice-limiter")), Some("1")));
        assert!(!wanted(Some(&os("/usr/local/bin/sluice-limiter")), None));
        assert!(!wanted(Some(&os("ratelimit-x")), Some("0")));
    }
}
