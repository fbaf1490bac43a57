//! What a store decides: the items of a check, rate limits or concurrency
//! limits, what a permits operation found, and the items of a charge.

use sluice_core::{Adjust, Holder, Limit, Nanos, Permits};

/// One limit to decide, with the identity of its stored state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreItem {
    /// A rate limit (one of sluice-core's algorithms).
    Rate(RateItem),
    /// A concurrency limit: permits taken for a holder.
    Permits(PermitItem),
}

/// A rate limit to decide.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateItem {
    /// The state's identity (`domain/key|algorithm|window_ms`).
    pub id: String,
    /// The limit.
    pub limit: Limit,
    /// The request's weight under this limit.
    pub hits: u64,
    /// Leases: when the check is admitted, the most units to take beyond
    /// `hits` (0: none; only in a check of one request).
    pub lease: u64,
    /// Leases: units to give back before deciding (0: none; only in a
    /// check of one request).
    pub returned: u64,
    /// How long before the check the `returned` units were consumed, on
    /// the store's clock.
    pub returned_age: Nanos,
    /// Priority: units that must still fit beside `hits` for the request
    /// to pass, not consumed (0: none; never with a lease or delay mode).
    pub reserve: u64,
    /// Penalty box: once this limit refuses a request over it, its key is
    /// refused for this long (0: no block; never with a lease or delay
    /// mode). An item of weight 0 reads the block in force and never
    /// starts one.
    pub block: Nanos,
}

/// A concurrency limit to decide: `hits` permits for `holder`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PermitItem {
    /// The state's identity (`domain/key|concurrency`, see
    /// [`permits_id`](super::permits_id)).
    pub id: String,
    /// The limit: how many units at once, how long a holder's permits
    /// count after its last acquire or renewal.
    pub permits: Permits,
    /// Who takes the permits.
    pub holder: Holder,
    /// The request's weight: the permits it takes.
    pub hits: u64,
}

impl StoreItem {
    /// A rate limit weighing `hits`, without lease or returns.
    pub fn new(id: String, limit: Limit, hits: u64) -> StoreItem {
        StoreItem::Rate(RateItem::new(id, limit, hits))
    }

    /// The state's identity.
    pub fn id(&self) -> &str {
        match self {
            StoreItem::Rate(r) => &r.id,
            StoreItem::Permits(p) => &p.id,
        }
    }

    /// The request's weight under this limit.
    pub fn hits(&self) -> u64 {
        match self {
            StoreItem::Rate(r) => r.hits,
            StoreItem::Permits(p) => p.hits,
        }
    }

    /// The quota a decision reports as its `limit`: requests per window,
    /// or the permits.
    pub fn quota(&self) -> u64 {
        match self {
            StoreItem::Rate(r) => r.limit.requests,
            StoreItem::Permits(p) => p.permits.max,
        }
    }

    /// The rate limit, when this is one.
    pub fn rate(&self) -> Option<&RateItem> {
        match self {
            StoreItem::Rate(r) => Some(r),
            StoreItem::Permits(_) => None,
        }
    }

    /// Whether this item takes a lease or gives units back.
    pub fn leases(&self) -> bool {
        self.rate().is_some_and(RateItem::leases)
    }
}

impl RateItem {
    /// A rate limit weighing `hits`, without lease or returns.
    pub fn new(id: String, limit: Limit, hits: u64) -> RateItem {
        RateItem {
            id,
            limit,
            hits,
            lease: 0,
            returned: 0,
            returned_age: 0,
            reserve: 0,
            block: 0,
        }
    }

    /// Whether this item takes a lease or gives units back.
    pub fn leases(&self) -> bool {
        self.lease != 0 || self.returned != 0
    }
}

impl From<RateItem> for StoreItem {
    fn from(r: RateItem) -> StoreItem {
        StoreItem::Rate(r)
    }
}

impl From<PermitItem> for StoreItem {
    fn from(p: PermitItem) -> StoreItem {
        StoreItem::Permits(p)
    }
}

/// What [`Store::permits`](super::Store::permits) found, one flag per entry
/// of each list, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PermitsOutcome {
    /// Per `release` entry: the holder held permits on the key and gave
    /// some back.
    pub released: Vec<bool>,
    /// Per `renew` entry: the holder still held permits on the key (after
    /// the releases) and they were renewed.
    pub renewed: Vec<bool>,
}

/// A rate limit adjusted once a request's real cost is known
/// ([`Store::adjust`](super::Store::adjust)): charged, possibly into debt,
/// or given units back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdjustItem {
    /// The state's identity, as a check's ([`state_id`](super::state_id)).
    pub id: String,
    /// The limit, as in its checks.
    pub limit: Limit,
    /// A charge, or a refund of units consumed `age` before the store's
    /// clock reading.
    pub adjust: Adjust,
}
