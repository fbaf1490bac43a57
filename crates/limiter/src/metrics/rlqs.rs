//! The rate limit quota service's metrics: streams open, usage reports
//! received, assignments sent by kind.

use super::labels::{Counters, KindLabel};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// The kinds of action sent, shown from the start at zero.
const KINDS: [&str; 4] = ["token_bucket", "allow_all", "deny_all", "abandon"];

#[derive(Debug, Default)]
pub(super) struct Rlqs {
    streams: Gauge,
    reports: Counter,
    assignments: Counters<KindLabel>,
}

impl Rlqs {
    pub(super) fn register(&self, r: &mut Registry) {
        r.register(
            "sluice_limiter_rlqs_streams",
            "RLQS streams open now",
            self.streams.clone(),
        );
        r.register(
            "sluice_limiter_rlqs_reports",
            "RLQS bucket usage reports received",
            self.reports.clone(),
        );
        r.register(
            "sluice_limiter_rlqs_assignments",
            "RLQS bucket actions sent, by kind (token_bucket, allow_all, deny_all, abandon)",
            self.assignments.clone(),
        );
        for kind in KINDS {
            self.assignments
                .get_or_create(&KindLabel { kind })
                .inc_by(0);
        }
    }

    pub(super) fn stream_opened(&self) -> StreamGuard {
        self.streams.inc();
        StreamGuard(self.streams.clone())
    }

    pub(super) fn reports(&self, n: usize) {
        self.reports.inc_by(u64::try_from(n).unwrap_or(u64::MAX));
    }

    pub(super) fn assignment(&self, kind: &str) {
        let kind = KINDS
            .iter()
            .find(|k| **k == kind)
            .copied()
            .unwrap_or("_other");
        self.assignments.get_or_create(&KindLabel { kind }).inc();
    }

    pub(super) fn assignments(&self, kind: &'static str) -> u64 {
        self.assignments.get_or_create(&KindLabel { kind }).get()
    }
}

/// An open stream, counted until dropped.
#[derive(Debug)]
pub struct StreamGuard(Gauge);

impl Drop for StreamGuard {
    fn drop(&mut self) {
        self.0.dec();
    }
}
