//! The descriptor configuration: envoyproxy/ratelimit's YAML format, read
//! into raw serde types and compiled into a tree per domain.
//!
//! Errors name the field (`descriptors[1].rate_limit.unit`) and, where the
//! YAML parser knows it, the line and column. Checks that span several
//! fields of a `rate_limit` (a unit and a window, an unlimited limit with a
//! unit) run while that block is read, so they carry its position too.

use serde::de::{self, Deserializer};
use serde::Deserialize;
use sluice_core::{Algorithm, Limit, Nanos, SECOND};
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::path::{Path, PathBuf};

/// A rate limit unit of the RLS protocol (`RateLimitResponse.RateLimit.Unit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Unit {
    /// One second.
    Second,
    /// 60 seconds.
    Minute,
    /// 3,600 seconds.
    Hour,
    /// 86,400 seconds.
    Day,
    /// 7 days.
    Week,
    /// 30 days (as envoyproxy/ratelimit counts a month).
    Month,
    /// 365 days.
    Year,
}

impl Unit {
    /// Every unit, shortest first.
    pub const ALL: [Unit; 7] = [
        Unit::Second,
        Unit::Minute,
        Unit::Hour,
        Unit::Day,
        Unit::Week,
        Unit::Month,
        Unit::Year,
    ];

    /// The unit's length.
    pub const fn window(self) -> Nanos {
        let secs: u64 = match self {
            Unit::Second => 1,
            Unit::Minute => 60,
            Unit::Hour => 3_600,
            Unit::Day => 86_400,
            Unit::Week => 7 * 86_400,
            Unit::Month => 30 * 86_400,
            Unit::Year => 365 * 86_400,
        };
        secs * SECOND
    }

    /// The unit's number in the protocol's enum.
    pub const fn code(self) -> i32 {
        match self {
            Unit::Second => 1,
            Unit::Minute => 2,
            Unit::Hour => 3,
            Unit::Day => 4,
            Unit::Month => 5,
            Unit::Year => 6,
            Unit::Week => 7,
        }
    }

    /// The unit numbered `code` in the protocol (`None` for `UNKNOWN`).
    pub fn from_code(code: i32) -> Option<Unit> {
        Unit::ALL.into_iter().find(|u| u.code() == code)
    }

    /// The unit exactly `window` long, if any (for `current_limit`).
    pub fn of_window(window: Nanos) -> Option<Unit> {
        Unit::ALL.into_iter().find(|u| u.window() == window)
    }

    fn parse(text: &str) -> Option<Unit> {
        match text.to_ascii_lowercase().as_str() {
            "second" => Some(Unit::Second),
            "minute" => Some(Unit::Minute),
            "hour" => Some(Unit::Hour),
            "day" => Some(Unit::Day),
            "week" => Some(Unit::Week),
            "month" => Some(Unit::Month),
            "year" => Some(Unit::Year),
            _ => None,
        }
    }
}

impl<'de> Deserialize<'de> for Unit {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Unit::parse(&text).ok_or_else(|| {
            de::Error::custom(format!(
                "invalid rate limit unit {text:?} (expected second, minute, hour, day, week, month or year)"
            ))
        })
    }
}

fn duration<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Nanos>, D::Error> {
    let text = String::deserialize(d)?;
    sluice_core::parse_duration(&text)
        .map(Some)
        .map_err(de::Error::custom)
}

fn algorithm<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Algorithm>, D::Error> {
    let text = String::deserialize(d)?;
    text.parse::<Algorithm>()
        .map(Some)
        .map_err(|e| de::Error::custom(e.to_string()))
}

/// One entry of `replaces`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawReplaces {
    #[serde(default)]
    name: String,
}

/// `rate_limit` as written, before its fields are checked together.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRateLimitFields {
    #[serde(default)]
    unit: Option<Unit>,
    #[serde(default)]
    requests_per_unit: Option<u32>,
    #[serde(default)]
    unlimited: bool,
    #[serde(default)]
    name: String,
    #[serde(default)]
    replaces: Vec<RawReplaces>,
    // Sluice's extensions.
    #[serde(default, deserialize_with = "algorithm")]
    algorithm: Option<Algorithm>,
    #[serde(default, deserialize_with = "duration")]
    window: Option<Nanos>,
    #[serde(default)]
    burst: Option<u64>,
    #[serde(default)]
    soft_percent: Option<u32>,
}

/// What a `rate_limit` block does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Counted against a limit in the store.
    Limit(Limit),
    /// `requests_per_unit: 0`: every request is over the limit (nothing is
    /// stored).
    Block,
    /// `unlimited: true`: never limited, never stored.
    Unlimited,
}

/// A checked `rate_limit` block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateLimit {
    /// What it does.
    pub action: Action,
    /// `requests_per_unit` as configured (reported in `current_limit`).
    pub requests_per_unit: u32,
    /// The window's unit when it is one (`None` for a `window` that is not
    /// exactly a unit: reported as `UNKNOWN`).
    pub unit: Option<Unit>,
    /// The window.
    pub window: Nanos,
    /// `name`, reported in `current_limit` and matched by `replaces`.
    pub name: String,
    /// Names of the limits this one replaces when both apply.
    pub replaces: Vec<String>,
}

impl TryFrom<RawRateLimitFields> for RateLimit {
    type Error = String;

    fn try_from(raw: RawRateLimitFields) -> Result<Self, String> {
        let replaces: Vec<String> = raw.replaces.into_iter().map(|r| r.name).collect();
        if replaces.iter().any(String::is_empty) {
            return Err("replaces: an entry has an empty name".into());
        }
        if !raw.name.is_empty() && replaces.contains(&raw.name) {
            return Err(format!("replaces: {:?} is this limit's own name", raw.name));
        }
        let extended = raw.algorithm.is_some()
            || raw.window.is_some()
            || raw.burst.is_some()
            || raw.soft_percent.is_some();
        if raw.unlimited {
            if raw.unit.is_some() || raw.window.is_some() {
                return Err("unit: an unlimited rate limit takes no unit or window".into());
            }
            if extended {
                return Err(
                    "unlimited: an unlimited rate limit takes no algorithm, burst or soft_percent"
                        .into(),
                );
            }
            return Ok(RateLimit {
                action: Action::Unlimited,
                requests_per_unit: raw.requests_per_unit.unwrap_or(0),
                unit: None,
                window: 0,
                name: raw.name,
                replaces,
            });
        }
        let (unit, window) = match (raw.unit, raw.window) {
            (Some(_), Some(_)) => return Err("window: give either unit or window, not both".into()),
            (Some(u), None) => (Some(u), u.window()),
            (None, Some(w)) => (Unit::of_window(w), w),
            (None, None) => return Err("unit: missing (or a window, or unlimited: true)".into()),
        };
        let Some(requests_per_unit) = raw.requests_per_unit else {
            return Err("requests_per_unit: missing".into());
        };
        let action = if requests_per_unit == 0 {
            Action::Block
        } else {
            let limit = Limit {
                algorithm: raw.algorithm.unwrap_or(Algorithm::FixedWindow),
                requests: u64::from(requests_per_unit),
                window,
                burst: raw.burst.unwrap_or(u64::from(requests_per_unit)),
                precision: 1,
                soft_percent: raw.soft_percent.unwrap_or(0),
                max_delay: None,
            };
            limit.validate().map_err(|e| {
                let e = e
                    .renamed("requests", "requests_per_unit")
                    .renamed("window", if raw.unit.is_some() { "unit" } else { "window" });
                e.to_string()
            })?;
            Action::Limit(limit)
        };
        Ok(RateLimit {
            action,
            requests_per_unit,
            unit,
            window,
            name: raw.name,
            replaces,
        })
    }
}

impl<'de> Deserialize<'de> for RateLimit {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = RawRateLimitFields::deserialize(d)?;
        RateLimit::try_from(raw).map_err(de::Error::custom)
    }
}

/// One descriptor as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDescriptor {
    key: String,
    #[serde(default)]
    value: Option<String>,
    #[serde(default)]
    rate_limit: Option<RateLimit>,
    #[serde(default)]
    descriptors: Option<Vec<RawDescriptor>>,
    #[serde(default)]
    shadow_mode: bool,
    #[serde(default)]
    detailed_metric: bool,
    // Read so that envoyproxy/ratelimit files load; see the README.
    #[serde(default)]
    value_to_metric: bool,
    #[serde(default)]
    share_threshold: bool,
    #[serde(default)]
    quota_mode: bool,
    #[serde(default)]
    metadata: Option<serde_yaml_ng::Value>,
}

/// One configuration file as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDomain {
    domain: String,
    #[serde(default)]
    descriptors: Option<Vec<RawDescriptor>>,
}

/// A descriptor of the configuration, compiled.
#[derive(Debug, Clone, Default)]
pub struct Node {
    /// Its limit, if it has one.
    pub rate_limit: Option<RateLimit>,
    /// `shadow_mode`: counted, never denies.
    pub shadow: bool,
    /// `detailed_metric`: metrics name the request's values.
    pub detailed_metric: bool,
    /// `share_threshold` on a wildcard value: every matching value shares
    /// one counter, keyed by the pattern.
    pub share_threshold: bool,
    /// The path of this descriptor in the file (`key_value.key2`), as
    /// envoyproxy/ratelimit names its stats; used in metrics.
    pub path: String,
    /// The nested descriptors.
    pub children: Level,
}

/// The descriptors at one level of nesting.
#[derive(Debug, Clone, Default)]
pub struct Level {
    /// `key` with `value` (no wildcard), by key then value.
    exact: HashMap<String, HashMap<String, Node>>,
    /// `key` with a value holding `*`, in file order.
    wildcards: Vec<(String, Vec<String>, String, Node)>,
    /// `key` without a value: any value.
    any: HashMap<String, Node>,
}

/// How a request's entry matched a descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Matched<'a> {
    /// The key and the exact value.
    Value,
    /// A wildcard pattern (the pattern as written).
    Pattern(&'a str),
    /// The key only.
    Key,
}

impl Level {
    /// The most specific descriptor for `(key, value)`: the exact value,
    /// then the first wildcard pattern that matches, then the key alone.
    pub fn find(&self, key: &str, value: &str) -> Option<(&Node, Matched<'_>)> {
        if let Some(node) = self.exact.get(key).and_then(|m| m.get(value)) {
            return Some((node, Matched::Value));
        }
        for (k, parts, pattern, node) in &self.wildcards {
            if k == key && wildcard_match(parts, value) {
                return Some((node, Matched::Pattern(pattern)));
            }
        }
        self.any.get(key).map(|n| (n, Matched::Key))
    }

    fn is_empty(&self) -> bool {
        self.exact.is_empty() && self.wildcards.is_empty() && self.any.is_empty()
    }

    /// Whether this level has nested descriptors to descend into.
    pub fn has_children(&self) -> bool {
        !self.is_empty()
    }
}

/// Whether `value` matches a pattern split on `*` (each `*` matches any
/// run of characters, possibly empty).
fn wildcard_match(parts: &[String], value: &str) -> bool {
    let (Some(first), Some(last)) = (parts.first(), parts.last()) else {
        return false;
    };
    if parts.len() == 1 {
        return first == value;
    }
    let fixed: usize = parts.iter().map(String::len).sum();
    if value.len() < fixed || !value.starts_with(first.as_str()) || !value.ends_with(last.as_str())
    {
        return false;
    }
    let mut rest = &value[first.len()..value.len() - last.len()];
    for part in &parts[1..parts.len() - 1] {
        match rest.find(part.as_str()) {
            Some(i) => rest = &rest[i + part.len()..],
            None => return false,
        }
    }
    true
}

/// One domain's descriptors.
#[derive(Debug, Clone, Default)]
pub struct Domain {
    /// The top level.
    pub root: Level,
    /// Where it was read from.
    pub source: PathBuf,
}

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
    fn at(file: &Path, field: impl Into<String>, message: impl Into<String>) -> ConfigError {
        ConfigError {
            file: file.to_path_buf(),
            field: field.into(),
            position: None,
            message: message.into(),
        }
    }
}

/// Parses one file's text (one domain) into its domain name and tree.
pub fn parse_domain(text: &str, file: &Path) -> Result<(String, Domain), ConfigError> {
    // The YAML scanner takes time quadratic in flow nesting (100,000 `[`:
    // most of a minute); deeper than the deserializer's own limit fails
    // anyway, so fail it first.
    if flow_depth(text) > MAX_FLOW_DEPTH {
        return Err(ConfigError::at(
            file,
            "",
            format!("flow collections ([...], {{...}}) nested deeper than {MAX_FLOW_DEPTH}"),
        ));
    }
    let de = serde_yaml_ng::Deserializer::from_str(text);
    let raw: RawDomain = serde_path_to_error::deserialize(de).map_err(|e| {
        let field = e.path().to_string();
        let inner = e.into_inner();
        let position = inner.location().map(|l| (l.line(), l.column()));
        // The parser appends "at line L column C"; the position says it.
        let mut message = inner.to_string();
        if let Some(i) = message.find(" at line ") {
            message.truncate(i);
        }
        // ... and may lead with the path of the enclosing value; the field says it.
        if let Some(i) = message.find(": ") {
            if !message[..i].contains(' ') && field.starts_with(&message[..i]) {
                message.drain(..i + 2);
            }
        }
        ConfigError {
            file: file.to_path_buf(),
            field,
            position,
            message,
        }
    })?;
    if raw.domain.is_empty() {
        return Err(ConfigError::at(file, "domain", "must not be empty"));
    }
    let mut root = Level::default();
    compile_level(
        &mut root,
        raw.descriptors.unwrap_or_default(),
        "descriptors",
        "",
        file,
    )?;
    Ok((
        raw.domain,
        Domain {
            root,
            source: file.to_path_buf(),
        },
    ))
}

/// Deepest flow nesting a file may have (the deserializer's recursion limit).
const MAX_FLOW_DEPTH: usize = 128;

/// The deepest nesting of `[` and `{` outside quoted scalars and comments
/// (brackets in plain scalars count too).
fn flow_depth(text: &str) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    let mut quote: Option<u8> = None;
    let mut escaped = false;
    let mut comment = false;
    let mut prev = b'\n';
    for &b in text.as_bytes() {
        if comment {
            comment = b != b'\n';
        } else if let Some(q) = quote {
            if escaped {
                escaped = false;
            } else if q == b'"' && b == b'\\' {
                escaped = true;
            } else if b == q {
                quote = None;
            }
        } else {
            match b {
                // A quote opens a scalar only where one starts (`it's` is plain).
                b'"' | b'\'' if prev.is_ascii_whitespace() || b"[{,:-".contains(&prev) => {
                    quote = Some(b);
                }
                b'#' if prev.is_ascii_whitespace() => comment = true,
                b'[' | b'{' => {
                    depth += 1;
                    deepest = deepest.max(depth);
                }
                b']' | b'}' => depth = depth.saturating_sub(1),
                _ => {}
            }
        }
        prev = b;
    }
    deepest
}

fn compile_level(
    level: &mut Level,
    raws: Vec<RawDescriptor>,
    field: &str,
    parent_path: &str,
    file: &Path,
) -> Result<(), ConfigError> {
    let mut seen: HashSet<(String, Option<String>)> = HashSet::new();
    for (i, raw) in raws.into_iter().enumerate() {
        let here = format!("{field}[{i}]");
        if raw.key.is_empty() {
            return Err(ConfigError::at(
                file,
                format!("{here}.key"),
                "must not be empty",
            ));
        }
        // An empty value is no value, as in envoyproxy/ratelimit.
        let value = raw.value.filter(|v| !v.is_empty());
        if !seen.insert((raw.key.clone(), value.clone())) {
            return Err(ConfigError::at(
                file,
                format!("{here}.key"),
                format!(
                    "duplicate descriptor {:?}{} at this level",
                    raw.key,
                    value
                        .as_ref()
                        .map(|v| format!(" = {v:?}"))
                        .unwrap_or_default()
                ),
            ));
        }
        if raw.quota_mode {
            return Err(ConfigError::at(
                file,
                format!("{here}.quota_mode"),
                "quota mode is not supported by sluice-limiter",
            ));
        }
        let wildcard = value.as_ref().is_some_and(|v| v.contains('*'));
        if raw.share_threshold && !wildcard {
            return Err(ConfigError::at(
                file,
                format!("{here}.share_threshold"),
                "only a value with a wildcard (*) can share a threshold",
            ));
        }
        let _ = (raw.value_to_metric, raw.metadata);
        let segment = match &value {
            Some(v) => format!("{}_{v}", raw.key),
            None => raw.key.clone(),
        };
        let path = if parent_path.is_empty() {
            segment
        } else {
            format!("{parent_path}.{segment}")
        };
        let mut node = Node {
            rate_limit: raw.rate_limit,
            shadow: raw.shadow_mode,
            detailed_metric: raw.detailed_metric,
            share_threshold: raw.share_threshold,
            path: path.clone(),
            children: Level::default(),
        };
        compile_level(
            &mut node.children,
            raw.descriptors.unwrap_or_default(),
            &format!("{here}.descriptors"),
            &path,
            file,
        )?;
        match value {
            None => {
                level.any.insert(raw.key, node);
            }
            Some(v) if wildcard => {
                let parts = v.split('*').map(str::to_string).collect();
                level.wildcards.push((raw.key, parts, v, node));
            }
            Some(v) => {
                level.exact.entry(raw.key).or_default().insert(v, node);
            }
        }
    }
    Ok(())
}

/// Most files read from one directory.
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

impl Descriptors {
    /// Reads `path`: one YAML file, or a directory of them; one domain per
    /// file, each domain in one file only.
    pub fn load(path: &Path) -> Result<Descriptors, ConfigError> {
        let mut out = Descriptors::default();
        for file in files_of(path)? {
            let text = std::fs::read_to_string(&file)
                .map_err(|e| ConfigError::at(&file, "", format!("cannot read: {e}")))?;
            out.add(&text, &file)?;
        }
        Ok(out)
    }

    /// Adds the domain of one file's text.
    pub fn add(&mut self, text: &str, file: &Path) -> Result<(), ConfigError> {
        let (name, domain) = parse_domain(text, file)?;
        if let Some(first) = self.domains.get(&name) {
            return Err(ConfigError::at(
                file,
                "domain",
                format!(
                    "duplicate domain {name:?} (also in {})",
                    first.source.display()
                ),
            ));
        }
        self.domains.insert(name, domain);
        Ok(())
    }

    /// Parses one file's text alone (tests, tools).
    pub fn parse(text: &str) -> Result<Descriptors, ConfigError> {
        let mut out = Descriptors::default();
        out.add(text, Path::new(""))?;
        Ok(out)
    }
}

/// The limit a request's descriptor falls under.
#[derive(Debug, Clone)]
pub struct Found<'a> {
    /// The descriptor of the configuration that matched.
    pub node: &'a Node,
    /// Its limit.
    pub rate_limit: &'a RateLimit,
    /// The counter's identity within the domain: the request's entries
    /// (`key=value/key=value`, escaped), a shared wildcard as its pattern.
    pub key: String,
    /// The descriptor's name in metrics: the configuration's path, or the
    /// request's keys and values under `detailed_metric`.
    pub metric: String,
}

/// Appends a key or value escaped (percent-encoded outside
/// `[A-Za-z0-9-._:@+,]`) so that `/`, `=`, `~` and `|` only ever separate.
pub(crate) fn push_escaped(out: &mut String, text: &str) {
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-._:@+,".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
}

impl Domain {
    /// The limit for a descriptor of `entries`, by envoyproxy/ratelimit's
    /// rules: entry by entry down the nesting, each the most specific match
    /// (exact value, wildcard, key alone); the limit of the descriptor the
    /// last entry reaches, if it has one. A request with more entries than
    /// the nesting has levels matches nothing.
    pub fn lookup<'a, 'e>(
        &'a self,
        entries: impl ExactSizeIterator<Item = (&'e str, &'e str)>,
    ) -> Option<Found<'a>> {
        let last = entries.len().checked_sub(1)?;
        let mut level = &self.root;
        let mut key = String::new();
        let mut detailed = String::new();
        for (i, (k, v)) in entries.enumerate() {
            let (node, how) = level.find(k, v)?;
            if i > 0 {
                key.push('/');
                detailed.push('.');
            }
            push_escaped(&mut key, k);
            detailed.push_str(k);
            match how {
                Matched::Pattern(p) if node.share_threshold => {
                    key.push('~');
                    push_escaped(&mut key, p);
                    detailed.push('_');
                    detailed.push_str(p);
                }
                _ => {
                    key.push('=');
                    push_escaped(&mut key, v);
                    if !v.is_empty() {
                        detailed.push('_');
                        detailed.push_str(v);
                    }
                }
            }
            if i == last {
                let rate_limit = node.rate_limit.as_ref()?;
                let metric = if node.detailed_metric {
                    detailed
                } else {
                    node.path.clone()
                };
                return Some(Found {
                    node,
                    rate_limit,
                    key,
                    metric,
                });
            }
            if !node.children.has_children() {
                return None;
            }
            level = &node.children;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> ConfigError {
        match Descriptors::parse(text) {
            Ok(_) => panic!("accepted:\n{text}"),
            Err(e) => e,
        }
    }

    fn find<'a>(d: &'a Descriptors, entries: &[(&'a str, &'a str)]) -> Option<Found<'a>> {
        d.domains["d"].lookup(entries.iter().copied())
    }

    const EXAMPLE: &str = "
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
    fn the_most_specific_match_wins() {
        let d = Descriptors::parse(EXAMPLE).unwrap();
        let any = find(&d, &[("remote_address", "50.0.0.1")]).unwrap();
        assert_eq!(any.rate_limit.requests_per_unit, 10);
        assert_eq!(any.key, "remote_address=50.0.0.1");
        assert_eq!(any.metric, "remote_address");
        let exact = find(&d, &[("remote_address", "50.0.0.5")]).unwrap();
        assert_eq!(exact.rate_limit.action, Action::Block);
        assert_eq!(exact.metric, "remote_address_50.0.0.5");
    }

    #[test]
    fn nesting_needs_as_many_entries_as_levels() {
        let d = Descriptors::parse(EXAMPLE).unwrap();
        let nested = find(&d, &[("message_type", "marketing"), ("to_number", "206")]).unwrap();
        assert_eq!(nested.rate_limit.requests_per_unit, 5);
        assert_eq!(nested.key, "message_type=marketing/to_number=206");
        assert_eq!(nested.metric, "message_type_marketing.to_number");
        // The placeholder level has no limit; an entry too many matches nothing.
        assert!(find(&d, &[("message_type", "marketing")]).is_none());
        assert!(find(&d, &[("key", "value"), ("subkey", "x")]).is_none());
        assert!(find(&d, &[("message_type", "other"), ("to_number", "206")]).is_none());
        assert!(find(&d, &[("unknown", "x")]).is_none());
        assert!(find(&d, &[]).is_none());
    }

    #[test]
    fn wildcards_match_anywhere_and_may_share_a_counter() {
        let d = Descriptors::parse(EXAMPLE).unwrap();
        let w = find(&d, &[("path", "/api/123/action")]).unwrap();
        assert_eq!(w.rate_limit.requests_per_unit, 20);
        assert_eq!(w.key, "path=%2Fapi%2F123%2Faction");
        assert!(find(&d, &[("path", "/api/123/other")]).is_none());
        let a = find(&d, &[("files", "files/a.pdf")]).unwrap();
        let b = find(&d, &[("files", "files/b.csv")]).unwrap();
        assert_eq!(a.key, b.key, "share_threshold: one counter");
        assert_eq!(a.key, "files~files%2F%2A");
        assert!(wildcard_match(
            &["a".into(), "b".into(), "c".into()],
            "a-b-c"
        ));
        assert!(!wildcard_match(&["ab".into(), "ba".into()], "aba"));
        assert!(wildcard_match(&["".into(), "".into()], ""));
    }

    #[test]
    fn extensions_and_detailed_metrics() {
        let d = Descriptors::parse(EXAMPLE).unwrap();
        let f = find(&d, &[("user", "alice")]).unwrap();
        assert_eq!(f.metric, "user_alice");
        let Action::Limit(limit) = &f.rate_limit.action else {
            panic!("not a limit")
        };
        assert_eq!(limit.algorithm, Algorithm::Gcra);
        assert_eq!(limit.window, 10 * SECOND);
        assert_eq!(limit.burst, 2);
        assert_eq!(f.rate_limit.unit, None, "10s is no protocol unit");
        let minute = Descriptors::parse(
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {window: 60s, requests_per_unit: 1}\n",
        )
        .unwrap();
        let f = find(&minute, &[("k", "v")]).unwrap();
        assert_eq!(f.rate_limit.unit, Some(Unit::Minute));
        let Action::Limit(limit) = &f.rate_limit.action else {
            panic!("not a limit")
        };
        assert_eq!(limit.algorithm, Algorithm::FixedWindow, "the default");
    }

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
        let e = err("domain: d\ndescriptors:\n  - key: a\n    quota_mode: true\n");
        assert_eq!(e.field, "descriptors[0].quota_mode");
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
            "domain: d\ndescriptors:\n  - key: a\n    value_to_metric: true\n    metadata: {team: x}\n    detailed_metric: false\n    shadow_mode: true\n    rate_limit:\n      unlimited: true\n      name: n\n",
        )
        .unwrap();
        let f = find(&d, &[("a", "x")]).unwrap();
        assert_eq!(f.rate_limit.action, Action::Unlimited);
        assert!(f.node.shadow);
        for unit in ["SECOND", "Minute", "hour", "day", "week", "month", "year"] {
            let text = format!("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {{unit: {unit}, requests_per_unit: 1}}\n");
            assert!(Descriptors::parse(&text).is_ok(), "{unit}");
        }
    }

    #[test]
    fn units_round_trip_their_codes() {
        for u in Unit::ALL {
            assert_eq!(Unit::from_code(u.code()), Some(u));
            assert_eq!(Unit::of_window(u.window()), Some(u));
        }
        assert_eq!(Unit::from_code(0), None);
    }
    mod fuzz {
        //! The descriptor YAML loader on arbitrary text and on valid files
        //! with values swapped, lines dropped, repeated or re-indented, and
        //! bytes changed: descriptors, or an error naming what is wrong,
        //! never a panic; lookups in what loads never panic either.
        //! More cases: `PROPTEST_CASES=100000 cargo test -p sluice-limiter fuzz_`.
        use super::*;
        use proptest::prelude::*;
        use proptest::sample::Index;

        const SEEDS: &[&str] = &[
            EXAMPLE,
            "domain: d\ndescriptors:\n  - key: a\n    value_to_metric: true\n    metadata: {team: x}\n    detailed_metric: false\n    shadow_mode: true\n    rate_limit:\n      unlimited: true\n      name: n\n",
            "domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n        value: '*'\n        descriptors:\n          - key: c\n            rate_limit: {unit: minute, requests_per_unit: 3, algorithm: sliding_window}\n",
        ];

        const HOSTILE: &[&str] = &[
            "",
            "~",
            "null",
            "0",
            "-1",
            "18446744073709551615",
            "18446744073709551616",
            "1e309",
            ".nan",
            "'*'",
            "\"*\"",
            "'**'",
            "'a*b*c'",
            "[]",
            "{}",
            "[1, [2]]",
            "!!binary aGk=",
            "&a x",
            "*a",
            "second",
            "0s",
            "999999999999h",
            "1ns",
            "gcra",
            "\"\\u0000\"",
            "'日本😀'",
            "|\n  x",
            "{unit: second}",
        ];

        fn check(text: &str) -> Result<(), TestCaseError> {
            crate::rls::fuzzing::check_descriptor_yaml(text).map_err(TestCaseError::fail)
        }

        /// One change to a file: a scalar after `: ` swapped, a line
        /// removed, repeated or re-indented, or a byte changed.
        fn edit(text: &str, (line, op, pick): (Index, u8, Index)) -> String {
            let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
            if lines.is_empty() {
                return text.to_string();
            }
            let i = line.index(lines.len());
            match op % 5 {
                0 => {
                    if let Some(at) = lines[i].find(": ") {
                        lines[i].truncate(at + 2);
                        lines[i].push_str(pick.get::<&str>(HOSTILE));
                    }
                }
                1 => {
                    lines.remove(i);
                }
                2 => {
                    let copy = lines[i].clone();
                    lines.insert(i, copy);
                }
                3 => {
                    let spaces = " ".repeat(pick.index(9));
                    let trimmed = lines[i].trim_start().to_string();
                    lines[i] = spaces + &trimmed;
                }
                _ => {
                    const BYTES: &[u8] = b":-{}[],'\"*&!|>#% \t\n";
                    let mut bytes = std::mem::take(&mut lines[i]).into_bytes();
                    let at = pick.index(bytes.len() + 1);
                    bytes.insert(at, BYTES[pick.index(BYTES.len())]);
                    lines[i] = String::from_utf8_lossy(&bytes).into_owned();
                }
            }
            lines.join("\n")
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(300))]

            #[test]
            fn fuzz_rls_yaml_arbitrary_text(text in "[a-z_:{}\\[\\],'\"*&!|>#%. \n-]{0,200}") {
                check(&text)?;
            }

            #[test]
            fn fuzz_rls_yaml_arbitrary_bytes(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
                check(&String::from_utf8_lossy(&bytes))?;
            }

            #[test]
            fn fuzz_rls_yaml_mutated_files(
                seed in any::<Index>(),
                edits in prop::collection::vec((any::<Index>(), any::<u8>(), any::<Index>()), 1..5),
            ) {
                let mut text = seed.get::<&str>(SEEDS).to_string();
                for e in edits {
                    text = edit(&text, e);
                }
                check(&text)?;
            }
        }

        /// Deep nesting, alias expansion and long documents end in an
        /// error or descriptors, not a stack overflow or a hang.
        #[test]
        fn fuzz_rls_yaml_deep_and_expanding() {
            let mut deep = String::from("domain: d\ndescriptors:\n");
            for level in 0..2000 {
                let pad = "  ".repeat(level);
                deep.push_str(&format!("{pad}- key: k{level}\n{pad}  descriptors:\n"));
            }
            let _ = Descriptors::parse(&deep);
            let flow = format!(
                "domain: d\ndescriptors: {}{}",
                "[".repeat(100_000),
                "]".repeat(100_000)
            );
            let e = Descriptors::parse(&flow).unwrap_err();
            assert!(e.message.contains("nested deeper than"), "{e}");
            // At the limit, the deserializer decides (quickly); quotes and
            // comments do not count.
            let ok =
                "domain: d\ndescriptors: [{key: 'a[[[', value: \"{{\\\"[\"}] # [[[\n".to_string();
            assert!(Descriptors::parse(&ok).is_ok(), "{ok}");
            assert_eq!(flow_depth(&ok), 2);
            assert_eq!(flow_depth("a: it's [[x]]"), 2);
            let mut laughs = String::from("domain: d\na0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
            for i in 1..10 {
                let prev = format!("*a{}", i - 1);
                laughs.push_str(&format!(
                    "a{i}: &a{i} [{}]\n",
                    [prev.as_str(); 10].join(", ")
                ));
            }
            laughs.push_str("descriptors: *a9\n");
            assert!(Descriptors::parse(&laughs).is_err());
        }
    }
}
