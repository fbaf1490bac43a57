//! A domain's descriptors as a tree, and the lookup of a request's
//! entries in it by envoyproxy/ratelimit's matching rules.

use super::rate_limit::RateLimit;
use std::collections::HashMap;
use std::path::PathBuf;

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
    /// `quota_mode`: over its limit, it refuses the call only when every
    /// quota-mode descriptor of the call is over its own.
    pub quota_mode: bool,
    /// `value_to_metric`: metrics name the request's value at this level
    /// where the descriptor has none or a wildcard.
    pub value_to_metric: bool,
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
    pub(super) exact: HashMap<String, HashMap<String, Node>>,
    /// `key` with a value holding `*`, in file order.
    pub(super) wildcards: Vec<(String, Vec<String>, String, Node)>,
    /// `key` without a value: any value.
    pub(super) any: HashMap<String, Node>,
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

    /// Joins `other`'s descriptors into this level (a domain spanning
    /// files); a descriptor with the same key and value in both is
    /// refused, its path returned.
    pub(super) fn merge(&mut self, other: Level) -> Result<(), String> {
        for (key, values) in other.exact {
            let mine = self.exact.entry(key).or_default();
            for (value, node) in values {
                if mine.contains_key(&value) {
                    return Err(node.path);
                }
                mine.insert(value, node);
            }
        }
        for entry in other.wildcards {
            if self
                .wildcards
                .iter()
                .any(|(k, _, pattern, _)| *k == entry.0 && *pattern == entry.2)
            {
                return Err(entry.3.path);
            }
            self.wildcards.push(entry);
        }
        for (key, node) in other.any {
            if self.any.contains_key(&key) {
                return Err(node.path);
            }
            self.any.insert(key, node);
        }
        Ok(())
    }

    /// Whether this level has nested descriptors to descend into.
    pub fn has_children(&self) -> bool {
        !self.is_empty()
    }

    /// Every descriptor of this level: its key, its value (`None`: any
    /// value) and itself, sorted by key then value.
    pub fn each(&self) -> Vec<(&str, Option<&str>, &Node)> {
        let mut out: Vec<(&str, Option<&str>, &Node)> = Vec::new();
        for (key, values) in &self.exact {
            out.extend(
                values
                    .iter()
                    .map(|(v, n)| (key.as_str(), Some(v.as_str()), n)),
            );
        }
        for (key, _, pattern, node) in &self.wildcards {
            out.push((key.as_str(), Some(pattern.as_str()), node));
        }
        out.extend(self.any.iter().map(|(k, n)| (k.as_str(), None, n)));
        out.sort_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
        out
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

/// Appends one level of a descriptor's name in metrics, as
/// envoyproxy/ratelimit names its stats: `key_value` as the descriptor
/// has it (its value, its pattern, or only the key), the request's value
/// instead under `value_to_metric` (a shared pattern stays the pattern).
fn push_metric_segment(out: &mut String, (k, v): (&str, &str), node: &Node, how: Matched<'_>) {
    out.push_str(k);
    let value = match how {
        Matched::Value => v,
        Matched::Pattern(p) if node.share_threshold || !node.value_to_metric => p,
        Matched::Pattern(_) => v,
        Matched::Key if node.value_to_metric => v,
        Matched::Key => "",
    };
    if !value.is_empty() {
        out.push('_');
        out.push_str(value);
    }
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
        let mut named = String::new();
        for (i, (k, v)) in entries.enumerate() {
            let (node, how) = level.find(k, v)?;
            if i > 0 {
                key.push('/');
                detailed.push('.');
                named.push('.');
            }
            push_metric_segment(&mut named, (k, v), node, how);
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
                    named
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
    use super::super::tests::{find, EXAMPLE};
    use super::super::{Action, Descriptors, Unit};
    use super::*;
    use sluice_core::{Algorithm, SECOND};

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
}
