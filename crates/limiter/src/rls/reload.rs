//! The descriptor configuration in force, replaced whole when its file (or
//! directory) changes or on SIGHUP.
//!
//! Counters live in the store under keys derived from the domain, the
//! request's entries, the algorithm and the window only, so a reload keeps
//! the state of every limit whose algorithm and window did not change (a
//! new `requests_per_unit` applies to the running window). A file that
//! does not load is refused: the error is logged and counted, and the
//! previous configuration stays in force until the files change again.
//!
//! Changes are found by the files' contents, not their modification times:
//! a Kubernetes ConfigMap update swaps the `..data` symlink the visible
//! files resolve through and leaves their own entries as they were. A
//! change is read a second time and used only when both reads agree, so a
//! swap in the middle of a read never loads half of each version.

use super::config::{ConfigError, Descriptors, SameDomain, Snapshot};
use crate::metrics::Metrics;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime};

/// Reads of a forced reload (or the first load) before files still
/// changing are refused.
const FORCED_TRIES: usize = 5;

/// The files as last read, whether they loaded or not.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seen {
    /// Nothing read yet (a configuration not read from files).
    Nothing,
    /// Read: the digest of their names and texts.
    Files([u8; 32]),
    /// Not readable, for this reason.
    Unreadable(String),
}

/// `first` when a second read of the files agrees with it; `None` when
/// they changed between the two.
fn confirmed(
    path: &Path,
    first: Result<Snapshot, ConfigError>,
) -> Option<Result<Snapshot, ConfigError>> {
    (seen_of(&first) == seen_of(&Snapshot::read(path))).then_some(first)
}

fn seen_of(read: &Result<Snapshot, ConfigError>) -> Seen {
    match read {
        Ok(s) => Seen::Files(s.digest()),
        Err(e) => Seen::Unreadable(e.to_string()),
    }
}

/// A stable read, tried up to [`FORCED_TRIES`] times.
fn forced_read(path: &Path) -> Result<Snapshot, ConfigError> {
    for _ in 0..FORCED_TRIES {
        if let Some(read) = confirmed(path, Snapshot::read(path)) {
            return read;
        }
    }
    Err(ConfigError {
        file: path.to_path_buf(),
        field: String::new(),
        position: None,
        message: format!("the files changed during each of {FORCED_TRIES} reads"),
    })
}

/// The first 32 bits of a digest, as metrics and logs show it.
fn short(digest: &[u8; 32]) -> u32 {
    u32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]])
}

fn unix_seconds(t: SystemTime) -> i64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// Where a configuration put in force was read.
#[derive(Debug, Clone, Copy)]
pub enum Origin<'a> {
    /// `files` files under `path`.
    Files {
        /// The file or directory.
        path: &'a Path,
        /// How many files.
        files: usize,
    },
    /// A response of the xDS server `server`, of this `version`.
    Xds {
        /// The server's address.
        server: &'a str,
        /// The response's `version_info`.
        version: &'a str,
    },
}

/// The configuration in force and where it comes from.
#[derive(Debug)]
pub struct ConfigCell {
    path: PathBuf,
    same: SameDomain,
    current: RwLock<Arc<Descriptors>>,
    seen: Mutex<Seen>,
    /// The hash and time of the configuration in force.
    in_force: Mutex<(u32, SystemTime)>,
    /// Whether a configuration was ever put in force (one from an xDS
    /// server is awaited).
    loaded: AtomicBool,
    /// Wakes those waiting for the first configuration.
    first: tokio::sync::Notify,
}

impl ConfigCell {
    /// Loads `path` (a file or a directory), each domain in one file; an
    /// error refuses to start.
    pub fn load(path: &Path) -> Result<ConfigCell, ConfigError> {
        ConfigCell::load_as(path, SameDomain::Refuse)
    }

    /// Loads `path`, a domain in several files as `same` says; an error
    /// refuses to start.
    pub fn load_as(path: &Path, same: SameDomain) -> Result<ConfigCell, ConfigError> {
        let snapshot = forced_read(path)?;
        let digest = snapshot.digest();
        let config = Descriptors::from_snapshot(&snapshot, same)?;
        Ok(ConfigCell {
            path: path.to_path_buf(),
            same,
            current: RwLock::new(Arc::new(config)),
            seen: Mutex::new(Seen::Files(digest)),
            in_force: Mutex::new((short(&digest), SystemTime::now())),
            loaded: AtomicBool::new(true),
            first: tokio::sync::Notify::new(),
        })
    }

    /// A configuration not read from files (tests).
    pub fn fixed(config: Descriptors) -> ConfigCell {
        ConfigCell {
            path: PathBuf::new(),
            same: SameDomain::Refuse,
            current: RwLock::new(Arc::new(config)),
            seen: Mutex::new(Seen::Nothing),
            in_force: Mutex::new((0, SystemTime::now())),
            loaded: AtomicBool::new(true),
            first: tokio::sync::Notify::new(),
        }
    }

    /// A configuration put in force from elsewhere ([`ConfigCell::install`],
    /// by the xDS client): empty, and not loaded, until the first one comes.
    pub fn awaiting(same: SameDomain) -> ConfigCell {
        ConfigCell {
            same,
            loaded: AtomicBool::new(false),
            ..ConfigCell::fixed(Descriptors::default())
        }
    }

    /// What a domain in several files (or resources) does.
    pub fn same_domain(&self) -> SameDomain {
        self.same
    }

    /// Whether a configuration is in force (false only while an awaited
    /// one has not come).
    pub fn loaded(&self) -> bool {
        self.loaded.load(Ordering::Acquire)
    }

    /// Returns once a configuration is in force.
    pub async fn wait_loaded(&self) {
        loop {
            let first = self.first.notified();
            if self.loaded() {
                return;
            }
            first.await;
        }
    }

    /// The configuration in force.
    pub fn current(&self) -> Arc<Descriptors> {
        Arc::clone(&self.current.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// Counts and logs the first load in `metrics` (made before they
    /// existed).
    pub fn record_first_load(&self, metrics: &Metrics) {
        let (hash, at) = *self.in_force.lock().unwrap_or_else(|e| e.into_inner());
        metrics.record_rls_reload(true);
        metrics.record_rls_config(hash, unix_seconds(at));
        let config = self.current();
        tracing::info!(
            path = %self.path.display(),
            domains = config.domains.len(),
            hash = %format!("{hash:08x}"),
            "descriptors loaded"
        );
    }

    /// Reads the files again now; on error the previous configuration stays.
    pub fn reload(&self, metrics: &Metrics) -> Result<(), ConfigError> {
        if self.path.as_os_str().is_empty() {
            tracing::info!("the descriptors are not read from files: nothing to re-read");
            return Ok(());
        }
        let read = forced_read(&self.path);
        self.apply(read, metrics)
    }

    /// Reloads when the files differ from the last read; `None` when they
    /// did not change, or changed while being read (the next poll sees
    /// them settled).
    pub fn reload_if_changed(&self, metrics: &Metrics) -> Option<Result<(), ConfigError>> {
        if self.path.as_os_str().is_empty() {
            return None;
        }
        // One read while nothing changes; a second only to confirm a change.
        let read = Snapshot::read(&self.path);
        if *self.seen.lock().unwrap_or_else(|e| e.into_inner()) == seen_of(&read) {
            return None;
        }
        let read = confirmed(&self.path, read)?;
        Some(self.apply(read, metrics))
    }

    /// Puts a read in force if it compiles; counts and logs either way.
    fn apply(
        &self,
        read: Result<Snapshot, ConfigError>,
        metrics: &Metrics,
    ) -> Result<(), ConfigError> {
        *self.seen.lock().unwrap_or_else(|e| e.into_inner()) = seen_of(&read);
        let loaded = read.and_then(|s| {
            Descriptors::from_snapshot(&s, self.same).map(|c| (c, s.files.len(), s.digest()))
        });
        match loaded {
            Ok((config, files, digest)) => {
                let from = Origin::Files {
                    path: &self.path,
                    files,
                };
                self.install(config, &digest, from, metrics);
                Ok(())
            }
            Err(e) => {
                self.refuse(&e, metrics);
                Err(e)
            }
        }
    }

    /// Puts `config` (whose source's digest is `digest`, read from `from`)
    /// in force; counts and logs it.
    pub fn install(
        &self,
        config: Descriptors,
        digest: &[u8; 32],
        from: Origin<'_>,
        metrics: &Metrics,
    ) {
        let domains = config.domains.len();
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(config);
        let (hash, now) = (short(digest), SystemTime::now());
        *self.in_force.lock().unwrap_or_else(|e| e.into_inner()) = (hash, now);
        self.loaded.store(true, Ordering::Release);
        self.first.notify_waiters();
        metrics.record_rls_reload(true);
        metrics.record_rls_config(hash, unix_seconds(now));
        let hash = format!("{hash:08x}");
        match from {
            Origin::Files { path, files } => {
                tracing::info!(path = %path.display(), files, domains, hash = %hash, "descriptors loaded")
            }
            Origin::Xds { server, version } => {
                tracing::info!(xds = %server, version = %version, domains, hash = %hash, "descriptors loaded")
            }
        }
    }

    /// Counts and logs a configuration refused; the one in force stays.
    pub fn refuse(&self, e: &ConfigError, metrics: &Metrics) {
        metrics.record_rls_reload(false);
        let hash = self.in_force.lock().unwrap_or_else(|e| e.into_inner()).0;
        tracing::error!(
            hash = %format!("{hash:08x}"),
            "descriptors refused, the configuration in force (hash) stays: {e}"
        );
    }
}

impl crate::watch::Reloadable for ConfigCell {
    const WHAT: &'static str = "descriptors";

    fn reload_now(&self, metrics: &Metrics) {
        let _ = self.reload(metrics);
    }

    fn reload_changed(&self, metrics: &Metrics) {
        let _ = self.reload_if_changed(metrics);
    }
}

/// Watches the files every `poll` and on SIGHUP, reloading on change, for
/// as long as the cell is in use.
pub fn spawn_watcher(cell: &Arc<ConfigCell>, metrics: Arc<Metrics>, poll: Duration) {
    crate::watch::spawn(cell, metrics, poll);
}
