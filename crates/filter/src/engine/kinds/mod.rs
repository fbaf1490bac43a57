//! The limit kinds, one module each (its compile step, its step, what it
//! does with the limiter's answer, its undo and its duty after the
//! response), and the registry: the one place that lists them. Every
//! `match` over [`LimitKind`] and over the follow-ups of the kinds'
//! items ([`Follow`]) is here and names every kind, so that the compiler
//! lists what a new kind must handle. The kinds import the core
//! ([`crate::engine::core`]); no kind imports another.

pub(crate) mod coalesced;
pub mod concurrency;
pub(crate) mod global;
pub(crate) mod global_elastic;
pub(crate) mod leased;
pub(crate) mod local;
pub(crate) mod local_elastic;
pub(crate) mod service_held;

use self::concurrency::PermitAsk;
use self::global_elastic::{Lend, Lent};
use self::leased::LeaseAsk;
use crate::config::{LimitKind, RuleLimit};
use crate::engine::core::call::{Batch, Item, Wire};
use crate::engine::core::env::Env;
use crate::engine::core::follow::FollowUp;
use crate::engine::core::tally::{Refusal, Tally};
use crate::engine::core::walk::{Applied, Steps, Walk};
use crate::key::RequestView;
use crate::local::SharedStore;
use crate::metrics::MetricSink;
use sluice_core::{Decision, Nanos};
use sluice_wire::LimitResult;

/// What a global limit's item in a call does with the answer, by kind.
#[derive(Debug, Clone)]
pub enum Follow {
    /// Checked for this request alone (per request, a leased limit that
    /// asks nothing, an elastic limit that cannot borrow, or held by a
    /// rate limit service): the answer is read as it comes.
    Alone,
    /// May share its call with requests that have the same check.
    Coalesced,
    /// A leased limit's ask for units, made with the check.
    Leased(LeaseAsk),
    /// An elastic limit: what it checks in the second call if it denies.
    Elastic(Box<Lend>),
    /// Borrowing in the second call for an elastic limit that denied.
    Lent(Lent),
    /// A concurrency limit's permits.
    Permit(PermitAsk),
}

impl Steps for Follow {
    fn step<'a, V, S, M>(
        walk: &mut Walk<'a, V, S, M, Self>,
        applied: &Applied<'a, '_>,
        l: usize,
        limit: &'a RuleLimit,
    ) -> Result<(), Refusal>
    where
        V: RequestView,
        S: SharedStore + ?Sized,
        M: MetricSink + ?Sized,
    {
        let cx = &mut walk.cx;
        let item = match &limit.kind {
            LimitKind::Local(local) => return Ok(local::step(cx, applied, l, local)?),
            LimitKind::LocalElastic(limit) => {
                return Ok(local_elastic::step(cx, applied, l, limit)?)
            }
            LimitKind::Global(global) => global::step(cx, applied, l, global)?.with(Follow::Alone),
            LimitKind::Coalesced(global) => {
                coalesced::step(cx, applied, l, global)?.with(Follow::Coalesced)
            }
            LimitKind::Leased(leased) => match leased::step(cx, applied, l, leased)? {
                None => return Ok(()),
                Some(item) => {
                    let follow = item.follow.clone().map_or(Follow::Alone, Follow::Leased);
                    item.with(follow)
                }
            },
            LimitKind::GlobalElastic(limit) => {
                let item = global_elastic::step(cx, applied, l, limit)?;
                let follow = item
                    .follow
                    .clone()
                    .map_or(Follow::Alone, |lend| Follow::Elastic(Box::new(lend)));
                item.with(follow)
            }
            LimitKind::ServiceHeld(held) => {
                service_held::step(cx, applied, l, held)?.with(Follow::Alone)
            }
            LimitKind::Concurrency(c) => match concurrency::step(cx, applied, l, c)? {
                None => return Ok(()),
                Some(item) => {
                    let follow = Follow::Permit(item.follow);
                    item.with(follow)
                }
            },
        };
        walk.push(applied, item);
        Ok(())
    }
}

impl FollowUp for Follow {
    fn permit_ttl(&self) -> Option<Nanos> {
        match self {
            Follow::Permit(ask) => Some(ask.ttl),
            Follow::Alone
            | Follow::Coalesced
            | Follow::Leased(_)
            | Follow::Elastic(_)
            | Follow::Lent(_) => None,
        }
    }

    fn wait(&self) -> Option<Nanos> {
        match self {
            Follow::Permit(ask) => ask.wait,
            Follow::Alone
            | Follow::Coalesced
            | Follow::Leased(_)
            | Follow::Elastic(_)
            | Follow::Lent(_) => None,
        }
    }

    fn coalesces(&self) -> bool {
        match self {
            Follow::Coalesced => true,
            Follow::Alone
            | Follow::Leased(_)
            | Follow::Elastic(_)
            | Follow::Lent(_)
            | Follow::Permit(_) => false,
        }
    }

    fn counted_alone(&self) -> bool {
        match self {
            Follow::Alone | Follow::Elastic(_) => true,
            Follow::Coalesced | Follow::Leased(_) | Follow::Lent(_) | Follow::Permit(_) => false,
        }
    }

    fn settle<S, M>(
        &self,
        env: &Env<'_, S, M>,
        _item: &Item<Self>,
        answer: Option<&LimitResult>,
        now: Nanos,
    ) -> Option<u64>
    where
        S: SharedStore + ?Sized,
        M: MetricSink + ?Sized,
    {
        match self {
            Follow::Leased(ask) => leased::settle(env, ask, answer, now),
            Follow::Alone
            | Follow::Coalesced
            | Follow::Elastic(_)
            | Follow::Lent(_)
            | Follow::Permit(_) => None,
        }
    }

    fn admitted(&self, item: &Item<Self>, decision: Decision, tally: &mut Tally) {
        let reported = match self {
            Follow::Lent(lent) => return global_elastic::admitted(lent, tally),
            Follow::Alone
            | Follow::Coalesced
            | Follow::Leased(_)
            | Follow::Elastic(_)
            | Follow::Permit(_) => item.reported(decision),
        };
        tally.note(reported);
        tally.note_delay(reported);
    }

    fn refusal(&self, item: &Item<Self>, decision: Decision) -> Refusal {
        let report = match self {
            Follow::Lent(lent) => global_elastic::refused(lent),
            Follow::Alone
            | Follow::Coalesced
            | Follow::Leased(_)
            | Follow::Elastic(_)
            | Follow::Permit(_) => item.reported(decision),
        };
        Refusal {
            report,
            wait: self.wait(),
        }
    }

    fn may_borrow(&self) -> bool {
        match self {
            Follow::Elastic(_) => true,
            Follow::Alone
            | Follow::Coalesced
            | Follow::Leased(_)
            | Follow::Lent(_)
            | Follow::Permit(_) => false,
        }
    }

    fn again(mut item: Item<Self>, answer: &LimitResult, weight: u64, batch: &mut Batch<Self>) {
        let follow = std::mem::replace(&mut item.follow, Follow::Alone);
        match follow {
            Follow::Elastic(lend) if !answer.allowed => {
                for lent in global_elastic::borrowing(&item, *lend, answer) {
                    let follow = Follow::Lent(lent.follow);
                    batch.push(lent.with(follow), weight);
                }
                return;
            }
            // Permits are asked for again; nothing else is.
            Follow::Permit(ask) => item.follow = Follow::Permit(ask),
            Follow::Alone
            | Follow::Coalesced
            | Follow::Leased(_)
            | Follow::Elastic(_)
            | Follow::Lent(_) => {}
        }
        // The first call settled its lease ask and returns.
        match &mut item.wire {
            Wire::Limit(spec) => {
                spec.lease = None;
                spec.returned = None;
                spec.returned_age_ms = None;
            }
            Wire::Descriptor(_) => {}
        }
        batch.push(item, weight);
    }

    fn serves_unanswered(&self) -> bool {
        match self {
            Follow::Leased(_) => true,
            Follow::Alone
            | Follow::Coalesced
            | Follow::Elastic(_)
            | Follow::Lent(_)
            | Follow::Permit(_) => false,
        }
    }

    fn serve_unanswered<S, M>(
        &self,
        env: &Env<'_, S, M>,
        item: &Item<Self>,
        weight: u64,
        tally: &mut Tally,
    ) -> Option<Decision>
    where
        S: SharedStore + ?Sized,
        M: MetricSink + ?Sized,
    {
        match self {
            Follow::Leased(ask) => leased::serve_unanswered(env, ask, item, weight, tally),
            Follow::Alone
            | Follow::Coalesced
            | Follow::Elastic(_)
            | Follow::Lent(_)
            | Follow::Permit(_) => None,
        }
    }

    fn cancel<S, M>(&self, env: &Env<'_, S, M>, _item: &Item<Self>)
    where
        S: SharedStore + ?Sized,
        M: MetricSink + ?Sized,
    {
        match self {
            Follow::Leased(ask) => leased::cancel(env, ask),
            Follow::Alone
            | Follow::Coalesced
            | Follow::Elastic(_)
            | Follow::Lent(_)
            | Follow::Permit(_) => {}
        }
    }
}
