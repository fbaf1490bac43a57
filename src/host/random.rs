//! Random bytes from the host: WASI's `random_get`, which Envoy's
//! proxy-wasm host serves from its own cryptographic generator.

use sluice_filter::slots::SEED_LEN;

#[link(wasm_import_module = "wasi_snapshot_preview1")]
extern "C" {
    fn random_get(buf: *mut u8, len: usize) -> u16;
}

/// A fresh slot-hashing seed from the host's random source; `None` if the
/// host refuses.
pub(super) fn seed() -> Option<[u8; SEED_LEN]> {
    let mut seed = [0u8; SEED_LEN];
    // SAFETY: the host writes exactly `SEED_LEN` bytes into `seed`, which
    // lives until the call returns.
    let errno = unsafe { random_get(seed.as_mut_ptr(), seed.len()) };
    (errno == 0).then_some(seed)
}
