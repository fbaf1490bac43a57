//! The filter configuration: raw JSON types, the duration syntax, checking,
//! and the compiled [`Plan`].

mod compile;
mod duration;
mod plan;
mod raw;

pub use compile::{compile, parse, MAX_LOCAL_KEYS, MAX_NAME_LEN, MAX_QUEUED};
pub use duration::parse_duration;
pub use plan::{
    Cost, DenyResponse, Elastic, Entry, EntryValue, LeasePolicy, LimitScope, LimiterTarget,
    OverrideLimit, Plan, Rule, RuleLimit, Sync,
};
pub use raw::{
    FailureMode, HeadersMode, Mode, OnExceed, Protocol, RawConfig, Scope, ServiceHeaders, SyncMode,
};
pub use sluice_core::FieldError;

#[cfg(test)]
mod tests;
