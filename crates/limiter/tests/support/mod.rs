//! A throwaway redis-server for tests.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, dead_code)]

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

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
