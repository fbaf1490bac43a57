//! The invariants of both ends of the wire, shared by the proptest fuzzers
//! (`fuzz.rs`) and the libFuzzer targets `check` and `answer` (fuzz/): check,
//! permits and charge bodies on the limiter's side, answers on the filter's.

use crate::answer::compact;
use crate::loose;
use crate::{parse_check, CheckResponse, LimitResult, Rule};
use sluice_core::{decide_all, decide_batch, Check, SECOND};

/// The limiter's side: a check is refused with a message, or valid (with a
/// limit) and decided (one request and as a batch) without a panic, and its
/// answer reads back as written.
pub fn check_body(body: &[u8]) -> Result<(), String> {
    let check = match parse_check(body) {
        Err(e) if e.message.is_empty() => return Err(format!("no message at {:?}", e.path)),
        Err(_) => return Ok(()),
        Ok(check) => check,
    };
    if check.limits.is_empty() {
        return Err("a valid check without limits".into());
    }
    let checks: Vec<_> = check
        .limits
        .iter()
        .filter_map(|l| l.limit().map(|limit| Check::new(limit, None, l.hits)))
        .collect();
    let now = 1_714_521_600 * SECOND;
    let out = decide_all(&checks, now);
    decide_batch(&checks, now, check.requests().min(64));
    let permits = check.limits.iter().filter_map(|l| match &l.rule {
        Rule::Permits { permits, holder } => {
            Some(sluice_core::permits::acquire(permits, None, *holder, now, l.hits).decision)
        }
        Rule::Rate(_) => None,
    });
    let decisions: Vec<_> = out.decisions.into_iter().chain(permits).collect();
    let answer = CheckResponse {
        allowed: decisions.iter().all(|d| d.allowed),
        limits: decisions.iter().map(LimitResult::from).collect(),
        admitted: None,
        delays_ms: Vec::new(),
    };
    let written = serde_json::to_vec(&answer).map_err(|e| e.to_string())?;
    match CheckResponse::parse(&written, decisions.len()) {
        Some(read) if read == answer => Ok(()),
        read => Err(format!("{answer:?} read back as {read:?}")),
    }
}

/// The filter's side: an answer is read or not, never a panic; what the
/// compact and the loose readers read, serde reads alike; `parse` and `parse_batch` keep
/// their promises for `expected` limits and `requests` requests.
pub fn answer_body(body: &[u8], expected: usize, requests: u32) -> Result<(), String> {
    if let Some(fast) = compact::parse(body) {
        let serde: Option<CheckResponse> = serde_json::from_slice(body).ok();
        if Some(&fast) != serde.as_ref() {
            return Err(format!("compact reader {fast:?}, serde {serde:?}"));
        }
    }
    if let Some(read) = loose::parse(body) {
        let serde: Option<CheckResponse> = serde_json::from_slice(body).ok();
        if Some(&read) != serde.as_ref() {
            return Err(format!("loose reader {read:?}, serde {serde:?}"));
        }
    }
    if let Some(r) = CheckResponse::parse(body, expected) {
        if r.limits.len() != expected {
            return Err(format!(
                "{} limits read, {expected} expected",
                r.limits.len()
            ));
        }
    }
    if let Some(r) = CheckResponse::parse_batch(body, expected, requests) {
        if !r.admitted.is_some_and(|a| a <= requests) || r.limits.len() != expected {
            return Err(format!(
                "batch answer {r:?} for {requests} requests, {expected} limits"
            ));
        }
    }
    Ok(())
}

/// The limiter's side of the other bodies: a `POST /v1/permits` or
/// `POST /v1/charge` body is refused with a message, or valid; a valid
/// charge adjusts each of its limits without a panic, and a charge reads
/// into a state that a check then decides; the filter's hand writers write
/// what serde writes for a body serde reads.
pub fn permits_and_charge_bodies(body: &[u8]) -> Result<(), String> {
    match crate::parse_permits(body) {
        Err(e) if e.message.is_empty() => {
            return Err(format!("permits: no message at {:?}", e.path))
        }
        _ => {}
    }
    if let Ok(request) = serde_json::from_slice::<crate::PermitsRequest<'_>>(body) {
        let serde = serde_json::to_vec(&request).map_err(|e| e.to_string())?;
        if request.to_json() != serde {
            return Err("the permits writer differs from serde".into());
        }
    }
    let charge = match crate::parse_charge(body) {
        Err(e) if e.message.is_empty() => {
            return Err(format!("charge: no message at {:?}", e.path))
        }
        Err(_) => return Ok(()),
        Ok(charge) => charge,
    };
    let now = 1_714_521_600 * SECOND;
    for item in &charge.limits {
        let state = sluice_core::adjust(&item.limit, None, now, item.adjust);
        let bytes = state
            .as_ref()
            .and_then(|o| o.new_state.as_ref())
            .map(|s| s.as_bytes());
        sluice_core::decide(&item.limit, bytes, now, 1);
    }
    Ok(())
}
