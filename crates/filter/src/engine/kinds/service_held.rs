//! Global limits held by a rate limit service (`limiter.protocol: rls`):
//! the request sends the limit's descriptor, and the service, which holds
//! the quota and window, answers (see [`crate::rls`]). A denial is cached
//! like any global limit's.

use crate::config::checks::{field_path, rate_fields, LimitSite};
use crate::config::raw::{OnExceed, RawLimit};
use crate::config::{Entry, EntryValue, LimitKind, ServiceHeld};
use crate::engine::core::call::{Item, Wire};
use crate::engine::core::walk::{Applied, Cx};
use crate::headers::Reported;
use crate::key::{KeyPart, RequestView};
use crate::layout;
use crate::local::SharedStore;
use crate::metrics::MetricSink;
use crate::rls;
use sluice_core::{Decision, FieldError};

/// Compiles a limit the rate limit service holds: only `scope` and
/// `descriptor` may be set.
pub(crate) fn compile(site: &LimitSite<'_>, raw: &RawLimit) -> Result<LimitKind, FieldError> {
    let descriptor = compile_descriptor(site.path, raw, site.rule, site.key)?;
    Ok(LimitKind::ServiceHeld(ServiceHeld {
        deny_prefix: layout::deny_prefix(site.domain, site.rule, site.index).into(),
        descriptor,
        from_metadata: None,
    }))
}

/// Denies global limit `l` of `applied`, held by a rate limit service, if
/// the over-limit cache holds its key; else its item for the call, its
/// descriptor. Its quota and window are known only from the service's
/// answer.
pub(crate) fn step<'a, V, S, M>(
    cx: &mut Cx<'a, V, S, M>,
    applied: &Applied<'_, '_>,
    l: usize,
    held: &'a ServiceHeld,
) -> Result<Item<()>, Reported>
where
    V: RequestView,
    S: SharedStore + ?Sized,
    M: MetricSink + ?Sized,
{
    let reported = |decision| Reported {
        rule: applied.index,
        limit: l,
        window: 0,
        decision,
    };
    let own = held
        .from_metadata
        .as_ref()
        .and_then(|place| cx.metadata_limit(applied, place));
    // A request with its own limit skips the over-limit cache: its denials
    // were made under another limit.
    let slot = match own {
        Some(_) => None,
        None => cx.cache_slot(applied, &held.deny_prefix, 0),
    };
    let cache = match slot {
        Some((_, Some(deadline))) => {
            let wait = deadline.saturating_sub(cx.now());
            return Err(reported(Decision::over_limit(0, wait)));
        }
        Some((slot, None)) => Some(slot),
        None => None,
    };
    let mut value = String::new();
    let entries = held
        .descriptor
        .iter()
        .map(|e| {
            let value = match &e.value {
                EntryValue::Fixed(text) => text.clone(),
                EntryValue::Part(part) => {
                    // A part of the rule's key, which was built.
                    cx.request.write_key(std::slice::from_ref(part), &mut value);
                    value.clone()
                }
            };
            (e.key.clone(), value)
        })
        .collect();
    Ok(Item {
        rule: applied.index,
        limit: l,
        window: 0,
        requests: 0,
        fingerprint: applied.fingerprint,
        cache,
        wire: Wire::Descriptor(rls::Descriptor {
            entries,
            hits: None,
            limit: own,
        }),
        follow: (),
    })
}

/// Checks a global limit of `protocol: rls`: only `scope` and `descriptor`
/// may be set (the service holds the limit). Without `descriptor`, it is
/// `generic_key: <rule>` followed by one entry per key part of the rule
/// (see [`default_entry_key`]).
fn compile_descriptor(
    path: &str,
    raw: &RawLimit,
    rule: &str,
    key: &[KeyPart],
) -> Result<Vec<Entry>, FieldError> {
    let delay = [
        ("on_exceed", raw.on_exceed != OnExceed::Deny),
        ("max_delay", raw.max_delay.is_some()),
    ];
    if let Some((field, _)) = rate_fields(raw)
        .into_iter()
        .chain(delay)
        .find(|(_, set)| *set)
    {
        return Err(FieldError::at(
            format!("{path}.{field}"),
            "not with limiter.protocol rls: the rate limit service's configuration holds the limit",
        ));
    }
    let Some(entries) = &raw.descriptor else {
        let mut entries = vec![Entry {
            key: "generic_key".to_string(),
            value: EntryValue::Fixed(rule.to_string()),
        }];
        entries.extend(key.iter().map(|part| Entry {
            key: default_entry_key(part),
            value: EntryValue::Part(part.clone()),
        }));
        return Ok(entries);
    };
    if entries.is_empty() {
        return Err(FieldError::at(
            field_path(path, "descriptor"),
            "must list at least one entry",
        ));
    }
    entries
        .iter()
        .enumerate()
        .map(|(k, e)| {
            let at = format!("{path}.descriptor[{k}]");
            if e.key.is_empty() {
                return Err(FieldError::at(field_path(&at, "key"), "must not be empty"));
            }
            let value = match (&e.value, &e.from) {
                (Some(v), None) => EntryValue::Fixed(v.clone()),
                (None, Some(from)) => {
                    let part = KeyPart::parse(from)
                        .map_err(|m| FieldError::at(field_path(&at, "from"), m))?;
                    // The rule's own part: its capture and default apply.
                    let Some(own) = key.iter().find(|k| k.base() == &part) else {
                        return Err(FieldError::at(
                            field_path(&at, "from"),
                            format!("{from:?} is not a key part of the rule"),
                        ));
                    };
                    EntryValue::Part(own.clone())
                }
                _ => return Err(FieldError::at(at, "set exactly one of value and from")),
            };
            Ok(Entry {
                key: e.key.clone(),
                value,
            })
        })
        .collect()
}

/// The descriptor key a key part gets by default: Envoy's own action names
/// where there is one (`remote_address`, `generic_key`), else the part's
/// name (`path`, `method`, `authority`), its header or query name or its
/// body field's path.
fn default_entry_key(part: &KeyPart) -> String {
    match part {
        KeyPart::ClientIp => "remote_address".to_string(),
        KeyPart::Header(name) | KeyPart::Query(name) => name.clone(),
        KeyPart::Path => "path".to_string(),
        KeyPart::Method => "method".to_string(),
        KeyPart::Authority => "authority".to_string(),
        KeyPart::Const(_) => "generic_key".to_string(),
        KeyPart::Context(part) => part.descriptor_key(),
        KeyPart::Refined(r) => default_entry_key(&r.part),
        KeyPart::Body(path) => path.as_str().to_string(),
    }
}
