//! Files re-read when they change (polled) and on SIGHUP: the descriptor
//! configuration and the listeners' TLS certificates.

use crate::metrics::Metrics;
use std::sync::Arc;
use std::time::Duration;

/// Something read from files, replaced whole when they change.
pub trait Reloadable: Send + Sync + 'static {
    /// What the log line of a SIGHUP names.
    const WHAT: &'static str;

    /// Reads the files again now (a failure is logged and counted, and what
    /// was in force stays).
    fn reload_now(&self, metrics: &Metrics);

    /// Reads the files again if they changed since the last read.
    fn reload_changed(&self, metrics: &Metrics);
}

/// Watches `cell`'s files every `poll` and on SIGHUP, reloading on change,
/// for as long as the cell is in use.
pub fn spawn<T: Reloadable>(cell: &Arc<T>, metrics: Arc<Metrics>, poll: Duration) {
    let weak = Arc::downgrade(cell);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(poll.max(Duration::from_millis(10)));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        #[cfg(unix)]
        let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
        loop {
            #[cfg(unix)]
            let forced = {
                let hangup = async {
                    match hup.as_mut() {
                        Some(s) => {
                            s.recv().await;
                        }
                        None => std::future::pending::<()>().await,
                    }
                };
                tokio::select! {
                    _ = tick.tick() => false,
                    () = hangup => true,
                }
            };
            #[cfg(not(unix))]
            let forced = {
                tick.tick().await;
                false
            };
            let Some(cell) = weak.upgrade() else { return };
            if forced {
                tracing::info!("SIGHUP: reloading {}", T::WHAT);
                cell.reload_now(&metrics);
            } else {
                cell.reload_changed(&metrics);
            }
        }
    });
}
