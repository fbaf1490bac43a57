//! A rule's `priority`: the classes a key part's value names and the share
//! of each limit a class may use (see [`Priority`]).

use super::checks::{field_path, valid_name, MAX_NAME_LEN};
use super::plan::{LimitKind, Priority, RuleLimit};
use super::raw::{OnExceed, RawLimit, RawPriority};
use crate::key::KeyPart;
use sluice_core::FieldError;

/// Most classes of a rule.
pub const MAX_CLASSES: usize = 16;

/// Compiles the `priority` of the rule at `path`, whose limits are
/// `limits` (`raw`: as written).
pub fn compile(
    path: &str,
    priority: Option<&RawPriority>,
    limits: &[RuleLimit],
    raw: &[RawLimit],
) -> Result<Option<Priority>, FieldError> {
    let Some(priority) = priority else {
        return Ok(None);
    };
    let at = field_path(path, "priority");
    check_limits(&at, limits, raw)?;
    let from =
        KeyPart::parse(&priority.from).map_err(|m| FieldError::at(field_path(&at, "from"), m))?;
    if priority.classes.is_empty() || priority.classes.len() > MAX_CLASSES {
        return Err(FieldError::at(
            field_path(&at, "classes"),
            format!("must list 1 to {MAX_CLASSES} classes"),
        ));
    }
    let mut classes: Vec<(String, u8)> = Vec::with_capacity(priority.classes.len());
    for (i, class) in priority.classes.iter().enumerate() {
        let class_at = format!("{at}.classes[{i}]");
        if !valid_name(&class.name) || classes.iter().any(|(n, _)| *n == class.name) {
            return Err(FieldError::at(
                field_path(&class_at, "name"),
                format!(
                    "{:?} must be 1 to {MAX_NAME_LEN} bytes of A-Z, a-z, 0-9, '_', '.', '-', distinct from the other classes",
                    class.name
                ),
            ));
        }
        let share = u8::try_from(class.share)
            .ok()
            .filter(|s| (1..=100).contains(s))
            .ok_or_else(|| {
                FieldError::at(
                    field_path(&class_at, "share"),
                    format!("must be a percent from 1 to 100, got {}", class.share),
                )
            })?;
        classes.push((class.name.clone(), share));
    }
    let Some(&(_, default)) = classes.iter().find(|(n, _)| *n == priority.default) else {
        return Err(FieldError::at(
            field_path(&at, "default"),
            format!("{:?} is not one of the classes", priority.default),
        ));
    };
    Ok(Some(Priority {
        from,
        classes,
        default,
    }))
}

/// Priority classes share the rule's rate limits, local or checked with
/// the limiter per request: a reserve is room now, for one request.
fn check_limits(at: &str, limits: &[RuleLimit], raw: &[RawLimit]) -> Result<(), FieldError> {
    for (j, (limit, raw)) in limits.iter().zip(raw).enumerate() {
        let why = match &limit.kind {
            _ if raw.on_exceed == OnExceed::Delay => Some("a limit in delay mode"),
            LimitKind::Local(_)
            | LimitKind::LocalElastic(_)
            | LimitKind::Global(_)
            | LimitKind::GlobalElastic(_) => None,
            LimitKind::Coalesced(_) => Some("a global limit with sync coalesce"),
            LimitKind::Leased(_) => Some("a global limit with sync lease"),
            LimitKind::Concurrency(_) => Some("a concurrency limit"),
            LimitKind::ServiceHeld(_) => Some("held by a rate limit service (protocol rls)"),
        };
        if let Some(why) = why {
            return Err(FieldError::at(
                at,
                format!(
                    "applies to rate limits, local or global per request; limits[{j}] is {why}"
                ),
            ));
        }
    }
    Ok(())
}
