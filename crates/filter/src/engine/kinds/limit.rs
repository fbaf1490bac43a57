//! What a compiled limit is, whatever its kind: its quota, overrides,
//! condition, place and penalty, read through one `match` over
//! [`LimitKind`] each (the registry's other half, beside `mod.rs`).

use crate::config::plan::{
    ByOutcome, ConcurrencyLimit, CountWhen, Counted, Elastic, GlobalElastic, LeasedLimit,
    LimitKind, LocalElastic, LocalLimit, OverrideLimit, Penalty, PermitPlace, Quota, RuleLimit,
    SERVICE_HELD,
};
use crate::cost::metadata::MetadataPlace;
use sluice_core::{Limit, Nanos};

impl RuleLimit {
    /// The limit, with its overrides; `None` for a limit the rate limit
    /// service holds and for a concurrency limit.
    pub fn quota(&self) -> Option<&Quota> {
        match &self.kind {
            LimitKind::Local(local) | LimitKind::LocalElastic(LocalElastic { local, .. }) => {
                Some(&local.quota)
            }
            LimitKind::Global(global)
            | LimitKind::Coalesced(global)
            | LimitKind::Leased(LeasedLimit { global, .. })
            | LimitKind::GlobalElastic(GlobalElastic { global, .. }) => Some(&global.quota),
            LimitKind::ServiceHeld(_) | LimitKind::Concurrency(_) => None,
            LimitKind::ByOutcome(b) => match &b.counted {
                Counted::Local(local) => Some(&local.quota),
                Counted::Global(global) => Some(&global.quota),
                Counted::Service(_) => None,
            },
        }
    }

    /// Which responses the limit counts, if it is counted by outcome.
    pub fn count_when(&self) -> Option<&CountWhen> {
        match &self.kind {
            LimitKind::ByOutcome(ByOutcome { when, .. }) => Some(when),
            LimitKind::Local(_)
            | LimitKind::LocalElastic(_)
            | LimitKind::Global(_)
            | LimitKind::Coalesced(_)
            | LimitKind::Leased(_)
            | LimitKind::GlobalElastic(_)
            | LimitKind::ServiceHeld(_)
            | LimitKind::Concurrency(_) => None,
        }
    }

    /// Where a request's own limit may be in its dynamic metadata
    /// (`limit_from_metadata`).
    pub fn from_metadata(&self) -> Option<&MetadataPlace> {
        match &self.kind {
            LimitKind::Global(global) => global.from_metadata.as_ref(),
            LimitKind::ServiceHeld(held) => held.from_metadata.as_ref(),
            LimitKind::Local(_)
            | LimitKind::LocalElastic(_)
            | LimitKind::Coalesced(_)
            | LimitKind::Leased(_)
            | LimitKind::GlobalElastic(_)
            | LimitKind::Concurrency(_)
            | LimitKind::ByOutcome(_) => None,
        }
    }

    /// How long a key this local limit refuses is blocked
    /// (`on_exceed: block`; a global limit's blocks are the limiter's).
    pub fn local_block(&self) -> Option<Nanos> {
        let local = match &self.kind {
            LimitKind::Local(local)
            | LimitKind::ByOutcome(ByOutcome {
                counted: Counted::Local(local),
                ..
            }) => local,
            LimitKind::ByOutcome(_)
            | LimitKind::LocalElastic(_)
            | LimitKind::Global(_)
            | LimitKind::Coalesced(_)
            | LimitKind::Leased(_)
            | LimitKind::GlobalElastic(_)
            | LimitKind::ServiceHeld(_)
            | LimitKind::Concurrency(_) => return None,
        };
        match local.quota.penalty {
            Penalty::Block(block) => Some(block),
            Penalty::None => None,
        }
    }

    /// The local rate limit, if this is a local limit without borrowing.
    pub fn local(&self) -> Option<&LocalLimit> {
        match &self.kind {
            LimitKind::Local(local) => Some(local),
            LimitKind::ByOutcome(_)
            | LimitKind::LocalElastic(_)
            | LimitKind::Global(_)
            | LimitKind::Coalesced(_)
            | LimitKind::Leased(_)
            | LimitKind::GlobalElastic(_)
            | LimitKind::ServiceHeld(_)
            | LimitKind::Concurrency(_) => None,
        }
    }

    /// The concurrency limit, if this is one.
    pub fn concurrency(&self) -> Option<&ConcurrencyLimit> {
        match &self.kind {
            LimitKind::Concurrency(c) => Some(c),
            LimitKind::ByOutcome(_)
            | LimitKind::Local(_)
            | LimitKind::LocalElastic(_)
            | LimitKind::Global(_)
            | LimitKind::Coalesced(_)
            | LimitKind::Leased(_)
            | LimitKind::GlobalElastic(_)
            | LimitKind::ServiceHeld(_) => None,
        }
    }

    /// The limit (for a limit the rate limit service holds, or a
    /// concurrency limit, the stand-in [`SERVICE_HELD`], which refuses no
    /// weight).
    pub fn limit(&self) -> &Limit {
        self.quota().map_or(&SERVICE_HELD, |q| &q.limit)
    }

    /// The overrides, sorted by key (none for a service-held limit).
    pub fn overrides(&self) -> &[OverrideLimit] {
        self.quota().map_or(&[], |q| q.overrides.as_slice())
    }

    /// See [`Quota::override_index`].
    pub fn override_index(&self, key: &str) -> Option<usize> {
        self.quota().and_then(|q| q.override_index(key))
    }

    /// See [`Quota::limit_for`].
    pub fn limit_for(&self, key: &str) -> &Limit {
        self.quota().map_or(&SERVICE_HELD, |q| q.limit_for(key))
    }

    /// Whether a request may be held for the limit: a quota in delay mode
    /// (its `max_delay`, or an override's) or a concurrency limit waiting
    /// for permits.
    pub fn can_delay(&self) -> bool {
        if let Some(concurrency) = self.concurrency() {
            return concurrency.max_wait.is_some();
        }
        self.quota().is_some_and(|q| {
            q.limit.max_delay.is_some() || q.overrides.iter().any(|o| o.limit.max_delay.is_some())
        })
    }

    /// The elastic borrowing, if the limit has one.
    pub fn elastic(&self) -> Option<&Elastic> {
        match &self.kind {
            LimitKind::LocalElastic(LocalElastic { elastic, .. })
            | LimitKind::GlobalElastic(GlobalElastic { elastic, .. }) => Some(elastic),
            LimitKind::ByOutcome(_)
            | LimitKind::Local(_)
            | LimitKind::Global(_)
            | LimitKind::Coalesced(_)
            | LimitKind::Leased(_)
            | LimitKind::ServiceHeld(_)
            | LimitKind::Concurrency(_) => None,
        }
    }

    /// Whether this filter decides the limit.
    pub fn is_local(&self) -> bool {
        match &self.kind {
            LimitKind::Local(_) | LimitKind::LocalElastic(_) => true,
            LimitKind::Concurrency(c) => matches!(c.place, PermitPlace::Local(..)),
            LimitKind::ByOutcome(b) => match b.counted {
                Counted::Local(_) => true,
                Counted::Global(_) | Counted::Service(_) => false,
            },
            LimitKind::Global(_)
            | LimitKind::Coalesced(_)
            | LimitKind::Leased(_)
            | LimitKind::GlobalElastic(_)
            | LimitKind::ServiceHeld(_) => false,
        }
    }

    /// The prefix of the over-limit cache keys of a global limit.
    pub fn deny_prefix(&self) -> Option<&str> {
        match &self.kind {
            LimitKind::Local(_) | LimitKind::LocalElastic(_) | LimitKind::Concurrency(_) => None,
            LimitKind::Global(global)
            | LimitKind::Coalesced(global)
            | LimitKind::Leased(LeasedLimit { global, .. })
            | LimitKind::GlobalElastic(GlobalElastic { global, .. }) => Some(&global.deny_prefix),
            LimitKind::ServiceHeld(held) => Some(&held.deny_prefix),
            LimitKind::ByOutcome(b) => match &b.counted {
                Counted::Local(_) => None,
                Counted::Global(global) => Some(&global.deny_prefix),
                Counted::Service(held) => Some(&held.deny_prefix),
            },
        }
    }
}
