//! Per-key limits that replace the request's limit for that key, resolved
//! before the store decides and the same way whichever store decides.
//!
//! Two sources, consulted in this order: a JSON file (`--overrides FILE`),
//! and Redis hashes `sluice:overrides:<domain>` (field = key, value = the same
//! JSON object), for tables too large to ship in filter configuration. The
//! hashes are read from the store's Redis (`--redis-overrides`) or from any
//! Redis or Redis Cluster (`--overrides-redis`), also when the memory store
//! decides.
//!
//! An override replaces `requests`, `window_ms` and `burst` (which defaults
//! to the override's `requests`); the algorithm, its extras (precision, soft
//! allowance, delay mode) and the request's weights stay the request's. A
//! file entry wins over a Redis entry for the same key. Overrides are for
//! rate limits: a concurrency limit (`"algorithm": "concurrency"`) is
//! decided as the request gives it, whatever the sources hold for its key.
//! A charge (`POST /v1/charge`) is given the same overrides as the checks,
//! so that it adjusts the state they decided.

use crate::store::redis::RedisStore;
use crate::store::StoreError;
use serde::Deserialize;
use sluice_core::{Algorithm, Limit};
use sluice_wire::{build_limit, validate_domain, Rule, ValidCheck};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Most Redis answers cached at once; the cache is emptied when it is full.
const MAX_CACHED: usize = 100_000;

/// One per-key limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OverrideSpec {
    /// Requests per window.
    pub requests: u64,
    /// The window in milliseconds.
    pub window_ms: u64,
    /// Requests a fresh key admits at once; defaults to `requests`.
    #[serde(default)]
    pub burst: Option<u64>,
}

type Cached = (Instant, Option<OverrideSpec>);

/// The override sources in force.
#[derive(Debug, Default)]
pub struct Overrides {
    /// `"domain/key"` -> limit, from the file.
    file: HashMap<String, OverrideSpec>,
    /// The Redis hashes, when consulted.
    redis: Option<RedisHashes>,
}

/// Overrides read from Redis hashes, each answer (including "none") reused
/// for a while.
#[derive(Debug)]
struct RedisHashes {
    redis: Arc<RedisStore>,
    ttl: Duration,
    cache: Mutex<HashMap<String, Cached>>,
}

/// The Redis hash holding a domain's overrides.
pub fn redis_hash(domain: &str) -> String {
    format!("sluice:overrides:{domain}")
}

impl Overrides {
    /// Parses a file's JSON: `{"domain/key": {"requests":..,"window_ms":..,"burst":..}}`.
    pub fn from_json(text: &str) -> Result<Self, String> {
        let de = &mut serde_json::Deserializer::from_str(text);
        let file: HashMap<String, OverrideSpec> =
            serde_path_to_error::deserialize(de).map_err(|e| e.to_string())?;
        for (name, spec) in &file {
            let (domain, key) = name
                .split_once('/')
                .ok_or_else(|| format!("{name:?}: expected \"domain/key\""))?;
            validate_domain(domain).map_err(|m| format!("{name:?}: domain {m}"))?;
            if key.is_empty() {
                return Err(format!("{name:?}: empty key"));
            }
            check_spec(spec).map_err(|m| format!("{name:?}: {m}"))?;
        }
        Ok(Overrides { file, redis: None })
    }

    /// Reads and parses an overrides file.
    pub fn load(path: &std::path::Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        Overrides::from_json(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Also consults the hashes `sluice:overrides:<domain>` on `redis` (any
    /// Redis or Redis Cluster, whichever store decides), reusing each answer
    /// for `ttl`.
    pub fn with_redis(mut self, redis: Arc<RedisStore>, ttl: Duration) -> Self {
        self.redis = Some(RedisHashes {
            redis,
            ttl,
            cache: Mutex::new(HashMap::new()),
        });
        self
    }

    /// Number of file entries.
    pub fn len(&self) -> usize {
        self.file.len()
    }

    /// True when the file held no entry.
    pub fn is_empty(&self) -> bool {
        self.file.is_empty()
    }

    /// Replaces the limits of `check` that have an override. Fails only when
    /// the Redis hashes cannot be read; then nothing is decided.
    pub async fn apply(&self, check: &mut ValidCheck) -> Result<(), StoreError> {
        // Concurrency limits are the request's own: no override applies.
        let limits = check.limits.iter_mut().filter_map(|kl| match &mut kl.rule {
            Rule::Rate(rate) => Some((kl.key.as_str(), &mut rate.limit)),
            Rule::Permits { .. } => None,
        });
        self.apply_to(&check.domain, limits.collect()).await
    }

    /// Replaces the rate limits of `domain` (each with its key) that have an
    /// override, as [`Overrides::apply`] does for a check's.
    pub async fn apply_to(
        &self,
        domain: &str,
        mut limits: Vec<(&str, &mut Limit)>,
    ) -> Result<(), StoreError> {
        if self.file.is_empty() && self.redis.is_none() {
            return Ok(());
        }
        let mut missing: Vec<usize> = Vec::new();
        for (i, (key, limit)) in limits.iter_mut().enumerate() {
            match self.file.get(&format!("{domain}/{key}")) {
                Some(spec) => replace(limit, spec),
                None => missing.push(i),
            }
        }
        match &self.redis {
            Some(redis) if !missing.is_empty() => redis.apply(domain, &mut limits, &missing).await,
            _ => Ok(()),
        }
    }
}

impl RedisHashes {
    /// Replaces the limits at `missing` (positions in `limits`) that have
    /// an override in the domain's hash.
    async fn apply(
        &self,
        domain: &str,
        limits: &mut [(&str, &mut Limit)],
        missing: &[usize],
    ) -> Result<(), StoreError> {
        let now = Instant::now();
        let mut found: Vec<(usize, Option<OverrideSpec>)> = Vec::new();
        let mut ask: Vec<usize> = Vec::new();
        {
            let cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
            for &i in missing {
                let Some((key, _)) = limits.get(i) else {
                    continue;
                };
                match cache.get(&format!("{domain}/{key}")) {
                    Some((at, spec)) if now.duration_since(*at) < self.ttl => {
                        found.push((i, *spec))
                    }
                    _ => ask.push(i),
                }
            }
        }
        if !ask.is_empty() {
            let keys: Vec<&str> = ask
                .iter()
                .filter_map(|&i| limits.get(i).map(|(key, _)| *key))
                .collect();
            let values = self.redis.hmget(&redis_hash(domain), &keys).await?;
            let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
            if cache.len() >= MAX_CACHED {
                cache.clear();
            }
            for (&i, value) in ask.iter().zip(values) {
                let Some((key, _)) = limits.get(i) else {
                    continue;
                };
                let spec = value.and_then(|v| parse_redis_value(domain, key, &v));
                cache.insert(format!("{domain}/{key}"), (now, spec));
                found.push((i, spec));
            }
        }
        for (i, spec) in found {
            if let (Some(spec), Some((_, limit))) = (spec, limits.get_mut(i)) {
                replace(limit, &spec);
            }
        }
        Ok(())
    }
}

fn check_spec(spec: &OverrideSpec) -> Result<(), String> {
    build_limit(
        Algorithm::Gcra,
        spec.requests,
        spec.window_ms,
        spec.burst,
        None,
        None,
        None,
    )
    .map(|_| ())
    .map_err(|e| e.to_string())
}

fn parse_redis_value(domain: &str, key: &str, value: &str) -> Option<OverrideSpec> {
    match serde_json::from_str::<OverrideSpec>(value)
        .map_err(|e| e.to_string())
        .and_then(|s| check_spec(&s).map(|()| s))
    {
        Ok(spec) => Some(spec),
        Err(e) => {
            tracing::warn!(domain, key, error = %e, "ignoring invalid override in redis");
            None
        }
    }
}

fn replace(limit: &mut sluice_core::Limit, spec: &OverrideSpec) {
    match build_limit(
        limit.algorithm,
        spec.requests,
        spec.window_ms,
        spec.burst,
        Some(limit.precision),
        Some(limit.soft_percent),
        None,
    ) {
        // Delay mode is the request's: valid for this algorithm whatever the quota.
        Ok(l) => {
            *limit = sluice_core::Limit {
                max_delay: limit.max_delay,
                ..l
            }
        }
        Err(e) => {
            tracing::warn!(error = %e, "override does not fit this limit; keeping the request's")
        }
    }
}
