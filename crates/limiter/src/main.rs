//! `sluice-limiter`: parses flags, builds the store and serves until SIGTERM/SIGINT.

use clap::Parser;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_server::RateLimitQuotaServiceServer;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitServiceServer;
use sluice_limiter::api::{app, metrics_app, AppState};
use sluice_limiter::cli::{Args, LogFormat};
use sluice_limiter::clock::SystemClock;
use sluice_limiter::introspect::Inspector;
use sluice_limiter::metrics::{Listener, Metrics};
use sluice_limiter::overrides::Overrides;
use sluice_limiter::ratelimit_env;
use sluice_limiter::rlqs::service::RlqsService;
use sluice_limiter::rls::config::SameDomain;
use sluice_limiter::rls::reload::{spawn_watcher, ConfigCell};
use sluice_limiter::rls::service::{Mode, RlsService};
use sluice_limiter::rls::xds::{self, XdsSource};
use sluice_limiter::server::{serve_grpc, serve_http, Acceptor, Grpc, Stop};
use sluice_limiter::spread::Spread;
use sluice_limiter::store::memory::{MemoryConfig, MemoryStore};
use sluice_limiter::store::redis::{ConnectOptions, RedisStore};
use sluice_limiter::store::AnyStore;
use sluice_limiter::tls::{TlsCell, ALPN_GRPC, ALPN_HTTP};
use sluice_limiter::top::TopKeys;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;
use tracing_subscriber::EnvFilter;

/// mimalloc: the HTTP path allocates and frees a few small buffers per check,
/// and glibc's allocator costs several percent of the limiter's CPU there.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// How often the memory store drops keys that are back to full.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// The flags, from the command line, or from envoyproxy/ratelimit's
/// environment when started as `ratelimit` (then with the variables it
/// ignored, to log).
fn parse_args() -> Result<(Args, Vec<String>), ExitCode> {
    let program = std::env::args_os().next();
    let flag = std::env::var("SLUICE_RATELIMIT_ENV").ok();
    if !ratelimit_env::wanted(program.as_deref(), flag.as_deref()) {
        return Ok((Args::parse(), Vec::new()));
    }
    let t = match ratelimit_env::translate(&|name| std::env::var(name).ok()) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("sluice-limiter (envoyproxy/ratelimit environment): {e}");
            return Err(ExitCode::from(2));
        }
    };
    let given = std::env::args().skip(1);
    let line = std::iter::once("sluice-limiter".to_string())
        .chain(t.args)
        .chain(given);
    // Help and version exit 0, errors 2, as for any command line.
    let mut args = Args::try_parse_from(line).unwrap_or_else(|e| e.exit());
    args.redis_password = t.redis_password;
    Ok((args, t.ignored))
}

fn main() -> ExitCode {
    let (args, ignored) = match parse_args() {
        Ok(parsed) => parsed,
        Err(code) => return code,
    };
    let filter = EnvFilter::try_new(&args.log_level).unwrap_or_else(|_| EnvFilter::new("info"));
    match args.log_format {
        LogFormat::Text => tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
            .init(),
        LogFormat::Json => tracing_subscriber::fmt()
            .json()
            .with_current_span(false)
            .with_env_filter(filter)
            .init(),
    }
    for note in &ignored {
        tracing::warn!("envoyproxy/ratelimit environment: {note}");
    }
    // Redis TLS uses rustls with the ring provider.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.enable_all().thread_name("sluice-worker");
    if args.threads > 0 {
        builder.worker_threads(args.threads);
    }
    let runtime = match builder.build() {
        Ok(runtime) => runtime,
        Err(e) => {
            tracing::error!("cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(run(args));
    // Checks abandoned at the shutdown bound are not waited for.
    runtime.shutdown_timeout(Duration::from_millis(100));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            ExitCode::FAILURE
        }
    }
}

/// Reads a file the flag `flag` names.
fn read(flag: &str, path: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("{flag} {}: {e}", path.display()))
}

/// The Redis TLS material and password from the flags and the environment.
fn connect_options(args: &Args) -> Result<ConnectOptions, String> {
    let mut opts = ConnectOptions {
        ca: args
            .redis_ca
            .as_deref()
            .map(|p| read("--redis-ca", p))
            .transpose()?,
        client_cert: args
            .redis_cert
            .as_deref()
            .map(|p| read("--redis-cert", p))
            .transpose()?,
        client_key: args
            .redis_key
            .as_deref()
            .map(|p| read("--redis-key", p))
            .transpose()?,
        password: args.redis_password.clone().or_else(|| {
            std::env::var("SLUICE_REDIS_PASSWORD")
                .ok()
                .filter(|p| !p.is_empty())
        }),
    };
    if let Some(path) = &args.redis_password_file {
        let bytes = read("--redis-password-file", path)?;
        let text = String::from_utf8(bytes)
            .map_err(|_| format!("--redis-password-file {}: not UTF-8", path.display()))?;
        opts.password = Some(text.trim_end_matches(['\r', '\n']).to_string());
    }
    Ok(opts)
}

/// What a domain in several descriptor files does.
fn same_domain(args: &Args) -> SameDomain {
    if args.merge_domains {
        SameDomain::Merge
    } else {
        SameDomain::Refuse
    }
}

async fn run(args: Args) -> Result<(), String> {
    // The descriptors first: a bad file refuses to start.
    let xds = args.xds.source()?;
    let cell = descriptors_cell(&args, xds.is_some())?;
    // The TLS files too: a bad one refuses to start.
    let tls = args
        .tls_files()
        .map(|files| TlsCell::load(files).map(Arc::new))
        .transpose()?;
    descriptors_served(&args, cell.is_some())?;
    let timeout = Duration::from_millis(args.store_timeout_ms.max(1));
    let opts = connect_options(&args)?;
    if args.store.redis_target().is_none()
        && args.overrides_redis.is_none()
        && (opts.ca.is_some() || opts.client_cert.is_some() || opts.password.is_some())
    {
        tracing::warn!("Redis TLS or password options given, and no Redis is used: ignored");
    }
    let store = open_store(&args, &opts, timeout).await?;
    let overrides = open_overrides(&args, &opts, timeout, &store).await?;
    let state = AppState {
        store,
        metrics: Arc::new(Metrics::default()),
        overrides: Arc::new(overrides),
        introspection: args.introspection.then(|| inspector(&args, cell.clone())),
    };
    if let Some(tls) = &tls {
        state.metrics.record_tls_load(true);
        sluice_limiter::watch::spawn(
            tls,
            Arc::clone(&state.metrics),
            Duration::from_millis(args.tls_poll_ms),
        );
    }
    if let Some(cell) = &cell {
        let waited = keep_current(&args, cell, xds, &state.metrics);
        if !wait_first(waited, cell).await {
            return Ok(());
        }
    }
    let limits = args.connection_limits();
    let listener = sluice_limiter::server::bind(args.listen)
        .map_err(|e| format!("cannot listen on {}: {e}", args.listen))?;
    let http_tls = tls.as_ref().filter(|_| !args.plain_http);
    let listener = Acceptor::new(listener, limits, Listener::Http, Arc::clone(&state.metrics))
        .tls(http_tls.map(|t| t.listener(ALPN_HTTP)));
    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    let spread = Spread::threads(connection_threads(args.threads))
        .map(Arc::new)
        .map_err(|e| format!("cannot start the connection threads: {e}"))?;
    let grpc = match cell {
        Some(cell) => grpc_listeners(&args, cell, &state, tls.as_ref(), &stop, &spread)?,
        None => Vec::new(),
    };
    tracing::info!(
        listen = %args.listen,
        store = %args.store,
        tls = tls.is_some(),
        version = env!("CARGO_PKG_VERSION"),
        "sluice-limiter serving"
    );
    if let Some(addr) = args.metrics_listen {
        let bound = sluice_limiter::server::bind(addr)
            .map_err(|e| format!("cannot listen on {addr} (--metrics-listen): {e}"))?;
        let scrape = Acceptor::new(bound, limits, Listener::Http, Arc::clone(&state.metrics));
        let served = serve_http(
            scrape,
            metrics_app(state.clone()),
            stop.clone(),
            Arc::clone(&spread),
        );
        tokio::spawn(served);
    }
    let http = tokio::spawn(serve_http(listener, app(state), stop.clone(), spread));
    shutdown_signal().await;
    let _ = stop_tx.send(true);
    finish(http, grpc, args.shutdown_timeout_ms).await?;
    tracing::info!("sluice-limiter stopped");
    Ok(())
}

/// What the introspection API reads: the top limited keys over
/// `--top-window-s` windows, the descriptors in `cell`.
fn inspector(args: &Args, cell: Option<Arc<ConfigCell>>) -> Arc<Inspector> {
    let window = args.top_window_s.saturating_mul(sluice_core::SECOND);
    let top = TopKeys::new(
        window,
        usize::from(args.top_domains),
        args.introspection_keys.display(),
    );
    Arc::new(Inspector {
        top: Arc::new(top),
        descriptors: cell,
        metric_keys: usize::from(args.top_keys),
        clock: Arc::new(SystemClock),
    })
}

/// The threads that serve connections: `--threads`, or one per CPU
/// the process may use.
fn connection_threads(threads: usize) -> usize {
    match threads {
        0 => std::thread::available_parallelism().map_or(1, usize::from),
        n => n,
    }
}

/// Refuses descriptors without a gRPC listener to serve them, and the other
/// way round.
fn descriptors_served(args: &Args, descriptors: bool) -> Result<(), String> {
    let served = args.grpc_listen.is_some() || args.rlqs_listen.is_some();
    match (descriptors, served) {
        (false, true) => Err(
            "--grpc-listen and --rlqs-listen need --descriptors FILE or --descriptors-xds URL"
                .into(),
        ),
        (true, false) => {
            Err("the descriptors are served by --grpc-listen ADDR or --rlqs-listen ADDR".into())
        }
        _ => Ok(()),
    }
}

/// The descriptors: loaded from `--descriptors`, or awaited from the xDS
/// server; none without either.
fn descriptors_cell(args: &Args, xds: bool) -> Result<Option<Arc<ConfigCell>>, String> {
    Ok(match (&args.descriptors, xds) {
        (Some(path), _) => Some(Arc::new(
            ConfigCell::load_as(path, same_domain(args))
                .map_err(|e| format!("--descriptors: {e}"))?,
        )),
        (None, true) => Some(Arc::new(ConfigCell::awaiting(same_domain(args)))),
        (None, false) => None,
    })
}

/// Keeps `cell` current: the files watched, or the xDS client started.
/// True when the first configuration is to be awaited before listening.
fn keep_current(
    args: &Args,
    cell: &Arc<ConfigCell>,
    xds: Option<XdsSource>,
    metrics: &Arc<Metrics>,
) -> bool {
    match xds {
        Some(source) => {
            tracing::info!(xds = %source.url, node = %source.node_id, "descriptors from xDS");
            xds::spawn(Arc::clone(cell), Arc::clone(metrics), source);
        }
        None => cell.record_first_load(metrics),
    }
    // With xDS too: a SIGHUP is then logged and changes nothing.
    spawn_watcher(
        cell,
        Arc::clone(metrics),
        Duration::from_millis(args.descriptors_poll_ms),
    );
    args.xds.url.is_some() && !args.xds.start_empty
}

/// Waits for the first configuration when `wanted`: false when the
/// process is asked to stop first.
async fn wait_first(wanted: bool, cell: &ConfigCell) -> bool {
    if !wanted || cell.loaded() {
        return true;
    }
    tracing::info!("waiting for the first configuration from the xDS server");
    tokio::select! {
        () = cell.wait_loaded() => true,
        () = shutdown_signal() => false,
    }
}

/// The gRPC listeners the descriptors in `cell` serve (watched for
/// changes): RLS on `--grpc-listen`, RLQS on `--rlqs-listen`.
fn grpc_listeners(
    args: &Args,
    cell: Arc<ConfigCell>,
    state: &AppState<AnyStore>,
    tls: Option<&Arc<TlsCell>>,
    stop: &Stop,
    spread: &Arc<Spread>,
) -> Result<Vec<GrpcServer>, String> {
    let acceptor = |addr, name| grpc_acceptor(args, addr, name, &state.metrics, tls);
    let mut servers = Vec::new();
    if let Some(addr) = args.grpc_listen {
        let grpc = rls(args, Arc::clone(&cell), state);
        let acceptor = acceptor(addr, Listener::Grpc)?;
        tracing::info!(grpc_listen = %addr, "serving Envoy's rate limit service protocol");
        let serve = serve_grpc(acceptor, grpc, stop.clone(), Arc::clone(spread));
        servers.push(tokio::spawn(serve));
    }
    if let Some(addr) = args.rlqs_listen {
        let grpc = rlqs(args, cell, state, stop.clone());
        let acceptor = acceptor(addr, Listener::Rlqs)?;
        tracing::info!(rlqs_listen = %addr, "serving Envoy's rate limit quota service protocol");
        let serve = serve_grpc(acceptor, grpc, stop.clone(), Arc::clone(spread));
        servers.push(tokio::spawn(serve));
    }
    Ok(servers)
}

/// A gRPC listener on `addr`: bound, capped, TLS when given.
fn grpc_acceptor(
    args: &Args,
    addr: std::net::SocketAddr,
    name: Listener,
    metrics: &Arc<Metrics>,
    tls: Option<&Arc<TlsCell>>,
) -> Result<Acceptor, String> {
    let listener =
        sluice_limiter::server::bind(addr).map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    let acceptor = Acceptor::new(
        listener,
        args.connection_limits(),
        name,
        Arc::clone(metrics),
    );
    Ok(acceptor.tls(tls.map(|t| t.listener(ALPN_GRPC))))
}

/// The store `--store` names; a memory store is swept in the background.
async fn open_store(
    args: &Args,
    opts: &ConnectOptions,
    timeout: Duration,
) -> Result<AnyStore, String> {
    let Some(target) = args.store.redis_target() else {
        let config = MemoryConfig {
            shards: args.shards,
            max_keys: args.max_keys,
        };
        let mem = Arc::new(MemoryStore::new(config, Arc::new(SystemClock)));
        let weak = Arc::downgrade(&mem);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(SWEEP_EVERY);
            loop {
                tick.tick().await;
                let Some(mem) = weak.upgrade() else { return };
                let dropped = mem.sweep();
                tracing::trace!(dropped, "swept memory store");
            }
        });
        return Ok(AnyStore::Memory(mem));
    };
    let redis = RedisStore::open(target, opts.clone(), timeout)
        .await
        .map_err(|e| format!("--store {}: {e}", args.store))?;
    Ok(AnyStore::Redis(redis))
}

/// The overrides of `--overrides`, read through from the Redis of
/// `--overrides-redis` (or the store's, with `--redis-overrides`).
async fn open_overrides(
    args: &Args,
    opts: &ConnectOptions,
    timeout: Duration,
    store: &AnyStore,
) -> Result<Overrides, String> {
    let overrides = match &args.overrides {
        Some(path) => Overrides::load(path)?,
        None => Overrides::default(),
    };
    let ttl = Duration::from_millis(args.overrides_ttl_ms);
    match (&args.overrides_redis, store) {
        (Some(spec), _) => {
            let target = spec.redis_target().ok_or_else(|| {
                "--overrides-redis: expected redis://host:port or redis-cluster://host:port,..."
                    .to_string()
            })?;
            let redis = RedisStore::open(target, opts.clone(), timeout)
                .await
                .map_err(|e| format!("--overrides-redis {spec}: {e}"))?;
            Ok(overrides.with_redis(redis, ttl))
        }
        (None, AnyStore::Redis(redis)) if args.redis_overrides => {
            Ok(overrides.with_redis(Arc::clone(redis), ttl))
        }
        (None, AnyStore::Memory(_)) if args.redis_overrides => {
            tracing::warn!(
                "--redis-overrides reads the store's Redis, and the store is memory: \
                 ignored (give --overrides-redis to read a Redis)"
            );
            Ok(overrides)
        }
        (None, _) => Ok(overrides),
    }
}

type GrpcServer = tokio::task::JoinHandle<()>;

/// Envoy's RLS protocol from the descriptors in `cell`, watched for
/// changes; a call whose message never completes ends at the request
/// timeout.
fn rls(
    args: &Args,
    cell: Arc<ConfigCell>,
    state: &AppState<AnyStore>,
) -> Grpc<RateLimitServiceServer<RlsService<AnyStore>>> {
    let mut service = RlsService::new(
        state.store.clone(),
        cell,
        Arc::clone(&state.metrics),
        Arc::new(SystemClock),
    );
    if let Some(inspector) = &state.introspection {
        service = service.with_top(Arc::clone(&inspector.top));
    }
    if args.quota_mode {
        service = service.with_quota_mode();
    }
    if args.shadow_mode {
        tracing::warn!("--shadow-mode: RLS calls over the limit are answered OK and counted");
        service = service.with_mode(Mode::Shadow);
    }
    Grpc {
        service: service.into_server(),
        timeout: Some(args.connection_limits().request_timeout),
    }
}

/// Envoy's rate limit quota service from the descriptors in `cell`. Its
/// streams live as long as Envoy keeps them (no request timeout: HTTP/2
/// pings find the dead ones), and end on `stop`.
fn rlqs(
    args: &Args,
    cell: Arc<ConfigCell>,
    state: &AppState<AnyStore>,
    stop: Stop,
) -> Grpc<RateLimitQuotaServiceServer<RlqsService<AnyStore>>> {
    let service = RlqsService::new(
        state.store.clone(),
        cell,
        Arc::clone(&state.metrics),
        Arc::new(SystemClock),
        args.rlqs_settings(),
    )
    .until(stop);
    let service = match &state.introspection {
        Some(inspector) => service.with_top(Arc::clone(&inspector.top)),
        None => service,
    };
    Grpc {
        service: service.into_server(),
        timeout: None,
    }
}

/// Waits, within `bound_ms`, for both servers to finish what is in flight
/// (they stopped accepting when the stop signal came).
async fn finish<E: std::fmt::Display>(
    http: tokio::task::JoinHandle<Result<(), E>>,
    grpc: Vec<GrpcServer>,
    bound_ms: u64,
) -> Result<(), String> {
    let bound = Duration::from_millis(bound_ms);
    let finished = tokio::time::timeout(bound, async {
        let http = http.await;
        let grpc = futures_util::future::join_all(grpc).await;
        (http, grpc)
    })
    .await;
    let Ok((http, grpc)) = finished else {
        tracing::warn!(
            bound_ms,
            "shutdown bound reached with checks still in flight; exiting"
        );
        return Ok(());
    };
    match http {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(format!("server error: {e}")),
        Err(e) => return Err(format!("server stopped: {e}")),
    }
    for g in grpc {
        if let Err(e) = g {
            return Err(format!("grpc server stopped: {e}"));
        }
    }
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
    tracing::info!("shutting down: no new connections; finishing the checks in flight");
}
