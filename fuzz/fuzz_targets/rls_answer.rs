#![no_main]
//! libFuzzer target `rls_answer`: see `sluice_fuzz::run`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    sluice_fuzz::rls_answer(data);
});
