//! Shared by the tests: the router driven in-process, and throwaway
//! redis-servers.
#![allow(dead_code)]

pub mod rls;

/// The random traces' generator (xorshift64*): the same seed, the same trace.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number below `n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    /// A number from `lo` to `hi`, both included.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }
}

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::Value;
use sluice_limiter::api::{app, AppState};
use sluice_limiter::store::Store;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tower::ServiceExt;

/// Serves `routes` (tonic services) on a loopback port in the background
/// as the limiter's gRPC listeners do, reached over a socket as Envoy
/// reaches them; returns the address.
pub async fn serve_grpc(routes: tonic::service::Routes) -> std::net::SocketAddr {
    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    let (addr, server) = serve_grpc_until(routes, stop).await;
    tokio::spawn(async move {
        let _ = server.await;
        drop(stop_tx);
    });
    addr
}

/// [`serve_grpc`] until `stop` turns true: the address, and the server's
/// task, done once every connection is closed.
pub async fn serve_grpc_until(
    routes: tonic::service::Routes,
    stop: tokio::sync::watch::Receiver<bool>,
) -> (std::net::SocketAddr, tokio::task::JoinHandle<()>) {
    use sluice_limiter::metrics::Listener;
    use sluice_limiter::server::{bind, serve_grpc, Acceptor, Grpc, Limits};
    use std::sync::Arc;
    let listener = bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = listener.local_addr().unwrap();
    let metrics = Arc::new(sluice_limiter::metrics::Metrics::default());
    let acceptor = Acceptor::new(listener, Limits::default(), Listener::Grpc, metrics);
    let spread = Arc::new(sluice_limiter::spread::Spread::threads(1).unwrap());
    let grpc = Grpc {
        service: routes,
        timeout: None,
    };
    (addr, tokio::spawn(serve_grpc(acceptor, grpc, stop, spread)))
}

/// Sends one request to the router over `state`, without a socket; returns
/// the status and the body.
pub async fn send<S: Store + Clone>(
    state: &AppState<S>,
    method: &str,
    uri: &str,
    body: Vec<u8>,
) -> (StatusCode, Vec<u8>) {
    let req = Request::builder()
        .method(method)
        .uri(uri)
        .header("content-type", "application/json")
        .body(Body::from(body))
        .unwrap();
    let resp = app(state.clone()).oneshot(req).await.unwrap();
    let status = resp.status();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (status, bytes.to_vec())
}

/// Sends `body` as JSON; the answer as JSON (`Null` when it is not JSON).
pub async fn send_json<S: Store + Clone>(
    state: &AppState<S>,
    method: &str,
    uri: &str,
    body: &Value,
) -> (StatusCode, Value) {
    let (status, bytes) = send(state, method, uri, serde_json::to_vec(body).unwrap()).await;
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// A check of one limit (default burst) in the domain `demo`.
pub fn one(key: &str, algorithm: &str, requests: u64, window_ms: u64) -> Value {
    serde_json::json!({"domain": "demo", "limits": [
        {"key": key, "algorithm": algorithm, "requests": requests, "window_ms": window_ms}
    ]})
}

/// Whether the check `body` is admitted; the answer must be a 200.
pub async fn allowed<S: Store + Clone>(state: &AppState<S>, body: &Value) -> bool {
    let (status, v) = send_json(state, "POST", "/v1/check", body).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    v["allowed"].as_bool().unwrap()
}

/// The text of `/metrics`.
pub async fn metrics<S: Store + Clone>(state: &AppState<S>) -> String {
    let (status, bytes) = send(state, "GET", "/metrics", Vec::new()).await;
    assert_eq!(status, StatusCode::OK);
    String::from_utf8(bytes).unwrap()
}

/// A redis-server on a free port, killed on drop.
pub struct RedisServer {
    child: Child,
    pub port: u16,
    pub dir: PathBuf,
}

/// The redis-server binary, if there is one.
pub fn binary() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("REDIS_SERVER") {
        return Some(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("redis-server"))
        .chain([PathBuf::from("/usr/bin/redis-server")])
        .find(|p| p.is_file())
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl RedisServer {
    /// Starts one, or returns `None` (after saying why) when there is no binary.
    pub fn start(extra: &[&str]) -> Option<RedisServer> {
        let Some(bin) = binary() else {
            eprintln!(
                "SKIPPED: no redis-server binary found (set REDIS_SERVER or install redis-server)"
            );
            return None;
        };
        Some(RedisServer::start_on(&bin, free_port(), extra))
    }

    pub fn start_on(bin: &std::path::Path, port: u16, extra: &[&str]) -> RedisServer {
        let dir = std::env::temp_dir().join(format!("sluice-redis-{port}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let child = Command::new(bin)
            .args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .args(extra)
            .current_dir(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let server = RedisServer { child, port, dir };
        server.wait_ready();
        server
    }

    fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("redis-server did not start on port {}", self.port);
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A Redis Cluster of three masters on free ports, slots assigned and state
/// ok; `None` (after saying why) without redis-server or redis-cli.
pub fn start_cluster() -> Option<Vec<RedisServer>> {
    let Some(bin) = binary() else {
        eprintln!("SKIPPED: no redis-server binary found");
        return None;
    };
    let cli = bin.with_file_name("redis-cli");
    if !cli.is_file() {
        eprintln!("SKIPPED: no redis-cli next to redis-server");
        return None;
    }
    let nodes: Vec<RedisServer> = (0..3)
        .map(|_| {
            RedisServer::start_on(
                &bin,
                free_port(),
                &[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                ],
            )
        })
        .collect();
    let addrs: Vec<String> = nodes
        .iter()
        .map(|n| format!("127.0.0.1:{}", n.port))
        .collect();
    let out = Command::new(&cli)
        .args(["--cluster", "create"])
        .args(&addrs)
        .args(["--cluster-replicas", "0", "--cluster-yes"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    for n in &nodes {
        loop {
            let info = Command::new(&cli)
                .args(["-p", &n.port.to_string(), "cluster", "info"])
                .output()
                .unwrap();
            if String::from_utf8_lossy(&info.stdout).contains("cluster_state:ok") {
                break;
            }
            assert!(Instant::now() < deadline, "cluster never became ok");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    Some(nodes)
}

/// Seed URLs of a cluster.
pub fn cluster_seeds(nodes: &[RedisServer]) -> Vec<String> {
    nodes.iter().map(RedisServer::url).collect()
}

/// A Redis store that has answered a ping, with `timeout` as its store timeout.
pub async fn connected(
    target: sluice_limiter::store::redis::Target,
    timeout: Duration,
) -> std::sync::Arc<sluice_limiter::store::redis::RedisStore> {
    let store = sluice_limiter::store::redis::RedisStore::start(target, timeout);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !store.ping().await {
        assert!(Instant::now() < deadline, "no connection to redis");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    store
}
