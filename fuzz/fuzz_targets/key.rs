#![no_main]
//! libFuzzer target `key`: see `sluice_fuzz::run`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    sluice_fuzz::key::key(data);
});
