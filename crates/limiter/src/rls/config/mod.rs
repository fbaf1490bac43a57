//! The descriptor configuration: envoyproxy/ratelimit's YAML format, read
//! into raw serde types and compiled into a tree per domain.
//!
//! Errors name the field (`descriptors[1].rate_limit.unit`) and, where the
//! YAML parser knows it, the line and column. Checks that span several
//! fields of a `rate_limit` (a unit and a window, an unlimited limit with a
//! unit) run while that block is read, so they carry its position too.

mod parse;
mod rate_limit;
mod tree;

pub use parse::{parse_domain, MAX_DESCRIPTORS, MAX_FILE_BYTES, MAX_NESTING};
pub use rate_limit::{Action, RateLimit, Unit};
pub(crate) use tree::push_escaped;
pub use tree::{Domain, Found, Level, Matched, Node};

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};

/// Every domain in force.
#[derive(Debug, Clone, Default)]
pub struct Descriptors {
    /// By domain name.
    pub domains: HashMap<String, Domain>,
}

/// Why a configuration was refused: the file, the field and, when the
/// parser knows it, the position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The file at fault (empty for text not read from a file).
    pub file: PathBuf,
    /// The field at fault, as a path from the document's root.
    pub field: String,
    /// Line and column (1-based), when known.
    pub position: Option<(usize, usize)>,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.file.as_os_str().is_empty() {
            write!(f, "{}", self.file.display())?;
            if let Some((line, col)) = self.position {
                write!(f, ":{line}:{col}")?;
            }
            f.write_str(": ")?;
        } else if let Some((line, col)) = self.position {
            write!(f, "line {line} column {col}: ")?;
        }
        if !self.field.is_empty() && self.field != "." {
            write!(f, "{}: ", self.field)?;
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for ConfigError {}

impl ConfigError {
    /// An error in `file` at `field`, without a position.
    pub(crate) fn at(
        file: &Path,
        field: impl Into<String>,
        message: impl Into<String>,
    ) -> ConfigError {
        ConfigError {
            file: file.to_path_buf(),
            field: field.into(),
            position: None,
            message: message.into(),
        }
    }
}

const MAX_FILES: usize = 10_000;

/// The YAML files `path` stands for: itself, or the `.yaml` / `.yml`
/// files of a directory (not hidden, not in subdirectories), by name.
pub fn files_of(path: &Path) -> Result<Vec<PathBuf>, ConfigError> {
    let meta = std::fs::metadata(path)
        .map_err(|e| ConfigError::at(path, "", format!("cannot read: {e}")))?;
    if !meta.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let entries = std::fs::read_dir(path)
        .map_err(|e| ConfigError::at(path, "", format!("cannot list: {e}")))?;
    let mut files = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| ConfigError::at(path, "", format!("cannot list: {e}")))?;
        let p = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let yaml = name.ends_with(".yaml") || name.ends_with(".yml");
        if yaml && !name.starts_with('.') && p.is_file() {
            files.push(p);
        }
        if files.len() > MAX_FILES {
            return Err(ConfigError::at(
                path,
                "",
                format!("more than {MAX_FILES} files"),
            ));
        }
    }
    files.sort();
    Ok(files)
}

/// What a domain named in several files does (envoyproxy/ratelimit's
/// `MERGE_DOMAIN_CONFIG`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SameDomain {
    /// Refused: each domain in one file only (the peer's default).
    #[default]
    Refuse,
    /// The files' descriptors join into one domain; a top-level descriptor
    /// (key and value) in two files is refused.
    Merge,
}

/// The files a configuration is read from, as read at one time.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// Each file's path and text, by path.
    pub files: Vec<(PathBuf, String)>,
}

impl Snapshot {
    /// Reads the files `path` stands for (see [`files_of`]).
    pub fn read(path: &Path) -> Result<Snapshot, ConfigError> {
        let mut files = Vec::new();
        for file in files_of(path)? {
            // Refused before it is read (the text is checked again as parsed).
            if let Some(len) = std::fs::metadata(&file)
                .ok()
                .map(|m| m.len())
                .filter(|&l| l > parse::MAX_FILE_BYTES)
            {
                return Err(parse::file_too_large(&file, len));
            }
            let text = std::fs::read_to_string(&file)
                .map_err(|e| ConfigError::at(&file, "", format!("cannot read: {e}")))?;
            files.push((file, text));
        }
        Ok(Snapshot { files })
    }

    /// SHA-256 of the files' names and texts: equal digests, same
    /// configuration.
    pub fn digest(&self) -> [u8; 32] {
        digest_of(self.files.iter().flat_map(|(file, text)| {
            let name = file
                .file_name()
                .map(|n| n.as_encoded_bytes())
                .unwrap_or(&[]);
            [name, text.as_bytes()]
        }))
    }
}

/// SHA-256 of `parts`, each preceded by its length (8 bytes little-endian):
/// equal digests, same parts in the same order.
pub fn digest_of<'a>(parts: impl IntoIterator<Item = &'a [u8]>) -> [u8; 32] {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    for part in parts {
        ctx.update(&(part.len() as u64).to_le_bytes());
        ctx.update(part);
    }
    let mut out = [0u8; 32];
    out.copy_from_slice(ctx.finish().as_ref());
    out
}

impl Descriptors {
    /// Reads `path`: one YAML file, or a directory of them; one domain per
    /// file, each domain in one file only.
    pub fn load(path: &Path) -> Result<Descriptors, ConfigError> {
        Descriptors::from_snapshot(&Snapshot::read(path)?, SameDomain::Refuse)
    }

    /// Compiles the files of `snapshot`, one domain per file, a domain in
    /// several files as `same` says.
    pub fn from_snapshot(
        snapshot: &Snapshot,
        same: SameDomain,
    ) -> Result<Descriptors, ConfigError> {
        let mut out = Descriptors::default();
        for (file, text) in &snapshot.files {
            out.add_as(text, file, same)?;
        }
        Ok(out)
    }

    /// Adds the domain of one file's text (a domain seen before refused).
    pub fn add(&mut self, text: &str, file: &Path) -> Result<(), ConfigError> {
        self.add_as(text, file, SameDomain::Refuse)
    }

    /// Adds the domain of one file's text, a domain seen before as `same`
    /// says.
    pub fn add_as(&mut self, text: &str, file: &Path, same: SameDomain) -> Result<(), ConfigError> {
        let (name, domain) = parse_domain(text, file)?;
        let Some(first) = self.domains.get_mut(&name) else {
            self.domains.insert(name, domain);
            return Ok(());
        };
        match same {
            SameDomain::Refuse => Err(ConfigError::at(
                file,
                "domain",
                format!(
                    "duplicate domain {name:?} (also in {}; merging needs --merge-domains)",
                    first.source.display()
                ),
            )),
            SameDomain::Merge => first.root.merge(domain.root).map_err(|path| {
                ConfigError::at(
                    file,
                    "descriptors",
                    format!(
                        "duplicate descriptor composite key '{name}.{path}' (also in {})",
                        first.source.display()
                    ),
                )
            }),
        }
    }

    /// Parses one file's text alone (tests, tools).
    pub fn parse(text: &str) -> Result<Descriptors, ConfigError> {
        let mut out = Descriptors::default();
        out.add(text, Path::new(""))?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn err(text: &str) -> ConfigError {
        match Descriptors::parse(text) {
            Ok(_) => panic!("accepted:\n{text}"),
            Err(e) => e,
        }
    }

    pub(super) fn find<'a>(
        d: &'a Descriptors,
        entries: &[(&'a str, &'a str)],
    ) -> Option<Found<'a>> {
        d.domains["d"].lookup(entries.iter().copied())
    }

    pub(super) const EXAMPLE: &str = "
domain: d
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: remote_address
    value: 50.0.0.5
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit: {unit: day, requests_per_unit: 5}
  - key: path
    value: /api/*/action
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: files
    value: files/*
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: key
    value: value
    rate_limit: {unit: second, requests_per_unit: 300}
  - key: user
    detailed_metric: true
    rate_limit: {window: 10s, requests_per_unit: 3, algorithm: gcra, burst: 2}
";

    #[test]
    fn errors_name_the_field_and_the_line() {
        let e = err("domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 1\n");
        assert_eq!(e.field, "descriptors[0].rate_limit.unit");
        assert_eq!(e.position.map(|p| p.0), Some(5), "{e}");
        assert!(e.message.contains("fortnight"), "{e}");

        let e = err("domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: -1\n");
        assert_eq!(e.field, "descriptors[0].rate_limit.requests_per_unit");
        assert_eq!(e.position.map(|p| p.0), Some(6), "{e}");

        let e = err("domain: d\ndescriptors:\n  - key: a\n    rate_limt: {unit: second}\n");
        assert_eq!(e.field, "descriptors[0].rate_limt");
        assert!(e.message.contains("unknown field"), "{e}");
        assert_eq!(e.position.map(|p| p.0), Some(4), "{e}");

        let e = err("domain: d\ndescriptors:\n  - key: a\n  - key: b\n    rate_limit:\n      unit: second\n      window: 1s\n      requests_per_unit: 1\n");
        assert_eq!(e.field, "descriptors[1].rate_limit");
        assert!(e.message.starts_with("window:"), "{e}");
        assert!(e.position.is_some(), "{e}");

        let e = err("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unlimited: true, unit: second}\n");
        assert!(e.message.contains("unlimited"), "{e}");
        let e =
            err("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {requests_per_unit: 5}\n");
        assert!(e.message.starts_with("unit: missing"), "{e}");
        let e = err("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 5, algorithm: magic}\n");
        assert_eq!(e.field, "descriptors[0].rate_limit.algorithm");
        let e = err("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {window: 1x, requests_per_unit: 5}\n");
        assert_eq!(e.field, "descriptors[0].rate_limit.window");
        let e = err("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 5, burst: 0}\n");
        assert!(e.message.starts_with("burst:"), "{e}");
        let e = err("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {name: x, replaces: [{name: x}], unit: second, requests_per_unit: 5}\n");
        assert!(e.message.starts_with("replaces:"), "{e}");

        let e = err("domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n      - key: b\n");
        assert_eq!(e.field, "descriptors[0].descriptors[1].key");
        assert!(e.message.contains("duplicate"), "{e}");
        let e =
            err("domain: d\ndescriptors:\n  - key: a\n    value: x\n    share_threshold: true\n");
        assert_eq!(e.field, "descriptors[0].share_threshold");
        let e = err("domain: ''\n");
        assert_eq!(e.field, "domain");
        let e = err("descriptors: []\n");
        assert!(e.message.contains("domain"), "{e}");
        let e = err("domain: d\ndescriptors:\n  - key: a\n   bad indent: 1\n");
        assert!(e.position.is_some(), "{e}");
    }

    #[test]
    fn a_display_names_file_line_and_field() {
        let e = ConfigError {
            file: PathBuf::from("rl.yaml"),
            field: "descriptors[0].rate_limit.unit".into(),
            position: Some((5, 13)),
            message: "bad".into(),
        };
        assert_eq!(
            e.to_string(),
            "rl.yaml:5:13: descriptors[0].rate_limit.unit: bad"
        );
    }

    #[test]
    fn envoyproxy_ratelimit_fields_load() {
        let d = Descriptors::parse(
            "domain: d\ndescriptors:\n  - key: a\n    value_to_metric: true\n    metadata: {team: x}\n    detailed_metric: false\n    shadow_mode: true\n    quota_mode: true\n    rate_limit:\n      unlimited: true\n      name: n\n",
        )
        .unwrap();
        let f = find(&d, &[("a", "x")]).unwrap();
        assert_eq!(f.rate_limit.action, Action::Unlimited);
        assert!(f.node.shadow);
        assert!(f.node.quota_mode);
        for unit in ["SECOND", "Minute", "hour", "day", "week", "month", "year"] {
            let text = format!("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {{unit: {unit}, requests_per_unit: 1}}\n");
            assert!(Descriptors::parse(&text).is_ok(), "{unit}");
        }
    }
}
