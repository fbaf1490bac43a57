//! The limiter's incoming RLS requests: protobuf bytes → `RateLimitRequest`
//! → descriptor matching → one decision in a memory store, with a fixed
//! descriptor configuration; the invariants live in the limiter
//! (`sluice_limiter::rls::fuzzing`), shared with its proptest fuzzers.

use sluice_limiter::rls::fuzzing::check_encoded;

/// The whole path on `data` (see `check_encoded`); a broken invariant is a crash.
pub fn rls_request(data: &[u8]) {
    if let Err(broken) = crate::runtime().block_on(check_encoded(data)) {
        panic!("{broken}");
    }
}
