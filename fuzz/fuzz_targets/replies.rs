//! Node replies fed to the core's machines (`redlock-core/tests/fuzzed/replies.rs`).
#![no_main]

#[path = "../../redlock-core/tests/fuzzed/replies.rs"]
mod replies;

libfuzzer_sys::fuzz_target!(|data: &[u8]| replies::check(data));
