//! The three contenders, behind one interface: this library, `rslock`, and
//! the floor (raw `SET NX PX` on every node at once).

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use rand::{Rng, RngExt};
use redis::aio::MultiplexedConnection;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, RedisResult, Value};
use redlock_tokio::core::scripts;
use redlock_tokio::{LockGuard, Redlock, Wait};

/// Which contender; also the row order of every table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Kind {
    Ours,
    Rslock,
    Floor,
    /// A second floor for reference: the commands this library sends, sent
    /// raw the way the floor sends `SET`: `SET NX PX GET` where the server
    /// has it (else `EVALSHA` of the acquire script), and `EVALSHA` of the
    /// release script (with its notice, as a release with notices on). The
    /// gap between the two floors is what these commands cost the servers
    /// over `SET NX PX` and `DEL`; the gap between this one and this library
    /// is the client's own overhead.
    ScriptFloor,
    /// The least a correct lock can send on this server: `SET NX PX` to
    /// acquire, and a compare-and-delete to release (`DELIFEQ` on Valkey 9
    /// and later, else this library's release script without its notice).
    /// Raw `SET NX PX` + `DEL` (the floor) is no safe lock: a release there
    /// can delete another owner's key.
    SafeFloor,
}

impl Kind {
    /// The three contenders of the comparison.
    pub(crate) const MAIN: [Kind; 3] = [Kind::Ours, Kind::Rslock, Kind::Floor];
    /// The three and the script floor.
    pub(crate) const ALL: [Kind; 5] = [
        Kind::Ours,
        Kind::Rslock,
        Kind::Floor,
        Kind::SafeFloor,
        Kind::ScriptFloor,
    ];

    pub(crate) fn label(self) -> &'static str {
        match self {
            Kind::Ours => "redlock-tokio (this library)",
            Kind::Rslock => "rslock 0.10",
            Kind::Floor => "floor: raw SET NX PX",
            Kind::ScriptFloor => "reference: our commands, sent raw",
            Kind::SafeFloor => "safe floor: SET NX PX + compare-and-delete",
        }
    }

    pub(crate) fn short(self) -> &'static str {
        match self {
            Kind::Ours => "ours",
            Kind::Rslock => "rslock",
            Kind::Floor => "floor",
            Kind::ScriptFloor => "script-floor",
            Kind::SafeFloor => "safe-floor",
        }
    }
}

/// What every contender is configured with.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Common {
    pub(crate) ttl: Duration,
    /// Retries of a blocking acquire (scenario c) wait `uniform(0, jitter)`.
    pub(crate) retry_jitter: Duration,
    /// This library's per-node timeout; `None`: the one it derives from
    /// the TTL. (k) runs a shorter TTL with the other scenarios' timeout.
    pub(crate) node_timeout: Option<Duration>,
}

/// The three clients, connected to the same servers.
pub(crate) struct Contenders {
    pub(crate) ours: Redlock,
    /// Single attempt, no retry: the counterpart of `.wait(Wait::No)`.
    pub(crate) rslock_once: rslock::LockManager,
    /// Retries `uniform(0, jitter)` apart, as many times as the caller's
    /// deadline allows.
    pub(crate) rslock_retry: rslock::LockManager,
    pub(crate) floor: Floor,
    pub(crate) script_floor: Floor,
    pub(crate) safe_floor: Floor,
    pub(crate) common: Common,
    /// Nodes where one of our releases found no key of ours although the
    /// lock was held: the release ran there before the acquire's `SET`
    /// (a broken per-node order), or the key was lost. Must stay 0.
    pub(crate) node_misses: AtomicU64,
}

/// A lock held by one of the contenders. Not boxed: one per held lock,
/// and a box would add an allocation to every acquire measured.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Held {
    Ours(LockGuard),
    Rslock(rslock::Lock),
    Floor(FloorLock),
}

/// The timings of one acquire that succeeded.
pub(crate) struct Acquired {
    pub(crate) held: Held,
    /// For the floor, when the quorum-th `OK` arrived (the acquire's own
    /// latency waits for every node, as one round of N commands does).
    pub(crate) quorum_at: Option<Instant>,
}

impl Contenders {
    pub(crate) async fn connect(urls: &[String], common: Common) -> Result<Self, String> {
        let mut ours = Redlock::builder(urls);
        if let Some(timeout) = common.node_timeout {
            ours = ours.node_timeout(timeout);
        }
        let ours = ours
            // `--nodes` may be even: the benchmark measures what it is given.
            .allow_even_nodes(true)
            .ttl(common.ttl)
            // Bounded by the caller's deadline instead.
            .wait(Wait::Retries(u32::MAX))
            .retry_delay(Duration::ZERO)
            .retry_jitter(common.retry_jitter)
            .build()
            .await
            .map_err(|err| format!("redlock-tokio: {err}"))?;
        if ours.connected_nodes() != urls.len() {
            return Err(format!(
                "redlock-tokio: only {} of {} nodes connected",
                ours.connected_nodes(),
                urls.len()
            ));
        }
        let rslock = rslock::LockManager::new(urls.to_vec());
        let mut rslock_once = rslock.clone();
        rslock_once.set_retry(1, Duration::from_millis(1));
        let mut rslock_retry = rslock;
        rslock_retry.set_retry(u32::MAX, common.retry_jitter.max(Duration::from_millis(1)));
        let floor = Floor::connect(urls, FloorMode::Raw).await?;
        let script_floor = Floor::connect(urls, FloorMode::Ours).await?;
        let safe_floor = Floor::connect(urls, FloorMode::Safe).await?;
        Ok(Self {
            ours,
            rslock_once,
            rslock_retry,
            floor,
            script_floor,
            safe_floor,
            common,
            node_misses: AtomicU64::new(0),
        })
    }

    /// One attempt (no retry) to lock `key`.
    pub(crate) async fn try_acquire(&self, kind: Kind, key: &str) -> Result<Acquired, String> {
        match kind {
            Kind::Ours => self
                .ours
                .lock(key)
                .wait(Wait::No)
                .await
                .map(|guard| Acquired {
                    held: Held::Ours(guard),
                    quorum_at: None,
                })
                .map_err(|err| err.to_string()),
            Kind::Rslock => self
                .rslock_once
                .lock(key, self.common.ttl)
                .await
                .map(|lock| Acquired {
                    held: Held::Rslock(lock),
                    quorum_at: None,
                })
                .map_err(|err| err.to_string()),
            Kind::Floor => self.floor.try_acquire(key, self.common.ttl).await,
            Kind::ScriptFloor => self.script_floor.try_acquire(key, self.common.ttl).await,
            Kind::SafeFloor => self.safe_floor.try_acquire(key, self.common.ttl).await,
        }
    }

    /// A blocking acquire: retries `uniform(0, jitter)` apart until
    /// `deadline`. `Ok(None)` when the deadline passed first.
    pub(crate) async fn acquire_until(
        &self,
        kind: Kind,
        key: &str,
        deadline: Instant,
    ) -> Result<Option<Held>, String> {
        let deadline = tokio::time::Instant::from_std(deadline);
        match kind {
            Kind::Ours => match tokio::time::timeout_at(deadline, self.ours.lock(key)).await {
                Err(_) => Ok(None),
                Ok(result) => result
                    .map(|guard| Some(Held::Ours(guard)))
                    .map_err(|err| err.to_string()),
            },
            Kind::Rslock => {
                let lock = self.rslock_retry.lock(key, self.common.ttl);
                match tokio::time::timeout_at(deadline, lock).await {
                    Err(_) => Ok(None),
                    Ok(result) => result
                        .map(|lock| Some(Held::Rslock(lock)))
                        .map_err(|err| err.to_string()),
                }
            }
            Kind::Floor | Kind::ScriptFloor | Kind::SafeFloor => {
                let floor = self.floor_of(kind);
                // Bounded by the deadline: every turn either returns or sleeps.
                loop {
                    if tokio::time::Instant::now() >= deadline {
                        return Ok(None);
                    }
                    let attempt = floor.try_acquire(key, self.common.ttl);
                    match tokio::time::timeout_at(deadline, attempt).await {
                        Err(_) => return Ok(None),
                        Ok(Ok(acquired)) => return Ok(Some(acquired.held)),
                        Ok(Err(_)) => {}
                    }
                    let jitter_us =
                        u64::try_from(self.common.retry_jitter.as_micros()).unwrap_or(u64::MAX);
                    let wait = Duration::from_micros(rand::rng().random_range(0..jitter_us.max(1)));
                    tokio::time::sleep(wait).await;
                }
            }
        }
    }

    /// Releases a lock and waits for the nodes, as each library's release does.
    pub(crate) async fn release(&self, held: Held) {
        match held {
            Held::Ours(guard) => {
                let valid = !guard.validity().is_zero();
                let report = guard.release().await;
                if valid {
                    self.node_misses
                        .fetch_add(report.not_held() as u64, Ordering::Relaxed);
                }
            }
            Held::Rslock(lock) => lock.release().await,
            Held::Floor(lock) => match lock.mode {
                FloorMode::Raw => self.floor.release(lock).await,
                FloorMode::Ours => self.script_floor.release(lock).await,
                FloorMode::Safe => self.safe_floor.release(lock).await,
            },
        }
    }

    fn floor_of(&self, kind: Kind) -> &Floor {
        match kind {
            Kind::ScriptFloor => &self.script_floor,
            Kind::SafeFloor => &self.safe_floor,
            _ => &self.floor,
        }
    }
}

/// What a floor sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FloorMode {
    /// `SET NX PX`, then `DEL`.
    Raw,
    /// `SET NX PX`, then a compare-and-delete without a notice.
    Safe,
    /// This library's commands, raw.
    Ours,
}

/// The floor: what one round of N commands costs here. Raw `SET key value NX
/// PX ttl` on every node at once over plain multiplexed connections, and raw
/// `DEL` where the `SET` succeeded. No timeouts of its own, no state machine;
/// waits for every node. A node that is a Redis Cluster
/// (`redis+cluster://h:p,...`) gets the `redis` crate's cluster client
/// instead, which sends each command to the shard of its key.
///
/// `scripted`: the same with one `EVALSHA` of this library's acquire and
/// release scripts instead of `SET NX PX` and `DEL` (plain nodes only).
pub(crate) struct Floor {
    connections: Vec<FloorConnection>,
    quorum: usize,
    mode: FloorMode,
    scripted: Option<Shas>,
    /// Safe mode: release with `DELIFEQ` (Valkey >= 9.0).
    delifeq: bool,
    /// Scripted only: acquire with `SET NX PX GET` rather than the script,
    /// as this library does on this server.
    native_acquire: bool,
    /// Scripted only: release with `DELIFEQ` rather than the script, as
    /// this library does on this server (Valkey >= 9.0).
    plain_release: bool,
    /// This library's commands: the client's tag its releases carry (8
    /// random bytes, hex, as the library draws it).
    client_tag: String,
}

struct Shas {
    acquire: String,
    release: String,
    /// This library's release: it publishes only for a waiter's mark.
    release_if_waited: String,
}

/// Where the floor's `SET NX` succeeded.
pub(crate) struct FloorLock {
    key: String,
    value: String,
    granted: Vec<usize>,
    mode: FloorMode,
}

/// The floor's connection to one node: a master, or a whole cluster.
#[derive(Clone)]
enum FloorConnection {
    Plain(MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl FloorConnection {
    async fn query(&self, command: Cmd) -> RedisResult<Value> {
        match self {
            FloorConnection::Plain(connection) => {
                command.query_async(&mut connection.clone()).await
            }
            FloorConnection::Cluster(connection) => {
                command.query_async(&mut connection.clone()).await
            }
        }
    }
}

/// The seeds of a `redis+cluster://h1:p1,h2:p2` (or `valkey+cluster://`)
/// URL as `redis://h:p` URLs, or `None` for a plain node's URL. The
/// benchmark's own servers have no password.
pub(crate) fn cluster_seeds(url: &str) -> Option<Vec<String>> {
    let rest = url
        .strip_prefix("redis+cluster://")
        .or_else(|| url.strip_prefix("valkey+cluster://"))?;
    Some(
        rest.trim_end_matches('/')
            .split(',')
            .map(|seed| format!("redis://{seed}"))
            .collect(),
    )
}

impl Floor {
    pub(crate) async fn connect(urls: &[String], mode: FloorMode) -> Result<Self, String> {
        // The safe floor needs the release script only where it has no
        // `DELIFEQ`.
        let delifeq = mode == FloorMode::Safe && has_delifeq();
        let scripted = mode == FloorMode::Ours || (mode == FloorMode::Safe && !delifeq);
        let mut connections = Vec::with_capacity(urls.len());
        let scripts = [
            scripts::ACQUIRE,
            scripts::RELEASE,
            scripts::RELEASE_IF_WAITED,
        ];
        for url in urls {
            if let Some(seeds) = cluster_seeds(url) {
                if mode != FloorMode::Raw {
                    return Err(format!(
                        "floor: {url}: only the raw floor has a cluster mode"
                    ));
                }
                let connection = redis::cluster::ClusterClient::new(seeds)
                    .map_err(|err| format!("floor: {url}: {err}"))?
                    .get_async_connection()
                    .await
                    .map_err(|err| format!("floor: {url}: {err}"))?;
                connections.push(FloorConnection::Cluster(connection));
                continue;
            }
            let client = redis::Client::open(url.as_str()).map_err(|err| err.to_string())?;
            let mut connection = client
                .get_multiplexed_async_connection()
                .await
                .map_err(|err| format!("floor: {url}: {err}"))?;
            if scripted {
                for script in scripts {
                    redis::cmd("SCRIPT")
                        .arg("LOAD")
                        .arg(script)
                        .query_async::<String>(&mut connection)
                        .await
                        .map_err(|err| format!("floor: {url}: SCRIPT LOAD: {err}"))?;
                }
            }
            connections.push(FloorConnection::Plain(connection));
        }
        let sha = |source| redis::Script::new(source).get_hash().to_owned();
        Ok(Self {
            quorum: connections.len() / 2 + 1,
            connections,
            mode,
            delifeq,
            native_acquire: mode == FloorMode::Ours && has_set_nx_get(),
            plain_release: mode == FloorMode::Ours && has_delifeq(),
            client_tag: random_value()[..16].to_owned(),
            scripted: scripted.then(|| Shas {
                acquire: sha(scripts::ACQUIRE),
                release: sha(scripts::RELEASE),
                release_if_waited: sha(scripts::RELEASE_IF_WAITED),
            }),
        })
    }

    pub(crate) async fn try_acquire(&self, key: &str, ttl: Duration) -> Result<Acquired, String> {
        let value = random_value();
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
        let mut replies: FuturesUnordered<_> = self
            .connections
            .iter()
            .enumerate()
            .map(|(node, connection)| {
                let command = match &self.scripted {
                    _ if self.mode != FloorMode::Ours => {
                        let mut command = redis::cmd("SET");
                        command.arg(key).arg(&value).arg("NX").arg("PX").arg(ttl_ms);
                        command
                    }
                    None => unreachable!("this library's commands are scripted"),
                    Some(_) if self.native_acquire => {
                        let mut command = redis::cmd("SET");
                        command
                            .arg(key)
                            .arg(&value)
                            .arg("NX")
                            .arg("PX")
                            .arg(ttl_ms)
                            .arg("GET");
                        command
                    }
                    Some(shas) => {
                        let mut command = redis::cmd("EVALSHA");
                        command
                            .arg(&shas.acquire)
                            .arg(1)
                            .arg(key)
                            .arg(&value)
                            .arg(ttl_ms);
                        command
                    }
                };
                async move { (node, connection.query(command).await) }
            })
            .collect();
        let mut granted = Vec::with_capacity(self.connections.len());
        let mut quorum_at = None;
        while let Some((node, reply)) = replies.next().await {
            // `SET NX PX GET` answers nil when it set the key.
            let set = if self.native_acquire {
                matches!(reply, Ok(Value::Nil))
            } else {
                matches!(reply, Ok(Value::Okay | Value::Int(1)))
            };
            if set {
                granted.push(node);
                if granted.len() == self.quorum {
                    quorum_at = Some(Instant::now());
                }
            }
        }
        let lock = FloorLock {
            key: key.to_owned(),
            value,
            granted,
            mode: self.mode,
        };
        if lock.granted.len() >= self.quorum {
            Ok(Acquired {
                held: Held::Floor(lock),
                quorum_at,
            })
        } else {
            // Undo where it did get the key (it is ours there: SET NX said so).
            self.release(lock).await;
            Err("no quorum".to_owned())
        }
    }

    pub(crate) async fn release(&self, lock: FloorLock) {
        let deletes = lock.granted.iter().map(|&node| {
            let connection = &self.connections[node];
            let command = match &self.scripted {
                _ if self.mode == FloorMode::Raw => {
                    let mut command = redis::cmd("DEL");
                    command.arg(&lock.key);
                    command
                }
                // The safe floor's release, and this library's where the
                // server has `DELIFEQ` (nobody waits here, so nobody marked
                // the value: nothing follows it).
                _ if self.delifeq || self.plain_release => {
                    let mut command = redis::cmd("DELIFEQ");
                    command.arg(&lock.key).arg(&lock.value);
                    command
                }
                None => unreachable!("a compare-and-delete is scripted or DELIFEQ"),
                // This library's release publishes its notice when a waiter
                // marked itself (nobody does here); the safe floor's never.
                // The same keys and arguments as the library's: the waiters
                // mark, the others mark and the client's tag.
                Some(shas) if self.mode == FloorMode::Ours => {
                    let key = redlock_tokio::core::Key::from(lock.key.as_bytes());
                    let mut command = redis::cmd("EVALSHA");
                    command
                        .arg(&shas.release_if_waited)
                        .arg(3)
                        .arg(&lock.key)
                        .arg(key.derived(b"\0waiters").as_bytes())
                        .arg(key.derived(b"\0others").as_bytes())
                        .arg(&lock.value)
                        .arg(1)
                        .arg(&self.client_tag);
                    command
                }
                Some(shas) => {
                    let mut command = redis::cmd("EVALSHA");
                    command
                        .arg(&shas.release)
                        .arg(1)
                        .arg(&lock.key)
                        .arg(&lock.value)
                        .arg(0);
                    command
                }
            };
            async move { connection.query(command).await }
        });
        futures::future::join_all(deletes).await;
    }
}

/// Whether the benchmark's servers take `SET key value NX PX ttl GET`, as
/// this library finds per node (Redis >= 7.0, Valkey).
fn has_set_nx_get() -> bool {
    let server = redlock_tests::server();
    let major: u32 = server
        .version()
        .split('.')
        .next()
        .and_then(|major| major.parse().ok())
        .unwrap_or(0);
    server.name().eq_ignore_ascii_case("valkey") || major >= 7
}

/// Whether the benchmark's servers take `DELIFEQ key value` (Valkey >= 9.0).
fn has_delifeq() -> bool {
    let server = redlock_tests::server();
    let major: u32 = server
        .version()
        .split('.')
        .next()
        .and_then(|major| major.parse().ok())
        .unwrap_or(0);
    server.name().eq_ignore_ascii_case("valkey") && major >= 9
}

/// 20 random bytes, hex: the same size as this library's lock values.
fn random_value() -> String {
    let mut bytes = [0u8; 20];
    rand::rng().fill_bytes(&mut bytes);
    let mut value = String::with_capacity(40);
    for byte in bytes {
        let _ = write!(value, "{byte:02x}");
    }
    value
}
