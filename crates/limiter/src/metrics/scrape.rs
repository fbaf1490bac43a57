//! What `/metrics` reads at scrape time: the build information and the
//! store's gauges.

use super::labels::BuildLabels;
use super::Histogram;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// What `/metrics` says about the store and the build besides the counters.
#[derive(Debug, Clone, Copy)]
pub struct StoreGauges<'a> {
    /// `memory`, `redis`, `redis_cluster` or `redis_sentinel`.
    pub kind: &'a str,
    /// Last known state of the store.
    pub up: bool,
    /// Memory store: keys held and `--max-keys`.
    pub keys: Option<(usize, usize)>,
    /// Memory store: keys a penalty box holds.
    pub blocked: Option<usize>,
    /// Redis: round-trip times of the decision calls.
    pub round_trips: Option<&'a Histogram>,
}

/// Registers the build information and the store's gauges, read at scrape
/// time.
pub(super) fn register_store(r: &mut Registry, g: &StoreGauges<'_>) {
    let gauge = |v: i64| {
        let g: Gauge = Gauge::default();
        g.set(v);
        g
    };
    let build: Family<BuildLabels, Gauge> = Family::default();
    build
        .get_or_create(&BuildLabels {
            version: env!("CARGO_PKG_VERSION"),
            store: g.kind.to_string(),
        })
        .set(1);
    r.register(
        "sluice_limiter_build_info",
        "The limiter's version and store kind (always 1)",
        build,
    );
    r.register(
        "sluice_limiter_store_up",
        "Whether the store answered its last call or probe (1) or not (0)",
        gauge(i64::from(g.up)),
    );
    if let Some((held, max)) = g.keys {
        let count = |n: usize| gauge(i64::try_from(n).unwrap_or(i64::MAX));
        r.register(
            "sluice_limiter_store_keys",
            "Keys the memory store holds",
            count(held),
        );
        r.register(
            "sluice_limiter_store_max_keys",
            "Most keys the memory store holds (--max-keys)",
            count(max),
        );
    }
    if let Some(blocked) = g.blocked {
        r.register(
            "sluice_limiter_store_blocked_keys",
            "Keys a penalty box holds in the memory store (block_ms)",
            gauge(i64::try_from(blocked).unwrap_or(i64::MAX)),
        );
    }
    if let Some(h) = g.round_trips {
        r.register(
            "sluice_limiter_redis_round_trip_seconds",
            "Time from sending a decision call to Redis to its answer",
            h.0.clone(),
        );
    }
}
