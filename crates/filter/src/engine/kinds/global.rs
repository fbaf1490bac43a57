//! Global limits decided by the `sluice-limiter` cluster, checked per
//! request: denied at once while the over-limit cache holds the key, else
//! added to the call of the request's enforcing or shadow limits (see
//! [`crate::engine::core::global`]). The limiter's answer is read as it
//! comes: nothing follows it.

use crate::config::checks::{compile_limit, LimitSite};
use crate::config::raw::RawLimit;
use crate::config::{GlobalLimit, LimitKind};
use crate::engine::core::call::Item;
use crate::engine::core::global::{built, refuse_lease_fields};
use crate::engine::core::walk::{Applied, Cx};
use crate::headers::Reported;
use crate::key::RequestView;
use crate::local::SharedStore;
use crate::metrics::MetricSink;
use sluice_core::FieldError;

/// Compiles a global limit checked per request.
pub(crate) fn compile(site: &LimitSite<'_>, raw: &RawLimit) -> Result<LimitKind, FieldError> {
    let limit = compile_limit(site.path, raw)?;
    refuse_lease_fields(site, raw)?;
    built(site, raw, limit).map(LimitKind::Global)
}

/// Denies global limit `l` of `applied` if it can never admit the request's
/// weight or the over-limit cache holds its key; else its item for the
/// call.
pub(crate) fn step<V, S, M>(
    cx: &mut Cx<'_, V, S, M>,
    applied: &Applied<'_, '_>,
    l: usize,
    global: &GlobalLimit,
) -> Result<Item<()>, Reported>
where
    V: RequestView,
    S: SharedStore + ?Sized,
    M: MetricSink + ?Sized,
{
    cx.checked_item(applied, l, global)
}
