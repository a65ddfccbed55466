//! Building the client from the common options.

use redlock_tokio::{Builder, ConfigError, Error, Redlock};

use crate::cli::Common;
use crate::failure::Failure;

/// The server URLs, checked for what the client cannot tell: none at all,
/// empty entries. (An even count is the client's to refuse, as for every
/// user of the library.)
fn servers(common: &Common) -> Result<Vec<String>, Failure> {
    let servers: Vec<String> = common
        .servers
        .iter()
        .map(|server| server.trim().to_owned())
        .collect();
    if servers.iter().all(String::is_empty) {
        return Err(Failure::usage(
            "no servers: give --servers URL[,URL...] or set REDLOCK_SERVERS \
             (redis://host:port, one per independent Redis master; 3 or 5 of them)",
        ));
    }
    if servers.iter().any(String::is_empty) {
        return Err(Failure::usage(
            "an empty entry in the server list (two commas in a row, or a trailing comma?)",
        ));
    }
    Ok(servers)
}

/// Validates the options and connects, with `configure` adding what the
/// subcommand needs (TTL, retries). Nodes that are down do not fail this;
/// they count as failed in the rounds that follow.
pub(crate) async fn connect(
    common: &Common,
    configure: impl FnOnce(Builder) -> Builder,
) -> Result<Redlock, Failure> {
    let servers = servers(common)?;
    let mut builder = Redlock::builder(&servers)
        .allow_even_nodes(common.allow_even)
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
        if let Error::Config(ConfigError::EvenServers { .. }) = error {
            failure
                .message
                .push_str("; pass --allow-even to use them anyway");
        }
        failure
    })
}
