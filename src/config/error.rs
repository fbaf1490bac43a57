//! Configuration errors that name the offending field.

use std::fmt;

/// Why a configuration was rejected: the JSON path of the field at fault
/// (`rules[0].limits[1].window`) and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// Path of the field, or empty for errors about the document as a whole.
    pub path: String,
    /// What is wrong.
    pub message: String,
}

impl ConfigError {
    /// An error at `path`.
    pub fn at(path: impl Into<String>, message: impl Into<String>) -> ConfigError {
        ConfigError {
            path: path.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

impl std::error::Error for ConfigError {}
