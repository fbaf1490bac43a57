//! The filter configuration: raw JSON types, the duration syntax, the
//! checks every part shares, and the compiled [`Plan`]'s types. Nothing
//! here names a kind of limit's module: each kind compiles its own part,
//! and the plan is put together where the kinds are registered (the
//! engine's registry), below which this module sits.

pub(crate) mod checks;
pub(crate) mod compile;
pub(crate) mod cost;
mod describe;
mod doc;
mod duration;
mod from_json;
pub(crate) mod matching;
mod message;
pub(crate) mod plan;
pub(crate) mod priority;
pub(crate) mod raw;
mod reader;
#[cfg(feature = "schema")]
pub mod schema;
mod span;
mod syntax_path;

pub use checks::MAX_NAME_LEN;
pub use compile::{MAX_LOCAL_KEYS, MAX_QUEUED};
pub use duration::parse_duration;
pub use plan::{
    AtRequest, ByOutcome, ConcurrencyLimit, Cost, CostSource, CountWhen, Counted, DenyResponse,
    Elastic, Entry, EntryValue, Estimate, GlobalElastic, GlobalLimit, LeasePolicy, LeasedLimit,
    LimitKind, LimiterTarget, LocalElastic, LocalLimit, Outcome, OutcomeTest, OverrideLimit,
    Penalty, PermitPlace, Plan, PricedSource, Quota, RequestBody, ResponseCost, Rule, RuleLimit,
    ServiceHeld, TopLimitedKeys, MAX_COST_SOURCES, SERVICE_HELD,
};
pub use raw::{
    FailureMode, HeadersMode, HeadersWhileBody, KeyShown, Mode, OnExceed, Protocol, RawConfig,
    Scope, ServiceHeaders, SyncMode,
};
pub use sluice_core::FieldError;

/// Parses and checks the JSON configuration; every error names the field at
/// fault by its JSON path (`rules[2].limits[0].window`).
pub fn parse(json: &[u8]) -> Result<Plan, FieldError> {
    compile(from_json::raw_config(json)?)
}

/// Checks `raw` and compiles it: each limit by its kind, where the kinds are
/// registered ([`Plan::compile`]).
pub fn compile(raw: RawConfig) -> Result<Plan, FieldError> {
    Plan::compile(raw)
}

#[cfg(test)]
mod tests;
