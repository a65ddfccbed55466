//! What a newcomer reads: each message says what happened, once, in the
//! words of the operation (issue #24's trial on a fresh clone). Bad input
//! exits 2 before anything is printed or sent; the messages of a run say
//! "released" for a release, and never call a node that is still answering
//! a failure.

mod support;

use redlock_tests::{NodeOptions, RedisCluster, RedisNode};
use support::{redlock, redlock_on, run};

const UNREACHABLE: &str = "redis://127.0.0.1:1";

/// Runs `redlock ARGS...` and asserts exit 2, `message` on stderr, and
/// nothing else said first.
#[track_caller]
fn rejects(args: &[&str], message: &str) -> String {
    let run = run(redlock().args(args));
    run.assert_code(2);
    assert!(
        run.stderr.contains(message),
        "expected {message:?} for {args:?}: {run:#?}"
    );
    assert_eq!(run.stdout, "", "{args:?}");
    run.stderr
}

#[test]
fn a_ttl_too_short_to_use_is_a_configuration_error() {
    // It used to be granted with "validity 0ms" and lost at once (exit 4).
    let stderr = rejects(
        &["exec", "-N", UNREACHABLE, "--ttl", "3ms", "k", "--", "true"],
        "too short",
    );
    assert!(!stderr.contains("locked"), "{stderr}");
}

#[test]
fn an_absurd_ttl_is_refused() {
    rejects(
        &[
            "exec",
            "-N",
            UNREACHABLE,
            "--ttl",
            "100000000y",
            "k",
            "--",
            "true",
        ],
        // Refused as it is parsed: no option takes more than 100 years.
        "longer than 100 years",
    );
    rejects(
        &["exec", "-N", UNREACHABLE, "--ttl", "31d", "k", "--", "true"],
        // Both in one style (issue 54: "2678400s ... 2592000000 ms").
        "TTL 31days is over the maximum of 30days",
    );
    rejects(
        &[
            "elect",
            "-N",
            UNREACHABLE,
            "--lease",
            "30days 1ms",
            "n",
            "--",
            "true",
        ],
        "lease 30days 1ms is over the maximum of 30days",
    );
}

/// `--ttl -5s` was taken for flags, and clap suggested `-- -5`.
#[test]
fn a_negative_duration_is_said_to_be_negative() {
    let stderr = rejects(
        &["exec", "-N", UNREACHABLE, "--ttl", "-5s", "k", "--", "true"],
        "a TTL cannot be negative: give a positive duration such as 10s",
    );
    assert!(!stderr.contains("-- -5"), "{stderr}");
    rejects(
        &[
            "elect",
            "-N",
            UNREACHABLE,
            "--lease",
            "-1m",
            "n",
            "--",
            "true",
        ],
        "a lease cannot be negative",
    );
    rejects(
        &[
            "exec",
            "-N",
            UNREACHABLE,
            "--kill-grace",
            "-1s",
            "k",
            "--",
            "true",
        ],
        "a duration cannot be negative",
    );
    // A value left out is not called negative.
    let stderr = rejects(
        &[
            "exec",
            "-N",
            UNREACHABLE,
            "--ttl",
            "--wait",
            "k",
            "--",
            "true",
        ],
        "expected a duration such as 10s",
    );
    assert!(!stderr.contains("negative"), "{stderr}");
}

/// The usage line and the argument list name the election alike, as
/// `redlock leader NAME` and the docs do.
#[test]
fn the_help_names_an_election_name() {
    for subcommand in ["elect", "leader"] {
        let run = run(redlock().args([subcommand, "--help"]));
        run.assert_code(0);
        assert!(
            run.stdout
                .contains(&format!("Usage: redlock {subcommand} [OPTIONS] <NAME>")),
            "{run:#?}"
        );
        assert!(run.stdout.contains("\n  <NAME>\n"), "{run:#?}");
        assert!(!run.stdout.contains("<KEY>"), "{run:#?}");
    }
}

/// `-v` into a file or a pipe: plain text, no colour codes.
#[test]
fn logs_into_a_pipe_carry_no_colour_codes() {
    let cluster = RedisCluster::start(3);
    let run = run(redlock_on(&cluster, "status").args(["-v", "k"]));
    run.assert_code(0);
    assert!(run.stderr.contains("DEBUG"), "{run:#?}");
    assert!(!run.stderr.contains('\x1b'), "{run:#?}");
}

#[test]
fn bad_urls_are_quoted_and_say_what_is_wrong() {
    rejects(
        &["status", "-N", "http://example", "k"],
        "node \"http://example\": not a Redis URL",
    );
    rejects(
        &["status", "-N", "redis://127.0.0.1:99999", "k"],
        "port 99999 out of range",
    );
    // A slash short: it read "Missing hostname - InvalidClientConfig".
    let stderr = rejects(
        &["status", "-N", "redis:/127.0.0.1:7601", "k"],
        "node \"redis:/127.0.0.1:7601\": not a Redis URL: expected redis://",
    );
    assert!(!stderr.contains("InvalidClientConfig"), "{stderr}");
    rejects(
        &[
            "status",
            "-N",
            "rediss+cluster://127.0.0.1:7000,127.0.0.1:7001",
            "k",
        ],
        "cluster nodes take no TLS in this version",
    );
}

#[test]
fn a_zero_deadline_is_refused_before_waiting() {
    let stderr = rejects(
        &[
            "exec",
            "-N",
            UNREACHABLE,
            "--wait",
            "--deadline",
            "0s",
            "k",
            "--",
            "true",
        ],
        "is zero",
    );
    assert!(!stderr.contains("waiting for lock"), "{stderr}");
}

#[test]
fn usage_does_not_ask_for_nodes_the_environment_gives() {
    let run = run(redlock()
        .args(["exec", "k"])
        .env("REDLOCK_NODES", UNREACHABLE));
    run.assert_code(2);
    assert!(
        run.stderr.contains("Usage: redlock exec [OPTIONS]"),
        "{run:#?}"
    );
    assert!(!run.stderr.contains("--nodes <"), "{run:#?}");
}

#[test]
fn a_wrong_password_says_so_once() {
    let node = RedisNode::start_with(NodeOptions {
        password: Some("right horse battery".to_owned()),
        ..NodeOptions::default()
    });
    let run = run(redlock().args(["status", "-N", &node.url_with_password("wrong"), "k"]));
    run.assert_code(2);
    assert!(run.stderr.contains("wrong password"), "{run:#?}");
    assert!(!run.stderr.contains("AuthenticationFailed"), "{run:#?}");
    assert_eq!(
        run.stderr.matches("authentication failed").count()
            + run.stderr.matches("rejected the credentials").count(),
        1,
        "one cause, once: {run:#?}"
    );
}

#[test]
fn a_run_with_a_node_down_reads_as_a_success_in_release_words() {
    let cluster = RedisCluster::start(3);
    cluster.node(2).kill();
    let run = run(redlock_on(&cluster, "exec").args(["--ttl", "20days", "k", "--", "true"]));
    run.assert_code(0);
    let stderr = &run.stderr;
    // The lock: a quorum, not "so far"; a long validity in humantime's words.
    assert!(
        stderr.contains("locked k with a quorum (2 of 3 nodes granted, quorum 2; 1 failed)"),
        "{run:#?}"
    );
    assert!(!stderr.contains("so far"), "{run:#?}");
    assert!(stderr.contains("validity 19days 19h"), "{run:#?}");
    // The release: the node that was down never had the key.
    assert!(
        stderr.contains("released k on 2 of 3 nodes; the lock is free"),
        "{run:#?}"
    );
    assert!(!stderr.contains("keep it until its TTL"), "{run:#?}");
    assert!(!stderr.contains("granted (quorum"), "{run:#?}");
    // A one-shot run does not promise to reconnect.
    assert!(
        !stderr.contains("reconnecting in the background"),
        "{run:#?}"
    );
}

/// The samples in docs/cli.md read as the binary writes them: each sample
/// line, up to its first figure (a count, a duration, a value), begins a
/// line that a run like the sample's prints (a node's line: after its
/// address).
#[test]
fn the_docs_samples_read_as_the_binary_writes_them() {
    let docs = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/cli.md"))
        .expect("read docs/cli.md");
    let cluster = RedisCluster::start(3);
    let nodes = cluster.urls().join(",");
    // `status` and `leader` run as the command, while the lock or the
    // leadership is held.
    let exec = run(redlock().env("REDLOCK_NODES", &nodes).args([
        "exec",
        "--wait",
        "--deadline",
        "10m",
        "--fencing",
        "deploy-web",
        "--",
        support::REDLOCK,
        "status",
        "deploy-web",
    ]));
    exec.assert_code(0);
    let elect = run(redlock().env("REDLOCK_NODES", &nodes).args([
        "elect",
        "--lease",
        "10s",
        "--proclaim",
        "10.0.0.7:8080",
        "scheduler",
        "--",
        support::REDLOCK,
        "leader",
        "scheduler",
    ]));
    elect.assert_code(0);
    let printed: Vec<&str> = [&exec.stdout, &exec.stderr, &elect.stdout, &elect.stderr]
        .into_iter()
        .flat_map(|text| text.lines())
        .collect();
    let shape = |sample: &str| {
        sample
            .split(|c: char| c.is_ascii_digit() || c == '(')
            .next()
            .unwrap_or_default()
            .to_owned()
    };
    let mut samples = 0;
    let mut in_sh = false;
    for line in docs.lines() {
        if line.starts_with("```") {
            in_sh = line == "```sh";
            continue;
        }
        let Some(sample) = line.strip_prefix("# ").filter(|_| in_sh) else {
            continue;
        };
        if sample.trim_start().starts_with("...") {
            continue;
        }
        let found = match sample.strip_prefix("  ") {
            Some(node_line) => {
                let (_, said) = node_line.split_once(": ").expect("node: what");
                let said = format!(": {}", shape(said));
                printed
                    .iter()
                    .any(|line| line.starts_with("  ") && line.contains(&said))
            }
            None => {
                let said = shape(sample);
                printed.iter().any(|line| line.starts_with(&said))
            }
        };
        assert!(
            found,
            "docs/cli.md says {sample:?}, which redlock does not print: {printed:#?}"
        );
        samples += 1;
    }
    assert!(samples >= 10, "only {samples} samples found in docs/cli.md");
}
