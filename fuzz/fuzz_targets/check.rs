#![no_main]
//! libFuzzer target `check`: see `sluice_fuzz::run`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    sluice_fuzz::check(data);
});
