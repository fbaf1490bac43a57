//! The one error shape of Sluice's inputs: the field at fault and what is wrong.

use std::fmt;

/// An input rejected because of one field: a limit, the filter's
/// configuration or a limiter request.
///
/// `path` names the field the way the input spells it, from the outermost
/// object in: `rules[0].limits[1].window` in a configuration,
/// `limits[2].burst` in a check, `requests` for a bare [`Limit`](crate::Limit).
/// An empty path means the input as a whole (say, a body that is not JSON).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// Path of the field at fault, or empty.
    pub path: String,
    /// What is wrong with it.
    pub message: String,
}

impl FieldError {
    /// An error about the field at `path`.
    // Not inlined: the many error paths of a configuration's checks share
    // one copy (the filter's wasm is smaller by about 1.4 KB).
    #[inline(never)]
    pub fn at(path: impl Into<String>, message: impl Into<String>) -> FieldError {
        FieldError {
            path: path.into(),
            message: message.into(),
        }
    }

    /// The same error seen from the object that holds the field under
    /// `prefix`: `requests` under `limits[2]` is `limits[2].requests`.
    #[must_use]
    pub fn under(mut self, prefix: &str) -> FieldError {
        self.path = match (prefix.is_empty(), self.path.is_empty()) {
            (true, _) => self.path,
            (false, true) => prefix.to_string(),
            (false, false) => format!("{prefix}.{}", self.path),
        };
        self
    }

    /// The same error with its last path segment renamed from `from` to
    /// `to` (a field spelled differently on another input, such as
    /// `window` that a check spells `window_ms`).
    #[must_use]
    pub fn renamed(mut self, from: &str, to: &str) -> FieldError {
        if self.path == from {
            self.path = to.to_string();
        }
        self
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

impl std::error::Error for FieldError {}

#[cfg(test)]
mod tests {
    use super::FieldError;

    #[test]
    fn paths_compose() {
        let e = FieldError::at("burst", "must be at least 1").under("limits[2]");
        assert_eq!(e.to_string(), "limits[2].burst: must be at least 1");
        assert_eq!(
            FieldError::at("", "not JSON").under("").to_string(),
            "not JSON"
        );
        assert_eq!(FieldError::at("", "bad").under("x").path, "x");
        assert_eq!(
            FieldError::at("window", "m")
                .renamed("window", "window_ms")
                .path,
            "window_ms"
        );
        assert_eq!(
            FieldError::at("burst", "m").renamed("window", "w").path,
            "burst"
        );
    }
}
