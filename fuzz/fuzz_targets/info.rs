//! `INFO server` texts and the plain-command choice (`redlock-core/tests/fuzzed/info.rs`).
#![no_main]

#[path = "../../redlock-core/tests/fuzzed/info.rs"]
mod info;

libfuzzer_sys::fuzz_target!(|data: &[u8]| info::check(data));
