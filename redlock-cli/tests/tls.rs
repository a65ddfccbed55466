//! `rediss://` servers from a private CA that require a client certificate:
//! `--tls-ca`, `--tls-cert` and `--tls-key`, and the errors without them.

mod support;

use redlock_tests::{NodeOptions, RedisCluster, RedisNode, TestCerts};
use support::{assert_absent, redlock, run};

fn path(path: &std::path::Path) -> &str {
    path.to_str().expect("a UTF-8 temp path")
}

#[test]
fn exec_and_status_over_mutual_tls_with_a_private_ca() {
    let server = redlock_tests::server();
    if let Err(why) = server.tls_support() {
        println!("not run on {server}: needs a TLS server, and this one is {why}");
        return;
    }
    let certs = TestCerts::generate();
    let cluster = RedisCluster::start_with(
        3,
        &NodeOptions {
            tls: Some(certs.server_options(true)),
            ..NodeOptions::default()
        },
    );
    let nodes = cluster
        .nodes()
        .iter()
        .map(RedisNode::tls_url)
        .collect::<Vec<_>>()
        .join(",");
    let (ca, cert, key) = (certs.ca_cert(), certs.client_cert(), certs.client_key());
    let tls = [
        "--tls-ca",
        path(&ca),
        "--tls-cert",
        path(&cert),
        "--tls-key",
        path(&key),
    ];
    let common = ["--nodes", nodes.as_str(), "--connect-timeout", "5s"];

    // The command runs while the lock is held: its key is on the nodes.
    let exec = run(redlock().arg("exec").args(common).args(tls).args([
        "k",
        "--",
        "sh",
        "-c",
        "test -n \"$REDLOCK_VALUE\"",
    ]));
    exec.assert_code(0);
    assert_absent(&cluster, "k");

    // The CA from the environment, as the other options.
    let status = run(redlock()
        .arg("status")
        .args(common)
        .args(&tls[2..])
        .arg("k")
        .env("REDLOCK_TLS_CA", &ca));
    status.assert_code(0);
    assert!(status.stdout.contains("free on every node"), "{status:#?}");

    // Without the client certificate: the servers refuse, a config error.
    let refused = run(redlock()
        .arg("status")
        .args(common)
        .args(&tls[..2])
        .args(["--json", "k"]));
    refused.assert_code(2);
    let [error] = &refused.stdout_json()[..] else {
        panic!("one JSON object expected: {refused:#?}");
    };
    assert_eq!(error["kind"], "tls", "{error}");

    // An unreadable CA file: a config error naming it.
    let missing = certs.dir().join("missing.pem");
    let unreadable =
        run(redlock()
            .arg("status")
            .args(common)
            .args(["--tls-ca", path(&missing), "k"]));
    unreadable.assert_code(2);
    assert!(unreadable.stderr.contains("missing.pem"), "{unreadable:#?}");
}
