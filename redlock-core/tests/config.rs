//! Configuration is validated once, into typed errors with clear messages.

use std::time::Duration;

use proptest::prelude::*;
use redlock_core::{Config, ConfigError, MAX_TTL_MS};

fn nodes(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("10.0.0.{i}:6379")).collect()
}

fn with(f: impl FnOnce(&mut Config)) -> Result<redlock_core::Settings, ConfigError> {
    let mut config = Config::new(nodes(3));
    f(&mut config);
    config.validate()
}

#[test]
fn bad_configurations_are_typed_errors() {
    assert_eq!(with(|c| c.nodes.clear()).unwrap_err(), ConfigError::NoNodes);
    let duplicate = with(|c| c.nodes.push("10.0.0.1:6379".into())).unwrap_err();
    assert!(
        matches!(duplicate, ConfigError::DuplicateNode { ref node } if node == "10.0.0.1:6379")
    );
    assert_eq!(
        with(|c| c.ttl = Duration::ZERO).unwrap_err(),
        ConfigError::ZeroTtl
    );
    assert_eq!(
        with(|c| c.ttl = Duration::from_micros(999)).unwrap_err(),
        ConfigError::ZeroTtl
    );
    assert!(matches!(
        with(|c| c.ttl = Duration::from_millis(MAX_TTL_MS + 1)).unwrap_err(),
        ConfigError::TtlTooLarge { .. }
    ));
    assert!(matches!(
        with(|c| c.ttl = Duration::MAX).unwrap_err(),
        ConfigError::TtlTooLarge { .. }
    ));
    // 2 ms TTL: the fixed 2 ms of drift leaves nothing.
    assert!(matches!(
        with(|c| c.ttl = Duration::from_millis(2)).unwrap_err(),
        ConfigError::TtlBelowDrift { .. }
    ));
    for factor in [-0.1, 1.0, 2.0, f64::NAN, f64::INFINITY] {
        assert!(
            matches!(
                with(|c| c.drift_factor = factor).unwrap_err(),
                ConfigError::DriftFactor { .. }
            ),
            "{factor}"
        );
    }
    assert_eq!(
        with(|c| c.node_timeout = Some(Duration::ZERO)).unwrap_err(),
        ConfigError::ZeroNodeTimeout
    );
    assert!(matches!(
        with(|c| c.node_timeout = Some(Duration::from_secs(10))).unwrap_err(),
        ConfigError::NodeTimeoutNotBelowTtl { .. }
    ));
    assert!(matches!(
        with(|c| c.value_len = 8).unwrap_err(),
        ConfigError::ValueLength { len: 8 }
    ));
    assert_eq!(
        with(|c| c.acquire_deadline = Some(Duration::ZERO)).unwrap_err(),
        ConfigError::ZeroDeadline
    );
}

#[test]
fn messages_explain_themselves() {
    let message = with(|c| c.nodes.push("10.0.0.0:6379".into()))
        .unwrap_err()
        .to_string();
    assert!(
        message.contains("10.0.0.0:6379") && message.contains("twice"),
        "{message}"
    );
    let message = with(|c| c.ttl = Duration::from_millis(2))
        .unwrap_err()
        .to_string();
    assert!(message.contains("no validity"), "{message}");
}

#[test]
fn defaults_follow_the_spec() {
    let settings = Config::new(nodes(5)).validate().unwrap();
    assert_eq!(settings.quorum(), 3);
    assert_eq!(settings.default_ttl().as_millis(), 10_000);
    assert_eq!(
        settings.drift(settings.default_ttl()),
        Duration::from_millis(102)
    );
    assert_eq!(settings.node_timeout(), Duration::from_millis(50));
    assert_eq!(settings.value_len(), 20);
    // Even N is refused unless allowed, and then works (and wastes a
    // node): quorum 3 of 4.
    for n in [2, 4, 6] {
        assert_eq!(
            Config::new(nodes(n)).validate().unwrap_err(),
            ConfigError::EvenNodes { count: n }
        );
    }
    let even = Config::new(nodes(4)).allow_even_nodes(true);
    assert_eq!(even.validate().unwrap().quorum(), 3);
    let message = Config::new(nodes(4)).validate().unwrap_err().to_string();
    assert!(
        message.contains("4 nodes") && message.contains("odd"),
        "{message}"
    );
    // Short TTLs get a short per-node timeout rather than an error.
    let short = with(|c| c.ttl = Duration::from_millis(300)).unwrap();
    assert_eq!(short.node_timeout(), Duration::from_millis(10));
    let tiny = with(|c| c.ttl = Duration::from_millis(8)).unwrap();
    assert_eq!(tiny.node_timeout(), Duration::from_millis(4));
}

/// The message of an even count compares it with one node fewer, and
/// counts that in words: "1 node", not "1 nodes".
#[test]
fn an_even_count_names_one_node_fewer_in_words() {
    let two = ConfigError::EvenNodes { count: 2 }.to_string();
    assert!(two.starts_with("2 nodes given"), "{two}");
    assert!(two.contains("quorum of 2"), "{two}");
    assert!(two.contains("than 1 node would"), "{two}");
    let four = ConfigError::EvenNodes { count: 4 }.to_string();
    assert!(four.contains("than 3 nodes would"), "{four}");
}

#[test]
fn a_ttl_that_leaves_no_usable_validity_is_refused() {
    // 3 ms: drift 2.03 ms and a per-node timeout of 1.5 ms leave nothing
    // (it used to be granted with "validity 0ms", then lost at once).
    for ttl in [3, 5] {
        let error = with(|c| c.ttl = Duration::from_millis(ttl)).unwrap_err();
        assert!(
            matches!(error, ConfigError::TtlTooShort { .. }),
            "{ttl} ms: {error:?}"
        );
        let message = error.to_string();
        assert!(message.contains("too short"), "{message}");
    }
    // Per-call TTLs meet the same floor.
    let settings = Config::new(nodes(3)).validate().unwrap();
    assert!(matches!(
        settings.ttl(Duration::from_millis(4)),
        Err(ConfigError::TtlTooShort { .. })
    ));
    assert!(settings.ttl(Duration::from_millis(8)).is_ok());
}

#[test]
fn absurd_ttls_are_refused() {
    let thirty_days = Duration::from_secs(30 * 24 * 3600);
    assert_eq!(MAX_TTL_MS, 2_592_000_000);
    assert!(with(|c| c.ttl = thirty_days).is_ok());
    let error = with(|c| c.ttl = thirty_days + Duration::from_millis(1)).unwrap_err();
    assert!(
        matches!(error, ConfigError::TtlTooLarge { .. }),
        "{error:?}"
    );
    assert!(error.to_string().contains("30 days"), "{error}");
    // `100000000y`, as the CLI once accepted silently.
    let years = Duration::from_secs(100_000_000 * 365 * 24 * 3600);
    assert!(matches!(
        with(|c| c.ttl = years).unwrap_err(),
        ConfigError::TtlTooLarge { .. }
    ));
}

#[test]
fn per_call_ttls_are_checked_too() {
    let settings = Config::new(nodes(3)).validate().unwrap();
    assert!(settings.ttl(Duration::from_secs(60)).is_ok());
    assert_eq!(
        settings.ttl(Duration::ZERO).unwrap_err(),
        ConfigError::ZeroTtl
    );
    let fixed = with(|c| c.node_timeout = Some(Duration::from_millis(40))).unwrap();
    assert!(matches!(
        fixed.ttl(Duration::from_millis(30)).unwrap_err(),
        ConfigError::NodeTimeoutNotBelowTtl { .. }
    ));
    // A shorter per-call TTL with a derived timeout gets a shorter timeout.
    let ttl = settings.ttl(Duration::from_millis(100)).unwrap();
    assert_eq!(settings.node_timeout_for(ttl), Duration::from_millis(10));
}

proptest! {
    /// Validation never panics, and whatever it accepts has positive validity
    /// and a per-node timeout strictly between zero and the TTL.
    #[test]
    fn accepted_settings_are_usable(
        n in 0usize..8,
        ttl_ms in 0u64..100_000,
        factor in -0.5f64..1.5,
        timeout_ms in proptest::option::of(0u64..200_000),
    ) {
        let mut config = Config::new(nodes(n))
            .ttl(Duration::from_millis(ttl_ms))
            .drift_factor(factor);
        // `None` (derive it from the TTL) has no setter.
        config.node_timeout = timeout_ms.map(Duration::from_millis);
        if let Ok(settings) = config.validate() {
            let ttl = settings.default_ttl();
            prop_assert!(settings.drift(ttl) < ttl.as_duration());
            let timeout = settings.node_timeout_for(ttl);
            prop_assert!(!timeout.is_zero() && timeout < ttl.as_duration());
            prop_assert!(n >= 1);
        }
    }
}

/// Validated settings report what was configured, in the nodes' order.
/// (Written for `make mutants`: no test read these accessors back.)
#[test]
fn settings_report_what_was_configured() {
    let settings = Config::new(nodes(5))
        .drift_factor(0.02)
        .key_prefix(b"lock:")
        .validate()
        .unwrap();
    assert_eq!(settings.nodes(), nodes(5).as_slice());
    assert_eq!(settings.node_count(), 5);
    assert_eq!(settings.drift_factor().to_bits(), 0.02f64.to_bits());
    assert_eq!(settings.key_prefix(), b"lock:");
    assert_eq!(settings.key(b"job").as_bytes(), b"lock:job");

    let plain = Config::new(nodes(3)).validate().unwrap();
    assert_eq!(plain.key_prefix(), b"");
    assert_eq!(plain.drift_factor().to_bits(), 0.01f64.to_bits());
}

/// The largest TTL is accepted, one millisecond more is not.
#[test]
fn the_largest_ttl_is_accepted() {
    let settings = Config::new(nodes(3)).validate().unwrap();
    let largest = settings.ttl(Duration::from_millis(MAX_TTL_MS)).unwrap();
    assert_eq!(largest.as_millis(), MAX_TTL_MS);
    assert!(matches!(
        settings.ttl(Duration::from_millis(MAX_TTL_MS + 1)),
        Err(ConfigError::TtlTooLarge { .. })
    ));
}

/// A waiter's mark lives the longest retry wait plus two per-node
/// timeouts, plus the drift allowance (1% + 2 ms), as its documentation
/// says; a fair waiter's queue entry, two retry waits and two per-node
/// timeouts, within the lock's TTL.
#[test]
fn waiters_marks_and_queue_entries_live_as_documented() {
    use rand::SeedableRng;
    use redlock_core::{Acquisition, Attempts, LockKind, LockSpec, RetryConfig};
    let node_timeout = Duration::from_millis(50);
    let settings = Config::new(nodes(3))
        .node_timeout(node_timeout)
        .retry(
            RetryConfig::default()
                .delay(Duration::from_millis(200))
                .jitter(Duration::from_millis(100)),
        )
        .validate()
        .unwrap();
    // 200 + 100 + 2 x 50 = 400 ms, plus 4 ms (1%) and 2 ms.
    assert_eq!(settings.waiters_mark_ttl(node_timeout).as_millis(), 406);

    let settings = std::sync::Arc::new(settings);
    let fair = Acquisition::with_spec(
        settings.clone(),
        LockSpec::Fair(b"printer"),
        settings.default_ttl(),
        Attempts::Once,
        std::time::Instant::now(),
        rand::rngs::StdRng::seed_from_u64(1),
    )
    .unwrap();
    let LockKind::Fair { entry, .. } = fair.kind() else {
        panic!("a fair lock: {:?}", fair.kind());
    };
    // (200 + 100 + 50) x 2.
    assert_eq!(entry.as_millis(), 700);
}

/// The servers reached at start that the client refuses, by its settings:
/// one server under two names, eviction, weak persistence, an AOF that
/// cannot be waited for; the first refusal in node order, and nothing of a
/// node not reached.
#[test]
fn servers_are_refused_at_start_as_the_settings_say() {
    use redlock_core::{Connected, WeakPersistence};
    let server = |id: &str| Connected {
        run_ids: vec![id.to_owned()],
        ..Connected::default()
    };
    let check = |config: Config, servers: &[(&str, Option<&Connected>)]| {
        config.validate().unwrap().check_servers(servers)
    };
    let three = || Config::new(["a", "b", "c"]);
    let (one, two) = (server("1"), server("2"));
    // A cluster node's masters are one node: its own run ids twice are no
    // second server.
    let shards = Connected {
        run_ids: vec!["3".to_owned(), "4".to_owned(), "3".to_owned()],
        ..Connected::default()
    };
    let all = [("a", Some(&one)), ("b", Some(&two)), ("c", Some(&shards))];
    assert_eq!(check(three(), &all), Ok(()));
    // A shard of a cluster node listed again as a plain node.
    let shard = server("4");
    let twice = [("a", Some(&shards)), ("b", None), ("c", Some(&shard))];
    assert_eq!(
        check(three(), &twice),
        Err(ConfigError::SameServer {
            first: "a".to_owned(),
            second: "c".to_owned()
        })
    );

    let evicting = Connected {
        evicting: Some("allkeys-lru".to_owned()),
        ..server("5")
    };
    let servers = [("a", Some(&one)), ("b", Some(&evicting)), ("c", None)];
    assert_eq!(
        check(three(), &servers),
        Err(ConfigError::EvictingServer {
            node: "b".to_owned(),
            policy: "allkeys-lru".to_owned()
        })
    );
    assert_eq!(check(three().allow_eviction(true), &servers), Ok(()));

    let weak = Connected {
        weak_persistence: Some("appendonly no".to_owned()),
        ..server("6")
    };
    let servers = [("a", None), ("b", Some(&one)), ("c", Some(&weak))];
    assert_eq!(check(three(), &servers), Ok(()), "said, not refused");
    let refusing = three().weak_persistence(WeakPersistence::Refuse);
    assert_eq!(
        check(refusing, &servers),
        Err(ConfigError::WeakPersistence {
            node: "c".to_owned(),
            reason: "appendonly no".to_owned()
        })
    );

    let old = Connected {
        no_waitaof: Some("Redis 7.0.15 has no WAITAOF".to_owned()),
        ..server("7")
    };
    let servers = [("a", Some(&old)), ("b", Some(&evicting)), ("c", None)];
    assert!(
        matches!(
            check(three(), &servers),
            Err(ConfigError::EvictingServer { .. })
        ),
        "WAITAOF matters only where it is waited for"
    );
    assert!(matches!(
        check(three().wait_for_aof(true), &servers),
        Err(ConfigError::NoWaitAof { node, .. }) if node == "a"
    ));
    // Not reached: not checked.
    let servers = [("a", None), ("b", None), ("c", None)];
    assert_eq!(check(three().wait_for_aof(true), &servers), Ok(()));
}

/// A cluster node is what its masters are together: what every one can do,
/// every run id, the youngest, the first that may evict or lose locks
/// (named), its persistence known only where every master's is, and never
/// waited for on its AOF.
#[test]
fn a_cluster_node_is_what_its_masters_are_together() {
    use redlock_core::Connected;
    let master = |version: &str, run: &str, aof: u8, policy: &str, up: u64| {
        Connected::from_info(
            Some(&format!(
                "# Server\r\nredis_version:{version}\r\nrun_id:{run}\r\nuptime_in_seconds:{up}\r\n"
            )),
            Some(&format!("# Memory\r\nmaxmemory_policy:{policy}\r\n")),
            Some(&format!("# Persistence\r\naof_enabled:{aof}\r\n")),
            Some("always"),
        )
    };
    let new = master("7.2.4", "a", 1, "noeviction", 50);
    assert_eq!(
        (new.weak_persistence.clone(), new.no_waitaof.clone()),
        (None, None)
    );
    let found = Connected::of_cluster([
        ("10.0.0.1:7000".to_owned(), new.clone()),
        (
            "10.0.0.2:7000".to_owned(),
            master("7.0.15", "b", 0, "allkeys-lru", 20),
        ),
    ]);
    assert_eq!(found.facts.to_string(), "Redis 7.0.15");
    assert_eq!(found.run_ids, ["a", "b"]);
    assert_eq!(found.uptime, Some(Duration::from_secs(20)));
    assert_eq!(found.evicting.as_deref(), Some("allkeys-lru"));
    assert_eq!(
        found.weak_persistence.as_deref(),
        Some("10.0.0.2:7000: appendonly no: a restart comes back without the locks it granted")
    );
    assert!(found.no_waitaof.unwrap().contains("Redis Cluster"));
    assert!(found.persistence_read);

    let unread = Connected::from_info(Some("redis_version:7.2.4\r\n"), None, None, None);
    let found = Connected::of_cluster([("a".to_owned(), new), ("b".to_owned(), unread)]);
    assert!(!found.persistence_read, "one master's persistence unknown");
    assert_eq!(found.weak_persistence, None);
    let none = Connected::of_cluster([]);
    assert_eq!(
        (none.facts.to_string(), none.run_ids, none.persistence_read),
        ("unknown server".to_owned(), vec![], false)
    );
}
