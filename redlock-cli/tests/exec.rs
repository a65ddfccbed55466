//! `redlock exec`: the command runs under the lock, which is released after;
//! exit codes pass through; a held lock stops a second exec; signals.

mod support;

use std::time::Duration;

use redlock_tests::RedisCluster;
use support::{REDLOCK, Scratch, assert_absent, eventually, redlock_on, run, start, wait_for_lock};

/// Clients connected to node 0, counting the one that asks.
fn connected_clients(cluster: &RedisCluster) -> usize {
    let info = cluster.node(0).command(["INFO", "clients"]);
    let redis::Value::BulkString(info) = info else {
        panic!("INFO answered {info:?}")
    };
    String::from_utf8_lossy(&info)
        .lines()
        .find_map(|line| line.strip_prefix("connected_clients:"))
        .and_then(|count| count.trim().parse().ok())
        .expect("connected_clients in INFO")
}

#[test]
fn runs_the_command_under_the_lock_and_releases_it() {
    let cluster = RedisCluster::start(3);
    // The command prints its environment, then asks `redlock status` (with
    // the nodes from REDLOCK_NODES) who holds the lock.
    let script = r#"echo "$REDLOCK_KEY|$REDLOCK_VALUE|$REDLOCK_FENCING_TOKEN"; "$REDLOCK_BIN" status --json deploy"#;
    let run = run(redlock_on(&cluster, "exec")
        .args([
            "--ttl",
            "5s",
            "--fencing",
            "deploy",
            "--",
            "sh",
            "-c",
            script,
        ])
        .env("REDLOCK_NODES", cluster.urls().join(","))
        .env("REDLOCK_BIN", REDLOCK)
        // A token from an outer redlock must not leak through.
        .env("REDLOCK_FENCING_TOKEN", "999"));
    run.assert_code(0);

    let mut lines = run.stdout.lines();
    let env_line = lines.next().expect("the command's first line");
    let [key, value, token] = env_line.split('|').collect::<Vec<_>>()[..] else {
        panic!("unexpected line {env_line:?}");
    };
    assert_eq!(key, "deploy");
    assert_eq!(value.len(), 40, "20 random bytes, hex: {value:?}");
    assert!(value.chars().all(|c| c.is_ascii_hexdigit()));
    let token: u64 = token.parse().expect("a numeric fencing token");
    assert!(token >= 1);

    let status: serde_json::Value =
        serde_json::from_str(lines.next().expect("the status line")).expect("status JSON");
    assert_eq!(status["state"], "held");
    assert_eq!(status["holder"]["value"], value);
    for node in status["nodes"].as_array().expect("nodes") {
        assert_eq!(node["state"], "held", "{node}");
        let pttl = node["pttl_ms"].as_u64().expect("a TTL");
        assert!(pttl > 0 && pttl <= 5_000, "{node}");
        assert_eq!(node["fencing_counter"].as_u64(), Some(token), "{node}");
    }

    // Plain words on stderr, released at the end.
    // "on 3 of 3 nodes", or "with a quorum (2 of 3 nodes granted, ...; 1
    // not waited for)" when the third answer came after the decision.
    assert!(
        run.stderr
            .contains("redlock: locked deploy on 3 of 3 nodes")
            || run
                .stderr
                .contains("redlock: locked deploy with a quorum ("),
        "{run:#?}"
    );
    assert!(!run.stderr.contains("so far"), "{run:#?}");
    // Every node is up: none is said to be still answering.
    assert!(!run.stderr.contains("answering"), "{run:#?}");
    assert!(
        run.stderr.contains("released deploy on 3 of 3 nodes"),
        "{run:#?}"
    );
    assert_absent(&cluster, "deploy");
}

#[test]
fn json_events_go_to_stderr_and_stdout_stays_the_command_s() {
    let cluster = RedisCluster::start(3);
    let run =
        run(redlock_on(&cluster, "exec").args(["--json", "report", "--", "echo", "the output"]));
    run.assert_code(0);
    assert_eq!(run.stdout, "the output\n");
    let events = run.stderr_json();
    let names: Vec<&str> = events
        .iter()
        .map(|event| event["event"].as_str().expect("an event name"))
        .collect();
    assert_eq!(names, ["locked", "exited", "released", "finished"]);
    assert_eq!(events[0]["key"], "report");
    assert!(events[0]["validity_ms"].as_u64().expect("validity") > 0);
    assert_eq!(events[0]["fencing_token"], serde_json::Value::Null);
    assert_eq!(events[1]["code"], 0);
    assert_eq!(events[2]["released"], 3);
    // What the release did on each node, not the acquire's "granted".
    for node in events[2]["nodes"].as_array().expect("nodes") {
        assert_eq!(node["result"], "released", "{run:#?}");
        assert_eq!(node["detail"], "key deleted", "{run:#?}");
    }
    assert_eq!(events[3]["exit_code"], 0);
    assert_absent(&cluster, "report");
}

#[test]
fn the_command_s_exit_status_passes_through() {
    let cluster = RedisCluster::start(3);
    run(redlock_on(&cluster, "exec").args(["job", "--", "sh", "-c", "exit 7"])).assert_code(7);
    assert_absent(&cluster, "job");
    // Death by a signal reads as 128 + its number, as in a shell.
    run(redlock_on(&cluster, "exec").args(["job", "--", "sh", "-c", "kill -TERM $$"]))
        .assert_code(143);
    assert_absent(&cluster, "job");
    // A command that does not exist: 127, and the lock is released.
    let missing = run(redlock_on(&cluster, "exec").args(["job", "--", "/nonexistent/command"]));
    missing.assert_code(127);
    assert!(missing.stderr.contains("cannot run"), "{missing:#?}");
    assert_absent(&cluster, "job");
}

#[test]
fn a_node_down_is_refused_only_when_every_node_is_required() {
    let cluster = RedisCluster::start(3);
    cluster.node(2).kill();
    // By default the command runs on the two that answer.
    run(redlock_on(&cluster, "exec").args(["job", "--", "true"])).assert_code(0);
    let refused = run(redlock_on(&cluster, "exec").args([
        "--require-nodes",
        "all",
        "job",
        "--",
        "touch",
        "/nonexistent/ran",
    ]));
    refused.assert_code(3);
    let down = format!("127.0.0.1:{}", cluster.node(2).port());
    assert!(
        refused
            .stderr
            .contains("2 of 3 servers reachable at build, 3 required")
            && refused.stderr.contains(&down),
        "{refused:#?}"
    );
    run(redlock_on(&cluster, "exec").args(["--require-nodes", "2", "job", "--", "true"]))
        .assert_code(0);
    for node in &cluster.nodes()[..2] {
        assert!(!node.exists("job"), "key job left on {}", node.url());
    }
}

#[test]
fn a_node_that_may_evict_lock_keys_is_refused_unless_allowed() {
    let cluster = RedisCluster::start(3);
    cluster
        .node(0)
        .command(["CONFIG", "SET", "maxmemory-policy", "allkeys-lfu"]);
    let refused = run(redlock_on(&cluster, "exec").args(["job", "--", "true"]));
    refused.assert_code(2);
    assert!(
        refused.stderr.contains("maxmemory-policy allkeys-lfu")
            && refused.stderr.contains("--allow-eviction"),
        "{refused:#?}"
    );
    run(redlock_on(&cluster, "exec").args(["--allow-eviction", "job", "--", "true"]))
        .assert_code(0);
    assert_absent(&cluster, "job");
}

/// The test servers run without AOF: accepted by default, refused (exit 2,
/// naming what the node lacks and the flag) under
/// `--refuse-weak-persistence`, accepted once AOF is on with `appendfsync
/// always`.
#[test]
fn a_node_that_may_lose_locks_is_refused_only_when_asked() {
    let cluster = RedisCluster::start(3);
    run(redlock_on(&cluster, "exec").args(["job", "--", "true"])).assert_code(0);
    let strict = || {
        let mut command = redlock_on(&cluster, "exec");
        command.args(["--refuse-weak-persistence", "job", "--", "true"]);
        command
    };
    let refused = run(&mut strict());
    refused.assert_code(2);
    assert!(
        refused.stderr.contains("appendonly no")
            && refused
                .stderr
                .contains("leave out --refuse-weak-persistence")
            && !refused.stderr.contains("WeakPersistence"),
        "{refused:#?}"
    );
    for node in cluster.nodes() {
        node.persist("yes", "always");
    }
    run(&mut strict()).assert_code(0);
    assert_absent(&cluster, "job");
}

/// `--wait-for-aof` on nodes that cannot confirm their AOF has a write
/// (Redis before 7.2 has no WAITAOF; no AOF) exits 2 naming the flag; on
/// nodes with WAITAOF and an fsynced AOF the command runs.
#[test]
fn waiting_for_the_aof_is_refused_where_a_node_cannot_confirm_it() {
    let cluster = RedisCluster::start(3);
    let durable = || {
        let mut command = redlock_on(&cluster, "exec");
        command.args(["--wait-for-aof", "job", "--", "true"]);
        command
    };
    let refused = run(&mut durable());
    refused.assert_code(2);
    assert!(
        refused
            .stderr
            .contains("cannot confirm that its AOF has a write")
            && refused.stderr.contains("leave out --wait-for-aof")
            && !refused.stderr.contains("wait_for_aof"),
        "{refused:#?}"
    );
    for node in cluster.nodes() {
        node.persist("yes", "always");
    }
    let outcome = run(&mut durable());
    if outcome.stderr.contains("has no WAITAOF") {
        // Redis 7.0: refused whatever its persistence.
        outcome.assert_code(2);
    } else {
        outcome.assert_code(0);
        assert_absent(&cluster, "job");
    }
}

#[test]
fn a_held_lock_is_busy_and_the_second_command_does_not_run() {
    let cluster = RedisCluster::start(3);
    let scratch = Scratch::new("busy");
    let go = scratch.path("go");
    // The first holder runs until the test creates `go` (at most 15 s).
    let hold = format!(
        "i=0; while [ ! -e '{}' ] && [ $i -lt 150 ]; do sleep 0.1; i=$((i+1)); done",
        go.display()
    );
    let first = start(redlock_on(&cluster, "exec").args(["cron", "--", "sh", "-c", &hold]));
    wait_for_lock(&cluster, "cron");

    let ran = scratch.path("ran");
    let touch = ["--", "touch", ran.to_str().expect("utf-8 path")];
    let busy = run(redlock_on(&cluster, "exec")
        .args(["--no-wait", "cron"])
        .args(touch));
    busy.assert_code(1);
    assert!(busy.stderr.contains("held by another owner"), "{busy:#?}");
    // The first holder has the lock on all three nodes: each is named, or
    // counted as not waited for (the round ends once two said "held").
    let named = cluster
        .nodes()
        .iter()
        .filter(|node| busy.stderr.contains(&format!(":{}/", node.port())))
        .count();
    let not_waited_for = usize::from(busy.stderr.contains("; 1 node not waited for)"));
    assert_eq!(named + not_waited_for, 3, "{busy:#?}");
    assert_eq!(busy.stderr.lines().count(), 1, "one short line: {busy:#?}");
    assert!(busy.stderr.len() <= 200, "one short line: {busy:#?}");
    // Quiet: no message for the expected refusal; -E picks the code.
    let quiet = run(redlock_on(&cluster, "exec")
        .args(["-q", "-E", "75", "cron"])
        .args(touch));
    quiet.assert_code(75);
    assert_eq!(quiet.stderr, "");
    // Waiting with a deadline that passes: busy too.
    let waited = run(redlock_on(&cluster, "exec")
        .args(["--deadline", "300ms", "cron"])
        .args(touch));
    waited.assert_code(1);
    assert!(waited.stderr.contains("still held"), "{waited:#?}");
    assert!(!ran.exists(), "a busy exec ran its command");

    // A waiter gets the lock once the first holder is done.
    let waiter = start(
        redlock_on(&cluster, "exec")
            .args(["--wait", "--deadline", "15s", "cron"])
            .args(touch),
    );
    std::fs::write(&go, b"").expect("create go");
    first.wait().assert_code(0);
    waiter.wait().assert_code(0);
    assert!(ran.exists(), "the waiter did not run its command");
    assert_absent(&cluster, "cron");
}

#[test]
fn a_signal_to_redlock_reaches_the_command_and_the_lock_is_released() {
    let cluster = RedisCluster::start(3);
    let running = start(redlock_on(&cluster, "exec").args(["deploy", "--", "sleep", "30"]));
    wait_for_lock(&cluster, "deploy");
    running.signal("TERM");
    let run = running.wait();
    // sleep died of the forwarded SIGTERM.
    run.assert_code(143);
    assert!(run.elapsed < Duration::from_secs(15), "{run:#?}");
    assert!(run.stderr.contains("got SIGTERM"), "{run:#?}");
    assert_absent(&cluster, "deploy");

    // Interrupted while waiting for a held lock: 130, nothing run, the
    // holder's key still the holder's (a waiter marks the value it found
    // as waited for, `redlock_core::waited`: `<value>\0<client>`).
    for node in cluster.nodes() {
        node.command(["SET", "deploy", "someone-else", "PX", "20000"]);
    }
    let waiting = start(redlock_on(&cluster, "exec").args(["--wait", "deploy", "--", "true"]));
    // Connected means its signal handlers are in place (they come first).
    eventually("redlock connects", Duration::from_secs(10), || {
        connected_clients(&cluster) >= 2
    });
    waiting.signal("INT");
    let run = waiting.wait();
    run.assert_code(130);
    for node in cluster.nodes() {
        let held = node.get("deploy").expect("the holder's key is still there");
        let unmarked = held.split(|&byte| byte == 0).next();
        assert_eq!(unmarked, Some(&b"someone-else"[..]), "{held:?}");
    }
}

/// `exec --permits 2`: two commands run at once, a third is busy, one with
/// `--permits 3` is refused; `status --permits 2` shows each permit's
/// holder, and so does `status` alone.
#[test]
fn permits_let_k_commands_run_at_once_and_status_shows_each_holder() {
    let cluster = RedisCluster::start(3);
    let scratch = Scratch::new("permits");
    let go = scratch.path("go");
    let hold = format!(
        "i=0; while [ ! -e '{}' ] && [ $i -lt 150 ]; do sleep 0.1; i=$((i+1)); done",
        go.display()
    );
    let holders: Vec<_> = (0..2)
        .map(|_| {
            start(redlock_on(&cluster, "exec").args([
                "--permits",
                "2",
                "--wait",
                "pool",
                "--",
                "sh",
                "-c",
                &hold,
            ]))
        })
        .collect();
    eventually("two permits held", Duration::from_secs(10), || {
        let status = run(redlock_on(&cluster, "status").args(["--json", "--permits", "2", "pool"]));
        status.stdout_json().first().is_some_and(|s| s["held"] == 2)
    });
    let status = run(redlock_on(&cluster, "status").args(["--permits", "2", "pool"]));
    status.assert_code(0);
    assert!(
        status
            .stdout
            .starts_with("semaphore pool: 2 of 2 permits held"),
        "{status:#?}"
    );
    assert!(
        status.stdout.contains("lock pool permit 0: held"),
        "{status:#?}"
    );
    assert!(
        status.stdout.contains("lock pool permit 1: held"),
        "{status:#?}"
    );

    // Found without `--permits`: the masters keep the semaphore's k.
    let found = run(redlock_on(&cluster, "status").arg("pool"));
    found.assert_code(0);
    assert_eq!(found.stdout, status.stdout, "{found:#?}");

    let busy = run(redlock_on(&cluster, "exec").args([
        "--permits",
        "2",
        "--no-wait",
        "pool",
        "--",
        "true",
    ]));
    busy.assert_code(1);
    // Another k is refused, naming both.
    let other = run(redlock_on(&cluster, "exec").args(["--permits", "3", "pool", "--", "true"]));
    other.assert_code(2);
    assert!(
        other
            .stderr
            .contains("semaphore pool has 2 permits on the masters, this request asked for 3"),
        "{other:#?}"
    );
    std::fs::write(&go, b"").unwrap();
    for holder in holders {
        holder.wait_within(Duration::from_secs(20)).assert_code(0);
    }
    let free = run(redlock_on(&cluster, "status").args(["--json", "--permits", "2", "pool"]));
    assert_eq!(free.stdout_json()[0]["held"], 0, "{free:#?}");
}

/// `exec --permits K --fencing`: the command gets its permit slot's fencing
/// token, which grows with each holder of that slot.
#[test]
fn a_fenced_permit_exports_its_slots_token() {
    let cluster = RedisCluster::start(3);
    let token = || {
        let run = run(redlock_on(&cluster, "exec").args([
            "--permits",
            "1",
            "--fencing",
            "fenced-pool",
            "--",
            "sh",
            "-c",
            "echo \"$REDLOCK_FENCING_TOKEN\"",
        ]));
        run.assert_code(0);
        run.stdout.trim().to_owned()
    };
    let first: u64 = token().parse().expect("a token");
    let next: u64 = token().parse().expect("a token");
    assert!(next > first, "the slot's next holder: {next} after {first}");
}
