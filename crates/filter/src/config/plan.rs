//! The compiled configuration: immutable, validated, with every per-request
//! constant (shared-data key prefixes, overrides) computed once.

use crate::client_ip::ClientIpPolicy;
use crate::config::raw::{
    FailureMode, HeadersMode, HeadersWhileBody, KeyShown, Protocol, ServiceHeaders,
};
use crate::cost::extract::FieldPath;
use crate::cost::metadata::MetadataPlace;
use crate::cost::price::Price;
use crate::key::KeyPart;
use crate::matcher::{HeaderCondition, Matcher, RuleIndex};
use crate::table::Shape;
use sluice_core::{Limit, Nanos, Permits};
use std::rc::Rc;

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
    /// Keys each local limit keeps exactly.
    pub local_max_keys: u64,
    /// The size and policy of every local limit's key table.
    pub local_keys: Shape,
    /// The `payload_in_metadata` name `jwt:` key parts read claims under.
    pub jwt_payload: String,
    /// The denial response.
    pub response: DenyResponse,
    /// The rules, in configuration order.
    pub rules: Vec<Rule>,
    /// The rules' matches indexed by path and method.
    pub rule_index: RuleIndex,
    /// Shared-data key holding the slot-hashing seed of this domain.
    pub seed_key: String,
    /// Whether a request with a body is decided once the body is in.
    pub request_body: RequestBody,
    /// The path the filter answers with the caller's quotas, if any.
    pub quota_endpoint: Option<String>,
    /// The keys each rule refused most, if kept.
    pub top_limited_keys: Option<TopLimitedKeys>,
    /// How a refused request's key is shown in the access log, if it is.
    pub access_log_key: Option<KeyShown>,
}

/// Whether requests are decided on their headers or once their body is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestBody {
    /// No rule reads it: every request is decided on its headers.
    Unread,
    /// Some rule estimates a response cost from it or has a `body:` key
    /// part: a request with a body is decided once the body is in, its
    /// headers meanwhile as this says.
    Read(HeadersWhileBody),
}

/// The keys each rule refused most, kept across the workers of one Envoy
/// (`top_limited_keys`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopLimitedKeys {
    /// Entries per rule.
    pub entries: usize,
    /// How keys are shown.
    pub keys: KeyShown,
    /// The path answered with the list, if any.
    pub path: Option<String>,
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
    /// Priority classes, each allowed a share of the rule's limits.
    pub priority: Option<Priority>,
}

/// A rule's priority classes: a request's class is named by the value of
/// `from`; a class with a share below 100% may use its limits only while
/// `100 − share` percent of their capacity would remain, so that at
/// saturation the lower classes are shed first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Priority {
    /// The key part naming the class.
    pub from: KeyPart,
    /// Each class's name and share (percent, 1 to 100).
    pub classes: Vec<(String, u8)>,
    /// The share of a request whose value is missing or names no class.
    pub default: u8,
}

impl Priority {
    /// The share of the class `value` names.
    pub fn share_of(&self, value: Option<&str>) -> u8 {
        value
            .and_then(|v| self.classes.iter().find(|(n, _)| n == v))
            .map_or(self.default, |&(_, share)| share)
    }
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
    /// The weight is the non-negative integer another filter wrote into
    /// the request's dynamic metadata; missing or malformed as for a header.
    Metadata(MetadataPlace),
    /// Known from the response: the request is admitted for an estimate,
    /// and the difference is charged or refunded once the response says
    /// what it cost.
    Response(ResponseCost),
}

/// What a request weighs when it comes, by a rule's [`Cost`]: a number the
/// configuration gives, or one read from the request (missing or
/// malformed there: counted as `cost_invalid`).
#[derive(Debug, Clone, Copy)]
pub enum AtRequest<'a> {
    /// This many units, whatever the request.
    Fixed(u64),
    /// The integer in this request header.
    Header(&'a str),
    /// The integer at this place of the request's dynamic metadata.
    Metadata(&'a MetadataPlace),
    /// The integer at this field of the request's JSON body.
    Body(&'a FieldPath),
}

impl Cost {
    /// What a request weighs when it comes: the cost itself, or a response
    /// cost's estimate.
    pub fn at_request(&self) -> AtRequest<'_> {
        match self {
            Cost::Fixed(weight) => AtRequest::Fixed(*weight),
            Cost::Header(name) => AtRequest::Header(name),
            Cost::Metadata(place) => AtRequest::Metadata(place),
            Cost::Response(response) => match &response.estimate {
                Estimate::Fixed(estimate) => AtRequest::Fixed(*estimate),
                Estimate::Header(name) => AtRequest::Header(name),
                Estimate::Body(path) => AtRequest::Body(path),
            },
        }
    }
}

/// A cost known from the response (an LLM's token count).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseCost {
    /// What a request is admitted for.
    pub estimate: Estimate,
    /// Where the response says what the request cost: the sum of these,
    /// each times its price (1 to [`MAX_COST_SOURCES`]).
    pub sources: Vec<PricedSource>,
}

/// A place the response says a count, and what one unit of it costs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PricedSource {
    /// Where the count is.
    pub source: CostSource,
    /// What one unit of it costs ([`Price::ONE`] unless `times` says).
    pub price: Price,
}

/// The most places one response cost is summed from.
pub const MAX_COST_SOURCES: usize = 4;

/// What a request with a response cost is admitted for. An estimate of 0
/// admits while the limits are not spent (or in debt), taking nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Estimate {
    /// Always this much (0 or more).
    Fixed(u64),
    /// The non-negative integer in this request header (lowercase name);
    /// missing or malformed: 0, counted as `cost_invalid`.
    Header(String),
    /// The non-negative integer at this field of the request's JSON body;
    /// missing or malformed: 0, counted as `cost_invalid`.
    Body(FieldPath),
}

/// Where a response says what its request cost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CostSource {
    /// A response header (lowercase name).
    Header(String),
    /// A response trailer (lowercase name).
    Trailer(String),
    /// A field of the JSON body, or of the last event of a
    /// `text/event-stream` body that has it.
    Body(FieldPath),
    /// A count in the request's dynamic metadata, read when the stream
    /// ends (a filter of the response path may have written it).
    Metadata(MetadataPlace),
}

/// One limit of a rule. Its accessors, which match over the kinds, are
/// with the kinds' registry (`crate::engine::kinds`).
#[derive(Debug)]
pub struct RuleLimit {
    /// Its configured name in the IETF rate-limit headers, if any.
    pub name: Option<String>,
    /// Who decides it, and how.
    pub kind: LimitKind,
}

/// Who decides a limit, and how: one variant per kind of limit, each
/// carrying only what that kind uses (see [`crate::engine`], where each
/// kind has its module). Every `match` on it is exhaustive: a new kind is
/// handled wherever the compiler lists it.
#[derive(Debug)]
pub enum LimitKind {
    /// Decided by this filter in shared data.
    Local(LocalLimit),
    /// Decided by this filter; a request its quota denies may borrow from
    /// a pool.
    LocalElastic(LocalElastic),
    /// Decided by the `sluice-limiter` cluster, each request in its own
    /// call.
    Global(GlobalLimit),
    /// Decided by the limiter; requests with the same check share calls
    /// (see [`crate::coalesce`]).
    Coalesced(GlobalLimit),
    /// Decided by the limiter; this Envoy spends leases of the quota (see
    /// [`crate::lease`]).
    Leased(LeasedLimit),
    /// Decided by the limiter per request; a request its quota denies may
    /// borrow in a second call.
    GlobalElastic(GlobalElastic),
    /// Held by a rate limit service (`limiter.protocol: rls`): the service
    /// knows its quota and window.
    ServiceHeld(ServiceHeld),
    /// A concurrency limit: permits held while requests are in flight.
    Concurrency(ConcurrencyLimit),
    /// A rate limit that counts only the requests whose response matches
    /// (`count_when`).
    ByOutcome(ByOutcome),
}

/// A rate limit counting only the requests whose response matches: a unit
/// taken at admission is given back when the response does not match (a
/// limit a rate limit service holds is charged at the stream's end instead).
#[derive(Debug)]
pub struct ByOutcome {
    /// The limit that counts.
    pub counted: Counted,
    /// Which responses it counts.
    pub when: Rc<CountWhen>,
}

/// The limit a by-outcome limit counts in.
#[derive(Debug)]
pub enum Counted {
    /// Decided by this filter: reserved at admission.
    Local(LocalLimit),
    /// Decided by the limiter per request: reserved at admission.
    Global(GlobalLimit),
    /// Held by a rate limit service: charged at the stream's end.
    Service(ServiceHeld),
}

/// Which responses a by-outcome limit counts: every test holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CountWhen {
    /// The tests, at least one.
    pub tests: Vec<OutcomeTest>,
}

/// One test of a response's outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutcomeTest {
    /// The status is in one of these inclusive ranges.
    Status(Vec<(u16, u16)>),
    /// A response header condition.
    Header(HeaderCondition),
    /// The gRPC status is one of these.
    GrpcStatus(Vec<u64>),
}

/// What a response showed of its outcome, as its stream went.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outcome {
    /// The `:status`; `None` until the response's headers came.
    pub status: Option<u16>,
    /// The value of the header a test names, if present.
    pub header: Option<String>,
    /// The `grpc-status` of the headers or trailers, once seen.
    pub grpc_status: Option<u64>,
}

impl CountWhen {
    /// The header a test names, if any.
    pub fn header(&self) -> Option<&str> {
        self.tests.iter().find_map(|t| match t {
            OutcomeTest::Header(h) => Some(h.name.as_str()),
            OutcomeTest::Status(_) | OutcomeTest::GrpcStatus(_) => None,
        })
    }

    /// Whether a test reads the gRPC status.
    pub fn reads_grpc(&self) -> bool {
        self.tests.iter().any(|t| match t {
            OutcomeTest::GrpcStatus(_) => true,
            OutcomeTest::Status(_) | OutcomeTest::Header(_) => false,
        })
    }

    /// Whether a response that showed `outcome` counts. What the stream
    /// never showed counts (no status: the request ended without a
    /// response; no gRPC status by the end), so that cutting a stream never
    /// makes a request free.
    pub fn counts(&self, outcome: &Outcome) -> bool {
        let Some(status) = outcome.status else {
            return true;
        };
        self.tests.iter().all(|t| match t {
            OutcomeTest::Status(ranges) => ranges.iter().any(|(l, h)| (*l..=*h).contains(&status)),
            OutcomeTest::Header(h) => h.test.holds(outcome.header.as_deref()),
            OutcomeTest::GrpcStatus(codes) => outcome
                .grpc_status
                .map_or(true, |code| codes.contains(&code)),
        })
    }
}

/// A local limit with elastic borrowing.
#[derive(Debug)]
pub struct LocalElastic {
    /// The limit itself.
    pub local: LocalLimit,
    /// Its borrowing; the pool's limits are local.
    pub elastic: Elastic,
}

/// A global limit whose quota this Envoy spends in leases.
#[derive(Debug)]
pub struct LeasedLimit {
    /// The limit itself.
    pub global: GlobalLimit,
    /// How its leases are sized and kept.
    pub policy: LeasePolicy,
}

/// A global limit with elastic borrowing.
#[derive(Debug)]
pub struct GlobalElastic {
    /// The limit itself.
    pub global: GlobalLimit,
    /// Its borrowing; the pool's limits are global.
    pub elastic: Elastic,
}

/// A concurrency limit: a request takes `weight` permits of its key when
/// admitted and gives them back when its stream ends.
#[derive(Debug)]
pub struct ConcurrencyLimit {
    /// Permits per key, and how long a worker's permits outlive its last
    /// renewal.
    pub permits: Permits,
    /// Where the permits are counted.
    pub place: PermitPlace,
    /// Delay mode: how long a request may wait for a permit (retried at
    /// the worker's fine ticks); `None` denies at once.
    pub max_wait: Option<Nanos>,
}

/// Where a concurrency limit's permits are counted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PermitPlace {
    /// In this Envoy's shared data: a key table of this shape under this
    /// prefix.
    Local(String, crate::table::Shape),
    /// By the limiter.
    Global,
}

/// A limit and its replacements for some keys.
#[derive(Debug)]
pub struct Quota {
    /// The limit.
    pub limit: Limit,
    /// Replacements of the limit for some keys, sorted by key.
    pub overrides: Vec<OverrideLimit>,
    /// What a key the limit refuses gets besides the refusal.
    pub penalty: Penalty,
}

/// What a key refused by a rate limit gets besides the refusal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Penalty {
    /// Nothing: its next request is decided by the limit.
    None,
    /// A penalty box (`on_exceed: block`): every request of the key is
    /// refused for this long from the refusal, whatever the limit allows.
    Block(Nanos),
}

/// A limit decided by this filter. The state of a key lives in shared data
/// under `state_prefix` followed by the key's slot number (or, for an
/// override key, under the override's `state_key`).
#[derive(Debug)]
pub struct LocalLimit {
    /// The limit and its overrides.
    pub quota: Quota,
    /// Prefix of the key table's buckets.
    pub state_prefix: Rc<str>,
    /// The key table's size and policy.
    pub keys: Shape,
    /// Prefix of the block table (used with [`Penalty::Block`]): a table of
    /// the same size whose entries hold when a key's block ends.
    pub block_prefix: Rc<str>,
}

/// A limit decided by the limiter; shared data holds only the over-limit
/// cache, under `deny_prefix` followed by the key's slot number.
#[derive(Debug)]
pub struct GlobalLimit {
    /// The limit and its overrides.
    pub quota: Quota,
    /// Prefix of the over-limit cache keys.
    pub deny_prefix: Rc<str>,
    /// Where a request's own limit may be (`limit_from_metadata`; only on
    /// a limit checked per request).
    pub from_metadata: Option<MetadataPlace>,
}

/// A global limit held by a rate limit service.
#[derive(Debug)]
pub struct ServiceHeld {
    /// Prefix of the over-limit cache keys.
    pub deny_prefix: Rc<str>,
    /// The descriptor it sends.
    pub descriptor: Vec<Entry>,
    /// Where a request's own limit may be, sent as the descriptor's
    /// `limit` (`limit_from_metadata`).
    pub from_metadata: Option<MetadataPlace>,
}

/// The stand-in limit of a limit the rate limit service holds: it never
/// refuses a weight (the service decides), and a decision made without the
/// service reports no quota (`requests` unknown: see [`crate::headers`]).
pub const SERVICE_HELD: Limit = Limit {
    algorithm: sluice_core::Algorithm::FixedWindow,
    requests: sluice_core::MAX_REQUESTS,
    window: sluice_core::SECOND,
    burst: sluice_core::MAX_REQUESTS,
    precision: 1,
    soft_percent: 0,
    max_delay: None,
};

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
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Elastic {
    /// The extra allowance: the limit's algorithm and window with
    /// `ceiling - requests` requests and the burst scaled alike.
    pub extra: Limit,
    /// The index of the pool rule.
    pub pool: usize,
    /// Where the extra allowance lives: for a local limit, the prefix of its
    /// slot keys; for a global one, the rule label of its limiter keys.
    pub place: Rc<str>,
}

impl Quota {
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

/// A limit replaced for one key.
#[derive(Debug)]
pub struct OverrideLimit {
    /// The request key text it applies to.
    pub key: String,
    /// The replacement limit.
    pub limit: Limit,
    /// For a local limit, the dedicated shared-data key of this key's state
    /// (empty for a global limit: the limiter keeps its state).
    pub state_key: Rc<str>,
}
