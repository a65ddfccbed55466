//! Tests of the test harness itself: if these fail, nothing else is trustworthy.

use std::io::Read;
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use redlock_tests::{
    CLIENT_TIMEOUT, GARBAGE_REPLY, GarbageServer, NodeOptions, RedisCluster, RedisNode,
    SilentServer,
};

fn process_exists(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

#[test]
fn start_answers_and_drop_kills_the_process_and_removes_its_dir() {
    let node = RedisNode::start();
    let pid = node.pid().expect("a started node has a pid");
    let dir = node.data_dir().to_path_buf();
    assert!(node.is_running());
    node.ping().expect("a started node answers PING");
    assert_eq!(node.url(), format!("redis://127.0.0.1:{}", node.port()));
    assert!(dir.join("redis.pid").is_file());

    node.set("key", "value");
    assert_eq!(node.get("key").as_deref(), Some(&b"value"[..]));
    assert!(node.exists("key"));
    assert_eq!(node.pttl("key"), -1);
    assert_eq!(node.pttl("missing"), -2);
    node.set("other", [0_u8, 255]);
    assert_eq!(node.keys("*"), vec![b"key".to_vec(), b"other".to_vec()]);

    drop(node);
    assert!(!process_exists(pid), "redis-server {pid} survived the drop");
    assert!(!dir.exists(), "{} survived the drop", dir.display());
}

#[test]
fn kill_then_restart_comes_back_on_the_same_port_without_data() {
    let node = RedisNode::start();
    let port = node.port();
    let first_pid = node.pid().unwrap();
    node.set("key", "value");

    node.kill();
    assert!(!node.is_running());
    assert_eq!(node.pid(), None);
    assert!(!process_exists(first_pid));
    assert!(node.ping().is_err(), "a killed node answered PING");
    node.kill(); // killing twice is fine

    node.restart();
    assert!(node.is_running());
    assert_eq!(node.port(), port);
    assert_ne!(node.pid(), Some(first_pid));
    node.ping().expect("a restarted node answers PING");
    assert_eq!(node.get("key"), None);
}

#[test]
fn restart_of_a_running_node_kills_it_first() {
    let node = RedisNode::start();
    let first_pid = node.pid().unwrap();
    node.set("key", "value");
    node.restart();
    assert!(!process_exists(first_pid));
    assert_eq!(node.get("key"), None);
}

#[test]
fn restart_keeping_data_keeps_what_an_fsynced_aof_persisted() {
    let node = RedisNode::start_with(NodeOptions {
        extra_args: ["--appendonly", "yes", "--appendfsync", "always"]
            .map(String::from)
            .to_vec(),
        ..NodeOptions::default()
    });
    node.set("key", "value");
    node.restart_keeping_data();
    assert_eq!(node.get("key").as_deref(), Some(&b"value"[..]));
    node.restart();
    assert_eq!(node.get("key"), None);
}

#[test]
fn pause_makes_ping_time_out_and_resume_answers_again() {
    let node = RedisNode::start();
    node.set("key", "value");

    node.pause();
    assert!(node.is_running(), "a paused node is still running");
    let started = Instant::now();
    let err = node.ping().expect_err("a paused node answered PING");
    assert!(err.is_timeout(), "expected a timeout, got {err}");
    assert!(started.elapsed() >= CLIENT_TIMEOUT - Duration::from_millis(50));

    node.resume();
    node.ping().expect("a resumed node answers PING");
    assert_eq!(node.get("key").as_deref(), Some(&b"value"[..]));
}

#[test]
fn a_paused_node_can_be_killed_and_dropped() {
    let node = RedisNode::start();
    let pid = node.pid().unwrap();
    node.pause();
    drop(node);
    assert!(!process_exists(pid));
}

#[test]
fn cluster_of_three_has_three_distinct_ports_and_independent_data() {
    let cluster = RedisCluster::start(3);
    assert_eq!(cluster.len(), 3);
    let mut ports: Vec<u16> = cluster.nodes().iter().map(RedisNode::port).collect();
    ports.sort_unstable();
    ports.dedup();
    assert_eq!(ports.len(), 3);
    assert_eq!(
        cluster.urls(),
        cluster
            .nodes()
            .iter()
            .map(RedisNode::url)
            .collect::<Vec<_>>()
    );

    cluster.node(0).set("key", "zero");
    assert!(!cluster.node(1).exists("key"));
    assert!(!cluster.node(2).exists("key"));

    cluster.node(1).kill();
    cluster.node(0).ping().unwrap();
    cluster.node(2).ping().unwrap();
}

#[test]
fn password_is_required_and_the_assertion_client_uses_it() {
    let password = "s3cret pass@word";
    let node = RedisNode::start_with(NodeOptions {
        password: Some(password.to_owned()),
        ..NodeOptions::default()
    });
    node.set("key", "value");

    let mut anonymous = redis::Client::open(node.url())
        .unwrap()
        .get_connection_with_timeout(CLIENT_TIMEOUT)
        .unwrap();
    let err = redis::cmd("GET")
        .arg("key")
        .query::<Option<String>>(&mut anonymous)
        .unwrap_err();
    assert_eq!(err.code(), Some("NOAUTH"), "got {err}");

    let mut authenticated = redis::Client::open(node.url_with_password(password))
        .unwrap()
        .get_connection_with_timeout(CLIENT_TIMEOUT)
        .unwrap();
    let value: Option<String> = redis::cmd("GET")
        .arg("key")
        .query(&mut authenticated)
        .unwrap();
    assert_eq!(value.as_deref(), Some("value"));

    let wrong = redis::Client::open(node.url_with_password("wrong"))
        .unwrap()
        .get_connection_with_timeout(CLIENT_TIMEOUT);
    assert!(wrong.is_err(), "a wrong password was accepted");
}

#[test]
fn commandstats_counts_calls_per_command() {
    let node = RedisNode::start();
    let sha = match node.command(["SCRIPT", "LOAD", "return 1"]) {
        redis::Value::BulkString(sha) => String::from_utf8(sha).unwrap(),
        other => panic!("SCRIPT LOAD answered {other:?}"),
    };
    node.reset_stats();
    for _ in 0..3 {
        node.command(["EVALSHA", sha.as_str(), "0"]);
    }
    let missing = "0000000000000000000000000000000000000000";
    let err = node.try_command(["EVALSHA", missing, "0"]).unwrap_err();
    assert_eq!(err.code(), Some("NOSCRIPT"), "got {err}");

    let stats = node.commandstats();
    // A NOSCRIPT reply still counts as a call (and as a failed call).
    assert_eq!(stats.get("evalsha"), Some(&4), "{stats:?}");
    assert_eq!(stats.get("script|load"), None, "reset_stats did not reset");
    assert_eq!(stats.get("get"), None);

    node.reset_stats();
    assert_eq!(node.commandstats().get("evalsha"), None);
}

#[test]
fn garbage_server_answers_bytes_that_are_not_resp() {
    let server = GarbageServer::start();
    assert_eq!(server.url(), format!("redis://127.0.0.1:{}", server.port()));

    let mut stream = TcpStream::connect(("127.0.0.1", server.port())).unwrap();
    stream.set_read_timeout(Some(CLIENT_TIMEOUT)).unwrap();
    let mut reply = vec![0_u8; GARBAGE_REPLY.len()];
    stream.read_exact(&mut reply).unwrap();
    assert_eq!(reply, GARBAGE_REPLY);

    let result = redis::Client::open(server.url())
        .unwrap()
        .get_connection_with_timeout(CLIENT_TIMEOUT)
        .and_then(|mut con| redis::cmd("PING").query::<String>(&mut con));
    let err = result.expect_err("garbage parsed as a PING reply");
    assert!(!err.is_timeout(), "expected a protocol error, got {err}");
    assert!(server.accepted_connections() >= 2);
}

#[test]
fn silent_server_accepts_and_never_answers() {
    let server = SilentServer::start();
    let started = Instant::now();
    let result = redis::Client::open(server.url())
        .unwrap()
        .get_connection_with_timeout(Duration::from_millis(300))
        .and_then(|mut con| {
            con.set_read_timeout(Some(Duration::from_millis(300)))?;
            redis::cmd("PING").query::<String>(&mut con)
        });
    let err = result.expect_err("a silent server answered");
    assert!(err.is_timeout(), "expected a timeout, got {err}");
    assert!(started.elapsed() >= Duration::from_millis(250));
    assert_eq!(server.accepted_connections(), 1);
}
