//! The compiled configuration: immutable, validated, with every per-request
//! constant (shared-data key prefixes, overrides) computed once.

use crate::client_ip::ClientIpPolicy;
use crate::config::raw::{FailureMode, HeadersMode, Protocol, ServiceHeaders};
use crate::key::KeyPart;
use crate::matcher::Matcher;
use sluice_core::{Limit, Nanos};

/// A validated configuration, shared read-only by every request.
#[derive(Debug)]
pub struct Plan {
    /// Namespace of every counter.
    pub domain: String,
    /// Which rate-limit headers to send.
    pub headers: HeadersMode,
    /// How the client address is found and masked.
    pub client_ip: ClientIpPolicy,
    /// The global limiter, present when some limit is global.
    pub limiter: Option<LimiterTarget>,
    /// Slots per local limit.
    pub local_max_keys: u64,
    /// The denial response.
    pub response: DenyResponse,
    /// The rules, in configuration order.
    pub rules: Vec<Rule>,
    /// Shared-data key holding the slot-hashing seed of this domain.
    pub seed_key: String,
}

/// Where and how global limits are checked.
#[derive(Debug)]
pub struct LimiterTarget {
    /// Envoy cluster name.
    pub cluster: String,
    /// `:authority` of the call-out (empty with `protocol: rls`).
    pub authority: String,
    /// How the filter talks to the limiter.
    pub protocol: Protocol,
    /// Call-out timeout.
    pub timeout: Nanos,
    /// What to do when the limiter cannot answer.
    pub failure_mode: FailureMode,
    /// Which responses get a rate limit service's headers (always
    /// [`ServiceHeaders::Never`] with `protocol: sluice`, whose answers have
    /// none).
    pub service_headers: ServiceHeaders,
}

/// The response sent to a denied request (before the per-request headers).
#[derive(Debug)]
pub struct DenyResponse {
    /// HTTP status.
    pub status: u32,
    /// Body.
    pub body: String,
    /// Configured headers, lowercase names.
    pub headers: Vec<(String, String)>,
}

/// One compiled rule.
#[derive(Debug)]
pub struct Rule {
    /// The rule's name (unique; used in metrics, headers and keys).
    pub name: String,
    /// Which requests it applies to.
    pub matcher: Matcher,
    /// Parts of the key, joined with `|`.
    pub key: Vec<KeyPart>,
    /// The limits in configuration order.
    pub limits: Vec<RuleLimit>,
    /// Shadow mode: count but never deny.
    pub shadow: bool,
    /// Requests of this rule held in delay mode at once, per worker.
    pub max_queued: usize,
    /// What one request weighs in every limit of the rule.
    pub cost: Cost,
    /// Some elastic limit borrows from this rule: it is not applied to
    /// requests on its own, only consulted by the borrowing.
    pub pool: bool,
}

/// What a request weighs in a rule's limits: the units it consumes, and the
/// check's `hits` for a global limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cost {
    /// Every request weighs this much (1 or more; no more than any limit of
    /// the rule can admit).
    Fixed(u64),
    /// The weight is the non-negative integer in this request header
    /// (lowercase name). Missing or malformed: weight 1, counted as
    /// `cost_invalid`. Zero: the rule does not count the request.
    Header(String),
}

/// One limit of a rule.
#[derive(Debug)]
pub struct RuleLimit {
    /// Its configured name in the IETF rate-limit headers, if any.
    pub name: Option<String>,
    /// The limit.
    pub limit: Limit,
    /// Who decides it, and where its shared data lives.
    pub scope: LimitScope,
    /// Replacements of the limit for some keys, sorted by key.
    pub overrides: Vec<OverrideLimit>,
    /// Admission beyond the quota while a pool has headroom.
    pub elastic: Option<Elastic>,
    /// How a global limit's checks reach the limiter.
    pub sync: Sync,
    /// With `protocol: rls`, the descriptor this global limit sends (its
    /// `limit` is then only a stand-in: the service holds the real one).
    pub descriptor: Option<Vec<Entry>>,
}

/// One entry of a rate limit service descriptor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The entry's key.
    pub key: String,
    /// Where its value comes from.
    pub value: EntryValue,
}

/// Where a descriptor entry's value comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntryValue {
    /// Always this text.
    Fixed(String),
    /// The request's value of this key part of the rule.
    Part(KeyPart),
}

/// How a global limit's checks reach the limiter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sync {
    /// Every request makes its own call.
    PerRequest,
    /// Requests with the same check share calls (see [`crate::coalesce`]).
    Coalesce,
    /// This Envoy spends leases of the quota (see [`crate::lease`]).
    Lease(LeasePolicy),
}

/// How a leased limit's leases are sized and kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeasePolicy {
    /// The most units of a key this Envoy holds, in millionths of the
    /// limit's `requests` (`max_share`).
    pub share_ppm: u64,
    /// How long a grant may be spent (never past the window's end).
    pub ttl: Nanos,
    /// Prefix of the lease slots in shared data (the slot number follows).
    pub prefix: String,
}

impl LeasePolicy {
    /// The most units of a key under `limit` this Envoy holds (0: the share
    /// is below one unit, so no lease is asked for).
    pub fn max_units(&self, limit: &Limit) -> u64 {
        let units = u128::from(limit.requests) * u128::from(self.share_ppm) / 1_000_000;
        u64::try_from(units).unwrap_or(u64::MAX)
    }
}

/// An elastic limit's borrowing: a request its own quota denies passes if
/// the key's extra allowance (`ceiling - requests` per window) and every
/// limit of the pool rule admit it; it then consumes both.
#[derive(Debug)]
pub struct Elastic {
    /// The extra allowance: the limit's algorithm and window with
    /// `ceiling - requests` requests and the burst scaled alike.
    pub extra: Limit,
    /// The index of the pool rule.
    pub pool: usize,
    /// The pool rule's name, as configured.
    pub pool_name: String,
    /// Where the extra allowance lives: for a local limit, the prefix of its
    /// slot keys; for a global one, the rule label of its limiter keys.
    pub place: String,
}

impl RuleLimit {
    /// The position in [`overrides`](Self::overrides) of the override for
    /// the request key `key`, if any.
    pub fn override_index(&self, key: &str) -> Option<usize> {
        if self.overrides.is_empty() {
            return None;
        }
        self.overrides
            .binary_search_by(|o| o.key.as_str().cmp(key))
            .ok()
    }

    /// The limit that applies to the request key `key`: its override's, or
    /// this one.
    pub fn limit_for(&self, key: &str) -> &Limit {
        self.override_index(key)
            .and_then(|i| self.overrides.get(i))
            .map_or(&self.limit, |o| &o.limit)
    }
}

/// Who decides a limit, and where its shared data lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LimitScope {
    /// Decided by this filter; the state of a key lives in shared data under
    /// `state_prefix` followed by the key's slot number (or, for an override
    /// key, under the override's `state_key`).
    Local {
        /// Prefix of the slot keys.
        state_prefix: String,
    },
    /// Decided by the limiter; shared data holds only the over-limit cache,
    /// under `deny_prefix` followed by the key's slot number.
    Global {
        /// Prefix of the over-limit cache keys.
        deny_prefix: String,
    },
}

/// A limit replaced for one key.
#[derive(Debug)]
pub struct OverrideLimit {
    /// The request key text it applies to.
    pub key: String,
    /// The replacement limit.
    pub limit: Limit,
    /// For a local limit, the dedicated shared-data key of this key's state
    /// (empty for a global limit: the limiter keeps its state).
    pub state_key: String,
}
