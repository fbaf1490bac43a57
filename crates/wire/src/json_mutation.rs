//! Structured mutation of JSON documents for the fuzz tests of the filter's
//! configuration and the limiter API: at one value of a document, swap in a
//! hostile value, remove it, or repeat it. Shared by `sluice-wire`'s tests and
//! the filter's (which include this file by path).

use proptest::sample::Index;
use serde_json::Value;

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
pub type Mutation = (Index, u8, Index);

pub fn mutate(v: &mut Value, (node, op, pick): &Mutation, hostile: &[Value]) {
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

/// One change to raw bytes: at the position `at` picks (the end included),
/// `op` replaces the byte there with `byte`, removes it, or inserts `byte`.
pub fn edit_bytes(body: &mut Vec<u8>, (at, op, byte): (Index, u8, u8)) {
    let i = at.index(body.len() + 1);
    match op % 3 {
        0 if i < body.len() => body[i] = byte,
        1 if i < body.len() => {
            body.remove(i);
        }
        _ => body.insert(i, byte),
    }
}
