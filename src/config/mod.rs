//! The filter configuration: raw JSON types, the duration syntax, checking,
//! and the compiled [`Plan`].

mod compile;
mod duration;
mod from_json;
mod plan;
mod raw;
mod reader;
mod span;
mod syntax_path;

pub use compile::{compile, MAX_LOCAL_KEYS, MAX_NAME_LEN, MAX_QUEUED};
pub use duration::parse_duration;
pub use plan::{
    Cost, DenyResponse, Elastic, Entry, EntryValue, LeasePolicy, LimitScope, LimiterTarget,
    OverrideLimit, Plan, Rule, RuleLimit, Sync,
};
pub use raw::{FailureMode, HeadersMode, Mode, OnExceed, Protocol, RawConfig, Scope, SyncMode};
pub use sluice_core::FieldError;

/// Parses and checks the JSON configuration; every error names the field at
/// fault by its JSON path (`rules[2].limits[0].window`).
pub fn parse(json: &[u8]) -> Result<Plan, FieldError> {
    compile(from_json::raw_config(json)?)
}

#[cfg(test)]
mod tests;
