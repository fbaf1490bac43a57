//! The label sets of the limiter's metrics, and the bound on the label
//! sets that clients choose.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use std::hash::Hash;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A listener of the limiter, as its connection metrics label it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listener {
    /// `--listen`: the HTTP API.
    Http,
    /// `--grpc-listen`: the rate limit service.
    Grpc,
    /// `--rlqs-listen`: the rate limit quota service.
    Rlqs,
}

impl Listener {
    /// The `listener` label's value.
    pub fn label(self) -> &'static str {
        match self {
            Listener::Http => "http",
            Listener::Grpc => "grpc",
            Listener::Rlqs => "rlqs",
        }
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ListenerLabel {
    pub(super) listener: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct KindLabel {
    pub(super) kind: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ResultLabel {
    pub(super) result: String,
}

/// Every reason a store operation fails for, as `store_errors_by_reason`
/// labels it (and `StoreError::reason` names it): each shown from the start.
pub const STORE_ERROR_REASONS: [&str; 4] = ["timeout", "unavailable", "protocol", "auth"];

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ReasonLabel {
    pub(super) reason: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct DomainResult {
    pub(super) domain: String,
    pub(super) result: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct DomainLabel {
    pub(super) domain: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct DescriptorResult {
    pub(super) domain: String,
    pub(super) descriptor: String,
    pub(super) result: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct BuildLabels {
    pub(super) version: &'static str,
    pub(super) store: String,
}

pub(super) type Counters<L> = Family<L, Counter>;

/// A labelled counter whose label sets are bounded: past `max` series, new
/// label sets count under `other(labels)`.
#[derive(Debug)]
pub(super) struct Bounded<L> {
    pub(super) family: Counters<L>,
    /// Series created so far (concurrent first events may count one twice:
    /// the bound only has to stop unbounded growth).
    series: AtomicUsize,
    max: usize,
    other: fn(L) -> L,
}

impl<L: Clone + Hash + Eq> Bounded<L> {
    pub(super) fn new(max: usize, other: fn(L) -> L) -> Self {
        Bounded {
            family: Family::default(),
            series: AtomicUsize::new(0),
            max,
            other,
        }
    }

    /// Counts one event under `labels`.
    pub(super) fn inc(&self, labels: L) {
        if let Some(c) = self.family.get(&labels) {
            c.inc();
            return;
        }
        let labels = if self.series.fetch_add(1, Ordering::Relaxed) >= self.max {
            (self.other)(labels)
        } else {
            labels
        };
        self.family.get_or_create(&labels).inc();
    }

    pub(super) fn get(&self, labels: &L) -> u64 {
        self.family.get(labels).map_or(0, |c| c.get())
    }
}

pub(super) fn result_label(result: &str) -> ResultLabel {
    ResultLabel {
        result: result.to_string(),
    }
}

pub(super) fn listener_label(listener: Listener) -> ListenerLabel {
    ListenerLabel {
        listener: listener.label(),
    }
}

pub(super) fn reload_label(ok: bool) -> ResultLabel {
    result_label(if ok { "ok" } else { "error" })
}

pub(super) fn descriptor_labels(domain: &str, descriptor: &str, result: &str) -> DescriptorResult {
    DescriptorResult {
        domain: domain.to_string(),
        descriptor: descriptor.to_string(),
        result: result.to_string(),
    }
}
