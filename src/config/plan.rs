//! The compiled configuration: immutable, validated, with every per-request
//! constant (store key prefixes, override tables) computed once.

use crate::client_ip::ClientIpPolicy;
use crate::config::raw::{FailureMode, HeadersMode};
use crate::key::KeyPart;
use crate::matcher::Matcher;
use sluice_core::{Limit, Nanos};
use std::collections::BTreeMap;

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
    /// `:authority` of the call-out.
    pub authority: String,
    /// Call-out timeout.
    pub timeout: Nanos,
    /// What to do when the limiter cannot answer.
    pub failure_mode: FailureMode,
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
    /// Override key text -> index in `override_sets`.
    pub overrides: BTreeMap<String, usize>,
    /// Per override, the replacement of each limit (`None`: not overridden).
    pub override_sets: Vec<Vec<Option<OverrideLimit>>>,
    /// Shadow mode: count but never deny.
    pub shadow: bool,
}

/// One limit of a rule.
#[derive(Debug)]
pub struct RuleLimit {
    /// The limit.
    pub limit: Limit,
    /// Decided by the limiter cluster rather than locally.
    pub global: bool,
    /// Local: shared-data key prefix; the slot number is appended.
    /// Global: prefix of the over-limit cache keys; the slot number is appended.
    pub store_prefix: String,
}

/// A limit replaced for one key.
#[derive(Debug)]
pub struct OverrideLimit {
    /// The replacement limit.
    pub limit: Limit,
    /// Local: the dedicated shared-data key of this key's state.
    pub store_key: String,
}
