//! Connection threads: each connection (HTTP or gRPC) is served, from its
//! first byte to its close, by one thread running a single-threaded runtime
//! of its own.
//!
//! On a work-stealing runtime a connection's wake-ups may land on any worker,
//! and an idle worker is woken to steal work that the busy one would have
//! taken next: futex wake-ups and context switches on every request, most
//! of the limiter's CPU beyond the kernel's own network path when it shares
//! cores with its clients. Pinning a connection to one thread keeps its
//! socket's readiness and its timers on that thread, and an HTTP/1
//! connection's requests and a gRPC connection's calls too (the HTTP API's
//! HTTP/2 streams go to the accepting runtime's workers: one client's
//! multiplexed checks use every core; Envoy's gRPC clients open a
//! connection per worker instead). Connections are handed out in turn.

use std::future::Future;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::runtime::{Builder, Handle};
use tokio::sync::oneshot;

/// Connection threads, each a single-threaded runtime, handed out in turn.
pub struct Spread {
    handles: Vec<Handle>,
    next: AtomicUsize,
    /// Dropped with the spread: each thread then ends, and with it the
    /// tasks still on its runtime.
    _stop: Vec<oneshot::Sender<()>>,
}

impl Spread {
    /// `threads` connection threads (at least one), each with its own
    /// single-threaded runtime.
    pub fn threads(threads: usize) -> io::Result<Spread> {
        let mut handles = Vec::new();
        let mut stops = Vec::new();
        for i in 0..threads.max(1) {
            let runtime = Builder::new_current_thread().enable_all().build()?;
            let (stop, stopped) = oneshot::channel::<()>();
            handles.push(runtime.handle().clone());
            stops.push(stop);
            std::thread::Builder::new()
                .name(format!("sluice-conn-{i}"))
                .spawn(move || {
                    runtime.block_on(async {
                        let _ = stopped.await;
                    });
                })?;
        }
        Ok(Spread {
            handles,
            next: AtomicUsize::new(0),
            _stop: stops,
        })
    }

    /// Runs `task` (a connection) on the next thread.
    pub fn spawn<F>(&self, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let i = self.next.fetch_add(1, Ordering::Relaxed);
        match self.handles.get(i % self.handles.len().max(1)) {
            Some(handle) => {
                handle.spawn(task);
            }
            // Never empty (`threads` makes at least one): served here.
            None => {
                tokio::spawn(task);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::sync::{Arc, Mutex};

    #[tokio::test]
    async fn connections_go_to_each_thread_in_turn() {
        let spread = Spread::threads(2).unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (tx, mut rx) = tokio::sync::mpsc::channel(4);
        for _ in 0..4 {
            let (seen, tx) = (Arc::clone(&seen), tx.clone());
            spread.spawn(async move {
                let name = std::thread::current().name().unwrap_or("").to_string();
                seen.lock().unwrap().push(name);
                tx.send(()).await.unwrap();
            });
        }
        for _ in 0..4 {
            rx.recv().await.unwrap();
        }
        let seen = seen.lock().unwrap().clone();
        let names: HashSet<&str> = seen.iter().map(String::as_str).collect();
        assert_eq!(names, HashSet::from(["sluice-conn-0", "sluice-conn-1"]));
        assert_eq!(seen.iter().filter(|n| *n == "sluice-conn-0").count(), 2);
    }

    #[tokio::test]
    async fn dropping_the_spread_ends_its_threads() {
        let spread = Spread::threads(1).unwrap();
        let (held, never) = oneshot::channel::<()>();
        let (ended_tx, ended) = oneshot::channel::<()>();
        spread.spawn(async move {
            // Dropped, with its task, when the runtime ends.
            let _guard = DropSignal(Some(ended_tx));
            let _ = never.await;
        });
        drop(spread);
        // The task's state is dropped whether or not it ever ran.
        let ended = tokio::time::timeout(std::time::Duration::from_secs(10), ended).await;
        assert!(ended.is_ok(), "the thread's runtime did not end");
        drop(held);
    }

    struct DropSignal(Option<oneshot::Sender<()>>);

    impl Drop for DropSignal {
        fn drop(&mut self) {
            if let Some(tx) = self.0.take() {
                let _ = tx.send(());
            }
        }
    }
}
