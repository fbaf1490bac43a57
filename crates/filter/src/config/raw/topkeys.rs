//! The raw form of `top_limited_keys` and `access_log_key` (described as
//! the other raw types are: see [`super`]).

use crate::config::describe::{raw_enum, raw_struct};

raw_enum! {
/// How a key is shown outside the filter (top limited keys, access log).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum KeyShown {
    /// The first 16 hex digits of the key's SHA-256, as the limiter shows
    /// keys.
    #[default]
    Hashed = "hashed",
    /// The key itself.
    Clear = "clear",
}
}

raw_struct! {
/// The keys each rule refused most, kept in a fixed number of entries
/// across the workers of one Envoy.
#[derive(Debug)]
pub struct RawTopLimitedKeys {
    /// Keys kept per rule (1 to 256).
    #[default = 32]
    pub entries: u64,
    /// How keys are shown.
    #[default]
    pub keys: KeyShown,
    /// A path the filter answers itself with the list (exact, without
    /// query), e.g. `/sluice/top-limited`.
    #[default]
    pub path: Option<String>,
}
}

impl KeyShown {
    /// `key` as shown.
    pub fn show(self, key: &str) -> std::borrow::Cow<'_, str> {
        match self {
            KeyShown::Hashed => crate::topkeys::hashed(key).into(),
            KeyShown::Clear => key.into(),
        }
    }
}
