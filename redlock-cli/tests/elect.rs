//! `redlock elect` and `redlock leader` on real nodes (Redis, or Valkey with
//! `REDLOCK_SERVER_BIN`): the command runs with its term and the name is
//! free once it exits; a second process waits and leads next with a higher
//! term; a leader paused past its lease finds its term lost on resumption
//! and stops its command while the next leader runs; a loss while leading
//! stops the command and campaigns again.

mod support;

use std::time::Duration;

use redlock_tests::RedisCluster;
use support::{Scratch, assert_absent, eventually, redlock_on, run, start, wait_for_lock};

/// Short timings, so that a loss comes within a second.
const TIMINGS: [&str; 6] = [
    "--lease",
    "1s",
    "--renew-deadline",
    "600ms",
    "--retry-period",
    "150ms",
];

/// `sh -c` appending the term to `file`, then running `then`.
fn note_term(file: &std::path::Path, then: &str) -> String {
    format!("echo $REDLOCK_TERM >> '{}'; {then}", file.display())
}

fn terms(file: &std::path::Path) -> Vec<u64> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .map(|line| line.trim().parse().expect("a term"))
        .collect()
}

#[test]
fn the_command_runs_with_its_term_and_the_name_is_free_once_it_exits() {
    let cluster = RedisCluster::start(3);
    let scratch = Scratch::new("elect-exit");
    let file = scratch.path("terms");
    let run = run(redlock_on(&cluster, "elect")
        .args(TIMINGS)
        .args(["--json", "scheduler", "--", "sh", "-c"])
        .arg(note_term(
            &file,
            "test \"$REDLOCK_FENCING_TOKEN\" = \"$REDLOCK_TERM\" && exit 3",
        )));
    run.assert_code(3);
    let terms = terms(&file);
    assert_eq!(terms.len(), 1, "{run:#?}");
    assert!(terms[0] > 0);
    let events = run.stderr_json();
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["event"].as_str()).collect();
    assert!(
        kinds.starts_with(&["campaigning", "elected", "exited", "resigned", "finished"]),
        "{kinds:?}"
    );
    assert_eq!(events[1]["term"].as_u64(), Some(terms[0]));
    assert_absent(&cluster, "scheduler");
}

#[test]
fn a_second_process_waits_and_leads_next_with_a_higher_term() {
    let cluster = RedisCluster::start(3);
    let scratch = Scratch::new("elect-next");
    let file = scratch.path("terms");
    let gate = scratch.path("gate");
    let first = start(
        redlock_on(&cluster, "elect")
            .args(TIMINGS)
            .args(["--proclaim", "10.0.0.7:80", "scheduler", "--", "sh", "-c"])
            .arg(note_term(
                &file,
                &format!("while [ ! -e '{}' ]; do sleep 0.05; done", gate.display()),
            )),
    );
    wait_for_lock(&cluster, "scheduler");
    eventually("the first leader runs", Duration::from_secs(10), || {
        terms(&file).len() == 1
    });
    // Who leads, with the proclaimed value (written just after the grant).
    eventually("the value is proclaimed", Duration::from_secs(10), || {
        let shown = run(redlock_on(&cluster, "leader").args(["--json", "scheduler"]));
        shown.assert_code(0);
        let leader = &shown.stdout_json()[0]["leader"];
        leader["value"] == "10.0.0.7:80" && leader["term"].as_u64() == Some(terms(&file)[0])
    });
    // Busy while the first leads: a bounded campaign gives up.
    let busy = run(redlock_on(&cluster, "elect").args(TIMINGS).args([
        "--deadline",
        "300ms",
        "scheduler",
        "--",
        "true",
    ]));
    busy.assert_code(1);
    assert!(
        busy.stderr
            .contains("another process still leads scheduler"),
        "{busy:#?}"
    );
    let second = start(
        redlock_on(&cluster, "elect")
            .args(TIMINGS)
            .args(["scheduler", "--", "sh", "-c"])
            .arg(note_term(&file, "exit 0")),
    );
    std::fs::write(&gate, b"").unwrap();
    first.wait().assert_code(0);
    second.wait().assert_code(0);
    let terms = terms(&file);
    assert_eq!(terms.len(), 2);
    assert!(terms[1] > terms[0], "{terms:?}");
    assert_absent(&cluster, "scheduler");
}

#[test]
fn a_leader_paused_past_its_lease_stops_its_command_on_resumption() {
    let cluster = RedisCluster::start(3);
    let scratch = Scratch::new("elect-paused");
    let file = scratch.path("terms");
    let first = start(
        redlock_on(&cluster, "elect")
            .args(TIMINGS)
            .args(["--once", "--json", "--kill-grace", "300ms", "paused", "--"])
            .args(["sh", "-c"])
            .arg(note_term(&file, "sleep 30")),
    );
    eventually("the first leader runs", Duration::from_secs(10), || {
        terms(&file).len() == 1
    });
    // Stopped past its lease: no renewal goes out, the key expires.
    first.signal("STOP");
    let second = start(
        redlock_on(&cluster, "elect")
            .args(TIMINGS)
            .args(["--deadline", "10s", "paused", "--", "sh", "-c"])
            .arg(note_term(&file, "sleep 1")),
    );
    eventually("the second leader runs", Duration::from_secs(10), || {
        terms(&file).len() == 2
    });
    first.signal("CONT");
    let first = first.wait();
    // On resumption its term is over: it stops its command, and exits 4.
    first.assert_code(4);
    let lost: Vec<_> = first
        .stderr_json()
        .into_iter()
        .filter(|event| event["event"] == "lost")
        .collect();
    assert_eq!(lost.len(), 1, "{first:#?}");
    second.wait().assert_code(0);
    let terms = terms(&file);
    assert!(terms[1] > terms[0], "{terms:?}");
    assert_absent(&cluster, "paused");
}

#[test]
fn a_loss_while_leading_stops_the_command_and_campaigns_again() {
    let cluster = RedisCluster::start(3);
    let scratch = Scratch::new("elect-again");
    let file = scratch.path("terms");
    let leader = start(
        redlock_on(&cluster, "elect")
            .args(TIMINGS)
            .args(["--kill-grace", "300ms", "again", "--", "sh", "-c"])
            // The first term waits to be stopped; the second exits.
            .arg(note_term(
                &file,
                &format!("[ $(wc -l < '{}') -ge 2 ] || sleep 30", file.display()),
            )),
    );
    eventually("the first term runs", Duration::from_secs(10), || {
        terms(&file).len() == 1
    });
    // A majority stops answering: no renewal is confirmed, the leader
    // steps down at its renew deadline and stops the command.
    cluster.node(0).pause();
    cluster.node(1).pause();
    std::thread::sleep(Duration::from_millis(1_500));
    cluster.node(0).resume();
    cluster.node(1).resume();
    let run = leader.wait();
    run.assert_code(0);
    assert!(run.stderr.contains("leadership of again (term"), "{run:#?}");
    let terms = terms(&file);
    assert_eq!(terms.len(), 2, "{run:#?}");
    assert!(terms[1] > terms[0], "{terms:?}");
}

#[test]
fn leader_exits_3_without_a_quorum_and_bad_timings_are_a_usage_error() {
    let cluster = RedisCluster::start(3);
    let shown = run(redlock_on(&cluster, "leader").arg("nobody"));
    shown.assert_code(0);
    assert!(
        shown.stdout.contains("election nobody: no leader"),
        "{shown:#?}"
    );
    cluster.node(0).kill();
    cluster.node(1).kill();
    run(redlock_on(&cluster, "leader").arg("nobody")).assert_code(3);
    let refused = run(redlock_on(&cluster, "elect").args([
        "--lease",
        "1s",
        "--renew-deadline",
        "2s",
        "x",
        "--",
        "true",
    ]));
    refused.assert_code(2);
    assert!(refused.stderr.contains("renew"), "{refused:#?}");
}
