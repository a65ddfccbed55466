//! Bad input exits 2 with a message that says what is wrong, never a panic;
//! nodes that are down exit 3.

mod support;

use redlock_tests::RedisCluster;
use support::{Scratch, redlock, redlock_on, run};

/// Runs `redlock ARGS...` and asserts exit 2 with `message` on stderr.
#[track_caller]
fn rejects(args: &[&str], message: &str) {
    let run = run(redlock().args(args));
    run.assert_code(2);
    assert!(
        run.stderr.contains(message),
        "expected {message:?} for {args:?}: {run:#?}"
    );
    assert_eq!(run.stdout, "", "{args:?}");
}

#[test]
fn bad_input_is_a_usage_error() {
    let one = "redis://127.0.0.1:1";
    rejects(&["exec", "k", "--", "true"], "no nodes");
    rejects(&["status", "--nodes", "", "k"], "no nodes");
    rejects(
        &["exec", "-N", "http://example", "k", "--", "true"],
        "not a Redis URL",
    );
    rejects(
        &["exec", "-N", "redis://h:notaport", "k", "--", "true"],
        "redis://h:notaport",
    );
    rejects(
        &["exec", "-N", one, "--ttl", "0s", "k", "--", "true"],
        "the TTL is zero",
    );
    rejects(
        &["exec", "-N", one, "--ttl", "soon", "k", "--", "true"],
        "expected a duration",
    );
    rejects(
        &[
            "exec",
            "-N",
            "redis://127.0.0.1:1,redis://127.0.0.1:2",
            "k",
            "--",
            "true",
        ],
        "use an odd number",
    );
    rejects(
        &[
            "status",
            "-N",
            "redis://127.0.0.1:1,redis://127.0.0.1:2",
            "k",
        ],
        "would; pass --allow-even to use them anyway",
    );
    rejects(
        &[
            "status",
            "-N",
            "redis://127.0.0.1:1,redis://127.0.0.1:1/0,redis://127.0.0.1:2",
            "k",
        ],
        "listed twice",
    );
    rejects(
        &[
            "exec",
            "-N",
            "redis://127.0.0.1:1,,redis://127.0.0.1:2",
            "k",
            "--",
            "true",
        ],
        "empty entry",
    );
    rejects(&["exec", "-N", one, "k"], "COMMAND");
    rejects(
        &[
            "exec",
            "-N",
            one,
            "--no-wait",
            "--deadline",
            "1s",
            "k",
            "--",
            "true",
        ],
        "--deadline",
    );
    rejects(
        &["release", "-N", one, "k", "--value", ""],
        "--value is empty",
    );
    rejects(&["release", "-N", one, "k"], "--value");
}

/// A typo in a host name used to count as a node down: the command ran on
/// the two nodes left, one failure from losing the lock, and exited 0.
#[test]
fn a_host_name_that_does_not_resolve_is_a_configuration_error() {
    let cluster = RedisCluster::start(2);
    let port = cluster.node(1).port();
    let nodes = format!("{},redis://127.0.0.l:{port}", cluster.urls().join(","));
    let scratch = Scratch::new("unresolved");
    let ran = scratch.path("ran");
    let run = run(redlock()
        .args(["exec", "--json", "-N", &nodes, "k", "--"])
        .args(["touch", ran.to_str().expect("utf-8")]));
    run.assert_code(2);
    let events = run.stderr_json();
    let error = &events[0];
    assert_eq!(error["event"], "error", "{run:#?}");
    assert_eq!(error["kind"], "config", "{run:#?}");
    let message = error["message"].as_str().expect("a message");
    assert!(message.contains("127.0.0.l"), "{message}");
    assert!(!ran.exists(), "the command ran");
    for node in cluster.nodes() {
        assert!(!node.exists("k"), "a lock was taken on {}", node.url());
    }
}

#[test]
fn json_errors_are_json() {
    let run = run(redlock().args(["status", "--json", "-N", "http://example", "k"]));
    run.assert_code(2);
    let [error] = &run.stdout_json()[..] else {
        panic!("one JSON object expected: {run:#?}");
    };
    assert_eq!(error["event"], "error");
    assert_eq!(error["kind"], "config");
    assert_eq!(error["exit_code"], 2);
}

#[test]
fn nodes_come_from_the_environment_too() {
    let cluster = RedisCluster::start(3);
    let run = run(redlock()
        .args(["status", "k"])
        .env("REDLOCK_NODES", cluster.urls().join(",")));
    run.assert_code(0);
    assert!(run.stdout.contains("free on every node"), "{run:#?}");
}

#[test]
fn nodes_down_exit_3_without_running_the_command() {
    let cluster = RedisCluster::start(3);
    cluster.node(0).kill();
    cluster.node(1).kill();
    let scratch = Scratch::new("down");
    let ran = scratch.path("ran");
    let run =
        run(redlock_on(&cluster, "exec").args(["k", "--", "touch", ran.to_str().expect("utf-8")]));
    run.assert_code(3);
    assert!(run.stderr.contains("no quorum"), "{run:#?}");
    // One short line, naming the nodes that are down.
    let lines: Vec<&str> = run.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{run:#?}");
    assert!(
        lines[0].len() <= 200,
        "{} chars: {}",
        lines[0].len(),
        lines[0]
    );
    assert!(lines[0].contains("unreachable"), "{run:#?}");
    assert!(!ran.exists());
    assert!(
        !cluster.node(2).exists("k"),
        "the partial lock was released"
    );
}

#[test]
fn a_key_of_another_type_exits_2_naming_the_key_without_waiting() {
    let cluster = RedisCluster::start(3);
    for node in cluster.nodes() {
        node.command(["LPUSH", "jobs", "x"]);
    }
    let scratch = Scratch::new("wrongtype");
    let ran = scratch.path("ran");
    // With --wait and no deadline redlock would retry forever if it took the
    // key for a held lock or for nodes down: it must stop at once.
    let run = support::start(redlock_on(&cluster, "exec").args([
        "--wait",
        "jobs",
        "--",
        "touch",
        ran.to_str().expect("utf-8"),
    ]))
    .wait_within(std::time::Duration::from_secs(10));
    run.assert_code(2);
    assert!(
        run.stderr
            .contains("the key jobs holds a value of another type"),
        "{run:#?}"
    );
    assert!(!run.stderr.contains("no quorum"), "{run:#?}");
    assert!(!ran.exists());
    let json = support::run(redlock_on(&cluster, "exec").args(["--json", "jobs", "--", "true"]));
    json.assert_code(2);
    assert!(
        json.stderr_json()
            .iter()
            .any(|event| event["event"] == "error" && event["kind"] == "wrong_type"),
        "{json:#?}"
    );
    for node in cluster.nodes() {
        assert_eq!(node.keys("*"), vec![b"jobs".to_vec()]);
        assert_eq!(node.command(["LLEN", "jobs"]), redis::Value::Int(1));
    }
}

#[test]
fn one_server_under_two_names_is_refused_and_even_counts_need_allow_even() {
    let cluster = RedisCluster::start(2);
    let port = cluster.node(0).port();
    let twice = format!(
        "redis://localhost:{port},redis://127.0.0.1:{port},{}",
        cluster.node(1).url()
    );
    let same = run(redlock().args(["status", "-N", &twice, "k"]));
    same.assert_code(2);
    assert!(
        same.stderr.contains(&format!(
            "redis://localhost:{port} and redis://127.0.0.1:{port} reach the same Redis server"
        )),
        "{same:#?}"
    );
    let even = run(redlock_on(&cluster, "status").arg("k"));
    even.assert_code(2);
    let allowed = run(redlock_on(&cluster, "status").args(["--allow-even", "k"]));
    allowed.assert_code(0);
}

/// Without `--`, the command's first word was "unexpected argument 'echo'"
/// and no more (issue 54): the error now says where `--` goes, still a
/// usage error.
#[test]
fn a_command_without_double_dash_says_where_it_goes() {
    let one = "redis://127.0.0.1:1";
    rejects(
        &["exec", "-N", one, "mykey", "echo", "hi"],
        &format!("put `--` before the command: redlock exec -N {one} mykey -- echo hi"),
    );
    rejects(
        &["elect", "-N", one, "leader", "echo", "it's"],
        &format!("put `--` before the command: redlock elect -N {one} leader -- echo 'it'\\''s'"),
    );
    rejects(
        &["exec", "mykey", "-N", one, "--wait", "./job.sh"],
        &format!("put `--` before the command: redlock exec mykey -N {one} --wait -- ./job.sh"),
    );
    // With a `--` already there, a stray word is not the command.
    let run = run(redlock().args(["exec", "-N", one, "mykey", "extra", "--", "true"]));
    run.assert_code(2);
    assert!(
        run.stderr.contains("unexpected argument 'extra'"),
        "{run:#?}"
    );
    assert!(!run.stderr.contains("put `--`"), "{run:#?}");
}
