//! Node URLs as a user meets them, through `Redlock::node_name`: the
//! canonical name of a node, and the `ConfigError` of a bad URL, which says
//! what is wrong and never shows the password. No server.

use redlock_tokio::{ConfigError, Redlock};

fn name(url: &str) -> String {
    Redlock::node_name(url).unwrap()
}

fn reason(url: &str) -> String {
    match Redlock::node_name(url) {
        Err(ConfigError::InvalidNode { reason, .. }) => reason,
        other => panic!("{url}: {other:?}"),
    }
}

#[test]
fn canonical_names() {
    assert_eq!(name("redis://localhost"), "localhost:6379/0");
    assert_eq!(name("redis://localhost:6379/0"), "localhost:6379/0");
    assert_eq!(name("redis://LocalHost:7001/3"), "localhost:7001/3");
    assert_eq!(
        name("redis://user:secret@10.0.0.1:7001/2"),
        "10.0.0.1:7001/2"
    );
    assert_eq!(name("redis://:secret@[::1]:7001"), "[::1]:7001/0");
    assert_eq!(
        name("redis+unix:///tmp/redis.sock"),
        "unix:/tmp/redis.sock/0"
    );
    #[cfg(feature = "tls")]
    assert_eq!(
        name("rediss://user:secret@example.com:6380/1"),
        "example.com:6380/1"
    );
}

#[test]
fn cluster_names() {
    let name_of = name("redis+cluster://u:pw@Host-B:7001,host-a:7000/");
    assert_eq!(name_of, "cluster:host-a:7000,host-b:7001");
    assert_eq!(name("valkey+cluster://host-a:7000,host-b:7001"), name_of);
    for bad in [
        "redis+cluster://u:hunter2@h:1,,h:2",
        "redis+cluster://u:hunter2@h:1/2",
        "redis+cluster://u:hunter2@h:99999",
    ] {
        let err = Redlock::node_name(bad).err().unwrap();
        assert!(matches!(err, ConfigError::InvalidNode { .. }), "{bad}");
        assert!(!format!("{err} {err:?}").contains("hunter2"), "{err}");
    }
}

#[test]
fn bad_urls_say_what_is_wrong() {
    for url in [
        "redis://h:99999",
        "redis://u:pw@h:70000/1",
        "redis+cluster://h:1,h:123456",
    ] {
        assert!(
            reason(url).contains("out of range"),
            "{url}: {}",
            reason(url)
        );
    }
    for url in ["rediss+cluster://h:1,h:2", "valkeys+cluster://h:1"] {
        assert!(
            reason(url).contains("cluster nodes take no TLS in this version"),
            "{url}"
        );
    }
    assert!(reason("http://h").contains("not a Redis URL"));
    // A slash short: a URL without a host, not the redis crate's
    // "Missing hostname - InvalidClientConfig".
    let missing = reason("redis:/127.0.0.1:7601");
    assert!(
        missing.contains("not a Redis URL: expected redis://"),
        "{missing}"
    );
    assert!(Redlock::node_name("redis+unix:///tmp/redis.sock").is_ok());
}

#[cfg(all(feature = "tls", not(feature = "insecure-tls")))]
#[test]
fn the_insecure_fragment_needs_its_feature() {
    assert!(reason("rediss://example.com:6380/#insecure").contains("insecure-tls"));
}

#[test]
fn invalid_urls_are_config_errors_without_the_password() {
    for url in [
        "http://u:hunter2@h:1",
        "redis://u:hunter2@h:1/notadb",
        "redis://u:hunter2@:1",
        "nonsense hunter2@",
        "redis://u:hunter2@h:99999",
    ] {
        let err = Redlock::node_name(url).err().unwrap();
        let ConfigError::InvalidNode { node, reason } = &err else {
            panic!("{url}: {err:?}");
        };
        assert!(!node.contains("hunter2"), "{node}");
        assert!(!reason.contains("hunter2"), "{reason}");
        assert!(!format!("{err} {err:?}").contains("hunter2"));
    }
}
