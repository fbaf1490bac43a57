//! What a request needs from its configuration, replaced as a whole on
//! reconfiguration.

use super::metrics::Metrics;
use sluice_core::Holder;
use sluice_filter::config::Plan;
use sluice_filter::slots::SlotHasher;

/// Everything a request needs, replaced as a whole on reconfiguration.
pub(super) struct Runtime {
    pub(super) plan: Plan,
    pub(super) hasher: SlotHasher,
    pub(super) metrics: Metrics,
    /// Who holds the permits this configuration's requests take.
    pub(super) holder: Holder,
}
