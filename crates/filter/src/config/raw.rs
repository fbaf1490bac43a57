//! The configuration as written: types mirroring the JSON contract, each
//! described once (`describe.rs`): a struct's fields with their JSON names,
//! types, defaults and docs, an enum's variants with their names. That one
//! description makes the type, its reader and, with the `schema` feature,
//! the JSON Schema (`schema.rs`).
//!
//! The reference of every field (default, range, meaning) is
//! `docs/reference/configuration.md`; the field docs
//! here give a one-line meaning, and `tests/test_docs.py` checks that the
//! reference lists exactly the fields of these types.
//!
//! Every struct refuses unknown fields so that a typo is an error rather than
//! a silently ignored setting. The forms that are one of several JSON types
//! (`RawKeyPart` in `raw/key.rs`, and a cost's forms in `raw/cost.rs`: `RawCost`,
//! `RawEstimate`, `RawPlaces`, `RawTimes`) are read by hand in
//! [`from_json`](super::from_json). Values are checked and converted by
//! [`compile`](super::compile).

use super::describe::{raw_enum, raw_struct, read_names};
use super::reader::Node;
pub use crate::client_ip::EnvoyXff;
pub use crate::table::WhenFull;
pub use cost::{
    RawCost, RawEstimate, RawMetadataPlace, RawPlace, RawPlaces, RawPricedPlace, RawResponseCost,
    RawTimes, COST_EXPECTED,
};

pub use body::HeadersWhileBody;
pub use key::{RawKeyPart, RawRefinedPart};
pub use outcome::{RawCountWhen, RawResponseHeader};
pub use topkeys::{KeyShown, RawTopLimitedKeys};

mod body;
mod cost;
mod key;
mod outcome;
mod topkeys;

read_names!(EnvoyXff {
    Detect = "detect",
    Appended = "appended",
    AsSent = "as_sent",
});

read_names!(WhenFull {
    Share = "share",
    Evict = "evict",
});

raw_struct! {
/// The whole filter configuration.
#[derive(Debug)]
pub struct RawConfig {
    /// Namespace of every counter; required and non-empty.
    pub domain: String,
    /// Which rate-limit headers to send.
    #[default]
    pub headers: HeadersMode,
    /// How the client address is found and masked.
    #[default]
    pub client_ip: RawClientIp,
    /// The global limiter; required when some limit has `scope: global`.
    #[default]
    pub limiter: Option<RawLimiter>,
    /// Keys each local limit keeps exactly (bounded key space).
    #[default = 100_000]
    pub local_max_keys: u64,
    /// What a key finds when its local limit's table is full of live keys.
    #[default]
    #[schema(schemars(extend("default" = "share")))]
    pub local_when_full: WhenFull,
    /// The `payload_in_metadata` name of Envoy's `jwt_authn` filter, under
    /// which `jwt:` key parts read claims.
    #[default = crate::key::DEFAULT_JWT_PAYLOAD.to_string()]
    pub jwt_payload_in_metadata: String,
    /// The response sent to denied requests.
    #[default]
    pub response: RawResponse,
    /// The rules; all matching rules apply.
    #[default]
    pub rules: Vec<RawRule>,
    /// A path the filter answers itself with the caller's quotas.
    #[default]
    pub quota_endpoint: Option<RawQuotaEndpoint>,
    /// The keys each rule refused most, kept across workers (off unless
    /// given).
    #[default]
    pub top_limited_keys: Option<RawTopLimitedKeys>,
    /// Sets filter state `wasm.sluice_key` of a refused request to the
    /// refusing limit's key, shown so (off unless given).
    #[default]
    pub access_log_key: Option<KeyShown>,
    /// What a request's headers do while its decision waits for its body.
    #[default]
    #[schema(schemars(extend("default" = "forward")))]
    pub headers_while_reading_body: HeadersWhileBody,
}
}

raw_struct! {
/// The quota endpoint: a path answered by the filter with the caller's
/// own quota under each rule, consuming nothing.
#[derive(Debug)]
pub struct RawQuotaEndpoint {
    /// The path (exact, without query) answered, e.g. `/rate_limit`.
    pub path: String,
}
}

raw_enum! {
/// Which rate-limit headers Sluice adds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum HeadersMode {
    /// No rate-limit headers (a denial still carries `retry-after`).
    None = "none",
    /// `x-ratelimit-limit`, `x-ratelimit-remaining`, `x-ratelimit-reset`.
    Legacy = "legacy",
    /// `ratelimit` and `ratelimit-policy` (draft-ietf-httpapi-ratelimit-headers).
    #[default]
    Ietf = "ietf",
    /// Both the legacy and the IETF headers.
    Both = "both",
}
}

raw_struct! {
/// Client address settings.
#[derive(Debug)]
#[default]
pub struct RawClientIp {
    /// Proxies in front of Envoy whose `x-forwarded-for` entries are trusted.
    #[default]
    pub xff_trusted_hops: u64,
    /// Whether Envoy appends to `x-forwarded-for` (its `use_remote_address`):
    /// `detect` reads the downstream address of each request to tell.
    #[default]
    #[schema(schemars(extend("default" = "detect")))]
    pub envoy_xff: EnvoyXff,
    /// IPv4 prefix length that identifies a client.
    #[default = 32]
    pub ipv4_prefix: u64,
    /// IPv6 prefix length that identifies a client.
    #[default = 64]
    pub ipv6_prefix: u64,
}
}

raw_struct! {
/// The global limiter cluster.
#[derive(Debug)]
pub struct RawLimiter {
    /// Envoy cluster of `sluice-limiter` instances (or of a rate limit
    /// service, with `protocol: rls`).
    pub cluster: String,
    /// `:authority` of the call-out (`protocol: sluice` only).
    #[default]
    pub authority: Option<String>,
    /// The limiter's protocol.
    #[default]
    pub protocol: Protocol,
    /// Call-out timeout.
    #[default = String::from("50ms")]
    pub timeout: String,
    /// What to do when the limiter cannot answer.
    #[default]
    pub failure_mode: FailureMode,
    /// Which responses get the headers a rate limit service asks for
    /// (`protocol: rls` only; default `always`).
    #[default]
    pub service_headers: Option<ServiceHeaders>,
}
}

raw_enum! {
/// Which responses get a rate limit service's `response_headers_to_add`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ServiceHeaders {
    /// Denials and admitted requests' responses, as Envoy's ratelimit
    /// filter does.
    #[default]
    Always = "always",
    /// Denials only.
    Denied = "denied",
    /// None.
    Never = "never",
}
}

raw_enum! {
/// How the filter talks to the limiter cluster.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Protocol {
    /// `sluice-limiter`'s HTTP/JSON API.
    #[default]
    Sluice = "sluice",
    /// Envoy's rate limit service protocol (gRPC `ShouldRateLimit`).
    Rls = "rls",
}
}

raw_enum! {
/// What happens to a request whose global check failed (error, timeout, bad answer).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum FailureMode {
    /// Let the request through (fail open).
    #[default]
    Allow = "allow",
    /// Deny the request (fail closed).
    Deny = "deny",
}
}

raw_struct! {
/// The denial response.
#[derive(Debug)]
#[default]
pub struct RawResponse {
    /// HTTP status, 400 to 599.
    #[default = 429]
    pub status: u64,
    /// Response body.
    #[default = String::from("rate limited\n")]
    pub body: String,
    /// Extra response headers.
    // An object in the JSON; read as pairs sorted by name.
    #[default]
    #[read_with = Node::string_map]
    #[schema(serde(serialize_with = "headers_as_object"))]
    #[schema(schemars(with = "std::collections::BTreeMap<String, String>"))]
    pub headers: Vec<(String, String)>,
}
}

/// The schema's default of `response.headers`: an object, as written.
#[cfg(feature = "schema")]
fn headers_as_object<S: serde::Serializer>(
    headers: &[(String, String)],
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.collect_map(headers.iter().map(|(name, value)| (name, value)))
}

raw_struct! {
/// One rule.
#[derive(Debug)]
pub struct RawRule {
    /// Unique name, `[A-Za-z0-9_.-]+`.
    pub name: String,
    /// Which requests the rule applies to; absent matches all.
    #[default]
    #[rename = "match"]
    pub matcher: RawMatch,
    /// Key parts (`client_ip`, `header:NAME`, `jwt:CLAIM` ... or
    /// `{"part", "regex", "default"}`).
    #[schema(schemars(schema_with = "crate::config::schema::key_parts::<RawRefinedPart>"))]
    pub key: Vec<RawKeyPart>,
    /// The limits, all of which must pass.
    pub limits: Vec<RawLimit>,
    /// Per-key exceptions.
    #[default]
    pub overrides: Vec<RawOverride>,
    /// Enforce or only observe.
    #[default]
    pub mode: Mode,
    /// What one request weighs: a fixed integer, `header:NAME`, or
    /// `{"estimate", "response"}` for a cost known from the response.
    #[default]
    #[schema(schemars(schema_with = "crate::config::schema::cost::<RawResponseCost>"))]
    pub cost: RawCost,
    /// Requests of this rule held in delay mode at once, per worker.
    #[default = 1000]
    pub max_queued: u64,
    /// Priority classes: each may use a share of the rule's limits.
    #[default]
    pub priority: Option<RawPriority>,
}
}

raw_struct! {
/// A rule's priority classes: the class of a request is the value of a key
/// part; each class may use a share of the rule's limits.
#[derive(Debug)]
pub struct RawPriority {
    /// The key part whose value names the request's class.
    #[schema(schemars(schema_with = "crate::config::schema::key_part"))]
    pub from: String,
    /// The classes and their shares.
    pub classes: Vec<RawPriorityClass>,
    /// The class of a request whose value is missing or names no class.
    pub default: String,
}
}

raw_struct! {
/// A priority class and the share of the limits its requests may use.
#[derive(Debug)]
pub struct RawPriorityClass {
    /// The value of `from` that names the class.
    pub name: String,
    /// Percent of each limit the class may use, 1 to 100.
    pub share: u64,
}
}

raw_enum! {
/// Whether a rule blocks requests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Mode {
    /// Deny requests over the limit.
    #[default]
    Enforce = "enforce",
    /// Count and report, never deny.
    Shadow = "shadow",
}
}

raw_struct! {
/// Request matching conditions; all given conditions must hold.
#[derive(Debug)]
#[default]
pub struct RawMatch {
    /// The path (without query) starts with this.
    #[default]
    pub path_prefix: Option<String>,
    /// The path (without query) is exactly this.
    #[default]
    pub path: Option<String>,
    /// The whole path (without query) matches this regular expression.
    #[default]
    pub path_regex: Option<String>,
    /// The method is one of these.
    #[default]
    pub methods: Vec<String>,
    /// Header conditions.
    #[default]
    pub headers: Vec<RawHeaderMatch>,
    /// Conditions on key parts (JWT claims, metadata, the route ...).
    #[default]
    pub parts: Vec<RawPartMatch>,
    /// The rule applies only to requests this does not match.
    #[default]
    pub not: Option<Box<RawMatch>>,
}
}

raw_struct! {
/// A header condition: `{name, exact}`, `{name, regex}` or `{name, present}`.
#[derive(Debug)]
pub struct RawHeaderMatch {
    /// Header name (case-insensitive).
    pub name: String,
    /// The header's value equals this.
    #[default]
    pub exact: Option<String>,
    /// The header's whole value matches this regular expression.
    #[default]
    pub regex: Option<String>,
    /// `true`: the header is present; `false`: it is absent.
    #[default]
    pub present: Option<bool>,
}
}

raw_struct! {
/// A condition on a key part: `{part, exact}`, `{part, regex}` or
/// `{part, present}`.
#[derive(Debug)]
pub struct RawPartMatch {
    /// A key part, as in `key` (`jwt:plan`, `metadata:NS:PATH`, `route` ...).
    #[schema(schemars(schema_with = "crate::config::schema::key_part"))]
    pub part: String,
    /// The part's value equals this.
    #[default]
    pub exact: Option<String>,
    /// The part's whole value matches this regular expression.
    #[default]
    pub regex: Option<String>,
    /// `true`: the request has the part; `false`: it has not.
    #[default]
    pub present: Option<bool>,
}
}

raw_enum! {
/// Where a limit is decided.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Scope {
    /// In this Envoy's shared data.
    #[default]
    Local = "local",
    /// By the limiter cluster.
    Global = "global",
}
}

raw_struct! {
/// One limit.
#[derive(Debug)]
#[default]
pub struct RawLimit {
    /// The limit's name in the IETF rate-limit headers; defaults to the
    /// rule's name, or `<rule>.<index>` when the rule has several limits.
    #[default]
    pub name: Option<String>,
    /// Algorithm name (not with `protocol: rls` for a global limit).
    #[default]
    pub algorithm: Option<String>,
    /// Requests per window (not with `protocol: rls` for a global limit).
    #[default]
    pub requests: Option<u64>,
    /// Window duration (not with `protocol: rls` for a global limit).
    #[default]
    pub window: Option<String>,
    /// Requests a fresh key admits at once; defaults to `requests`.
    #[default]
    pub burst: Option<u64>,
    /// Local or global.
    #[default]
    pub scope: Scope,
    /// Sub-windows per window (`sliding_window` only).
    #[default]
    pub precision: Option<u64>,
    /// Percent admitted above `requests`/`burst` (0 to 1000).
    #[default]
    pub soft_percent: u64,
    /// What a request over the limit gets: denied, or held until it conforms.
    #[default]
    pub on_exceed: OnExceed,
    /// Longest hold in delay mode (required with `on_exceed: delay`).
    #[default]
    pub max_delay: Option<String>,
    /// How long a key is refused once the limit refused it (required with
    /// `on_exceed: block`; 1s to 24h).
    #[default]
    pub block_for: Option<String>,
    /// Admission above `requests`, up to a ceiling, while a pool rule has
    /// headroom.
    #[default]
    pub elastic: Option<RawElastic>,
    /// How a global limit's checks reach the limiter.
    #[default]
    pub sync: Option<RawSync>,
    /// The rate limit service descriptor of a global limit
    /// (`protocol: rls` only).
    #[default]
    pub descriptor: Option<Vec<RawEntry>>,
    /// A concurrency limit: requests in flight at once per key (instead of
    /// `algorithm`, `requests` and `window`).
    #[default]
    pub concurrency: Option<u64>,
    /// Concurrency: how long a worker's permits count after it last
    /// renewed them (a crashed Envoy's permits come back after this).
    #[default]
    pub permit_ttl: Option<String>,
    /// Count only the requests whose response matches: a unit is taken at
    /// admission and given back when the response does not match.
    #[default]
    pub count_when: Option<RawCountWhen>,
    /// A global limit's requests and window for a request, from a struct
    /// another filter wrote into its dynamic metadata (the configured
    /// ones when it is missing or malformed).
    #[default]
    pub limit_from_metadata: Option<RawMetadataPlace>,
}
}

raw_struct! {
/// One entry of a rate limit service descriptor: `{key, value}` or
/// `{key, from}`.
#[derive(Debug)]
pub struct RawEntry {
    /// The entry's key.
    pub key: String,
    /// A fixed value.
    #[default]
    pub value: Option<String>,
    /// The value of one of the rule's key parts.
    #[default]
    #[schema(schemars(schema_with = "crate::config::schema::opt_part"))]
    pub from: Option<String>,
}
}

raw_struct! {
/// How a global limit's checks reach the limiter.
#[derive(Debug)]
pub struct RawSync {
    /// `per_request`, `coalesce` or `lease`.
    pub mode: SyncMode,
    /// Lease: the most of the limit's `requests` one Envoy holds, e.g. `"1%"`.
    #[default]
    pub max_share: Option<String>,
    /// Lease: how long a grant may be spent.
    #[default]
    pub ttl: Option<String>,
}
}

raw_enum! {
/// How a global limit's checks reach the limiter.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SyncMode {
    /// Every request makes its own call.
    #[default]
    PerRequest = "per_request",
    /// Requests with the same check while one is in flight from this
    /// worker wait for the next call, which carries them all.
    Coalesce = "coalesce",
    /// This Envoy spends slices of the quota the limiter debited in advance.
    Lease = "lease",
}
}

raw_struct! {
/// An elastic limit: beyond its own quota, a request may borrow from a pool.
#[derive(Debug)]
pub struct RawElastic {
    /// Requests per window at most, own quota and borrowed together.
    pub ceiling: u64,
    /// The name of the rule whose limits are the shared spare capacity.
    pub pool: String,
}
}

raw_enum! {
/// What happens to a request over a limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum OnExceed {
    /// Deny it at once.
    #[default]
    Deny = "deny",
    /// Hold it until it conforms, when that is within `max_delay`; deny it
    /// otherwise.
    Delay = "delay",
    /// Deny it, and every request of its key for `block_for`.
    Block = "block",
}
}

raw_struct! {
/// A per-key exception.
#[derive(Debug)]
pub struct RawOverride {
    /// The key text this override applies to.
    pub key: String,
    /// Requests per window for this key.
    pub requests: u64,
    /// Window for this key; defaults to the limit's window.
    #[default]
    pub window: Option<String>,
    /// Burst for this key; defaults to this override's `requests`.
    #[default]
    pub burst: Option<u64>,
    /// Index of the limit overridden; absent overrides every limit of the rule.
    #[default]
    pub limit: Option<u64>,
}
}
