#![no_main]
//! libFuzzer target `state`: see `sluice_fuzz::run`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    sluice_fuzz::state(data);
});
