//! Bytes from a server, read by the core's RESP reader (`redlock-core/tests/fuzzed/resp.rs`).
#![no_main]

#[path = "../../redlock-core/tests/fuzzed/resp.rs"]
mod resp;

libfuzzer_sys::fuzz_target!(|data: &[u8]| resp::check(data));
