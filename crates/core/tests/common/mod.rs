//! Helpers shared by the integration tests: a one-key store and naive
//! reference models.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

pub mod naive;

use sluice_core::{charge, decide, Decision, Limit, Nanos};

/// One key's stored state, updated the way a store would.
#[derive(Debug, Clone, Default)]
pub struct Key {
    pub state: Option<Vec<u8>>,
}

impl Key {
    /// Decides and stores the new state.
    pub fn hit(&mut self, limit: &Limit, now: Nanos, cost: u64) -> Decision {
        let out = decide(limit, self.state.as_deref(), now, cost);
        if let Some(s) = out.new_state {
            self.state = Some(s.as_bytes().to_vec());
        }
        out.decision
    }

    /// Charges `cost` (debt) and stores the new state; the decision after.
    pub fn charge(&mut self, limit: &Limit, now: Nanos, cost: u64) -> Decision {
        let out = charge(limit, self.state.as_deref(), now, cost).expect("carries debt");
        if let Some(s) = out.new_state {
            self.state = Some(s.as_bytes().to_vec());
        }
        out.decision
    }

    /// Decides without storing anything.
    pub fn peek(&self, limit: &Limit, now: Nanos, cost: u64) -> Decision {
        decide(limit, self.state.as_deref(), now, cost).decision
    }
}

/// `n + n * percent / 100`, as the limits apply soft throttling.
pub fn soft(n: u64, percent: u32) -> u64 {
    n + n * u64::from(percent) / 100
}
