//! The quota endpoint's figures: for each limit of the rules that apply to
//! a caller, what a request of its key would find now, read without
//! writing. A local limit's state is read from shared data and decided at
//! weight 0 (a peek: the figures its headers would give, nothing consumed);
//! a global limit is asked of the limiter with `hits: 0` (its check here),
//! unless this Envoy's over-limit cache refuses the key, which a request
//! would meet first; what neither can tell is said with a reason.
//!
//! Which rules apply: with `?path=` (and `?method=`, default `GET`) the
//! rules whose whole match holds for a request of the caller to that path;
//! without it, the rules whose conditions beyond path and method hold and
//! whose key the caller's request gives (a key reading the path or the
//! method has none then).

use crate::config::plan::{Counted, Penalty, PermitPlace};
use crate::config::{Cost, GlobalLimit, LimitKind, LocalLimit, Plan, Rule};
use crate::engine::core::block::{block_table, blocked_until};
use crate::engine::core::deny_cache;
use crate::engine::core::walk::slot;
use crate::key::{Request, RequestView};
use crate::layout;
use crate::local::SharedStore;
use crate::slots::SlotHasher;
use crate::table::{self, Step, Table};
use sluice_core::{permits, Algorithm, Decision, Limit, Nanos, MILLISECOND};
use sluice_wire::{limiter_key, LimitSpec};

/// What the quota endpoint reports of one limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Figures {
    /// A rate limit decided here: its state as a request would find it.
    Rate {
        /// The peek's decision (a blocked key's refusal while it is).
        decision: Decision,
        /// The limit's window and algorithm.
        window: Nanos,
        algorithm: Algorithm,
        /// When the key's penalty box ends, while it holds the key.
        blocked_until: Option<Nanos>,
    },
    /// A concurrency limit decided here.
    Permits {
        /// Permits held now.
        in_flight: u64,
        /// Permits per key.
        cap: u64,
    },
    /// A limit the limiter decides: asked with `hits: 0` (its check is
    /// in [`Quotas::asks`], in the order of these).
    Ask { window: Nanos, algorithm: Algorithm },
    /// Not known to this filter without consuming.
    Unknown(&'static str),
}

/// One limit's quota for the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quota {
    /// The rule's index and the limit's index in it.
    pub rule: usize,
    pub limit: usize,
    /// Whether the limiter (or a rate limit service) holds it.
    pub global: bool,
    /// What is known of it here.
    pub figures: Figures,
}

/// A caller's quotas, and the checks of those the limiter is asked about.
#[derive(Debug, Default)]
pub struct Quotas {
    /// One per limit, rule after rule.
    pub limits: Vec<Quota>,
    /// The checks, at weight 0, of the limits whose figures are
    /// [`Figures::Ask`], in their order.
    pub asks: Vec<LimitSpec<'static>>,
}

/// A global limit held by a rate limit service: it has no query.
pub const SERVICE_UNKNOWN: &str =
    "held by a rate limit service, which has no way to ask without consuming";
/// A concurrency limit the limiter counts.
pub const PERMITS_UNKNOWN: &str =
    "permits counted by the limiter, which has no way to count them without taking one";
/// Shared data could not be read for the key.
pub const UNREADABLE: &str = "its state could not be read";

/// The caller's quota under every limit of the rules that apply to the
/// request `view` shows, at `now`, read from `store` without writing.
/// `named`: the view's path and method are the ones the caller named (it
/// has none otherwise), and the rules' whole matches apply.
pub fn quotas<V, S>(
    plan: &Plan,
    hasher: &SlotHasher,
    view: &V,
    store: &S,
    now: Nanos,
    named: bool,
) -> Quotas
where
    V: RequestView,
    S: SharedStore + ?Sized,
{
    let request = Request::new(view, &plan.client_ip).with_jwt_payload(&plan.jwt_payload);
    let mut out = Quotas::default();
    let mut key = String::new();
    for (index, rule) in plan.rules.iter().enumerate() {
        let applies = match named {
            true => rule.matcher.matches(&request),
            false => rule.matcher.conditions_hold(&request),
        };
        if rule.pool || !applies || !request.write_key(&rule.key, &mut key) {
            continue;
        }
        let fingerprint = hasher.fingerprint(&key);
        let caller = Caller {
            index,
            rule,
            key: &key,
            fingerprint,
            slot: slot(plan, fingerprint),
            now,
        };
        for l in 0..rule.limits.len() {
            let (quota, ask) = caller.quota(store, l);
            out.limits.push(quota);
            out.asks.extend(ask);
        }
    }
    out
}

/// A rule that applies, and the caller's key under it.
struct Caller<'a> {
    index: usize,
    rule: &'a Rule,
    key: &'a str,
    fingerprint: u64,
    /// The key's slot in the over-limit cache.
    slot: u64,
    now: Nanos,
}

impl Caller<'_> {
    /// The quota of limit `l` of the rule, and its check when the limiter
    /// is asked.
    fn quota<S: SharedStore + ?Sized>(
        &self,
        store: &S,
        l: usize,
    ) -> (Quota, Option<LimitSpec<'static>>) {
        let mut quota = Quota {
            rule: self.index,
            limit: l,
            global: false,
            figures: Figures::Unknown(UNREADABLE),
        };
        let Some(rule_limit) = self.rule.limits.get(l) else {
            return (quota, None);
        };
        let global = match &rule_limit.kind {
            LimitKind::Local(local) => Err(local),
            LimitKind::LocalElastic(elastic) => Err(&elastic.local),
            LimitKind::ByOutcome(by) => match &by.counted {
                Counted::Local(local) => Err(local),
                Counted::Global(global) => Ok(Some(global)),
                Counted::Service(_) => Ok(None),
            },
            LimitKind::Global(global) | LimitKind::Coalesced(global) => Ok(Some(global)),
            LimitKind::Leased(leased) => Ok(Some(&leased.global)),
            LimitKind::GlobalElastic(elastic) => Ok(Some(&elastic.global)),
            LimitKind::ServiceHeld(_) => Ok(None),
            LimitKind::Concurrency(c) => {
                let p = &c.permits;
                quota.figures = match &c.place {
                    PermitPlace::Local(prefix, shape) => {
                        let table = Table::new(prefix, *shape);
                        // Asking for 0 permits takes none: what is free.
                        let read = self.peek(store, &table, |s: Option<&[u8]>| {
                            permits::acquire(p, s, 0, self.now, 0).decision
                        });
                        read.map_or(Figures::Unknown(UNREADABLE), |d| Figures::Permits {
                            in_flight: d.limit.saturating_sub(d.remaining),
                            cap: d.limit,
                        })
                    }
                    PermitPlace::Global => {
                        quota.global = true;
                        Figures::Unknown(PERMITS_UNKNOWN)
                    }
                };
                return (quota, None);
            }
        };
        let mut ask = None;
        match global {
            Err(local) => quota.figures = self.local(store, local),
            Ok(Some(global)) => {
                quota.global = true;
                let limit = global.quota.limit_for(self.key);
                if let Some(denied) = self.cached_denial(store, global, limit) {
                    // A request would be refused from the cache, unasked.
                    let wait = denied.until.saturating_sub(self.now);
                    quota.figures = Figures::Rate {
                        decision: Decision::over_limit(limit.requests, wait),
                        window: limit.window,
                        algorithm: limit.algorithm,
                        blocked_until: denied.blocked.then_some(denied.until),
                    };
                    return (quota, None);
                }
                quota.figures = Figures::Ask {
                    window: limit.window,
                    algorithm: limit.algorithm,
                };
                let key = limiter_key(&self.rule.name, l, self.key);
                ask = Some(spec(key, limit, global.quota.penalty));
            }
            Ok(None) => {
                quota.global = true;
                quota.figures = Figures::Unknown(SERVICE_UNKNOWN);
            }
        }
        (quota, ask)
    }

    /// The figures of a local rate limit: its penalty box while it holds
    /// the key, else its state decided at weight 0.
    fn local<S: SharedStore + ?Sized>(&self, store: &S, local: &LocalLimit) -> Figures {
        let quota = &local.quota;
        let own = quota
            .override_index(self.key)
            .and_then(|i| quota.overrides.get(i));
        let limit = own.map_or(&quota.limit, |o| &o.limit);
        let rate = |decision, blocked_until| Figures::Rate {
            decision,
            window: limit.window,
            algorithm: limit.algorithm,
            blocked_until,
        };
        if let Penalty::Block(_) = quota.penalty {
            let table = block_table(local);
            if let Some(end) = blocked_until(store, &table, self.fingerprint, self.now) {
                let wait = end.saturating_sub(self.now);
                return rate(Decision::blocked(limit.requests, wait), Some(end));
            }
        }
        let decision = match own {
            Some(o) => {
                let state = store.get(&o.state_key).0;
                Some(peek(limit, state.as_deref(), self.now))
            }
            None => {
                let table = Table::new(&local.state_prefix, local.keys);
                self.peek(store, &table, |s| peek(limit, s, self.now))
            }
        };
        decision.map_or(Figures::Unknown(UNREADABLE), |d| rate(d, None))
    }

    /// How long this Envoy's over-limit cache still refuses the key under
    /// `limit` of `global` (a denial, or a penalty box, the limiter gave),
    /// if it does: only fixed-cost rules' denials are cached.
    fn cached_denial<S>(
        &self,
        store: &S,
        global: &GlobalLimit,
        limit: &Limit,
    ) -> Option<deny_cache::Denied>
    where
        S: SharedStore + ?Sized,
    {
        if !matches!(self.rule.cost, Cost::Fixed(_)) {
            return None;
        }
        let mut key = String::new();
        layout::slot_key(&mut key, &global.deny_prefix, self.slot);
        let owner = deny_cache::owner(
            self.fingerprint,
            deny_cache::shape(&global.quota.limit, limit.requests),
        );
        deny_cache::lookup(store, &key, owner, self.now)
    }

    /// `read` of the key's entry in `table` (`None` for a fresh key), with
    /// nothing written; `None` when shared data could not be read.
    fn peek<S>(
        &self,
        store: &S,
        table: &Table<'_>,
        read: impl Fn(Option<&[u8]>) -> Decision,
    ) -> Option<Decision>
    where
        S: SharedStore + ?Sized,
    {
        let decided = table::decide(
            store,
            table,
            self.fingerprint,
            self.now,
            &mut |state| Step {
                write: None,
                result: read(state),
            },
            &mut |_, _| None,
        );
        decided.ok().map(|d| d.result)
    }
}

/// `limit` decided at weight 0 on `state`: what a request would find.
fn peek(limit: &Limit, state: Option<&[u8]>, now: Nanos) -> Decision {
    sluice_core::decide(limit, state, now, 0).decision
}

/// The check of `limit` under limiter key `key` at weight 0, with its
/// penalty box (a check of weight 0 reports a block in force and never
/// starts one), without a class's reserve.
fn spec(key: String, limit: &Limit, penalty: Penalty) -> LimitSpec<'static> {
    LimitSpec {
        hits: Some(0),
        block_ms: match penalty {
            Penalty::Block(block) => Some(block / MILLISECOND),
            Penalty::None => None,
        },
        ..LimitSpec::new(key, limit)
    }
}
