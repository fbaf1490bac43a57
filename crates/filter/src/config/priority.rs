//! A rule's `priority`: the classes a key part's value names and the share
//! of each limit a class may use (see [`Priority`]).

use super::checks::{field_path, valid_name, MAX_NAME_LEN};
use super::plan::Priority;
use super::raw::RawPriority;
use crate::key::source::BODY_ONLY_IN_KEY;
use crate::key::KeyPart;
use sluice_core::FieldError;

/// Most classes of a rule.
pub const MAX_CLASSES: usize = 16;

/// Compiles the `priority` of the rule at `path` (whether its limits can
/// be shared by classes is their kinds' to say, where the plan is put
/// together).
pub fn compile(path: &str, priority: Option<&RawPriority>) -> Result<Option<Priority>, FieldError> {
    let Some(priority) = priority else {
        return Ok(None);
    };
    let at = field_path(path, "priority");
    let from =
        KeyPart::parse(&priority.from).map_err(|m| FieldError::at(field_path(&at, "from"), m))?;
    if from.reads_body() {
        return Err(FieldError::at(field_path(&at, "from"), BODY_ONLY_IN_KEY));
    }
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
