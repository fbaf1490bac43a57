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

#[derive(Debug, Clone)]
enum Seg {
    Key(String),
    At(usize),
}

/// The path of every value in `v`, the root included.
fn paths(v: &Value, here: &mut Vec<Seg>, out: &mut Vec<Vec<Seg>>) {
    out.push(here.clone());
    match v {
        Value::Object(map) => {
            for (k, child) in map {
                here.push(Seg::Key(k.clone()));
                paths(child, here, out);
                here.pop();
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                here.push(Seg::At(i));
                paths(child, here, out);
                here.pop();
            }
        }
        _ => {}
    }
}

fn at<'v>(v: &'v mut Value, path: &[Seg]) -> Option<&'v mut Value> {
    path.iter().try_fold(v, |v, seg| match seg {
        Seg::Key(k) => v.get_mut(k.as_str()),
        Seg::At(i) => v.get_mut(*i),
    })
}

/// One change to a configuration: at the value chosen by `node`, `op`
/// swaps in a hostile value, removes it, or repeats it (in an array).
type Mutation = (Index, u8, Index);

fn mutate(v: &mut Value, (node, op, pick): &Mutation, hostile: &[Value]) {
    let mut all = Vec::new();
    paths(v, &mut Vec::new(), &mut all);
    let path = node.get(&all).clone();
    match op % 3 {
        0 => {
            if let Some(slot) = at(v, &path) {
                *slot = pick.get(hostile).clone();
            }
        }
        1 => {
            let Some((last, parent)) = path.split_last() else {
                return;
            };
            match (at(v, parent), last) {
                (Some(Value::Object(map)), Seg::Key(k)) => {
                    map.remove(k);
                }
                (Some(Value::Array(items)), Seg::At(i)) => {
                    items.remove(*i);
                }
                _ => {}
            }
        }
        _ => {
            let Some((Seg::At(i), parent)) = path.split_last() else {
                return;
            };
            if let Some(Value::Array(items)) = at(v, parent) {
                let copy = items[*i].clone();
                items.insert(*i, copy);
            }
        }
    }
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
    let byte = BYTES[usize::from(byte) % BYTES.len()];
    let i = at.index(body.len() + 1);
    match op % 3 {
        0 if i < body.len() => body[i] = byte,
        1 if i < body.len() => {
            body.remove(i);
        }
        _ => body.insert(i, byte),
    }
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
