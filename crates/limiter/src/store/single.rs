//! One Redis server: one multiplexed connection, replaced in the background
//! when it is lost.
//!
//! A call made while there is no connection fails at once (the caller
//! answers per its failure mode): no call waits on a reconnection. A
//! lost connection wakes the keeper task, which connects again at once and
//! then every 50 ms doubling to 250 ms (each give or take half, so
//! instances that lost Redis together do not come back in step) until the
//! server answers: a restarted server is used again within about 0.4 s of
//! accepting connections, and an outage costs each limiter at most a few
//! connection attempts a second.

use super::jitter::jittered;
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, ErrorKind, RedisError, RedisResult};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock, Weak};
use std::time::Duration;

/// The first and the longest wait between two connection attempts.
pub const RETRY_MIN: Duration = Duration::from_millis(50);
pub const RETRY_MAX: Duration = Duration::from_millis(250);

/// A connection to one server, kept by a background task.
pub struct Single {
    client: redis::Client,
    config: AsyncConnectionConfig,
    /// The connection and its generation; `None` while reconnecting.
    current: RwLock<Option<(u64, MultiplexedConnection)>>,
    generations: AtomicU64,
    wake: tokio::sync::Notify,
    /// The bound of one connection attempt.
    bound: Duration,
}

impl Single {
    /// Connects to `client` (within `bound`) and starts the task that
    /// keeps the connection.
    pub async fn open(
        client: redis::Client,
        config: AsyncConnectionConfig,
        bound: Duration,
    ) -> RedisResult<Arc<Single>> {
        let single = Arc::new(Single {
            client,
            config,
            current: RwLock::new(None),
            generations: AtomicU64::new(0),
            wake: tokio::sync::Notify::new(),
            bound,
        });
        let conn = single.attempt().await?;
        single.install(conn);
        tokio::spawn(keep(Arc::downgrade(&single)));
        Ok(single)
    }

    async fn attempt(&self) -> RedisResult<MultiplexedConnection> {
        let connecting = self
            .client
            .get_multiplexed_async_connection_with_config(&self.config);
        tokio::time::timeout(self.bound, connecting)
            .await
            .map_err(|_| RedisError::from((ErrorKind::IoError, "timed out connecting")))?
    }

    fn install(&self, conn: MultiplexedConnection) {
        let generation = self.generations.fetch_add(1, Ordering::Relaxed);
        let mut cur = self.current.write().unwrap_or_else(|e| e.into_inner());
        *cur = Some((generation, conn));
    }

    /// The connection with its generation, or an error at once while there
    /// is none.
    pub fn current(&self) -> RedisResult<(u64, MultiplexedConnection)> {
        let cur = self.current.read().unwrap_or_else(|e| e.into_inner());
        match cur.as_ref() {
            Some((generation, conn)) => Ok((*generation, conn.clone())),
            None => Err(RedisError::from((
                ErrorKind::IoError,
                "not connected to redis",
                "reconnecting".to_string(),
            ))),
        }
    }

    /// A call on generation `generation` failed with `e`: a connection that
    /// is gone is dropped and the keeper woken. A slow answer is no lost
    /// connection (a paused server answers when it resumes).
    pub fn failed(&self, generation: u64, e: &RedisError) {
        let lost = !e.is_timeout()
            && (e.is_connection_dropped()
                || e.is_io_error()
                || e.is_unrecoverable_error()
                || e.is_connection_refusal());
        if !lost {
            return;
        }
        let mut cur = self.current.write().unwrap_or_else(|e| e.into_inner());
        if cur.as_ref().is_some_and(|(g, _)| *g == generation) {
            tracing::warn!(error = %e, "lost the redis connection; reconnecting");
            *cur = None;
        }
        drop(cur);
        self.wake.notify_one();
    }

    fn connected(&self) -> bool {
        let cur = self.current.read().unwrap_or_else(|e| e.into_inner());
        cur.is_some()
    }
}

/// The keeper: waits for a lost connection, then connects again with
/// backoff until the server answers.
async fn keep(single: Weak<Single>) {
    let mut wait = RETRY_MIN;
    loop {
        let Some(s) = single.upgrade() else { return };
        if s.connected() {
            // Woken by a lost connection; a dropped store ends the task
            // within a second.
            let _ = tokio::time::timeout(Duration::from_secs(1), s.wake.notified()).await;
            continue;
        }
        match s.attempt().await {
            Ok(conn) => {
                s.install(conn);
                tracing::info!("reconnected to redis");
                wait = RETRY_MIN;
            }
            Err(e) => {
                crate::warn_throttled!(error = %e, "cannot reconnect to redis; retrying");
                drop(s);
                tokio::time::sleep(jittered(wait)).await;
                wait = wait.saturating_mul(2).min(RETRY_MAX);
            }
        }
    }
}
