#![no_main]
//! libFuzzer target `rls_request`: see `sluice_fuzz::run`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    sluice_fuzz::rls_request::rls_request(data);
});
