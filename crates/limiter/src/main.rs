//! `sluice-limiter`: parses flags, builds the store and serves until SIGTERM/SIGINT.

use axum::serve::ListenerExt;
use clap::Parser;
use sluice_limiter::api::{app, AppState};
use sluice_limiter::cli::Args;
use sluice_limiter::clock::SystemClock;
use sluice_limiter::metrics::Metrics;
use sluice_limiter::overrides::Overrides;
use sluice_limiter::rls::reload::{spawn_watcher, ConfigCell};
use sluice_limiter::rls::service::RlsService;
use sluice_limiter::store::memory::{MemoryConfig, MemoryStore};
use sluice_limiter::store::redis::RedisStore;
use sluice_limiter::store::AnyStore;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;
use tracing_subscriber::EnvFilter;

/// How often the memory store drops keys that are back to full.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

fn main() -> ExitCode {
    let args = Args::parse();
    let filter = EnvFilter::try_new(&args.log_level).unwrap_or_else(|_| EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
        .init();
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
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<(), String> {
    // The RLS configuration first: a bad file refuses to start.
    let rls = match (&args.grpc_listen, &args.descriptors) {
        (Some(addr), Some(path)) => {
            let cell = ConfigCell::load(path).map_err(|e| format!("--descriptors: {e}"))?;
            Some((*addr, Arc::new(cell)))
        }
        (Some(_), None) => return Err("--grpc-listen needs --descriptors FILE".into()),
        (None, Some(_)) => return Err("--descriptors is served by --grpc-listen ADDR".into()),
        (None, None) => None,
    };
    let timeout = Duration::from_millis(args.store_timeout_ms.max(1));
    let store = match args.store.redis_target() {
        None => {
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
            AnyStore::Memory(mem)
        }
        Some(target) => AnyStore::Redis(RedisStore::start(target, timeout)),
    };
    let mut overrides = match &args.overrides {
        Some(path) => Overrides::load(path)?,
        None => Overrides::default(),
    };
    let ttl = Duration::from_millis(args.overrides_ttl_ms);
    match (&args.overrides_redis, &store) {
        (Some(spec), _) => {
            let target = spec.redis_target().ok_or_else(|| {
                "--overrides-redis: expected redis://host:port or redis-cluster://host:port,..."
                    .to_string()
            })?;
            overrides = overrides.with_redis(RedisStore::start(target, timeout), ttl);
        }
        (None, AnyStore::Redis(redis)) if args.redis_overrides => {
            overrides = overrides.with_redis(Arc::clone(redis), ttl);
        }
        (None, AnyStore::Memory(_)) if args.redis_overrides => {
            tracing::warn!(
                "--redis-overrides reads the store's Redis, and the store is memory: \
                 ignored (give --overrides-redis to read a Redis)"
            );
        }
        (None, _) => {}
    }
    let state = AppState {
        store,
        metrics: Arc::new(Metrics::default()),
        overrides: Arc::new(overrides),
    };
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", args.listen))?
        // Answers are small and latency-bound: Nagle's algorithm would hold
        // a write back until the peer's delayed ACK (tens of ms).
        .tap_io(|tcp| {
            if let Err(e) = tcp.set_nodelay(true) {
                tracing::debug!("cannot set TCP_NODELAY: {e}");
            }
        });
    let grpc = match rls {
        Some((addr, cell)) => {
            let metrics = Arc::clone(&state.metrics);
            metrics.record_rls_reload(true);
            spawn_watcher(
                &cell,
                Arc::clone(&metrics),
                Duration::from_millis(args.descriptors_poll_ms),
            );
            let service =
                RlsService::new(state.store.clone(), cell, metrics, Arc::new(SystemClock));
            let incoming = tonic::transport::server::TcpIncoming::bind(addr)
                .map_err(|e| format!("cannot listen on {addr}: {e}"))?
                .with_nodelay(Some(true));
            tracing::info!(grpc_listen = %addr, "serving Envoy's rate limit service protocol");
            Some(tokio::spawn(
                tonic::transport::Server::builder()
                    .add_service(service.into_server())
                    .serve_with_incoming_shutdown(incoming, shutdown_signal()),
            ))
        }
        None => None,
    };
    tracing::info!(listen = %args.listen, store = ?args.store, "sluice-limiter serving");
    axum::serve(listener, app(state))
        .with_graceful_shutdown(shutdown_signal())
        .await
        .map_err(|e| format!("server error: {e}"))?;
    if let Some(grpc) = grpc {
        match grpc.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(format!("grpc server error: {e}")),
            Err(e) => return Err(format!("grpc server stopped: {e}")),
        }
    }
    tracing::info!("sluice-limiter stopped");
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
    tracing::info!("shutting down");
}
