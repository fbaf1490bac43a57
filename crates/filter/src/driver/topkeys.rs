//! Top limited keys (`top_limited_keys`): each worker counts the keys its
//! local limits refuse into a summary of its own per rule (no host call per
//! refusal), and folds it into the rule's summary in shared data at its
//! flush tick (one get and one compare-and-swap per rule that refused
//! since, keys shown then: at most `entries` hashes per rule per tick).
//! The shared summary's counts halve every [`DECAY`], so it follows the
//! last minutes. A request to the configured path is answered here with
//! the lists, read from shared data.
//!
//! Off (no `top_limited_keys`), none of this runs: no summary, no call.

use super::host::{Action, Host, LocalReply, Map};
use super::parts::Shared;
use super::request::{Phase, Request};
use crate::config::{Plan, TopLimitedKeys};
use crate::decimal::push_u64;
use crate::engine::Denied;
use crate::layout;
use crate::local::SharedStore;
use crate::topkeys::{decode, encode, Summary};
use sluice_core::{Nanos, SECOND};

/// The period at which the shared summaries' counts halve.
pub const DECAY: Nanos = 60 * SECOND;

/// Compare-and-swap tries per fold; a fold that loses them all is kept for
/// the next tick.
const CAS_TRIES: usize = 4;

/// Counts the refusal `denied` under its rule, if it has a key (a local
/// step refused it).
pub(super) fn count<M>(runtime: &super::Runtime<M>, denied: &Denied) {
    let Some(key) = &denied.key else {
        return;
    };
    if let Some(summary) = runtime.top.0.borrow_mut().get_mut(denied.report.rule) {
        summary.add(key, 1);
    }
}

/// Sets filter state `wasm.sluice_key` to `denied`'s key, shown as the
/// configuration says (nothing unless `access_log_key` is set).
pub(super) fn for_access_log<H: Host>(host: &mut H, plan: &Plan, denied: &Denied) {
    if let (Some(shown), Some(key)) = (plan.access_log_key, &denied.key) {
        host.set_state("sluice_key", &shown.show(key));
    }
}

/// Folds this worker's summaries into the shared ones at `now`.
pub(super) fn fold<H: Host>(host: &H, runtime: &Shared<H>, now: Nanos) {
    let Some(top) = &runtime.plan.top_limited_keys else {
        return;
    };
    let mut local = runtime.top.0.borrow_mut();
    for (rule, mine) in runtime.plan.rules.iter().zip(local.iter_mut()) {
        if mine.is_empty() {
            continue;
        }
        let key = layout::top_keys_key(&runtime.plan.domain, &rule.name);
        if fold_one(host, &key, top, mine, now) {
            *mine = Summary::new(top.entries);
        }
    }
}

/// Folds `mine` into the summary at `key`; whether it was written.
fn fold_one<S: SharedStore + ?Sized>(
    store: &S,
    key: &str,
    top: &TopLimitedKeys,
    mine: &Summary,
    now: Nanos,
) -> bool {
    for _ in 0..CAS_TRIES {
        let (bytes, cas) = store.get(key);
        let (mut shared, decayed_at) = read(bytes.as_deref(), top.entries, now);
        let mut shown = Summary::new(top.entries);
        for e in mine.entries() {
            shown.add_counted(&top.keys.show(&e.key), e.refusals, e.error);
        }
        shared.absorb(&mut shown);
        // A missing key is created whatever the non-zero cas.
        if store
            .set(key, &encode(&shared, decayed_at), Some(cas.unwrap_or(1)))
            .is_ok()
        {
            return true;
        }
    }
    false
}

/// The summary in `bytes` as of `now` (halved once per [`DECAY`] since it
/// last was), and when it last decayed.
fn read(bytes: Option<&[u8]>, entries: usize, now: Nanos) -> (Summary, Nanos) {
    let Some((mut summary, mut decayed_at)) = bytes.and_then(|b| decode(b, entries)) else {
        return (Summary::new(entries), now);
    };
    while now.saturating_sub(decayed_at) >= DECAY && !summary.is_empty() {
        summary.decay();
        decayed_at = decayed_at.saturating_add(DECAY);
    }
    if summary.is_empty() {
        decayed_at = now;
    }
    (summary, decayed_at)
}

/// Answers a request for the list's path.
pub(super) fn serve<H: Host>(host: &mut H, req: &mut Request<H>, runtime: &Shared<H>) -> Action {
    req.phase = Phase::Decided;
    let method = host.header(Map::RequestHeaders, ":method");
    let (status, body) = if matches!(method.as_deref(), Some("GET" | "HEAD")) {
        (200, listing(&*host, &runtime.plan, host.now()))
    } else {
        (
            405,
            r#"{"error":"method not allowed: GET or HEAD"}"#.to_owned(),
        )
    };
    let reply = LocalReply::Http {
        status,
        headers: vec![
            ("content-type", "application/json"),
            ("cache-control", "no-store"),
        ],
        body: body.as_bytes(),
    };
    if !host.reply(reply) {
        log::warn!("sluice: cannot answer the top limited keys path");
    }
    Action::Pause
}

/// `{"rules":[{"rule":r,"keys":[{"key","refusals","error"}]}]}`, every
/// rule's keys most refused first, as of `now` (written by hand: a JSON
/// value type would cost the module more than the list).
pub fn listing<S: SharedStore + ?Sized>(store: &S, plan: &Plan, now: Nanos) -> String {
    let entries = plan.top_limited_keys.as_ref().map_or(0, |t| t.entries);
    let mut out = String::from(r#"{"rules":["#);
    for (i, rule) in plan.rules.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(r#"{"rule":"#);
        push_string(&mut out, &rule.name);
        out.push_str(r#","keys":["#);
        let (bytes, _) = store.get(&layout::top_keys_key(&plan.domain, &rule.name));
        let (summary, _) = read(bytes.as_deref(), entries, now);
        for (j, e) in summary.top(entries).iter().enumerate() {
            if j > 0 {
                out.push(',');
            }
            out.push_str(r#"{"key":"#);
            push_string(&mut out, &e.key);
            out.push_str(r#","refusals":"#);
            push_u64(&mut out, e.refusals);
            out.push_str(r#","error":"#);
            push_u64(&mut out, e.error);
            out.push('}');
        }
        out.push_str("]}");
    }
    out.push_str("]}");
    out
}

/// Appends `text` as a JSON string (a clear key may hold anything).
fn push_string(out: &mut String, text: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if u32::from(c) < 0x20 => {
                out.push_str("\\u00");
                out.push(char::from(HEX[usize::from(c as u8 >> 4)]));
                out.push(char::from(HEX[usize::from(c as u8 & 15)]));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::push_string;

    #[test]
    fn strings_are_escaped_as_json_reads_them() {
        for text in ["plain", "a\"b\\c", "tab\there\u{1}", "é"] {
            let mut out = String::new();
            push_string(&mut out, text);
            let back: String = serde_json::from_str(&out).unwrap();
            assert_eq!(back, text);
        }
    }
}
