//! Server addresses: parsing URLs, naming nodes, keeping passwords out of sight.
//!
//! A node's *name* is its canonical address `host:port/db` (or
//! `unix:/path/db`). It is what the core sees in `Config::servers`, so two URLs
//! for the same server and database (`redis://h:6379` and `redis://h:6379/0`)
//! are rejected as duplicates, and it is what errors and logs print. It never
//! carries credentials or TLS options.
//!
//! A node may also be a whole Redis Cluster, given as
//! `redis+cluster://[user:password@]host1:port1,host2:port2,...` (or
//! `valkey+cluster://`): the listed masters are seeds, from which the cluster
//! client learns every shard. Its name is `cluster:` followed by the seeds,
//! lowercased and sorted (`cluster:10.0.0.1:7000,10.0.0.2:7000`).

use redis::{ConnectionAddr, ConnectionInfo};
use redlock_core::ConfigError;

/// The URL schemes of a node that is a whole Redis Cluster.
const CLUSTER_SCHEMES: [&str; 2] = ["redis+cluster://", "valkey+cluster://"];

/// Cluster schemes with TLS, which this version does not support: said
/// plainly rather than "not a Redis URL".
const TLS_CLUSTER_SCHEMES: [&str; 4] = [
    "rediss+cluster://",
    "valkeys+cluster://",
    "redis+cluster+tls://",
    "valkey+cluster+tls://",
];

/// One parsed server: its canonical name and the redis client for it.
pub(crate) struct Server {
    pub(crate) name: String,
    /// The address as the user gave it, password redacted, for messages
    /// that must point at one entry of their list.
    pub(crate) shown: String,
    /// The client of a single master; for a cluster node, of its first
    /// seed (which release notices listen on: a `PUBLISH` on any master of
    /// a cluster reaches the subscribers of every node of it).
    pub(crate) client: redis::Client,
    /// The seeds of a node that is a Redis Cluster.
    pub(crate) cluster: Option<Vec<redis::ConnectionInfo>>,
}

impl Server {
    /// Parses a `redis://`, `rediss://` (TLS), `valkey://`, `valkeys://` or
    /// `redis+unix://` URL.
    pub(crate) fn from_url(url: &str) -> Result<Self, ConfigError> {
        let invalid = |reason: String| ConfigError::InvalidNode {
            node: redact(url),
            reason,
        };
        if TLS_CLUSTER_SCHEMES
            .iter()
            .any(|scheme| url.starts_with(scheme))
        {
            return Err(invalid(
                "cluster nodes take no TLS in this version: use redis+cluster:// \
                 (plain) or plain rediss:// masters"
                    .to_owned(),
            ));
        }
        if let Some(port) = port_out_of_range(url) {
            return Err(invalid(format!(
                "port {port} out of range: a port is 1 to 65535"
            )));
        }
        if let Some(rest) = CLUSTER_SCHEMES
            .iter()
            .find_map(|scheme| url.strip_prefix(scheme))
        {
            return Self::cluster(url, rest).map_err(invalid);
        }
        if url.ends_with("#insecure") && !cfg!(feature = "insecure-tls") {
            return Err(invalid(
                "the #insecure fragment (no certificate check) needs redlock-tokio's \
                 `insecure-tls` feature, off by default: it is for tests only"
                    .to_owned(),
            ));
        }
        let not_a_url = || {
            invalid(
                "not a Redis URL: expected redis://[user:password@]host[:port][/db] \
                 (or rediss:// for TLS)"
                    .to_owned(),
            )
        };
        let parsed = redis::parse_redis_url(url).ok_or_else(not_a_url)?;
        // `redis:/host:port` parses, as a URL without a host whose path is
        // `/host:port`; only Unix sockets have no host.
        if parsed.host_str().is_none_or(str::is_empty) && !parsed.scheme().contains("unix") {
            return Err(not_a_url());
        }
        // The messages of redis' URL errors are fixed texts (no part of the
        // URL), so they cannot leak a password.
        let client = redis::Client::open(url).map_err(|err| invalid(describe(&err)))?;
        Ok(Self {
            shown: redact(url),
            ..Self::from_client(client)
        })
    }

    /// A cluster node from the part of its URL after the scheme:
    /// `[user:password@]host:port,host:port,...`.
    fn cluster(url: &str, rest: &str) -> Result<Self, String> {
        let (user_info, hosts) = match rest.rfind('@') {
            Some(at) => (Some(&rest[..at]), &rest[at + 1..]),
            None => (None, rest),
        };
        let hosts = hosts.strip_suffix('/').unwrap_or(hosts);
        if hosts.contains('/') || hosts.contains('?') || hosts.contains('#') {
            return Err("a cluster node has no database and no options: expected \
                 redis+cluster://[user:password@]host:port,host:port,..."
                .to_owned());
        }
        let mut clients = Vec::new();
        let mut names = Vec::new();
        for host in hosts.split(',') {
            if host.is_empty() {
                return Err("an empty seed address in the list".to_owned());
            }
            let seed = match user_info {
                Some(user_info) => format!("redis://{user_info}@{host}"),
                None => format!("redis://{host}"),
            };
            // Errors of the seed URL are fixed texts: no password in them.
            let client = redis::Client::open(seed.as_str()).map_err(|err| describe(&err))?;
            let name = canonical_name(client.get_connection_info());
            names.push(name.strip_suffix("/0").unwrap_or(&name).to_owned());
            clients.push(client);
        }
        names.sort();
        names.dedup();
        let seeds: Vec<redis::ConnectionInfo> = clients
            .iter()
            .map(|client| client.get_connection_info().clone())
            .collect();
        // Checks the seeds as the cluster client will take them.
        cluster_client(seeds.clone(), std::time::Duration::from_secs(1))
            .map_err(|err| describe(&err))?;
        Ok(Self {
            name: format!("cluster:{}", names.join(",")),
            shown: redact(url),
            client: clients.swap_remove(0),
            cluster: Some(seeds),
        })
    }

    /// Names a client built elsewhere.
    pub(crate) fn from_client(client: redis::Client) -> Self {
        let name = canonical_name(client.get_connection_info());
        Self {
            shown: name.clone(),
            name,
            client,
            cluster: None,
        }
    }

    /// The host name and port to resolve before connecting, for a node
    /// reached over TCP by name (not a cluster, a socket or an address).
    pub(crate) fn host_to_resolve(&self) -> Option<(String, u16)> {
        if self.cluster.is_some() {
            return None;
        }
        match self.client.get_connection_info().addr() {
            ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. }
                if host.parse::<std::net::IpAddr>().is_err() =>
            {
                Some((host.clone(), *port))
            }
            _ => None,
        }
    }

    /// Whether the connection uses TLS.
    pub(crate) fn is_tls(&self) -> bool {
        matches!(
            self.client.get_connection_info().addr(),
            ConnectionAddr::TcpTls { .. }
        )
    }
}

/// The node name a URL stands for (`host:port/db`, `unix:/path/db` or
/// `cluster:seed,seed`), checked as [`Builder::build`](crate::Builder::build)
/// checks it, without connecting: a name, or [`ConfigError::InvalidNode`]
/// with the password redacted. The name never carries credentials or
/// options; two URLs with the same name are the same node.
pub(crate) fn node_name(url: &str) -> Result<String, ConfigError> {
    Server::from_url(url).map(|server| server.name)
}

/// The cluster client of a cluster node's seeds.
pub(crate) fn cluster_client(
    seeds: Vec<redis::ConnectionInfo>,
    connect_timeout: std::time::Duration,
) -> redis::RedisResult<redis::cluster::ClusterClient> {
    redis::cluster::ClusterClient::builder(seeds)
        .connection_timeout(connect_timeout)
        // No response timeout: the core applies its own per-node deadline
        // to every request, and a release past its deadline must stay
        // queued until its shard answers (a request the cluster client
        // timed out would be dropped unwritten, after the acquire it undoes).
        // A request whose caller is gone is dropped by the cluster client.
        // MOVED and ASK during resharding, and a refreshed slot map, each
        // take one retry, at once. TRYAGAIN (a script whose keys a slot
        // migration has split), CLUSTERDOWN and LOADING wait first: a few
        // milliseconds, doubling up to a quarter of a second, 20 times
        // (about 2 s in all). The crate's default waits 1.28 s or more each
        // time, past any per-node timeout: a node answering TRYAGAIN for the
        // 100 ms of a migration would count as silent, and soon as known
        // slow, for every key. Order is kept above the cluster client (see
        // the guide, `docs/cluster.md`, "Retries and order"), so the count
        // does not bear on it.
        .retries(20)
        .min_retry_wait(1)
        .retry_wait_formula(5, 2)
        .max_retry_wait(250)
        .build()
}

/// The port of a `scheme://[user@]host:port[/...]` URL (or of any seed of a
/// cluster node's list) when it is a number past 65535, which the URL
/// parser reports only as "not a URL".
fn port_out_of_range(url: &str) -> Option<u64> {
    let rest = &url[url.find("://")? + 3..];
    let hosts = rest.rsplit_once('@').map_or(rest, |(_, hosts)| hosts);
    let hosts = hosts.split(['/', '?', '#']).next().unwrap_or(hosts);
    hosts.split(',').find_map(|host| {
        let (_, port) = host.rsplit_once(':')?;
        let port: u64 = port.parse().ok()?;
        (port > u64::from(u16::MAX)).then_some(port)
    })
}

fn describe(err: &redis::RedisError) -> String {
    match err.detail() {
        Some(detail) => format!("{} ({detail})", err.category()),
        None => err.to_string(),
    }
}

/// `host:port/db`; IPv6 hosts in brackets; Unix sockets as `unix:path/db`.
///
/// Host names are compared lowercased, otherwise as written: no DNS
/// lookup happens here, so `localhost` and `127.0.0.1` count as two servers.
pub(crate) fn canonical_name(info: &ConnectionInfo) -> String {
    let db = info.redis_settings().db();
    match info.addr() {
        ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
            // Host names are case-insensitive; the URL parser keeps the case
            // of hosts in non-special schemes such as redis://.
            let host = host.to_ascii_lowercase();
            if host.contains(':') {
                format!("[{host}]:{port}/{db}")
            } else {
                format!("{host}:{port}/{db}")
            }
        }
        ConnectionAddr::Unix(path) => format!("unix:{}/{db}", path.display()),
        // A future address kind: its Display has no credentials either.
        other => format!("{other}/{db}"),
    }
}

/// The URL with its password (and, when no username is separated from it,
/// the whole user info) replaced by `***`.
///
/// Works on text that is not a valid URL too, since it is used to report
/// URLs that failed to parse: everything between `://` and the last `@` is
/// treated as user info, which may over-redact but never leaks.
pub(crate) fn redact(url: &str) -> String {
    // A scheme is a letter, then letters, digits, `+`, `-` or `.` (RFC 3986);
    // text before a later `://` is not one, and may hold a password
    // (`user:pw@host://`).
    let is_scheme = |scheme: &str| {
        scheme.starts_with(|c: char| c.is_ascii_alphabetic())
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
    };
    let Some(scheme_end) = url.find("://").filter(|&end| is_scheme(&url[..end])) else {
        // Not URL-shaped: a password could be anywhere in it.
        return if url.contains('@') {
            "*** (unparsable, redacted)".to_owned()
        } else {
            url.to_owned()
        };
    };
    let rest_start = scheme_end + 3;
    let rest = &url[rest_start..];
    let Some(at) = rest.rfind('@') else {
        return url.to_owned();
    };
    let user_info = &rest[..at];
    let redacted_info = match user_info.find(':') {
        Some(colon) => format!("{}:***", &user_info[..colon]),
        None => "***".to_owned(),
    };
    format!("{}{}{}", &url[..rest_start], redacted_info, &rest[at..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(feature = "tls")]
    #[test]
    fn tls_urls_parse_to_the_same_name() {
        let server = Server::from_url("rediss://user:secret@example.com:6380/1").unwrap();
        assert_eq!(server.name, "example.com:6380/1");
        assert!(server.is_tls());
        #[cfg(feature = "insecure-tls")]
        {
            let insecure = Server::from_url("rediss://example.com:6380/#insecure").unwrap();
            assert_eq!(insecure.name, "example.com:6380/0");
        }
        assert!(!Server::from_url("redis://example.com").unwrap().is_tls());
    }

    #[test]
    fn cluster_urls() {
        let server = Server::from_url("redis+cluster://u:pw@Host-B:7001,host-a:7000/").unwrap();
        assert!(server.cluster.is_some());
        assert!(!server.shown.contains("pw"), "{}", server.shown);
    }

    #[test]
    fn redaction() {
        assert_eq!(redact("redis://h:1"), "redis://h:1");
        assert_eq!(redact("redis://u:pw@h:1/0"), "redis://u:***@h:1/0");
        assert_eq!(redact("redis://:pw@h:1"), "redis://:***@h:1");
        assert_eq!(redact("redis://onlyuser@h"), "redis://***@h");
        assert_eq!(redact("redis://u:p@ss/w@rd@h"), "redis://u:***@h");
        assert_eq!(redact("u:pw@h"), "*** (unparsable, redacted)");
        // Found by the server_url fuzz target: a `://` after the user info
        // is no scheme, and the password showed.
        assert_eq!(redact("u:pw@h://"), "*** (unparsable, redacted)");
        assert_eq!(redact("u:pw@h:1/redis://x"), "*** (unparsable, redacted)");
        assert_eq!(redact("redis+unix:///tmp/s"), "redis+unix:///tmp/s");
    }
}
