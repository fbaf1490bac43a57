//! The descriptor configuration in force, replaced whole when its file (or
//! directory) changes or on SIGHUP.
//!
//! Counters live in the store under keys derived from the domain, the
//! request's entries, the algorithm and the window only, so a reload keeps
//! the state of every limit whose algorithm and window did not change (a
//! new `requests_per_unit` applies to the running window). A file that
//! does not load is refused: the error is logged and counted, and the
//! previous configuration stays in force until the files change again.

use super::config::{files_of, ConfigError, Descriptors};
use crate::metrics::Metrics;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime};

/// What identifies one version of the files: each file's path, modification
/// time and length (the directory's own entry for a file added or removed).
type Fingerprint = Vec<(PathBuf, Option<SystemTime>, u64)>;

fn fingerprint(path: &Path) -> Fingerprint {
    let mut out: Fingerprint = Vec::new();
    let mut push = |p: &Path| {
        let meta = std::fs::metadata(p).ok();
        out.push((
            p.to_path_buf(),
            meta.as_ref().and_then(|m| m.modified().ok()),
            meta.as_ref().map_or(0, |m| m.len()),
        ));
    };
    push(path);
    if let Ok(files) = files_of(path) {
        for f in files.iter().filter(|f| f.as_path() != path) {
            push(f);
        }
    }
    out
}

/// The configuration in force and where it comes from.
#[derive(Debug)]
pub struct ConfigCell {
    path: PathBuf,
    current: RwLock<Arc<Descriptors>>,
    /// The files as last read, whether they loaded or not.
    seen: Mutex<Fingerprint>,
}

impl ConfigCell {
    /// Loads `path` (a file or a directory); an error refuses to start.
    pub fn load(path: &Path) -> Result<ConfigCell, ConfigError> {
        let seen = fingerprint(path);
        let config = Descriptors::load(path)?;
        Ok(ConfigCell {
            path: path.to_path_buf(),
            current: RwLock::new(Arc::new(config)),
            seen: Mutex::new(seen),
        })
    }

    /// A configuration not read from files (tests).
    pub fn fixed(config: Descriptors) -> ConfigCell {
        ConfigCell {
            path: PathBuf::new(),
            current: RwLock::new(Arc::new(config)),
            seen: Mutex::new(Vec::new()),
        }
    }

    /// The configuration in force.
    pub fn current(&self) -> Arc<Descriptors> {
        Arc::clone(&self.current.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// Reads the files again now; on error the previous configuration stays.
    pub fn reload(&self, metrics: &Metrics) -> Result<(), ConfigError> {
        if self.path.as_os_str().is_empty() {
            return Ok(());
        }
        let seen = fingerprint(&self.path);
        *self.seen.lock().unwrap_or_else(|e| e.into_inner()) = seen;
        match Descriptors::load(&self.path) {
            Ok(config) => {
                let domains = config.domains.len();
                *self.current.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(config);
                metrics.record_rls_reload(true);
                tracing::info!(path = %self.path.display(), domains, "descriptors loaded");
                Ok(())
            }
            Err(e) => {
                metrics.record_rls_reload(false);
                tracing::error!(
                    "descriptors refused, the previous configuration stays in force: {e}"
                );
                Err(e)
            }
        }
    }

    /// Reloads when the files differ from the last read; `None` when they
    /// did not change.
    pub fn reload_if_changed(&self, metrics: &Metrics) -> Option<Result<(), ConfigError>> {
        if self.path.as_os_str().is_empty() {
            return None;
        }
        let now = fingerprint(&self.path);
        if *self.seen.lock().unwrap_or_else(|e| e.into_inner()) == now {
            return None;
        }
        Some(self.reload(metrics))
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
