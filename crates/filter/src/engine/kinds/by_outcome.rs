//! Limits counted by the response's outcome (`count_when`): only requests
//! whose response matches count. A local or global limit reserves the
//! request's weight at admission, as it would without `count_when` (a key
//! over its limit is refused before the upstream sees it), and the request
//! owes a settlement once its stream ends: the units are kept when the
//! response matches, given back when it does not ([`crate::engine::settle`]).
//! Reserving first keeps the count exact at any concurrency; a global
//! limit's denials are not cached, since a unit given back frees the key. A
//! limit a rate limit service holds cannot be given back: it takes nothing
//! at admission (refused only while the over-limit cache holds the key,
//! which the service's answer to a charge saying the key is exhausted
//! fills) and is charged at the stream's end when the response matches. A
//! stream that ends without a response status keeps (or is charged) its
//! units.

use crate::config::checks::{field_path, LimitSite};
use crate::config::matching;
use crate::config::raw::{OnExceed, RawCountWhen, RawLimit, RawResponseHeader};
use crate::config::{ByOutcome, CountWhen, Counted, GlobalLimit, LimitKind, OutcomeTest};
use crate::engine::core::call::{Item, Wire};
use crate::engine::core::global::{affordable, ask_block, item};
use crate::engine::core::settle::{Owed, OwedOutcome};
use crate::engine::core::undo::Undo;
use crate::engine::core::walk::{Applied, Cx};
use crate::headers::Reported;
use crate::key::RequestView;
use crate::local::SharedStore;
use crate::matcher::{HeaderCondition, HeaderTest};
use crate::metrics::MetricSink;
use sluice_core::FieldError;
use std::rc::Rc;

/// Why `count_when` is refused with a limit of another kind, by field.
pub(crate) const NOT_COUNTED: &str = "not with count_when: a limit counted by outcome is a rate \
     limit, local or global per request (sync per_request), denied at once";

/// Compiles a limit counted by outcome: `counted`, the limit compiled
/// without `count_when`, and its condition.
pub(crate) fn compile(
    site: &LimitSite<'_>,
    raw: &RawLimit,
    when: &RawCountWhen,
    counted: Counted,
) -> Result<LimitKind, FieldError> {
    if raw.on_exceed == OnExceed::Delay {
        return Err(FieldError::at(site.field("on_exceed"), NOT_COUNTED));
    }
    let when = compile_when(&site.field("count_when"), when)?;
    Ok(LimitKind::ByOutcome(ByOutcome {
        counted,
        when: Rc::new(when),
    }))
}

/// Compiles the condition at `path`: at least one test, each valid.
fn compile_when(path: &str, raw: &RawCountWhen) -> Result<CountWhen, FieldError> {
    let mut tests = Vec::new();
    if let Some(status) = &raw.status {
        let at = field_path(path, "status");
        if status.is_empty() {
            return Err(FieldError::at(at, "must list at least one status"));
        }
        let ranges = status
            .iter()
            .enumerate()
            .map(|(k, s)| status_range(s).map_err(|m| FieldError::at(format!("{at}[{k}]"), m)))
            .collect::<Result<_, _>>()?;
        tests.push(OutcomeTest::Status(ranges));
    }
    if let Some(header) = &raw.header {
        tests.push(OutcomeTest::Header(response_header(
            &field_path(path, "header"),
            header,
        )?));
    }
    if let Some(codes) = &raw.grpc_status {
        let at = field_path(path, "grpc_status");
        if codes.is_empty() {
            return Err(FieldError::at(at, "must list at least one gRPC status"));
        }
        if let Some(k) = codes.iter().position(|c| *c > 16) {
            return Err(FieldError::at(
                format!("{at}[{k}]"),
                "a gRPC status is 0 to 16",
            ));
        }
        tests.push(OutcomeTest::GrpcStatus(codes.clone()));
    }
    if tests.is_empty() {
        return Err(FieldError::at(
            path,
            "set at least one of status, header and grpc_status",
        ));
    }
    Ok(CountWhen { tests })
}

/// The condition on a response header at `path`: present, and matching
/// its `value` pattern if given.
fn response_header(path: &str, raw: &RawResponseHeader) -> Result<HeaderCondition, FieldError> {
    if raw.name.is_empty() {
        return Err(FieldError::at(
            field_path(path, "name"),
            "must not be empty",
        ));
    }
    let test = match &raw.value {
        None => HeaderTest::Present,
        Some(value) => HeaderTest::Regex(matching::pattern(&field_path(path, "value"), value)?),
    };
    Ok(HeaderCondition {
        name: raw.name.to_ascii_lowercase(),
        test,
    })
}

/// The inclusive range of statuses `text` names: `401`, `5xx` or
/// `500-504`, each status from 100 to 599.
fn status_range(text: &str) -> Result<(u16, u16), String> {
    let why = || format!("{text:?} is not a status (401), a class (5xx) or a range (500-504)");
    let code = |t: &str| -> Result<u16, String> {
        let valid = t.len() == 3 && t.bytes().all(|b| b.is_ascii_digit());
        match t.parse::<u16>() {
            Ok(c) if valid && (100..=599).contains(&c) => Ok(c),
            Ok(_) | Err(_) => Err(why()),
        }
    };
    if let Some(class) = text.strip_suffix("xx") {
        let low = code(&format!("{class}00"))?;
        return Ok((low, low + 99));
    }
    match text.split_once('-') {
        Some((low, high)) => {
            let (low, high) = (code(low)?, code(high)?);
            if low > high {
                return Err(format!(
                    "{text:?}: the range's low end is above its high end"
                ));
            }
            Ok((low, high))
        }
        None => code(text).map(|c| (c, c)),
    }
}

/// The item of global limit `l` of `applied` counted by outcome; a denial
/// when it can never admit the request's weight. Its denials are not
/// cached: a unit given back may free the key before the denial's reset.
pub(crate) fn global_item(
    applied: &Applied<'_, '_>,
    l: usize,
    global: &GlobalLimit,
) -> Result<Item<()>, Reported> {
    let limit = affordable(applied, l, global)?;
    let mut item = item(applied, l, limit, None);
    ask_block(&mut item, global);
    Ok(item)
}

/// Notes what by-outcome limit `limit` of `applied` owes once its counted
/// limit's step admitted: `item`, its item for the call (none for a local
/// limit). Returns the item to check at admission: a global limit's; none
/// for a limit a rate limit service holds, which is charged at the end.
pub(crate) fn owe<V, S, M>(
    cx: &mut Cx<'_, V, S, M>,
    applied: &Applied<'_, '_>,
    limit: &ByOutcome,
    item: Option<Item<()>>,
) -> Option<Item<()>>
where
    V: RequestView,
    S: SharedStore + ?Sized,
    M: MetricSink + ?Sized,
{
    let mut owed = Owed {
        rule: applied.index,
        estimate: applied.weight,
        admitted_at: cx.now(),
        local: Vec::new(),
        global: Vec::new(),
        descriptors: Vec::new(),
        global_counted: true,
        shadow: applied.rule.shadow,
        outcome: Some(OwedOutcome {
            when: Rc::clone(&limit.when),
            cache: None,
        }),
    };
    let kept = match (&limit.counted, item) {
        (Counted::Local(_), _) => {
            // The local step's consumption, the last logged.
            if let Some(Undo::State { at, limit, .. }) = cx.tally.consumed.last() {
                owed.local.push((at.clone(), limit.clone()));
            }
            None
        }
        (Counted::Global(_), Some(item)) => {
            owed.global.extend(item.spec().cloned());
            Some(item)
        }
        (Counted::Service(_), Some(item)) => {
            owed.global_counted = false;
            if let Wire::Descriptor(descriptor) = item.wire {
                owed.descriptors.push(descriptor);
            }
            if let Some(outcome) = owed.outcome.as_mut() {
                outcome.cache = item.cache;
            }
            None
        }
        (Counted::Global(_) | Counted::Service(_), None) => None,
    };
    cx.tally.owed.push(owed);
    kept
}
