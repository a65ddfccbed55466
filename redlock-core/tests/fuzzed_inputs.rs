//! The fuzz targets' properties on stable, briefly: each target's seed corpus
//! (`fuzz/corpus/<target>/`), then a few thousand random inputs from a fixed
//! seed. `make fuzz` runs the same checks under libFuzzer for longer.
//!
//! `FUZZED_CASES=N` runs N random inputs per target instead of 3000.

#[path = "fuzzed/info.rs"]
mod info;
#[path = "fuzzed/replies.rs"]
mod replies;
#[path = "fuzzed/resp.rs"]
mod resp;

use std::path::Path;
use std::time::Instant;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

/// Runs `check` on the corpus of `target` and on random inputs; prints the figures.
fn run(target: &str, check: fn(&[u8])) {
    let started = Instant::now();
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(target);
    let mut seeds = 0;
    // The corpus is in the repository, not in the published crate.
    if let Ok(entries) = std::fs::read_dir(&corpus) {
        for entry in entries {
            let path = entry.expect("a corpus entry").path();
            let input = std::fs::read(&path).expect("a readable corpus file");
            check(&input);
            seeds += 1;
        }
    }
    let cases: usize = std::env::var("FUZZED_CASES")
        .ok()
        .and_then(|cases| cases.parse().ok())
        .unwrap_or(3000);
    let mut rng = StdRng::seed_from_u64(22);
    let mut input = Vec::new();
    for _ in 0..cases {
        let len = rng.random_range(0..1024);
        input.clear();
        input.extend((0..len).map(|_| rng.random::<u8>()));
        check(&input);
    }
    println!(
        "fuzzed {target}: corpus={seeds} random={cases} seconds={:.2}",
        started.elapsed().as_secs_f64()
    );
}

#[test]
fn any_reply_is_a_vote_its_contract_allows_or_a_protocol_error() {
    run("replies", replies::check);
}

#[test]
fn any_info_text_gives_facts_that_read_back_and_pick_only_documented_commands() {
    run("info", info::check);
}

#[test]
fn any_bytes_read_as_resp_are_an_answer_incomplete_or_garbage_and_answers_read_back() {
    run("resp", resp::check);
}
