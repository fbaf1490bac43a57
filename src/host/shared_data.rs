//! Envoy shared data as the engine's [`SharedStore`].

use proxy_wasm::hostcalls;
use proxy_wasm::types::Status;
use sluice_core::Nanos;
use sluice_filter::local::{SetError, SharedStore};

/// Shared data through host calls.
pub(super) struct HostStore;

impl SharedStore for HostStore {
    fn get(&self, key: &str) -> (Option<Vec<u8>>, Option<u32>) {
        hostcalls::get_shared_data(key).unwrap_or((None, None))
    }

    fn set(&self, key: &str, value: &[u8], cas: Option<u32>) -> Result<(), SetError> {
        match hostcalls::set_shared_data(key, Some(value), cas) {
            Ok(()) => Ok(()),
            Err(Status::CasMismatch) => Err(SetError::CasMismatch),
            Err(_) => Err(SetError::Failed),
        }
    }

    fn clock(&self) -> Option<Nanos> {
        Some(super::clock::now()).filter(|&t| t > 0)
    }
}
