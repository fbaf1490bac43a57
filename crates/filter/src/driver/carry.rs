//! Carrying out a final verdict on a request, once, whoever decided it:
//! the request's own callback, or the root (a check it made for the
//! request, a shared call, a request waiting for a permit decided again).
//! An admitted request keeps the permits it took and reads its costs, a
//! delayed one is held, a denied one waits for a permit or gets its
//! denial; a request gone gets back what the verdict took.

use super::host::{Action, Host};
use super::outcome::{add_request_headers, hold, send_denial, unapplied};
use super::parts::Shared;
use super::permits;
use super::request::{Phase, Request, Wait};
use super::worker::Worker;
use super::HOLD_TICK;
use crate::config::{HeadersWhileBody, RequestBody};
use crate::engine::concurrency::Held;
use crate::engine::{Admitted, Delayed, Denied, PendingCheck, Verdict};
use crate::metrics::{MetricSink, RuleEvent};

/// A verdict that asks nothing more of the limiter.
pub(super) enum Final {
    Allow(Admitted),
    Delay(Box<Delayed>),
    Deny(Denied),
}

impl Final {
    /// `verdict` if final, else the check it asks for.
    pub(super) fn of(verdict: Verdict) -> Result<Final, Box<PendingCheck>> {
        match verdict {
            Verdict::Allow(admitted) => Ok(Final::Allow(admitted)),
            Verdict::Delay(delayed) => Ok(Final::Delay(delayed)),
            Verdict::Deny(denied) => Ok(Final::Deny(denied)),
            Verdict::Check(pending) => Err(pending),
        }
    }
}

impl From<Final> for Verdict {
    fn from(outcome: Final) -> Verdict {
        match outcome {
            Final::Allow(admitted) => Verdict::Allow(admitted),
            Final::Delay(delayed) => Verdict::Delay(delayed),
            Final::Deny(denied) => Verdict::Deny(denied),
        }
    }
}

/// Carries out `outcome` for the request of `context` from the root:
/// resumed if it goes on; when it is gone, what the outcome took goes
/// back.
pub(super) fn from_root<H: Host>(
    w: &mut Worker<H>,
    host: &mut H,
    context: u32,
    runtime: &Shared<H>,
    outcome: Final,
) {
    let Some(mut req) = w.requests.remove(&context) else {
        return unapplied(w, host, runtime, outcome.into());
    };
    host.focus(context);
    if apply(w, host, context, &mut req, runtime, outcome) == Action::Continue {
        host.resume();
    }
    w.requests.insert(context, req);
}

/// Carries out `outcome` on `req`, the request of `context` (the focused
/// one). Returns whether it goes on.
pub(super) fn apply<H: Host>(
    w: &mut Worker<H>,
    host: &mut H,
    context: u32,
    req: &mut Request<H>,
    runtime: &Shared<H>,
    outcome: Final,
) -> Action {
    match outcome {
        Final::Allow(mut admitted) => {
            if let Some(wait) = req.waiting.take() {
                let waited = host.now().saturating_sub(wait.since);
                runtime.metrics.delayed(wait.rule, waited);
            }
            keep(w, host, req, runtime, std::mem::take(&mut admitted.held));
            req.owe(std::mem::take(&mut admitted.owed));
            if admitted.report.is_some() || !admitted.shadow_denied.is_empty() {
                req.admitted = Some(admitted);
            }
            req.phase = Phase::Decided;
            if let Some(reply) = &req.reply {
                add_request_headers(host, reply, headers_went_on(req, runtime));
            }
            Action::Continue
        }
        Final::Delay(delayed) => {
            match hold(w, host, context, runtime, delayed, req.shown.as_ref()) {
                Ok(mut held) => {
                    keep(w, host, req, runtime, held.take_held());
                    req.owe(held.take_owed());
                    req.admitted = Some(held.admitted());
                    req.phase = Phase::Held(held);
                    if let Some(reply) = &req.reply {
                        add_request_headers(host, reply, headers_went_on(req, runtime));
                    }
                }
                Err(taken) => {
                    keep(w, host, req, runtime, taken);
                    req.phase = Phase::Decided;
                }
            }
            Action::Pause
        }
        Final::Deny(mut denied) => {
            permits::give_back(w, host, runtime, std::mem::take(&mut denied.held));
            if denied.wait.is_some() {
                if wait(w, host, context, req, runtime, &denied) {
                    req.phase = Phase::Waiting;
                    return Action::Pause;
                }
                runtime.metrics.rule(denied.report.rule, RuleEvent::Denied);
            }
            super::topkeys::count(runtime, &denied);
            let shown = req.shown.as_ref();
            send_denial(host, &runtime.plan, &denied, req.reply.as_ref(), shown);
            req.phase = Phase::Decided;
            Action::Pause
        }
    }
}

/// Whether the request's headers went on before its decision (decided on
/// its body, the headers forwarded meanwhile): nothing can be added to
/// them.
fn headers_went_on<H: Host>(req: &Request<H>, runtime: &Shared<H>) -> bool {
    let forwarded = RequestBody::Read(HeadersWhileBody::Forward);
    req.shown.is_some() && runtime.plan.request_body == forwarded
}

/// Keeps the permits `held` until the stream ends.
fn keep<H: Host>(
    w: &mut Worker<H>,
    host: &mut H,
    req: &mut Request<H>,
    runtime: &Shared<H>,
    held: Held,
) {
    permits::keep(w, host, runtime, &held);
    req.holding.local.extend(held.local);
    req.holding.global.extend(held.global);
}

/// Holds the request of `context`, denied by `denied` (which may wait), for
/// another try at the root's fine ticks (up to its rule's `max_queued` per
/// worker); the first time sets until when it may wait. Returns whether it
/// waits. A request decided after its body cannot: the root decides again
/// from Envoy's headers, which no longer show; nor can one once the
/// worker's last root is closing.
fn wait<H: Host>(
    w: &mut Worker<H>,
    host: &mut H,
    context: u32,
    req: &mut Request<H>,
    runtime: &Shared<H>,
    denied: &Denied,
) -> bool {
    let (Some(max_wait), None) = (denied.wait, req.shown.as_ref()) else {
        return false;
    };
    if w.roots.is_empty() {
        // No tick will decide it again.
        return false;
    }
    let now = host.now();
    let rule = denied.report.rule;
    let wait = *req.waiting.get_or_insert(Wait {
        since: now,
        deadline: now.saturating_add(max_wait),
        rule,
    });
    let max = runtime.plan.rules.get(rule).map_or(0, |r| r.max_queued);
    if now >= wait.deadline || w.waiters.iter().filter(|(_, r)| *r == rule).count() >= max {
        return false;
    }
    w.waiters.push((context, rule));
    host.set_tick_period(HOLD_TICK);
    true
}
