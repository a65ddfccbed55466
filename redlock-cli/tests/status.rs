//! `redlock status`: the holder, every node's TTL and fencing counter, in
//! words and in JSON.

mod support;

use redlock_tests::RedisCluster;
use support::{redlock_on, run};

#[test]
fn shows_the_holder_and_every_node() {
    let cluster = RedisCluster::start(3);
    cluster
        .node(0)
        .command(["SET", "lock:k", "v1", "PX", "8000"]);
    cluster
        .node(1)
        .command(["SET", "lock:k", "v1", "PX", "6000"]);
    cluster
        .node(2)
        .command(["SET", "lock:k", "v2", "PX", "4000"]);
    cluster.node(0).command(["SET", "{lock:k}\0fencing", "7"]);

    let plain = run(redlock_on(&cluster, "status").args(["--key-prefix", "lock:", "k"]));
    plain.assert_code(0);
    assert!(
        plain
            .stdout
            .contains("lock k: held on 2 of 3 nodes (quorum 2)"),
        "{plain:#?}"
    );
    assert!(plain.stdout.contains("value: v1"), "{plain:#?}");
    assert!(plain.stdout.contains("held by value v2"), "{plain:#?}");
    assert!(plain.stdout.contains("fencing counter 7"), "{plain:#?}");
    assert_eq!(plain.stderr, "");

    let json = run(redlock_on(&cluster, "status").args(["--key-prefix", "lock:", "--json", "k"]));
    json.assert_code(0);
    let [status] = &json.stdout_json()[..] else {
        panic!("one JSON object expected: {json:#?}");
    };
    assert_eq!(status["event"], "status");
    assert_eq!(status["key"], "k");
    assert_eq!(status["redis_key"], "lock:k");
    assert_eq!(status["state"], "held");
    assert_eq!(status["quorum"], 2);
    assert_eq!(status["nodes_answered"], 3);
    assert_eq!(status["holder"]["value"], "v1");
    assert_eq!(status["holder"]["nodes"], 2);
    // A quorum holds it for as long as the second-longest TTL of its holders.
    let remaining = status["holder"]["remaining_ms"]
        .as_u64()
        .expect("remaining");
    assert!(remaining > 0 && remaining <= 6_000, "{status}");
    let nodes = status["nodes"].as_array().expect("nodes");
    let pttls: Vec<u64> = nodes
        .iter()
        .map(|n| n["pttl_ms"].as_u64().expect("pttl"))
        .collect();
    assert!(pttls[0] <= 8_000 && pttls[0] > pttls[2], "{pttls:?}");
    assert_eq!(nodes[2]["value"], "v2");
    assert_eq!(nodes[0]["fencing_counter"], 7);
    assert_eq!(nodes[1]["fencing_counter"], serde_json::Value::Null);
}

/// Each server as the connection found it: what it is, its run id, whether
/// it keeps what it acknowledged, in words and in JSON.
#[test]
fn shows_what_each_server_is_and_keeps() {
    let cluster = RedisCluster::start(3);
    cluster.node(0).persist("yes", "always");
    let plain = run(redlock_on(&cluster, "status").arg("k"));
    plain.assert_code(0);
    let servers: Vec<&str> = plain
        .stdout
        .lines()
        .skip_while(|line| *line != "servers:")
        .skip(1)
        .collect();
    assert_eq!(servers.len(), 3, "{plain:#?}");
    let name = redlock_tests::server().name();
    assert!(
        servers
            .iter()
            .all(|line| line.contains(name) && line.contains(", run id ")),
        "{plain:#?}"
    );
    assert!(
        servers[0].contains("keeps what it acknowledged (AOF, appendfsync always)"),
        "{plain:#?}"
    );
    assert!(
        servers[1].contains("may lose locks at a restart (appendonly no"),
        "{plain:#?}"
    );

    let json = run(redlock_on(&cluster, "status").args(["--json", "k"]));
    json.assert_code(0);
    let [status] = &json.stdout_json()[..] else {
        panic!("one JSON object expected: {json:#?}");
    };
    let servers = status["servers"].as_array().expect("servers");
    let persistence: Vec<&str> = servers
        .iter()
        .map(|s| s["persistence"].as_str().expect("persistence"))
        .collect();
    assert_eq!(persistence, ["kept", "weak", "weak"], "{status}");
    assert!(servers.iter().all(|s| s["connected"] == true
        && s["run_ids"][0].as_str().is_some_and(|id| id.len() == 40)
        && s["uptime_s"].as_u64().is_some()));
}

#[test]
fn a_free_lock_and_a_key_on_a_minority() {
    let cluster = RedisCluster::start(3);
    let free = run(redlock_on(&cluster, "status").args(["--json", "k"]));
    free.assert_code(0);
    let status = &free.stdout_json()[0];
    assert_eq!(status["state"], "not_held");
    assert_eq!(status["holder"], serde_json::Value::Null);
    assert!(
        status["nodes"]
            .as_array()
            .expect("nodes")
            .iter()
            .all(|n| n["state"] == "free")
    );

    cluster.node(1).command(["SET", "k", "v1", "PX", "8000"]);
    let partial = run(redlock_on(&cluster, "status").arg("k"));
    partial.assert_code(0);
    assert!(
        partial.stdout.contains("not held by a quorum"),
        "{partial:#?}"
    );
}

#[test]
fn too_few_nodes_answering_is_unknown_and_exits_3() {
    let cluster = RedisCluster::start(3);
    cluster.node(0).kill();
    cluster.node(2).kill();
    let run = run(redlock_on(&cluster, "status").args(["--json", "k"]));
    run.assert_code(3);
    let status = &run.stdout_json()[0];
    assert_eq!(status["state"], "unknown");
    assert_eq!(status["nodes_answered"], 1);
    assert_eq!(status["nodes"][0]["state"], "error");
    assert!(
        status["nodes"][0]["error"]
            .as_str()
            .is_some_and(|e| e.contains("unreachable"))
    );
}

#[test]
fn common_options_may_come_before_the_subcommand() {
    // As `flock` and `etcdctl` users type them.
    let cluster = RedisCluster::start(3);
    cluster.node(0).command(["SET", "k", "v1", "PX", "8000"]);
    let mut command = support::redlock();
    command.arg("--nodes").arg(cluster.urls().join(",")).args([
        "--node-timeout",
        "150ms",
        "status",
        "k",
    ]);
    let status = run(&mut command);
    status.assert_code(0);
    assert!(status.stdout.contains("lock k: "), "{status:#?}");
}

#[test]
fn cluster_nodes_are_given_with_all_their_seeds_in_one_list() {
    use redlock_tests::{RedisNode, ShardedNode};

    let clusters: Vec<ShardedNode> = std::thread::scope(|scope| {
        let starts: Vec<_> = (0..2)
            .map(|_| scope.spawn(|| ShardedNode::start(3)))
            .collect();
        starts.into_iter().map(|s| s.join().unwrap()).collect()
    });
    let plain = RedisNode::start();
    // `redis+cluster://h:p1,h:p2,h:p3` twice and a plain master, in one
    // comma-separated list: the seeds stay with their cluster.
    let nodes = [clusters[0].url(), plain.url(), clusters[1].url()].join(",");
    let exec = |key: &str| {
        run(support::redlock()
            .args(["exec", "--nodes", &nodes, "--node-timeout", "150ms"])
            .args(["--connect-timeout", "10s", "--fencing", key, "--"])
            .args(["sh", "-c", "test -n \"$REDLOCK_FENCING_TOKEN\""]))
    };
    // Keys on every shard of the first cluster.
    let mut shards = std::collections::BTreeSet::new();
    for i in 0.. {
        let key = format!("k{i}");
        if shards.insert(clusters[0].shard_index(&key)) {
            exec(&key).assert_code(0);
        }
        if shards.len() == 3 {
            break;
        }
    }
    let status = run(support::redlock()
        .args(["status", "--nodes", &nodes, "--connect-timeout", "10s"])
        .args(["--node-timeout", "150ms", "--json", "k0"]));
    status.assert_code(0);
    let [status] = &status.stdout_json()[..] else {
        panic!("one JSON object expected: {status:#?}");
    };
    assert_eq!(status["state"], "not_held", "{status}");
    assert_eq!(status["nodes_answered"], 3, "{status}");
    // The fenced exec left its counter on the first cluster, in the lock
    // key's slot.
    assert!(clusters[0].exists("{k0}\0fencing"));
}
