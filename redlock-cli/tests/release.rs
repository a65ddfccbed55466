//! `redlock release --value`: deletes that value's keys and never another's.

mod support;

use redlock_tests::RedisCluster;
use support::{redlock_on, run};

#[test]
fn releases_only_the_given_value() {
    let cluster = RedisCluster::start(3);
    cluster.node(0).command(["SET", "k", "v1", "PX", "20000"]);
    cluster.node(1).command(["SET", "k", "v1", "PX", "20000"]);
    cluster.node(2).command(["SET", "k", "v2", "PX", "20000"]);

    // A wrong value (a typo) deletes nothing, says so and exits 1.
    let wrong = run(redlock_on(&cluster, "release").args(["k", "--value", "v3"]));
    wrong.assert_code(1);
    assert!(wrong.stdout.contains("not held"), "{wrong:#?}");
    assert!(wrong.stdout.contains("not held on any node"), "{wrong:#?}");
    let json = run(redlock_on(&cluster, "release").args(["k", "--value", "v3", "--json"]));
    json.assert_code(1);
    let [report] = &json.stdout_json()[..] else {
        panic!("one JSON object expected: {json:#?}");
    };
    assert_eq!(report["released"], 0);
    assert_eq!(report["held"], false);
    assert!(cluster.nodes().iter().all(|node| node.exists("k")));

    let released = run(redlock_on(&cluster, "release").args(["k", "--value", "v1", "--json"]));
    released.assert_code(0);
    let [report] = &released.stdout_json()[..] else {
        panic!("one JSON object expected: {released:#?}");
    };
    assert_eq!(report["event"], "released");
    assert_eq!(report["released"], 2);
    assert_eq!(report["not_held"], 1);
    assert_eq!(report["failed"], 0);
    assert_eq!(report["freed"], true);
    let results: Vec<&str> = report["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .map(|node| node["result"].as_str().expect("result"))
        .collect();
    assert_eq!(results, ["released", "released", "not_held"]);
    // Each detail says what the release did there, not the vote's
    // "granted" (issue 54).
    let details: Vec<&str> = report["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .map(|node| node["detail"].as_str().expect("detail"))
        .collect();
    assert_eq!(
        details,
        ["key deleted", "key deleted", "held by another owner"]
    );
    assert!(!cluster.node(0).exists("k"));
    assert!(!cluster.node(1).exists("k"));
    assert_eq!(cluster.node(2).get("k").as_deref(), Some(&b"v2"[..]));
}

#[test]
fn too_many_nodes_down_exits_3() {
    let cluster = RedisCluster::start(3);
    cluster.node(0).command(["SET", "k", "v1", "PX", "20000"]);
    cluster.node(1).kill();
    cluster.node(2).kill();
    let run = run(redlock_on(&cluster, "release").args(["k", "--value", "v1"]));
    run.assert_code(3);
    assert!(run.stdout.contains("failed on 2"), "{run:#?}");
    assert!(!cluster.node(0).exists("k"));
}
