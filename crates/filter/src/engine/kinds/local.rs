//! Local limits: decided by this filter, each key's state in a shared-data
//! slot (or an override's own key), consumed in a compare-and-swap loop
//! (see [`crate::engine::core::local`]) and refunded if the request is
//! denied.

use crate::config::checks::{compile_limit, LimitSite};
use crate::config::raw::RawLimit;
use crate::config::{LimitKind, LocalLimit};
use crate::engine::core::local::built;
use crate::engine::core::walk::{Applied, Cx};
use crate::headers::Reported;
use crate::key::RequestView;
use crate::local::SharedStore;
use crate::metrics::MetricSink;
use sluice_core::FieldError;

/// Compiles a local limit: its quota and where its state lives.
pub(crate) fn compile(site: &LimitSite<'_>, raw: &RawLimit) -> Result<LimitKind, FieldError> {
    let limit = compile_limit(site.path, raw)?;
    built(site, raw, limit).map(LimitKind::Local)
}

/// Consumes local limit `l` of `applied`.
pub(crate) fn step<V, S, M>(
    cx: &mut Cx<'_, V, S, M>,
    applied: &Applied<'_, '_>,
    l: usize,
    local: &LocalLimit,
) -> Result<(), Reported>
where
    V: RequestView,
    S: SharedStore + ?Sized,
    M: MetricSink + ?Sized,
{
    let (limit, decision) = cx.take_quota(applied, l, local)?;
    if !decision.allowed {
        return Err(applied.reported(l, limit, decision));
    }
    cx.note_local(applied, l, limit, decision);
    Ok(())
}
