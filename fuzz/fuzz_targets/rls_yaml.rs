#![no_main]
//! libFuzzer target `rls_yaml`: see `sluice_fuzz::run`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    sluice_fuzz::rls_yaml(data);
});
