//! The `server_url` fuzz target's property on stable, briefly: its seed
//! corpus (`fuzz/corpus/server_url/`), then a few thousand random inputs from
//! a fixed seed. `make fuzz` runs it under libFuzzer for longer.
//!
//! `FUZZED_CASES=N` runs N random inputs instead of 3000.

#[path = "fuzzed/server_url.rs"]
mod server_url;

use std::path::Path;
use std::time::Instant;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

#[test]
fn any_url_is_a_node_name_or_an_invalid_server_error_without_its_password() {
    let started = Instant::now();
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/server_url");
    let mut seeds = 0;
    // The corpus is in the repository, not in the published crate.
    if let Ok(entries) = std::fs::read_dir(&corpus) {
        for entry in entries {
            let input = std::fs::read(entry.expect("a corpus entry").path()).expect("readable");
            server_url::check(&input);
            seeds += 1;
        }
    }
    let cases: usize = std::env::var("FUZZED_CASES")
        .ok()
        .and_then(|cases| cases.parse().ok())
        .unwrap_or(3000);
    let mut rng = StdRng::seed_from_u64(22);
    for _ in 0..cases {
        let len = rng.random_range(0..512);
        let input: Vec<u8> = (0..len).map(|_| rng.random::<u8>()).collect();
        server_url::check(&input);
    }
    println!(
        "fuzzed server_url: corpus={seeds} random={cases} seconds={:.2}",
        started.elapsed().as_secs_f64()
    );
}
