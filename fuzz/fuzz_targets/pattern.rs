#![no_main]
//! libFuzzer target `pattern`: see `sluice_fuzz::run`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    sluice_fuzz::pattern::pattern(data);
});
