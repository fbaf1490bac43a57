#![no_main]
//! libFuzzer target `cost_extract`: see `sluice_fuzz::run`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    sluice_fuzz::cost_extract::cost_extract(data);
});
