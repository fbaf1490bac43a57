//! The filter configuration: raw JSON types, the duration syntax, checking,
//! and the compiled [`Plan`].

pub(crate) mod checks;
mod compile;
mod duration;
mod plan;
pub(crate) mod raw;

pub use checks::MAX_NAME_LEN;
pub use compile::{compile, parse, MAX_LOCAL_KEYS, MAX_QUEUED};
pub use duration::parse_duration;
pub use plan::{
    Cost, DenyResponse, Elastic, Entry, EntryValue, GlobalLimit, LeasePolicy, LimitKind,
    LimiterTarget, LocalLimit, OverrideLimit, Plan, Quota, Rule, RuleLimit, ServiceHeld, Sync,
    SERVICE_HELD,
};
pub use raw::{
    FailureMode, HeadersMode, Mode, OnExceed, Protocol, RawConfig, Scope, ServiceHeaders, SyncMode,
};
pub use sluice_core::FieldError;

#[cfg(test)]
mod tests;
