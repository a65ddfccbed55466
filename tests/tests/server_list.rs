//! The node list: an even count is refused unless allowed, one server
//! reached under two names is refused, naming both, and a host name that
//! does not exist is a configuration error, not a node down, and a server
//! that may evict lock keys (a maxmemory-policy but noeviction) is refused
//! unless allowed.

mod support;

use redlock_core::ConfigError;
use redlock_tests::RedisCluster;
use redlock_tokio::{Error, Redlock, Wait, WeakPersistence};
use support::{NODE_TIMEOUT, init_tracing};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn even_counts_are_refused_unless_allowed() {
    init_tracing();
    let cluster = RedisCluster::start(4);
    let urls = cluster.urls();
    for n in [2, 4] {
        let err = Redlock::builder(&urls[..n])
            .node_timeout(NODE_TIMEOUT)
            .build()
            .await
            .unwrap_err();
        assert!(
            matches!(err, Error::Config(ConfigError::EvenNodes { count }) if count == n),
            "{err:?}"
        );
        assert!(err.is_config(), "{err:?}");
        let (quorum, fewer) = match n {
            2 => (2, "1 node"),
            _ => (3, "3 nodes"),
        };
        assert_eq!(
            err.to_string(),
            format!(
                "invalid configuration: {n} nodes given: use an odd number (3, 5, ...); \
                 the quorum of {quorum} tolerates no more failed nodes than {fewer} would \
                 (allow_even_nodes(true) accepts them anyway)"
            )
        );

        let redlock = Redlock::builder(&urls[..n])
            .node_timeout(NODE_TIMEOUT)
            .allow_even_nodes(true)
            .build()
            .await
            .expect("allowed");
        assert_eq!(redlock.settings().quorum(), n / 2 + 1);
        let guard = redlock.lock("even").wait(Wait::No).await.unwrap();
        let quorum = redlock.settings().quorum();
        assert!(guard.votes().granted() >= quorum, "{}", guard.votes());
        guard.release().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_server_under_two_names_is_refused_naming_both() {
    init_tracing();
    let cluster = RedisCluster::start(2);
    let port = cluster.node(0).port();
    let localhost = format!("redis://localhost:{port}");
    let loopback = format!("redis://127.0.0.1:{port}");
    let urls = [localhost.clone(), loopback.clone(), cluster.node(1).url()];
    let err = Redlock::builder(&urls)
        .node_timeout(NODE_TIMEOUT)
        .build()
        .await
        .unwrap_err();
    let Error::Config(ConfigError::SameServer { first, second }) = &err else {
        panic!("expected SameServer, got {err:?}");
    };
    assert_eq!((first, second), (&localhost, &loopback));
    let message = err.to_string();
    assert!(
        message.contains(&localhost) && message.contains(&loopback),
        "{message}"
    );
    assert!(err.is_config());

    // Three distinct servers build.
    let third = RedisCluster::start(1);
    let urls = [localhost, cluster.node(1).url(), third.node(0).url()];
    Redlock::builder(&urls)
        .node_timeout(NODE_TIMEOUT)
        .build()
        .await
        .expect("three servers");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_that_does_not_exist_is_a_config_error_not_a_node_down() {
    init_tracing();
    let cluster = RedisCluster::start(2);
    // `127.0.0.l`: a typo a person makes; `.invalid` never resolves (RFC 2606).
    for typo in ["127.0.0.l", "no-such-node.invalid"] {
        let mut urls = cluster.urls();
        urls.push(format!("redis://{typo}:7001"));
        let err = Redlock::builder(&urls)
            .node_timeout(NODE_TIMEOUT)
            .build()
            .await
            .expect_err("a node that can never count is refused");
        assert!(
            matches!(&err, Error::Config(ConfigError::InvalidNode { node, reason })
                if node.contains(typo) && reason.contains("does not resolve")),
            "{err:?}"
        );
        assert!(err.is_config(), "{err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_may_evict_lock_keys_is_refused_unless_allowed() {
    init_tracing();
    let cluster = RedisCluster::start(3);
    let evicting = cluster.node(1);
    for policy in ["allkeys-lru", "volatile-ttl"] {
        evicting.command(["CONFIG", "SET", "maxmemory-policy", policy]);
        let err = Redlock::builder(cluster.urls())
            .node_timeout(NODE_TIMEOUT)
            .build()
            .await
            .expect_err("an evicting server");
        let shown = err.to_string();
        println!("{shown}");
        let node = format!("127.0.0.1:{}", evicting.port());
        assert!(
            matches!(
                &err,
                Error::Config(ConfigError::EvictingServer { node: n, policy: p })
                    if n.contains(&node) && p == policy
            ) && err.is_config(),
            "{err:?}"
        );
        assert!(
            shown.contains(&format!("maxmemory-policy {policy}"))
                && shown.contains("allow_eviction(true)"),
            "names the policy and the override: {shown}"
        );
    }
    let redlock = Redlock::builder(cluster.urls())
        .node_timeout(NODE_TIMEOUT)
        .allow_eviction(true)
        .build()
        .await
        .expect("allowed");
    let guard = redlock.lock("evictable").wait(Wait::No).await.unwrap();
    guard.release().await;
    evicting.command(["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
    Redlock::builder(cluster.urls())
        .node_timeout(NODE_TIMEOUT)
        .build()
        .await
        .expect("noeviction is safe");
}

/// A server without AOF, or with `appendfsync` other than `always`, may
/// lose the locks it granted when it restarts: refused under
/// `WeakPersistence::Refuse`, naming the server, what it lacks and the fix;
/// AOF with `appendfsync always` is accepted. (Warned of by default:
/// `logging.rs`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_may_lose_locks_at_a_restart_is_refused_when_asked() {
    init_tracing();
    let cluster = RedisCluster::start(3);
    let build = || {
        Redlock::builder(cluster.urls())
            .node_timeout(NODE_TIMEOUT)
            .weak_persistence(WeakPersistence::Refuse)
            .build()
    };
    let refused = |err: Error, lacks: &str| {
        let shown = err.to_string();
        println!("{shown}");
        assert!(
            matches!(&err, Error::Config(ConfigError::WeakPersistence { reason, .. }) if reason.contains(lacks))
                && err.is_config(),
            "{err:?}"
        );
        assert!(
            shown.contains("appendonly yes and appendfsync always"),
            "names the fix: {shown}"
        );
    };
    refused(build().await.expect_err("no AOF"), "appendonly no");
    for node in cluster.nodes() {
        node.persist("yes", "everysec");
    }
    refused(
        build().await.expect_err("fsync every second"),
        "appendfsync everysec",
    );
    for node in cluster.nodes() {
        node.command(["CONFIG", "SET", "appendfsync", "always"]);
    }
    let redlock = build()
        .await
        .expect("AOF with appendfsync always keeps every grant");
    redlock
        .lock("durable")
        .wait(Wait::No)
        .await
        .unwrap()
        .release()
        .await;
}

/// `Redlock::servers`: each server as the last connection found it (what it
/// is, its run id, its uptime, what it keeps), and a restart seen in it: a
/// new run id, counted up from a fresh uptime.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_server_is_reported_as_its_last_connection_found_it() {
    use redlock_tokio::Persistence;
    init_tracing();
    let cluster = RedisCluster::start(3);
    cluster.node(0).persist("yes", "always");
    let redlock = Redlock::builder(cluster.urls())
        .node_timeout(NODE_TIMEOUT)
        .ttl(std::time::Duration::from_secs(1))
        .build()
        .await
        .unwrap();
    let servers = redlock.servers();
    for server in &servers {
        println!("{server}");
    }
    let names: Vec<&str> = servers.iter().map(|s| s.node.as_str()).collect();
    assert_eq!(names, redlock.nodes());
    for server in &servers {
        assert!(server.connected, "{server}");
        let shown = server.server.as_deref().unwrap_or_default();
        assert!(shown.contains(redlock_tests::server().name()), "{server}");
        assert!(
            matches!(&server.run_ids[..], [id] if id.len() == 40),
            "{server}"
        );
        assert!(server.uptime.is_some(), "{server}");
        assert_eq!(server.eviction, None, "{server}");
    }
    assert_eq!(servers[0].persistence, Persistence::Kept);
    assert!(
        matches!(&servers[1].persistence, Persistence::Weak(why) if why.contains("appendonly no")),
        "{}",
        servers[1]
    );
    let before = servers[1].run_ids.clone();
    cluster.node(1).restart();
    // A request to the restarted server finds the connection broken and
    // starts the reconnection; the report follows it.
    let since = std::time::Instant::now();
    while redlock.servers()[1].run_ids == before {
        assert!(
            since.elapsed() < std::time::Duration::from_secs(10),
            "no reconnection seen"
        );
        if let Ok(guard) = redlock.lock("poke").wait(Wait::No).await {
            guard.release().await;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let restarted = &redlock.servers()[1];
    println!("after the restart: {restarted}");
    assert!(restarted.connected, "{restarted}");
    assert_ne!(restarted.run_ids, before);
}
