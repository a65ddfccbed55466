//! `redlock exec` when the lock is lost while the command runs: the command
//! (and what it started) is stopped, redlock exits 4, and another owner's
//! key is never deleted.

mod support;

use std::time::Duration;

use redlock_tests::RedisCluster;
use support::{Scratch, eventually, process_gone, redlock_on, start, wait_for_lock};

/// A command that ignores SIGTERM (so only SIGKILL stops it) and starts a
/// grandchild that ignores it too, writing the grandchild's pid to `pidfile`.
fn stubborn(pidfile: &std::path::Path) -> String {
    format!(
        "trap '' TERM; sleep 30 & echo $! > '{}'; wait",
        pidfile.display()
    )
}

#[test]
fn a_lock_taken_over_by_another_value_stops_the_command() {
    let cluster = RedisCluster::start(3);
    let scratch = Scratch::new("taken-over");
    let pidfile = scratch.path("pid");
    let running = start(redlock_on(&cluster, "exec").args([
        "--ttl",
        "1s",
        "--kill-grace",
        "300ms",
        "nightly",
        "--",
        "sh",
        "-c",
        &stubborn(&pidfile),
    ]));
    wait_for_lock(&cluster, "nightly");
    eventually("the command started", Duration::from_secs(10), || {
        std::fs::read_to_string(&pidfile).is_ok_and(|pid| pid.trim().parse::<u32>().is_ok())
    });
    let grandchild: u32 = std::fs::read_to_string(&pidfile)
        .expect("pidfile")
        .trim()
        .parse()
        .expect("a pid");

    // Someone (an operator, a buggy client) overwrites the key everywhere.
    for node in cluster.nodes() {
        node.command(["SET", "nightly", "intruder", "PX", "30000"]);
    }
    let run = running.wait();
    run.assert_code(4);
    assert!(run.stderr.contains("lock nightly lost"), "{run:#?}");
    assert!(run.stderr.contains("SIGKILL"), "{run:#?}");
    // The next extension (at half the 1 s TTL) notices; SIGKILL follows the
    // grace period. Generous bound: no timing is asserted closely.
    assert!(run.elapsed < Duration::from_secs(15), "{run:#?}");
    eventually("the grandchild is gone", Duration::from_secs(5), || {
        process_gone(grandchild)
    });
    // The intruder's key is left alone.
    for node in cluster.nodes() {
        assert_eq!(node.get("nightly").as_deref(), Some(&b"intruder"[..]));
    }
}

#[test]
fn a_majority_of_nodes_going_down_stops_the_command() {
    let cluster = RedisCluster::start(3);
    let running = start(
        redlock_on(&cluster, "exec")
            .args(["--json", "--ttl", "1s", "nightly", "--", "sleep", "30"]),
    );
    wait_for_lock(&cluster, "nightly");
    cluster.node(0).kill();
    cluster.node(1).kill();
    let run = running.wait();
    run.assert_code(4);
    assert!(run.elapsed < Duration::from_secs(15), "{run:#?}");
    let events = run.stderr_json();
    let names: Vec<&str> = events
        .iter()
        .filter_map(|event| event["event"].as_str())
        .collect();
    assert_eq!(names, ["locked", "lost", "exited", "released", "finished"]);
    assert!(
        events[1]["reason"]
            .as_str()
            .is_some_and(|reason| !reason.is_empty())
    );
    // sleep got SIGTERM and died of it.
    assert_eq!(events[2]["signal"], 15);
    assert_eq!(events[4]["exit_code"], 4);
    // The surviving node's copy was released.
    assert!(!cluster.node(2).exists("nightly"));
}

#[test]
fn a_suspended_redlock_suspends_the_command_and_loses_the_lock() {
    let cluster = RedisCluster::start(3);
    let scratch = Scratch::new("suspended");
    let pidfile = scratch.path("pid");
    let script = format!("echo $$ > '{}'; exec sleep 30", pidfile.display());
    let running = start(
        redlock_on(&cluster, "exec").args(["--ttl", "1s", "nightly", "--", "sh", "-c", &script]),
    );
    wait_for_lock(&cluster, "nightly");
    eventually("the command started", Duration::from_secs(10), || {
        std::fs::read_to_string(&pidfile).is_ok_and(|pid| pid.trim().parse::<u32>().is_ok())
    });
    let command: u32 = std::fs::read_to_string(&pidfile)
        .expect("pidfile")
        .trim()
        .parse()
        .expect("a pid");

    // Ctrl-Z: the command must stop with redlock, or it would run on
    // while nothing extends the lock.
    running.signal("TSTP");
    eventually("the command is stopped", Duration::from_secs(10), || {
        process_state(command) == Some('T')
    });
    // Stopped for longer than the validity: the lock is gone on resumption.
    std::thread::sleep(Duration::from_millis(1_500));
    running.signal("CONT");
    let run = running.wait();
    run.assert_code(4);
    assert!(run.stderr.contains("suspended"), "{run:#?}");
    assert!(run.stderr.contains("lock nightly lost"), "{run:#?}");
    assert!(process_gone(command));
}

/// The state letter of `/proc/PID/stat` (`R`, `S`, `T`, `Z`, ...).
fn process_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(") ")?.1.chars().next()
}

#[test]
fn an_operator_release_by_value_stops_the_command_and_stays_released() {
    let cluster = RedisCluster::start(3);
    let running = start(redlock_on(&cluster, "exec").args([
        "--ttl",
        "1s",
        "released-by-hand",
        "--",
        "sleep",
        "30",
    ]));
    wait_for_lock(&cluster, "released-by-hand");
    eventually("every node holds the lock", Duration::from_secs(5), || {
        cluster
            .nodes()
            .iter()
            .all(|node| node.exists("released-by-hand"))
    });
    let value = cluster.node(0).get("released-by-hand").expect("held");
    let value = String::from_utf8(value).expect("a hex value");

    let release =
        support::run(redlock_on(&cluster, "release").args(["released-by-hand", "--value", &value]));
    release.assert_code(0);
    assert!(
        release.stdout.contains("released on 3 of 3"),
        "{release:#?}"
    );

    // The next extension (at half the 1 s TTL) finds the value gone from
    // every node: the lock is lost, the command stopped, exit 4.
    let run = running.wait();
    run.assert_code(4);
    assert!(
        run.stderr.contains("lock released-by-hand lost"),
        "{run:#?}"
    );
    assert!(run.elapsed < Duration::from_secs(15), "{run:#?}");
    // Not re-created: a status now (and for longer than the keep-alive
    // period) shows the lock free on every node.
    std::thread::sleep(Duration::from_millis(1500));
    for node in cluster.nodes() {
        assert_eq!(node.pttl("released-by-hand"), -2);
    }
    let status = support::run(redlock_on(&cluster, "status").arg("released-by-hand"));
    status.assert_code(0);
    assert!(status.stdout.contains("free on every node"), "{status:#?}");
}
