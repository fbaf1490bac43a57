//! The calls of a request to the limiter: the global limits bound for each
//! call, each an [`Item`] carrying its wire form and its kind's follow-up
//! (what the kind does with the answer), and the call's answer.

use crate::headers::Reported;
use crate::rls;
use sluice_core::{Decision, Holder, Nanos};
use sluice_wire::{check_json, CheckResponse, LimitSpec};

/// A global limit to check for this request.
#[derive(Debug)]
pub struct Item<F> {
    pub(crate) rule: usize,
    pub(crate) limit: usize,
    pub(crate) window: Nanos,
    pub(crate) requests: u64,
    pub(crate) fingerprint: u64,
    /// Where a denial is cached: `None` unless every request of the rule
    /// weighs the same (a fixed cost), so one denied until a deadline means
    /// all are.
    pub(crate) cache: Option<CacheSlot>,
    /// What is sent for it.
    pub(crate) wire: Wire,
    /// What its kind does with the answer.
    pub(crate) follow: F,
}

/// The over-limit cache entry a denial of an item is remembered in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CacheSlot {
    /// The cache's prefix and the slot under it (the key is written only
    /// when a denial is remembered).
    pub(crate) prefix: std::rc::Rc<str>,
    pub(crate) slot: u64,
    /// The entry's owner (see [`super::deny_cache::owner`]).
    pub(crate) owner: u64,
}

/// The wire form of an item: a limit for `sluice-limiter`, or a rate
/// limit service's descriptor (`protocol: rls`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Wire {
    Limit(LimitSpec<'static>),
    Descriptor(rls::Descriptor),
}

impl<F> Item<F> {
    pub(crate) fn reported(&self, decision: Decision) -> Reported {
        Reported {
            rule: self.rule,
            limit: self.limit,
            window: self.window,
            decision,
        }
    }

    /// The same item with follow-up `follow`.
    pub(crate) fn with<G>(self, follow: G) -> Item<G> {
        self.map(|_| follow)
    }

    /// The same item with its follow-up turned into another by `f`.
    pub(crate) fn map<G>(self, f: impl FnOnce(F) -> G) -> Item<G> {
        Item {
            rule: self.rule,
            limit: self.limit,
            window: self.window,
            requests: self.requests,
            fingerprint: self.fingerprint,
            cache: self.cache,
            wire: self.wire,
            follow: f(self.follow),
        }
    }

    /// The limiter's form of this item, if it has one.
    pub(crate) fn spec(&self) -> Option<&LimitSpec<'static>> {
        match &self.wire {
            Wire::Limit(spec) => Some(spec),
            Wire::Descriptor(_) => None,
        }
    }

    /// The weight the item was checked with, in a call of `hits`.
    pub(crate) fn weight(&self, hits: u64) -> u64 {
        let own = match &self.wire {
            Wire::Limit(spec) => spec.hits,
            Wire::Descriptor(d) => d.hits,
        };
        own.unwrap_or(hits)
    }
}

/// The global limits bound for one call, added as the rules are decided.
#[derive(Debug)]
pub struct Batch<F> {
    pub(crate) items: Vec<Item<F>>,
    /// The call's `hits`: the weight of its first limit. A limit weighing
    /// otherwise carries its own `hits`.
    pub(crate) hits: Option<u64>,
}

impl<F> Default for Batch<F> {
    fn default() -> Self {
        Batch {
            items: Vec::new(),
            hits: None,
        }
    }
}

impl<F> Batch<F> {
    /// Adds `item`, checked with `weight`, or with its own `hits` when it
    /// carries them (a concurrency limit's permits, see
    /// `crate::engine::concurrency`).
    pub(crate) fn push(&mut self, mut item: Item<F>, weight: u64) {
        let weight = item.weight(weight);
        if *self.hits.get_or_insert(weight) != weight {
            match &mut item.wire {
                Wire::Limit(spec) => spec.hits = Some(weight),
                Wire::Descriptor(d) => d.hits = Some(weight),
            }
        }
        self.items.push(item);
    }

    pub(crate) fn len(&self) -> usize {
        self.items.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The call's `hits`.
    pub(crate) fn hits(&self) -> u64 {
        self.hits.unwrap_or(1)
    }

    /// The wire forms of the limits added since the batch held `mark`: the
    /// limiter's (each with its weight in `hits`) and the rate limit
    /// service's descriptors.
    pub(crate) fn since(&self, mark: usize) -> (Vec<LimitSpec<'static>>, Vec<rls::Descriptor>) {
        let hits = self.hits();
        let (mut limits, mut descriptors) = (Vec::new(), Vec::new());
        for item in self.items.iter().skip(mark) {
            match &item.wire {
                Wire::Limit(spec) => limits.push(LimitSpec {
                    hits: Some(spec.hits.unwrap_or(hits)),
                    ..spec.clone()
                }),
                Wire::Descriptor(d) => descriptors.push(d.clone()),
            }
        }
        (limits, descriptors)
    }

    /// The limiter's forms of the items, as sent (borrowed: a call's body
    /// is written from them).
    pub(crate) fn specs(&self) -> Vec<LimitSpec<'_>> {
        self.items
            .iter()
            .filter_map(Item::spec)
            .map(borrowed)
            .collect()
    }

    pub(crate) fn truncate(&mut self, len: usize) {
        self.items.truncate(len);
        if self.items.is_empty() {
            self.hits = None;
        }
    }

    /// The call checking these limits, its permits held by `holder` when
    /// `takes_permits`; `None` when there are none.
    pub(crate) fn into_call(
        self,
        domain: &str,
        shadow: bool,
        holder: Option<Holder>,
    ) -> Option<Call<F>> {
        if self.is_empty() {
            return None;
        }
        let rls = self
            .items
            .iter()
            .any(|i| matches!(i.wire, Wire::Descriptor(_)));
        let hits = self.hits();
        let body = if rls {
            let descriptors: Vec<rls::Descriptor> = self
                .items
                .iter()
                .filter_map(|i| match &i.wire {
                    Wire::Descriptor(d) => Some(d.clone()),
                    Wire::Limit(_) => None,
                })
                .collect();
            rls::encode_request(domain, &descriptors, hits)
        } else {
            check_json(domain, hits, &self.specs(), None, holder)
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
pub struct Call<F> {
    pub(crate) shadow: bool,
    /// The limits checked, in the order of the answer's decisions.
    pub(crate) batch: Batch<F>,
    pub(crate) body: Vec<u8>,
    /// The call's answer once received (`Some(None)`: it failed).
    pub(crate) answer: Option<Option<CheckResponse>>,
    /// A call to a rate limit service (`protocol: rls`).
    pub(crate) rls: bool,
    /// The windows its answer gave, per item (rate limit service only).
    pub(crate) windows: Vec<Nanos>,
    /// It was answered with a body that could not be read.
    pub(crate) unreadable: bool,
}

impl<F> Call<F> {
    /// The answer, if the call succeeded.
    pub(crate) fn answered(&self) -> Option<&CheckResponse> {
        self.answer
            .as_ref()
            .and_then(Option::as_ref)
            .filter(|a| a.limits.len() == self.batch.len())
    }
}

/// `spec` with its texts borrowed, to write a body from without copying
/// them.
pub(crate) fn borrowed<'a>(spec: &'a LimitSpec<'_>) -> LimitSpec<'a> {
    LimitSpec {
        key: std::borrow::Cow::Borrowed(&spec.key),
        algorithm: std::borrow::Cow::Borrowed(&spec.algorithm),
        ..*spec
    }
}
