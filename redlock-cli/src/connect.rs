//! Building the client from the common options.

use redlock_tokio::{Builder, ConfigError, Error, Redlock, WeakPersistence};

use crate::cli::Common;
use crate::failure::Failure;

/// The node URLs, checked for what the client cannot tell: none at all,
/// empty entries. (An even count is the client's to refuse, as for every
/// user of the library.)
fn nodes(common: &Common) -> Result<Vec<String>, Failure> {
    let nodes = join_cluster_seeds(common.nodes.iter().map(|node| node.trim()));
    if nodes.iter().all(String::is_empty) {
        return Err(Failure::usage(
            "no nodes: give --nodes URL[,URL...] or set REDLOCK_NODES \
             (redis://host:port, one per independent Redis or Valkey master; 3 or 5 of them)",
        ));
    }
    if nodes.iter().any(String::is_empty) {
        return Err(Failure::usage(
            "an empty entry in the node list (two commas in a row, or a trailing comma?)",
        ));
    }
    Ok(nodes)
}

/// The list split on commas, with a cluster node's seeds put back
/// together: `redis+cluster://h1:p1,h2:p2` (or `valkey+cluster://`) is one
/// node, so the entries without a scheme that follow a cluster URL are more
/// of its seeds.
fn join_cluster_seeds<'a>(entries: impl Iterator<Item = &'a str>) -> Vec<String> {
    let mut nodes: Vec<String> = Vec::new();
    for entry in entries {
        match nodes.last_mut() {
            Some(last)
                if !entry.is_empty()
                    && !entry.contains("://")
                    && (last.starts_with("redis+cluster://")
                        || last.starts_with("valkey+cluster://")) =>
            {
                last.push(',');
                last.push_str(entry);
            }
            _ => nodes.push(entry.to_owned()),
        }
    }
    nodes
}

/// Validates the options and connects, with `configure` adding what the
/// subcommand needs (TTL, retries). Nodes that are down do not fail this;
/// they count as failed in the rounds that follow.
pub(crate) async fn connect(
    common: &Common,
    configure: impl FnOnce(Builder) -> Builder,
) -> Result<Redlock, Failure> {
    let nodes = nodes(common)?;
    let mut builder = Redlock::builder(&nodes)
        .allow_even_nodes(common.allow_even)
        .require_connected(common.require_nodes.unwrap_or(0))
        .allow_eviction(common.allow_eviction)
        .weak_persistence(if common.refuse_weak_persistence {
            WeakPersistence::Refuse
        } else {
            WeakPersistence::Warn
        })
        .wait_for_aof(common.wait_for_aof)
        .key_prefix(common.key_prefix.as_bytes())
        .connect_timeout(common.connect_timeout);
    if let Some(timeout) = common.node_timeout {
        builder = builder.node_timeout(timeout);
    }
    if let Some(ca) = &common.tls_ca {
        builder = builder.tls_ca_file(ca);
    }
    if let (Some(cert), Some(key)) = (&common.tls_cert, &common.tls_key) {
        builder = builder.tls_client_cert(cert, key);
    }
    configure(builder).build().await.map_err(|error| {
        let mut failure = Failure::from_error(&error, crate::failure::BUSY);
        // The library names its builder option; the command line its flag.
        match error {
            Error::Config(ConfigError::EvenNodes { .. }) => {
                failure.message = failure.message.replace(
                    " (allow_even_nodes(true) accepts them anyway)",
                    "; pass --allow-even to use them anyway",
                );
            }
            Error::Config(ConfigError::WeakPersistence { .. }) => {
                failure.message = failure.message.replace(
                    ", or accept the risk with weak_persistence(WeakPersistence::Warn)",
                    ", or leave out --refuse-weak-persistence",
                );
            }
            Error::Config(ConfigError::NoWaitAof { .. }) => {
                failure.message = failure.message.replace(
                    "(turn wait_for_aof off to count votes without it)",
                    "(leave out --wait-for-aof to count votes without it)",
                );
            }
            Error::Config(ConfigError::EvictingServer { .. }) => {
                failure.message = failure
                    .message
                    .replace("allow_eviction(true)", "--allow-eviction");
            }
            _ => {}
        }
        failure
    })
}

#[cfg(test)]
mod tests {
    use super::join_cluster_seeds;

    #[test]
    fn a_cluster_node_keeps_its_seeds() {
        let split = "redis://a:1,redis+cluster://b:1,b:2,b:3,redis://c:1,valkey+cluster://d:1,d:2";
        assert_eq!(
            join_cluster_seeds(split.split(',')),
            [
                "redis://a:1",
                "redis+cluster://b:1,b:2,b:3",
                "redis://c:1",
                "valkey+cluster://d:1,d:2"
            ]
        );
        // Only after a cluster URL: elsewhere a bare address stays an entry
        // of its own (and the client refuses it), and empty entries stay.
        assert_eq!(
            join_cluster_seeds("redis://a:1,b:2,,redis://c".split(',')),
            ["redis://a:1", "b:2", "", "redis://c"]
        );
    }
}
