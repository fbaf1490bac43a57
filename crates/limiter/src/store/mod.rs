//! Where key states live: [`memory::MemoryStore`] (one instance) or
//! [`redis::RedisStore`] (Redis or Redis Cluster, many instances).

pub mod memory;
pub mod redis;

use sluice_core::{Decision, Limit};
use std::fmt;
use std::sync::Arc;

/// One limit to decide, with the identity of its stored state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreItem {
    /// The state's identity (`domain/key|algorithm|window_ms`).
    pub id: String,
    /// The limit.
    pub limit: Limit,
}

/// The result of one check against a store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// True when every limit allowed; then every state was updated.
    pub allowed: bool,
    /// One decision per item, in order.
    pub decisions: Vec<Decision>,
    /// True when the memory store denied because it was full.
    pub capacity_denied: bool,
}

/// Why a store could not decide.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreError {
    /// No answer within the store timeout.
    Timeout,
    /// The store is unreachable or answered with an error.
    Unavailable(String),
    /// The store answered something this service cannot read.
    Protocol(String),
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::Timeout => f.write_str("store timed out"),
            StoreError::Unavailable(m) => write!(f, "store unavailable: {m}"),
            StoreError::Protocol(m) => write!(f, "store protocol error: {m}"),
        }
    }
}

impl std::error::Error for StoreError {}

/// Which store to use, as given by `--store`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreSpec {
    /// `memory`: the embedded store.
    Memory,
    /// `redis://host:port[/db]`: one Redis server.
    Redis(String),
    /// `redis-cluster://host:port,host:port`: a Redis Cluster, by seed nodes.
    RedisCluster(Vec<String>),
}

impl std::str::FromStr for StoreSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s == "memory" {
            Ok(StoreSpec::Memory)
        } else if s.starts_with("redis://") || s.starts_with("rediss://") {
            Ok(StoreSpec::Redis(s.to_string()))
        } else if let Some(rest) = s.strip_prefix("redis-cluster://") {
            let nodes: Vec<String> = rest
                .split(',')
                .map(str::trim)
                .filter(|n| !n.is_empty())
                .map(|n| format!("redis://{n}"))
                .collect();
            if nodes.is_empty() {
                return Err("redis-cluster:// needs at least one host:port".into());
            }
            Ok(StoreSpec::RedisCluster(nodes))
        } else {
            Err(format!(
                "unknown store {s:?} (expected memory, redis://host:port or redis-cluster://host:port,host:port)"
            ))
        }
    }
}

/// The store the service decides against.
#[derive(Debug, Clone)]
pub enum Store {
    /// The embedded store.
    Memory(Arc<memory::MemoryStore>),
    /// Redis or Redis Cluster.
    Redis(Arc<redis::RedisStore>),
}

impl Store {
    /// Decides `items` together for a request of weight `hits`.
    pub async fn check(&self, items: &[StoreItem], hits: u64) -> Result<Verdict, StoreError> {
        match self {
            Store::Memory(m) => Ok(m.check(items, hits)),
            Store::Redis(r) => r.check(items, hits).await,
        }
    }

    /// True when the store answers.
    pub async fn healthy(&self) -> bool {
        match self {
            Store::Memory(_) => true,
            Store::Redis(r) => r.ping().await,
        }
    }

    /// The Redis store, when that is the one in use.
    pub fn redis(&self) -> Option<&Arc<redis::RedisStore>> {
        match self {
            Store::Memory(_) => None,
            Store::Redis(r) => Some(r),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn store_specs() {
        assert_eq!("memory".parse::<StoreSpec>(), Ok(StoreSpec::Memory));
        assert_eq!(
            "redis://127.0.0.1:6379".parse::<StoreSpec>(),
            Ok(StoreSpec::Redis("redis://127.0.0.1:6379".into()))
        );
        assert_eq!(
            "redis-cluster://a:1, b:2".parse::<StoreSpec>(),
            Ok(StoreSpec::RedisCluster(vec![
                "redis://a:1".into(),
                "redis://b:2".into()
            ]))
        );
        assert!("redis-cluster://".parse::<StoreSpec>().is_err());
        assert!("postgres://x".parse::<StoreSpec>().is_err());
    }
}
