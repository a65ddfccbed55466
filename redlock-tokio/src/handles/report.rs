//! What the client knows of each server from its last connection
//! ([`Redlock::servers`](crate::Redlock::servers)): what it is, since when it
//! runs, and what it keeps.

use std::fmt;
use std::time::Duration;

/// One server as the client's last connection to it found it. No request
/// is sent to make it: everything is read when the client connects
/// (`INFO server`, `INFO persistence`, `INFO memory`, `CONFIG GET
/// appendfsync`), and the uptime is counted on from there.
///
/// ```no_run
/// # async fn example() -> Result<(), redlock_tokio::Error> {
/// let redlock = redlock_tokio::Redlock::builder(["redis://127.0.0.1:7001"]).build().await?;
/// for server in redlock.servers() {
///     // 127.0.0.1:7001/0: Valkey 9.1.2, up 3h 2m 5s, run id 79163465ae2b,
///     // may lose locks at a restart (appendonly no: ...)
///     println!("{server}");
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServerReport {
    /// The node, `host:port/db` (as in [`Redlock::nodes`](crate::Redlock::nodes)).
    pub node: String,
    /// Whether a connection is up (as far as the last request could tell).
    pub connected: bool,
    /// What the server said it is (`Redis 7.0.15`, `Valkey 9.1.2`); `None`
    /// before a first connection, or where it did not say.
    pub server: Option<String>,
    /// Its `run_id`: another one after a restart (a cluster node: one per
    /// master).
    pub run_ids: Vec<String>,
    /// How long it has been up: its `uptime_in_seconds` at the last
    /// connection, counted on since (a cluster node: its youngest master).
    pub uptime: Option<Duration>,
    /// Whether it keeps what it acknowledged across a restart.
    pub persistence: Persistence,
    /// Its `maxmemory-policy`, where it may evict lock keys (anything but
    /// `noeviction`).
    pub eviction: Option<String>,
}

/// What a server keeps across a restart, as its last connection read it
/// ([`Connected::weak_persistence`](redlock_core::Connected::weak_persistence)).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Persistence {
    /// AOF with `appendfsync always` (or unread `appendfsync`): it keeps
    /// every grant it acknowledged, as far as its disk does.
    Kept,
    /// It may lose locks it granted: why, in words.
    Weak(String),
    /// Not known: never connected, or `INFO persistence` refused.
    Unknown,
}

impl fmt::Display for ServerReport {
    /// `127.0.0.1:7001/0: Valkey 9.1.2, up 3h 2m 5s, run id 79163465ae2b,
    /// keeps what it acknowledged (AOF, appendfsync always)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.node)?;
        if !self.connected {
            f.write_str("not connected; last seen as ")?;
        }
        f.write_str(self.server.as_deref().unwrap_or("unknown server"))?;
        if let Some(uptime) = self.uptime {
            write!(f, ", up {}", Uptime(uptime))?;
        }
        for run_id in &self.run_ids {
            // By characters: a server that is not Redis may send any text.
            let short: String = run_id.chars().take(12).collect();
            write!(f, ", run id {short}")?;
        }
        match &self.persistence {
            Persistence::Kept => {
                f.write_str(", keeps what it acknowledged (AOF, appendfsync always)")?
            }
            Persistence::Weak(reason) => write!(f, ", may lose locks at a restart ({reason})")?,
            Persistence::Unknown => f.write_str(", persistence unknown")?,
        }
        if let Some(policy) = &self.eviction {
            write!(f, ", may evict lock keys (maxmemory-policy {policy})")?;
        }
        Ok(())
    }
}

/// An uptime in whole seconds: `2d 3h 0m 5s`, `4m 0s`, `12s`.
struct Uptime(Duration);

impl fmt::Display for Uptime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let seconds = self.0.as_secs();
        let parts = [
            (seconds / 86_400, "d"),
            (seconds / 3_600 % 24, "h"),
            (seconds / 60 % 60, "m"),
            (seconds % 60, "s"),
        ];
        // From the first unit that is not zero on (seconds always).
        let first = parts.iter().position(|(n, _)| *n > 0).unwrap_or(3);
        let mut sep = "";
        for (n, unit) in &parts[first..] {
            write!(f, "{sep}{n}{unit}")?;
            sep = " ";
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_id_of_any_text_is_shortened_without_a_panic() {
        let report = ServerReport {
            node: "n".into(),
            connected: true,
            server: None,
            run_ids: vec!["é".repeat(20)],
            uptime: None,
            persistence: Persistence::Unknown,
            eviction: None,
        };
        assert!(
            report
                .to_string()
                .contains(&format!("run id {}", "é".repeat(12)))
        );
    }

    #[test]
    fn uptimes_read_from_the_largest_unit() {
        let shown = |s| Uptime(Duration::from_secs(s)).to_string();
        assert_eq!(shown(0), "0s");
        assert_eq!(shown(12), "12s");
        assert_eq!(shown(240), "4m 0s");
        assert_eq!(shown(3 * 3_600 + 2 * 60 + 5), "3h 2m 5s");
        assert_eq!(shown(2 * 86_400 + 3 * 3_600 + 5), "2d 3h 0m 5s");
    }
}
