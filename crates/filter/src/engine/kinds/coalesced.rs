//! Global limits with `sync: coalesce`: requests of one worker with the same
//! check share calls (see [`crate::coalesce`]; the host keeps the groups).
//! The limiter admits the first `admitted` requests of a shared call in
//! arrival order; each request reads its share of the answer.

use crate::config::checks::{compile_limit, LimitSite};
use crate::config::raw::RawLimit;
use crate::config::{GlobalLimit, LimitKind};
use crate::engine::core::call::Item;
use crate::engine::core::follow::FollowUp;
use crate::engine::core::global::{built, refuse_lease_fields};
use crate::engine::core::pending::PendingCheck;
use crate::engine::core::walk::{Applied, Cx};
use crate::headers::Reported;
use crate::key::RequestView;
use crate::local::SharedStore;
use crate::metrics::MetricSink;
use sluice_core::FieldError;
use sluice_wire::{check_json, CheckResponse, LimitResult};

/// Compiles a global limit with `sync: coalesce`.
pub(crate) fn compile(site: &LimitSite<'_>, raw: &RawLimit) -> Result<LimitKind, FieldError> {
    let limit = compile_limit(site.path, raw)?;
    refuse_lease_fields(site, raw)?;
    built(site, raw, limit).map(LimitKind::Coalesced)
}

/// Denies coalesced limit `l` of `applied` if it can never admit the
/// request's weight or the over-limit cache holds its key; else its item
/// for the call, which may be shared.
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

// The bound is the crate's own: the only follow-up is the registry's.
#[allow(private_bounds)]
impl<F: FollowUp> PendingCheck<F> {
    /// The request's check, when it may share calls with requests that have
    /// the same (see [`crate::coalesce`]): one call, of enforcing limits that
    /// all coalesce, none of them elastic. Requests with equal bodies have
    /// the same check.
    pub fn coalescable(&self) -> Option<&[u8]> {
        let [call] = self.calls.as_slice() else {
            return None;
        };
        let all = call.batch.items.iter().all(|item| item.follow.coalesces());
        (!call.shadow && !self.borrowing && all).then_some(call.body.as_slice())
    }

    /// Takes the request's check out as its group's signature, when it may
    /// share calls ([`coalescable`](Self::coalescable)): a request that
    /// waits for its group's call sends no body of its own, so the body is
    /// not copied. Put it back ([`restore_signature`](Self::restore_signature))
    /// before the request makes its own call.
    pub fn take_signature(&mut self) -> Option<Vec<u8>> {
        self.coalescable()?;
        self.calls.first_mut().map(|c| std::mem::take(&mut c.body))
    }

    /// Puts back the body [`take_signature`](Self::take_signature) took.
    pub fn restore_signature(&mut self, body: Vec<u8>) {
        if let Some(call) = self.calls.first_mut() {
            call.body = body;
        }
    }

    /// The body of one call carrying `n` requests with this check.
    pub fn batch_body(&self, domain: &str, n: u32) -> Vec<u8> {
        let Some(call) = self.calls.first() else {
            return Vec::new();
        };
        let batch = &call.batch;
        check_json(domain, batch.hits(), &batch.specs(), Some(n), None)
    }

    /// Reads the answer `body` to a call carrying `n` requests with this
    /// check; `None` when it is malformed.
    pub fn parse_batch(&self, body: &[u8], n: u32) -> Option<CheckResponse> {
        let limits = self.calls.first().map_or(0, |c| c.batch.len());
        CheckResponse::parse_batch(body, limits, n)
    }

    /// Records this request's share of `answer` (see
    /// [`parse_batch`](Self::parse_batch); `None`: the call failed), the
    /// request being at `position` (0 first) in arrival order. A request
    /// among the first `admitted` is admitted with its own delay and reports
    /// what remained after the whole call; any later one is denied as the
    /// first refused one was.
    pub fn record_batch(&mut self, answer: Option<&CheckResponse>, position: u32) {
        let Some(call) = self.calls.first_mut() else {
            return;
        };
        call.answer = Some(answer.map(|a| share_of(a, position)));
    }
}

/// The answer of one request at `position` of a batch answered with
/// `batch`.
fn share_of(batch: &CheckResponse, position: u32) -> CheckResponse {
    let admitted = batch.admitted.unwrap_or(0);
    if position >= admitted {
        // Refused like the first refused one: the answer's limits are its.
        return CheckResponse {
            allowed: false,
            limits: batch.limits.clone(),
            admitted: None,
            delays_ms: Vec::new(),
        };
    }
    let delay_ms = usize::try_from(position)
        .ok()
        .and_then(|i| batch.delays_ms.get(i))
        .copied()
        .unwrap_or(0);
    CheckResponse {
        allowed: true,
        limits: batch
            .limits
            .iter()
            .map(|r| LimitResult {
                allowed: true,
                retry_after_ms: 0,
                delay_ms,
                ..*r
            })
            .collect(),
        admitted: None,
        delays_ms: Vec::new(),
    }
}
