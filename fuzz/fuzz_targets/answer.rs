#![no_main]
//! libFuzzer target `answer`: see `sluice_fuzz::run`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    sluice_fuzz::answer(data);
});
