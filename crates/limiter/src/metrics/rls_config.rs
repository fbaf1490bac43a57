//! The descriptor configuration in force: when it was last loaded and which
//! one it is, so that replicas serving different files can be told apart.

use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

#[derive(Debug, Default)]
pub(super) struct RlsConfig {
    last_load: Gauge,
    hash: Gauge,
}

impl RlsConfig {
    pub(super) fn register(&self, r: &mut Registry) {
        r.register(
            "sluice_limiter_rls_config_last_load_timestamp_seconds",
            "Unix time of the last load of the descriptor configuration that was accepted (0: none yet)",
            self.last_load.clone(),
        );
        r.register(
            "sluice_limiter_rls_config_hash",
            "The first 32 bits of the SHA-256 of the descriptor files in force (names and texts), as an integer",
            self.hash.clone(),
        );
    }

    pub(super) fn loaded(&self, hash: u32, unix_seconds: i64) {
        self.hash.set(i64::from(hash));
        self.last_load.set(unix_seconds);
    }

    pub(super) fn hash(&self) -> u32 {
        u32::try_from(self.hash.get()).unwrap_or(0)
    }
}

impl super::Metrics {
    /// Records the descriptor configuration now in force: the first 32
    /// bits of its SHA-256 and the Unix time it was loaded.
    pub fn record_rls_config(&self, hash: u32, unix_seconds: i64) {
        self.rls_config.loaded(hash, unix_seconds);
    }

    /// The hash of the descriptor configuration in force (0: none yet).
    pub fn rls_config_hash(&self) -> u32 {
        self.rls_config.hash()
    }
}
