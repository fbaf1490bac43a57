//! Naive reference models: straightforward, slow, float-free.

use sluice_core::{Algorithm, Limit, Nanos};

use super::soft;

/// What a model decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verdict {
    pub allowed: bool,
    pub remaining: u64,
    pub reset: Nanos,
    pub retry_after: Nanos,
    pub delay: Nanos,
}

/// `a / b` rounded up, saturating like the decisions' durations.
fn ceil(a: u128, b: u128) -> u64 {
    u64::try_from(a.div_ceil(b)).unwrap_or(u64::MAX)
}

/// Token bucket, leaky bucket and GCRA by the closed-form conformance
/// definition: with admitted requests `(t_i, c_i)`, the backlog at `t` (in
/// units where a request weighs `window` and the rate drains `rate` per ns) is
/// `max(0, max_j (sum_{i >= j} c_i * window - rate * (t - t_j)))`.
#[derive(Debug, Clone)]
pub struct Meter {
    rate: u128,
    window: u128,
    cap: u128,
    soft_extra: u64,
    max_delay: Option<Nanos>,
    pub admitted: Vec<(Nanos, u64)>,
}

impl Meter {
    pub fn new(limit: &Limit) -> Meter {
        let b = soft(limit.burst, limit.soft_percent);
        Meter {
            rate: u128::from(soft(limit.requests, limit.soft_percent)),
            window: u128::from(limit.window),
            cap: u128::from(b) * u128::from(limit.window),
            soft_extra: b - limit.burst,
            max_delay: limit.max_delay,
            admitted: Vec::new(),
        }
    }

    fn backlog(&self, t: Nanos) -> u128 {
        let mut best = 0u128;
        let mut sum = 0u128;
        for &(tj, cj) in self.admitted.iter().rev() {
            sum += u128::from(cj) * self.window;
            let drained = self.rate * u128::from(t - tj);
            best = best.max(sum.saturating_sub(drained));
        }
        best
    }

    pub fn decide(&mut self, t: Nanos, cost: u64) -> Verdict {
        let v = self.judge(t, cost, true);
        if v.allowed {
            self.admitted.push((t, cost));
        }
        v
    }

    /// Debt: `cost` consumed at `t` whatever the level.
    pub fn charge(&mut self, t: Nanos, cost: u64) {
        self.admitted.push((t, cost));
    }

    /// A query: would a request of cost 1 pass at `t` (consuming nothing).
    pub fn query(&self, t: Nanos) -> Verdict {
        self.judge(t, 1, false)
    }

    fn judge(&self, t: Nanos, cost: u64, commit: bool) -> Verdict {
        let level = self.backlog(t);
        let need = u128::from(cost) * self.window;
        let (allowed, delay, retry_after) = if level + need <= self.cap {
            (true, 0, 0)
        } else {
            let wait = ceil(level + need - self.cap, self.rate);
            match self.max_delay {
                Some(d) if wait <= d => (true, wait, 0),
                _ => (false, 0, wait),
            }
        };
        let after = if allowed && commit {
            level + need
        } else {
            level
        };
        Verdict {
            allowed,
            remaining: u64::try_from((self.cap - after.min(self.cap)) / self.window)
                .unwrap()
                .saturating_sub(self.soft_extra),
            reset: ceil(after, self.rate),
            retry_after,
            delay,
        }
    }
}

/// Fixed window: a count per epoch-aligned window.
#[derive(Debug, Clone)]
pub struct Fixed {
    window: Nanos,
    cap: u64,
    soft_extra: u64,
    counts: std::collections::BTreeMap<Nanos, u64>,
}

impl Fixed {
    pub fn new(limit: &Limit) -> Fixed {
        let b = soft(limit.burst, limit.soft_percent);
        Fixed {
            window: limit.window,
            cap: b,
            soft_extra: b - limit.burst,
            counts: Default::default(),
        }
    }

    pub fn decide(&mut self, t: Nanos, cost: u64) -> Verdict {
        let v = self.judge(t, cost);
        if v.allowed {
            *self.counts.entry(t / self.window).or_default() += cost;
        }
        self.judge(t, 0).with(v)
    }

    /// Debt: `cost` counted at `t` whatever the count.
    pub fn charge(&mut self, t: Nanos, cost: u64) {
        *self.counts.entry(t / self.window).or_default() += cost;
    }

    /// A query: would a request of cost 1 pass at `t` (consuming nothing).
    pub fn query(&self, t: Nanos) -> Verdict {
        self.judge(t, 0).with(self.judge(t, 1))
    }

    /// Whether `cost` fits at `t`, with the window as it is.
    fn judge(&self, t: Nanos, cost: u64) -> Verdict {
        let w = t / self.window;
        let count = self.counts.get(&w).copied().unwrap_or(0);
        let allowed = count + cost <= self.cap;
        let end = (w + 1) * self.window - t;
        Verdict {
            allowed,
            remaining: self
                .cap
                .saturating_sub(count)
                .saturating_sub(self.soft_extra),
            reset: if count > 0 { end } else { 0 },
            retry_after: if allowed { 0 } else { end },
            delay: 0,
        }
    }
}

impl Verdict {
    /// This verdict's counts with `judged`'s admission.
    fn with(self, judged: Verdict) -> Verdict {
        Verdict {
            allowed: judged.allowed,
            retry_after: judged.retry_after,
            delay: judged.delay,
            ..self
        }
    }
}

/// Sliding log: every admitted timestamp; a request passes when those newer
/// than `t - window` plus its cost fit.
#[derive(Debug, Clone)]
pub struct Log {
    window: Nanos,
    cap: u64,
    soft_extra: u64,
    pub admitted: Vec<Nanos>,
}

impl Log {
    pub fn new(limit: &Limit) -> Log {
        let b = soft(limit.burst, limit.soft_percent);
        Log {
            window: limit.window,
            cap: b,
            soft_extra: b - limit.burst,
            admitted: Vec::new(),
        }
    }

    /// Admitted timestamps still in the window at `t`.
    pub fn live(&self, t: Nanos) -> Vec<Nanos> {
        self.admitted
            .iter()
            .copied()
            .filter(|&a| a + self.window > t)
            .collect()
    }

    pub fn decide(&mut self, t: Nanos, cost: u64) -> Verdict {
        let live = self.live(t);
        let n = live.len() as u64;
        let allowed = n + cost <= self.cap;
        let retry_after = if allowed {
            0
        } else {
            let k = usize::try_from(n + cost - self.cap).unwrap();
            live[k - 1] + self.window - t
        };
        if allowed {
            for _ in 0..cost {
                self.admitted.push(t);
            }
        }
        let after = if allowed { n + cost } else { n };
        let newest = self.admitted.last().copied();
        Verdict {
            allowed,
            remaining: (self.cap - after).saturating_sub(self.soft_extra),
            reset: match newest {
                Some(a) if after > 0 => a + self.window - t,
                _ => 0,
            },
            retry_after,
            delay: 0,
        }
    }
}

/// Whether a limit is one of the three meters.
pub fn is_meter(a: Algorithm) -> bool {
    matches!(
        a,
        Algorithm::TokenBucket | Algorithm::LeakyBucket | Algorithm::Gcra
    )
}
