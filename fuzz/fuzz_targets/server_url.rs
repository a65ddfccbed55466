//! Server URLs as the client builder checks them (`redlock-tokio/tests/fuzzed/server_url.rs`).
#![no_main]

#[path = "../../redlock-tokio/tests/fuzzed/server_url.rs"]
mod server_url;

libfuzzer_sys::fuzz_target!(|data: &[u8]| server_url::check(data));
