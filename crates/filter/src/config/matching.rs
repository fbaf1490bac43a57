//! A rule's `match` compiled into a [`Matcher`]: the path (prefix, exact or
//! regular expression), methods, header and key-part conditions, and `not`.

use super::checks::field_path;
use super::raw::{RawHeaderMatch, RawKeyPart, RawMatch, RawPartMatch};
use crate::key::source::BODY_ONLY_IN_KEY;
use crate::key::{Case, KeyPart, Refined};
use crate::matcher::{HeaderCondition, HeaderTest, Matcher, PartCondition, PathMatch, Pattern};
use sluice_core::FieldError;

/// Deepest nesting of `not`.
pub const MAX_NOT_DEPTH: usize = 4;

/// Compiles the `match` at JSON path `path`.
pub fn compile(path: &str, raw: &RawMatch) -> Result<Matcher, FieldError> {
    compile_at(path, raw, 0)
}

fn compile_at(path: &str, raw: &RawMatch, depth: usize) -> Result<Matcher, FieldError> {
    let not = match &raw.not {
        Some(_) if depth >= MAX_NOT_DEPTH => {
            return Err(FieldError::at(
                field_path(path, "not"),
                format!("nests more than {MAX_NOT_DEPTH} levels of not"),
            ));
        }
        Some(inner) => Some(Box::new(compile_at(
            &field_path(path, "not"),
            inner,
            depth + 1,
        )?)),
        None => None,
    };
    let headers = raw
        .headers
        .iter()
        .enumerate()
        .map(|(j, h)| header(&format!("{path}.headers[{j}]"), h))
        .collect::<Result<_, _>>()?;
    let parts = raw
        .parts
        .iter()
        .enumerate()
        .map(|(j, p)| part(&format!("{path}.parts[{j}]"), p))
        .collect::<Result<_, _>>()?;
    Ok(Matcher {
        path: path_match(path, raw)?,
        methods: methods(path, &raw.methods)?,
        headers,
        parts,
        not,
    })
}

fn path_match(path: &str, raw: &RawMatch) -> Result<PathMatch, FieldError> {
    match (&raw.path_prefix, &raw.path, &raw.path_regex) {
        (Some(prefix), None, None) => Ok(PathMatch::Prefix(prefix.clone())),
        (None, Some(exact), None) => Ok(PathMatch::Exact(exact.clone())),
        (None, None, Some(regex)) => Ok(PathMatch::Regex(pattern(
            &field_path(path, "path_regex"),
            regex,
        )?)),
        (None, None, None) => Ok(PathMatch::Any),
        _ => Err(FieldError::at(
            path,
            "set at most one of path_prefix, path and path_regex",
        )),
    }
}

fn methods(path: &str, raw: &[String]) -> Result<Vec<String>, FieldError> {
    raw.iter()
        .enumerate()
        .map(|(j, method)| {
            if method.is_empty() {
                return Err(FieldError::at(
                    format!("{path}.methods[{j}]"),
                    "must not be empty",
                ));
            }
            Ok(method.to_ascii_uppercase())
        })
        .collect()
}

fn header(path: &str, h: &RawHeaderMatch) -> Result<HeaderCondition, FieldError> {
    if h.name.is_empty() {
        return Err(FieldError::at(
            field_path(path, "name"),
            "must not be empty",
        ));
    }
    Ok(HeaderCondition {
        name: h.name.to_ascii_lowercase(),
        test: test(path, &h.exact, &h.regex, h.present)?,
    })
}

fn part(path: &str, p: &RawPartMatch) -> Result<PartCondition, FieldError> {
    let part = KeyPart::parse(&p.part).map_err(|m| FieldError::at(field_path(path, "part"), m))?;
    if part.reads_body() {
        return Err(FieldError::at(field_path(path, "part"), BODY_ONLY_IN_KEY));
    }
    Ok(PartCondition {
        part,
        test: test(path, &p.exact, &p.regex, p.present)?,
    })
}

fn test(
    path: &str,
    exact: &Option<String>,
    regex: &Option<String>,
    present: Option<bool>,
) -> Result<HeaderTest, FieldError> {
    match (exact, regex, present) {
        (Some(value), None, None) => Ok(HeaderTest::Exact(value.clone())),
        (None, Some(regex), None) => Ok(HeaderTest::Regex(pattern(
            &field_path(path, "regex"),
            regex,
        )?)),
        (None, None, Some(true)) => Ok(HeaderTest::Present),
        (None, None, Some(false)) => Ok(HeaderTest::Absent),
        _ => Err(FieldError::at(
            path,
            "set exactly one of exact, regex and present",
        )),
    }
}

/// Longest `default` of a key part, in bytes.
pub const MAX_DEFAULT_LEN: usize = 256;

/// Compiles key part `raw` at JSON path `path`.
pub fn key_part(path: &str, raw: &RawKeyPart) -> Result<KeyPart, FieldError> {
    let (text, regex, default, case) = match raw {
        RawKeyPart::Text(text) => {
            return KeyPart::parse(text).map_err(|m| FieldError::at(path, m));
        }
        RawKeyPart::Refined {
            part,
            regex,
            default,
            case,
        } => (part, regex, default, *case),
    };
    let part = KeyPart::parse(text).map_err(|m| FieldError::at(field_path(path, "part"), m))?;
    if matches!(part, KeyPart::Const(_)) {
        return Err(FieldError::at(
            field_path(path, "part"),
            "a const: part is never missing and has nothing to capture",
        ));
    }
    let capture = match regex {
        Some(regex) => Some(pattern(&field_path(path, "regex"), regex)?),
        None => None,
    };
    if default.as_ref().is_some_and(|d| d.len() > MAX_DEFAULT_LEN) {
        return Err(FieldError::at(
            field_path(path, "default"),
            format!("must be at most {MAX_DEFAULT_LEN} bytes"),
        ));
    }
    if capture.is_none() && default.is_none() && case == Case::AsSent {
        return Err(FieldError::at(path, "set regex, default or case"));
    }
    Ok(KeyPart::Refined(Box::new(Refined {
        part,
        capture,
        default: default.clone(),
        case,
    })))
}

/// A regular expression of the configuration, refused naming its field.
pub fn pattern(path: &str, text: &str) -> Result<Pattern, FieldError> {
    Pattern::new(text).map_err(|m| FieldError::at(path, format!("{text:?}: {m}")))
}
