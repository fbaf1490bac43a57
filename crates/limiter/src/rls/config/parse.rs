//! Reading one file: the YAML as written (raw serde types), compiled into
//! a domain's tree of descriptors.

use super::rate_limit::RateLimit;
use super::tree::{Domain, Level, Node};
use super::ConfigError;
use serde::Deserialize;
use std::collections::HashSet;
use std::path::Path;

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
    // Read so that envoyproxy/ratelimit files load; see `docs/reference/descriptors.md`.
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

/// Parses one file's text (one domain) into its domain name and tree.
pub fn parse_domain(text: &str, file: &Path) -> Result<(String, Domain), ConfigError> {
    if text.len() as u64 > MAX_FILE_BYTES {
        return Err(file_too_large(file, text.len() as u64));
    }
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
    let mut nodes = 0;
    compile_level(
        &mut root,
        raw.descriptors.unwrap_or_default(),
        ("descriptors", 1),
        "",
        (file, &mut nodes),
    )?;
    Ok((
        raw.domain,
        Domain {
            root,
            source: file.to_path_buf(),
        },
    ))
}

/// Largest descriptor file, in bytes.
pub const MAX_FILE_BYTES: u64 = 4 << 20;

/// Most descriptors in one file, nested ones included.
pub const MAX_DESCRIPTORS: usize = 100_000;

/// Deepest nesting of `descriptors` (the top level is 1).
pub const MAX_NESTING: usize = 32;

/// The error of a file larger than [`MAX_FILE_BYTES`].
pub fn file_too_large(file: &Path, len: u64) -> ConfigError {
    ConfigError::at(
        file,
        "",
        format!("{len} bytes: larger than {MAX_FILE_BYTES} bytes (4 MiB)"),
    )
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

/// The descriptor's value (`None` for none or an empty one), once the
/// checks that need only the descriptor and its level have passed.
fn checked_value(
    raw: &RawDescriptor,
    here: &str,
    seen: &mut HashSet<(String, Option<String>)>,
    file: &Path,
) -> Result<Option<String>, ConfigError> {
    if raw.key.is_empty() {
        return Err(ConfigError::at(
            file,
            format!("{here}.key"),
            "must not be empty",
        ));
    }
    // An empty value is no value, as in envoyproxy/ratelimit.
    let value = raw.value.clone().filter(|v| !v.is_empty());
    if !seen.insert((raw.key.clone(), value.clone())) {
        let shown = value
            .as_ref()
            .map(|v| format!(" = {v:?}"))
            .unwrap_or_default();
        return Err(ConfigError::at(
            file,
            format!("{here}.key"),
            format!("duplicate descriptor {:?}{shown} at this level", raw.key),
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
    Ok(value)
}

/// Compiles the descriptors at nesting `depth` (named `field`) into
/// `level`, counting them in `nodes` (of the whole file).
fn compile_level(
    level: &mut Level,
    raws: Vec<RawDescriptor>,
    (field, depth): (&str, usize),
    parent_path: &str,
    (file, nodes): (&Path, &mut usize),
) -> Result<(), ConfigError> {
    if depth > MAX_NESTING && !raws.is_empty() {
        return Err(ConfigError::at(
            file,
            field,
            format!("descriptors nested deeper than {MAX_NESTING} levels"),
        ));
    }
    *nodes = nodes.saturating_add(raws.len());
    if *nodes > MAX_DESCRIPTORS {
        return Err(ConfigError::at(
            file,
            field,
            format!("more than {MAX_DESCRIPTORS} descriptors in the file"),
        ));
    }
    let mut seen: HashSet<(String, Option<String>)> = HashSet::new();
    for (i, raw) in raws.into_iter().enumerate() {
        let here = format!("{field}[{i}]");
        let value = checked_value(&raw, &here, &mut seen, file)?;
        let _ = raw.metadata;
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
            quota_mode: raw.quota_mode,
            value_to_metric: raw.value_to_metric,
            path: path.clone(),
            children: Level::default(),
        };
        compile_level(
            &mut node.children,
            raw.descriptors.unwrap_or_default(),
            (&format!("{here}.descriptors"), depth + 1),
            &path,
            (file, &mut *nodes),
        )?;
        match value {
            None => {
                level.any.insert(raw.key, node);
            }
            Some(v) if v.contains('*') => {
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

#[cfg(test)]
mod tests {
    use super::super::tests::EXAMPLE;
    use super::super::Descriptors;
    use super::*;

    fn nested(levels: usize) -> String {
        let mut text = String::from("domain: d\ndescriptors:\n");
        for i in 0..levels {
            let pad = "    ".repeat(i);
            if i > 0 {
                text.push_str(&format!("{pad}descriptors:\n"));
            }
            text.push_str(&format!("{pad}  - key: k{i}\n"));
            text.push_str(&format!(
                "{pad}    rate_limit: {{unit: second, requests_per_unit: 1}}\n"
            ));
        }
        text
    }

    #[test]
    fn nesting_count_and_size_are_bounded() {
        assert!(Descriptors::parse(&nested(MAX_NESTING)).is_ok());
        let err = Descriptors::parse(&nested(MAX_NESTING + 1)).unwrap_err();
        assert!(
            err.to_string().contains("nested deeper than 32 levels")
                && err.field.ends_with(".descriptors"),
            "{err}"
        );
        let many = |n: usize| {
            let mut text = String::from("domain: d\ndescriptors:\n");
            for i in 0..n {
                text.push_str(&format!("  - {{key: k, value: v{i}}}\n"));
            }
            text
        };
        assert!(Descriptors::parse(&many(MAX_DESCRIPTORS)).is_ok());
        let err = Descriptors::parse(&many(MAX_DESCRIPTORS + 1)).unwrap_err();
        assert!(
            err.to_string()
                .contains("more than 100000 descriptors in the file"),
            "{err}"
        );
        let big = format!("domain: d\n#{}\n", "x".repeat(4 << 20));
        let err = Descriptors::parse(&big).unwrap_err();
        assert!(
            err.to_string().contains("larger than 4194304 bytes"),
            "{err}"
        );
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
