//! The calls of a request to the limiter: the global limits bound for each
//! call, what each of them is there for, and the call's answer.

use crate::headers::Reported;
use crate::rls;
use sluice_core::{Decision, Holder, Nanos};
use sluice_wire::{check_json, CheckResponse, LimitSpec};

/// A global limit to check for this request.
#[derive(Debug, Clone)]
pub(super) struct GlobalItem {
    pub(super) rule: usize,
    pub(super) limit: usize,
    pub(super) window: Nanos,
    pub(super) requests: u64,
    pub(super) fingerprint: u64,
    /// Whether a denial may be cached for the key: every request of the
    /// rule weighs the same (a fixed cost), so one denied until a deadline
    /// means all are.
    pub(super) cacheable: bool,
    /// What the limit's kind does with the answer.
    pub(super) via: Via,
}

/// What a global limit's kind does around its check: one variant per kind
/// that does more than read the answer.
#[derive(Debug, Clone)]
pub(super) enum Via {
    /// Checked for this request alone (per request, or held by a rate limit
    /// service).
    Alone,
    /// May share its call with requests that have the same check.
    Coalesced,
    /// A leased limit's ask for units, made with the check.
    Leased(LeaseAsk),
    /// An elastic limit: what it checks in the second call if it denies.
    Elastic(Box<Lend>),
    /// Borrowing for an elastic limit that denied with `own` (reported in
    /// its place): its extra allowance (`extra`), or a limit of its pool.
    Lent { own: Reported, extra: bool },
    /// A concurrency limit's permits, held for this long after a renewal
    /// once the call admits.
    Permit(Nanos),
}

/// A leased limit's ask for units, made with the request's check.
#[derive(Debug, Clone, Copy)]
pub(super) struct LeaseAsk {
    pub(super) slot: u64,
    /// Whether units were asked for (the grant, even of none, ends the ask).
    pub(super) asked: bool,
    /// Units of the previous grant the ask gives back.
    pub(super) returned: u64,
}

/// What a global elastic limit checks in the second call instead of itself.
#[derive(Debug, Clone)]
pub(super) struct Lend {
    /// The key's extra allowance.
    pub(super) extra: (GlobalItem, LimitSpec<'static>),
    /// Each limit of the pool rule, at the pool's key.
    pub(super) pool: Vec<(GlobalItem, LimitSpec<'static>)>,
}

impl GlobalItem {
    pub(super) fn reported(&self, decision: Decision) -> Reported {
        Reported {
            rule: self.rule,
            limit: self.limit,
            window: self.window,
            decision,
        }
    }

    /// This item, or a copy with its window replaced by `window`.
    pub(super) fn in_window(&self, window: Option<Nanos>) -> std::borrow::Cow<'_, GlobalItem> {
        match window {
            Some(window) => std::borrow::Cow::Owned(GlobalItem {
                window,
                ..self.clone()
            }),
            None => std::borrow::Cow::Borrowed(self),
        }
    }

    /// The lease ask this item carries, if any.
    pub(super) fn lease(&self) -> Option<LeaseAsk> {
        match self.via {
            Via::Leased(ask) => Some(ask),
            _ => None,
        }
    }
}

/// The global limits bound for one call, added as the rules are decided.
#[derive(Debug, Default)]
pub(super) struct Batch {
    pub(super) items: Vec<GlobalItem>,
    /// The wire form of each item, in the same order.
    pub(super) limits: Vec<LimitSpec<'static>>,
    /// With `protocol: rls`, the descriptor of each item instead.
    pub(super) descriptors: Vec<rls::Descriptor>,
    /// The call's `hits`: the weight of its first limit. A limit weighing
    /// otherwise carries its own `hits`.
    pub(super) hits: Option<u64>,
}

impl Batch {
    pub(super) fn push(&mut self, item: GlobalItem, mut limit: LimitSpec<'static>, weight: u64) {
        if *self.hits.get_or_insert(weight) != weight {
            limit.hits = Some(weight);
        }
        self.items.push(item);
        self.limits.push(limit);
    }

    pub(super) fn push_descriptor(
        &mut self,
        item: GlobalItem,
        mut descriptor: rls::Descriptor,
        weight: u64,
    ) {
        if *self.hits.get_or_insert(weight) != weight {
            descriptor.hits = Some(weight);
        }
        self.items.push(item);
        self.descriptors.push(descriptor);
    }

    pub(super) fn len(&self) -> usize {
        self.items.len()
    }

    /// The wire forms of the limits added since the batch held `mark`: the
    /// limiter's (each with its weight in `hits`) and the rate limit
    /// service's descriptors.
    pub(super) fn since(&self, mark: usize) -> (Vec<LimitSpec<'static>>, Vec<rls::Descriptor>) {
        let descriptors = self.descriptors.iter().skip(mark).cloned().collect();
        (self.limits_since(mark), descriptors)
    }

    /// The wire form of the limits added since the batch held `mark`, each
    /// with its weight in `hits`.
    pub(super) fn limits_since(&self, mark: usize) -> Vec<LimitSpec<'static>> {
        let hits = self.hits.unwrap_or(1);
        self.limits
            .iter()
            .skip(mark)
            .map(|l| LimitSpec {
                hits: Some(l.hits.unwrap_or(hits)),
                ..l.clone()
            })
            .collect()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    pub(super) fn truncate(&mut self, len: usize) {
        self.items.truncate(len);
        self.limits.truncate(len);
        self.descriptors.truncate(len);
        if self.items.is_empty() {
            self.hits = None;
        }
    }

    /// The call checking these limits; `None` when there are none.
    pub(super) fn into_call(self, domain: &str, shadow: bool, holder: Holder) -> Option<Call> {
        if self.is_empty() {
            return None;
        }
        let rls = !self.descriptors.is_empty();
        let hits = self.hits.unwrap_or(1);
        let body = if rls {
            rls::encode_request(domain, &self.descriptors, hits)
        } else {
            let takes_permits = self.items.iter().any(|i| matches!(i.via, Via::Permit(_)));
            check_json(
                domain,
                hits,
                &self.limits,
                None,
                takes_permits.then_some(holder),
            )
        };
        Some(Call {
            shadow,
            batch: self,
            body,
            answer: None,
            rls,
            windows: Vec::new(),
            unreadable: false,
        })
    }
}

/// One `POST /v1/check` of a request (or one rate limit service call): the
/// global limits of the enforcing rules, or those of the shadow rules.
#[derive(Debug)]
pub(super) struct Call {
    pub(super) shadow: bool,
    /// The limits checked, in the order of the answer's decisions.
    pub(super) batch: Batch,
    pub(super) body: Vec<u8>,
    /// The call's answer once received (`Some(None)`: it failed).
    pub(super) answer: Option<Option<CheckResponse>>,
    /// A call to a rate limit service (`protocol: rls`).
    pub(super) rls: bool,
    /// The windows its answer gave, per item (rate limit service only).
    pub(super) windows: Vec<Nanos>,
    /// It was answered with a body that could not be read.
    pub(super) unreadable: bool,
}

impl Call {
    /// The answer, if the call succeeded.
    pub(super) fn answered(&self) -> Option<&CheckResponse> {
        self.answer
            .as_ref()
            .and_then(Option::as_ref)
            .filter(|a| a.limits.len() == self.batch.len())
    }
}
