//! The `sluice` command line: the committed schema is the generated one, and
//! `check-config` answers as the filter does.

#![cfg(test)]

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn sluice(args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    child.wait_with_output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn the_committed_schema_is_the_generated_one() {
    let committed = std::fs::read_to_string(repo().join("schema/sluice.schema.json")).unwrap();
    assert!(
        committed == sluice_filter::schema::schema_text(),
        "schema/sluice.schema.json is out of date: run `make schema` and commit it"
    );
    let out = sluice(&["schema"], b"");
    assert!(out.status.success());
    assert_eq!(text(&out.stdout), committed);
}

#[test]
fn the_schema_lists_every_top_level_field_and_denies_others() {
    let schema = sluice_filter::schema::schema();
    let props = schema["properties"].as_object().unwrap();
    for field in [
        "domain",
        "headers",
        "client_ip",
        "limiter",
        "local_max_keys",
        "response",
        "rules",
    ] {
        assert!(props.contains_key(field), "{field}");
    }
    assert_eq!(schema["additionalProperties"], false);
    assert_eq!(schema["required"], serde_json::json!(["domain"]));
}

#[test]
fn a_valid_configuration_passes() {
    let cfg = br#"{"domain": "shop", "rules": [{"name": "per-ip", "key": ["client_ip"],
        "limits": [{"algorithm": "gcra", "requests": 10, "window": "1s"}]}]}"#;
    let out = sluice(&["check-config", "-"], cfg);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "-: ok (domain shop, 1 rule)\n");
}

#[test]
fn an_invalid_configuration_names_the_field_as_the_filter_does() {
    let cases: [&[u8]; 3] = [
        br#"{"domain": "shop", "rules": [{"name": "r", "key": ["client_ip"],
            "limits": [{"algorithm": "gcra", "requests": 10, "window": "0ms"}]}]}"#,
        br#"{"domain": "shop", "rulez": []}"#,
        br#"{"domain": "shop", "rules": [{"name": "r", "key": ["client_ip"],
            "limits": [{"algorithm": "gcra", "requests": 10, "window": "1s", "scope": "global"}]}]}"#,
    ];
    for cfg in cases {
        let expected = sluice_filter::config::parse(cfg).unwrap_err();
        let out = sluice(&["check-config", "-"], cfg);
        assert_eq!(out.status.code(), Some(1));
        assert_eq!(
            text(&out.stderr),
            format!("-: invalid configuration: {expected}\n")
        );
        assert!(!expected.path.is_empty() || expected.message.contains("rulez"));
    }
}

#[test]
fn files_are_checked_in_turn_and_one_bad_file_fails_the_run() {
    let dir = std::env::temp_dir().join(format!("sluice-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = dir.join("good.json");
    let bad = dir.join("bad.json");
    std::fs::write(&good, br#"{"domain": "a"}"#).unwrap();
    std::fs::write(&bad, br#"{"domain": ""}"#).unwrap();
    let out = sluice(
        &[
            "check-config",
            good.to_str().unwrap(),
            bad.to_str().unwrap(),
        ],
        b"",
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stdout).contains("good.json: ok (domain a, 0 rules)"));
    assert!(text(&out.stderr).contains("bad.json: invalid configuration: domain: "));
    let missing = sluice(&["check-config", dir.join("nope").to_str().unwrap()], b"");
    assert_eq!(missing.status.code(), Some(2));
    assert_eq!(sluice(&[], b"").status.code(), Some(2));
    std::fs::remove_dir_all(&dir).unwrap();
}
