//! Fuzzing the configuration parser: arbitrary bytes, and valid
//! configurations with values swapped for hostile ones, fields dropped,
//! array elements repeated or bytes changed. Whatever the input, `parse`
//! returns a plan or an error with a message, never a panic.
//!
//! More cases: `PROPTEST_CASES=100000 cargo test -p sluice fuzz_`.

use super::*;
use proptest::prelude::*;
use proptest::sample::Index;
use serde_json::{json, Value};

#[path = "../../../../wire/src/json_mutation.rs"]
mod json_mutation;
use json_mutation::{edit_bytes, mutate};

/// Valid configurations covering every section the parser knows.
fn seeds() -> Vec<String> {
    vec![
        FULL.to_string(),
        with_rule(&format!(
            r#"{{"name":"r","key":["path"],"limits":[{LIMIT}]}}"#
        )),
        delay_limit("gcra", r#","burst":5,"max_delay":"1s","on_exceed":"delay""#),
        delay_limit(
            "leaky_bucket",
            r#","max_delay":"250ms","on_exceed":"delay""#,
        ),
        elastic_config(r#","elastic":{"ceiling":25,"pool":"spare"}"#, POOL),
        leased(r#"{"mode":"lease","max_share":"2.5%","ttl":"200ms"}"#),
        leased(r#"{"mode":"coalesce"}"#),
        rls(
            r#"{"name":"per-user","key":["client_ip","header:X-User"],"limits":[{"scope":"global"}]}"#,
        ),
    ]
}

/// Values a hostile or careless configuration may hold.
fn hostile() -> Vec<Value> {
    vec![
        json!(null),
        json!(true),
        json!(0),
        json!(1),
        json!(-1),
        json!(u64::MAX),
        json!(i64::MIN),
        json!(u32::MAX),
        json!(u64::from(u32::MAX) + 1),
        json!(1.5),
        json!(1e300),
        json!(-0.0),
        json!(""),
        json!("0s"),
        json!("1ns"),
        json!("0.000000001s"),
        json!("18446744073709551615s"),
        json!("99999999999999999999h"),
        json!("1.99999999999999999999s"),
        json!("-1s"),
        json!("1e9s"),
        json!("%"),
        json!("100%"),
        json!("0%"),
        json!("101%"),
        json!("2.5%"),
        json!("header:"),
        json!("const:"),
        json!("query:"),
        json!("client_ip"),
        json!("a.b"),
        json!("日本😀\u{0}"),
        json!("x".repeat(5000)),
        json!([]),
        json!(["client_ip"]),
        json!([{}]),
        json!({}),
    ]
}

/// Parses `json` and checks the outcome's shape.
fn check(json: &[u8]) -> Result<(), TestCaseError> {
    match parse(json) {
        Ok(plan) => prop_assert!(!plan.domain.is_empty()),
        Err(e) => {
            prop_assert!(!e.message.is_empty(), "no message for {:?}", e.path);
            // The display is what operators see.
            let _ = e.to_string();
        }
    }
    Ok(())
}

fn byte_edit(body: &mut Vec<u8>, (at, op, byte): (Index, u8, u8)) {
    const BYTES: &[u8] = b"0123456789,:{}[]\"\\ -.%aeEs\x00\xff";
    edit_bytes(body, (at, op, BYTES[usize::from(byte) % BYTES.len()]));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn fuzz_config_arbitrary_bytes(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        check(&bytes)?;
    }

    #[test]
    fn fuzz_config_arbitrary_text(text in "[{}\\[\\]\":,0-9a-z_ .%-]{0,300}") {
        check(text.as_bytes())?;
    }

    #[test]
    fn fuzz_config_mutated_values(
        seed in any::<Index>(),
        mutations in prop::collection::vec((any::<Index>(), any::<u8>(), any::<Index>()), 1..6),
    ) {
        let seeds = seeds();
        let mut v: Value = serde_json::from_str(seed.get::<String>(&seeds)).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let hostile = hostile();
        for m in &mutations {
            mutate(&mut v, m, &hostile);
        }
        check(v.to_string().as_bytes())?;
    }

    #[test]
    fn fuzz_config_mutated_bytes(
        seed in any::<Index>(),
        edits in prop::collection::vec((any::<Index>(), any::<u8>(), any::<u8>()), 1..8),
    ) {
        let seeds = seeds();
        let mut body = seed.get::<String>(&seeds).as_bytes().to_vec();
        for e in edits {
            byte_edit(&mut body, e);
        }
        check(&body)?;
    }
}

#[test]
fn the_seeds_are_valid() {
    for s in seeds() {
        if let Err(e) = parse(s.as_bytes()) {
            panic!("{s}: {e}");
        }
    }
}
