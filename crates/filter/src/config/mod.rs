//! The filter configuration: raw JSON types, the duration syntax, checking,
//! and the compiled [`Plan`].

pub(crate) mod checks;
mod compile;
mod cost;
mod describe;
mod doc;
mod duration;
mod from_json;
mod matching;
mod message;
mod plan;
mod priority;
pub(crate) mod raw;
mod reader;
mod span;
mod syntax_path;

pub use checks::MAX_NAME_LEN;
pub use compile::{compile, MAX_LOCAL_KEYS, MAX_QUEUED};
pub use duration::parse_duration;
pub use plan::{
    ConcurrencyLimit, Cost, CostSource, DenyResponse, Elastic, Entry, EntryValue, Estimate,
    GlobalLimit, LeasePolicy, LimitKind, LimiterTarget, LocalLimit, OverrideLimit, PermitPlace,
    Plan, Quota, ResponseCost, Rule, RuleLimit, ServiceHeld, Sync, MAX_COST_SOURCES, SERVICE_HELD,
};
pub use raw::{
    FailureMode, HeadersMode, Mode, OnExceed, Protocol, RawConfig, Scope, ServiceHeaders, SyncMode,
};
pub use sluice_core::FieldError;

/// Parses and checks the JSON configuration; every error names the field at
/// fault by its JSON path (`rules[2].limits[0].window`).
pub fn parse(json: &[u8]) -> Result<Plan, FieldError> {
    compile(from_json::raw_config(json)?)
}

#[cfg(test)]
mod tests;
