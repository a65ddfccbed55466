//! The `redlock` command line (`redlock-cli/src/fuzzed.rs`), on the CLI's own
//! argument definitions (`redlock-cli/src/cli.rs`, included as it is).
#![no_main]

#[allow(dead_code)]
#[path = "../../redlock-cli/src/cli.rs"]
mod cli;
#[path = "../../redlock-cli/src/fuzzed.rs"]
mod fuzzed;

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzzed::check(data));
