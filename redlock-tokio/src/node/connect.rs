//! Making a node's connection: to one master, to a whole cluster, or
//! through a simulation's connector; what the server is (`INFO server`);
//! and a reconnection the core asked for.

use std::collections::HashMap;

use redis::Value;
use redis::aio::MultiplexedConnection;
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{MultipleNodeRoutingInfo, ResponsePolicy, RoutingInfo};
use redlock_core::{NodeError, NodeErrorKind, Response, scripts};
use tracing::{debug, info};

use super::plain::{Plain, io_error};
use super::reply::{WRONG_CREDENTIALS, map_error};
use super::{Node, connection_config};

/// The connection of a node: our own to a plain master, the `redis`
/// crate's over TLS, or the crate's to a whole cluster.
#[derive(Clone)]
pub(super) enum Connection {
    Plain(Plain),
    Single(MultiplexedConnection),
    Cluster(ClusterConnection),
}

/// A connection's own work: it writes what is queued on the connection and
/// reads the answers ([`Plain`]). The client's
/// driver task polls it, beside the requests it waits for, so that a turn
/// that queues requests writes them and a reply read completes them, all
/// in one task.
/// It hands out the answers to the requests sent on it one by one
/// ([`Plain::send`]), and ends once the connection did.
pub(crate) type Wire = Box<dyn super::plain::Io>;

/// Runs `work` on a connection whose `wire` nobody polls yet: polled
/// beside it. A wire that ends first closed the connection.
async fn on_wire<T>(
    wire: &mut Option<Wire>,
    work: impl std::future::Future<Output = Result<T, NodeError>>,
) -> Result<T, NodeError> {
    let Some(wire) = wire else {
        return work.await;
    };
    let work = std::pin::pin!(work);
    let ended = std::pin::pin!(super::plain::until_end(wire));
    match futures::future::select(work, ended).await {
        futures::future::Either::Left((result, _)) => result,
        futures::future::Either::Right(((), _)) => Err(NodeError::new(
            NodeErrorKind::Connection,
            "the connection closed as it was made",
        )),
    }
}

/// A connection made, and what its server turned out to be.
pub(crate) struct Connected {
    pub(super) connection: Connection,
    /// Its wire, for the client's driver task to poll; `None` where the
    /// `redis` crate runs it.
    pub(super) wire: Option<Wire>,
    /// What the server is, for the core ([`redlock_core::Connected`]):
    /// read on this connection, since after a reconnect the server may be
    /// another version (upgraded, replaced) or kept otherwise. A cluster
    /// node's covers every master that answered: a `run_id` per master, so
    /// that a server listed twice (in two cluster nodes, or as a plain node
    /// and a shard) is found.
    pub(crate) found: redlock_core::Connected,
}

impl Node {
    /// Connects and loads the scripts, within the connect timeout, and reads
    /// what the server is ([`NodeFacts`], from `INFO server`: the core picks
    /// each request's form by them), with the server's `run_id` (from
    /// the same reply), which tells two addresses of one server apart from
    /// two servers, and a restart from a reconnect; none when the server
    /// does not say (INFO refused by an ACL, a Redis-compatible server),
    /// which also leaves the facts unknown: scripts only.
    ///
    /// A cluster node answers with the `run_id` of every master that
    /// answered, so that a server listed twice (in two cluster nodes, or as
    /// a plain node and a shard) is found.
    pub(crate) async fn connect(&self) -> Result<Connected, NodeError> {
        if let Some(cluster) = &self.cluster {
            return self.connect_cluster(cluster).await;
        }
        let attempt = async {
            let (connection, mut wire) = match &self.simulation {
                None => self.open().await?,
                Some((index, simulation)) => {
                    let stream = simulation
                        .connect(*index)
                        .await
                        .map_err(|err| io_error(&err))?;
                    let (plain, wire) = Plain::new(stream, simulation.queue());
                    (Connection::Plain(plain), Some(wire))
                }
            };
            let found = on_wire(&mut wire, self.read_server(&connection)).await?;
            Ok(Connected {
                connection,
                found,
                wire,
            })
        };
        match tokio::time::timeout(self.connect_timeout, attempt).await {
            Ok(result) => result,
            Err(_) => Err(NodeError::new(
                NodeErrorKind::Connection,
                format!(
                    "no working connection within the connect timeout of {} ms",
                    self.connect_timeout.as_millis()
                ),
            )),
        }
    }

    /// A plain master's connection, with its wire for the client's driver
    /// task to poll: our own ([`Plain`]), over TCP (`TCP_NODELAY`: a lock's
    /// requests are small and wait for their answers) or a Unix socket.
    /// Over TLS, the `redis` crate's connection, which runs its wire as a
    /// task of its own (`None`).
    async fn open(&self) -> Result<(Connection, Option<Wire>), NodeError> {
        let info = self.client.get_connection_info();
        let (plain, wire) = match info.addr() {
            redis::ConnectionAddr::Tcp(host, port) => {
                let stream = tokio::net::TcpStream::connect((host.as_str(), *port))
                    .await
                    .map_err(|err| io_error(&err))?;
                stream.set_nodelay(true).map_err(|err| io_error(&err))?;
                Plain::new(stream, None)
            }
            #[cfg(unix)]
            redis::ConnectionAddr::Unix(path) => {
                let stream = tokio::net::UnixStream::connect(path)
                    .await
                    .map_err(|err| io_error(&err))?;
                Plain::new(stream, None)
            }
            _ => {
                let config = connection_config().set_connection_timeout(Some(self.connect_timeout));
                let connection = self
                    .client
                    .get_multiplexed_async_connection_with_config(&config)
                    .await
                    .map_err(|err| map_error(&err))?;
                return Ok((Connection::Single(connection), None));
            }
        };
        Ok((Connection::Plain(plain), Some(wire)))
    }

    /// What a plain master is, read on `connection` as it is made, in one
    /// round trip: the credentials and database given (on our own
    /// connection: the `redis` crate's sends them itself), the scripts
    /// loaded, `INFO` and `appendfsync`.
    async fn read_server(
        &self,
        connection: &Connection,
    ) -> Result<redlock_core::Connected, NodeError> {
        use redlock_core::Argument::Bytes;
        let settings = self.client.get_connection_info().redis_settings();
        let own = matches!(connection, Connection::Plain(_));
        let db = settings.db().to_string();
        let mut words = Vec::new();
        let auth = own && settings.password().is_some();
        if auth {
            let mut command = vec![Bytes(b"AUTH")];
            command.extend(settings.username().map(|user| Bytes(user.as_bytes())));
            command.extend(
                settings
                    .password()
                    .map(|password| Bytes(password.as_bytes())),
            );
            words.push(command);
        }
        let select = own && settings.db() != 0;
        if select {
            words.push(vec![Bytes(b"SELECT"), Bytes(db.as_bytes())]);
        }
        // Steady state is then one EVALSHA per request.
        for script in scripts::ALL {
            words.push(vec![
                Bytes(b"SCRIPT"),
                Bytes(b"LOAD"),
                Bytes(script.as_bytes()),
            ]);
        }
        // Sections apart: Redis before 7.0 takes one per INFO.
        for section in ["server", "memory", "persistence"] {
            words.push(vec![Bytes(b"INFO"), Bytes(section.as_bytes())]);
        }
        words.push(vec![Bytes(b"CONFIG"), Bytes(b"GET"), Bytes(b"appendfsync")]);
        let mut answers = connection.run(&words).await.into_iter();
        let mut next = || answers.next().expect("one answer per command");
        if auth && let Err(failure) = next() {
            let error = failure.error;
            return Err(match failure.broke {
                true => error,
                // However the server words it (`WRONGPASS`, no password
                // set, an old server that takes no user name): the
                // credentials are refused.
                false if error.detail.starts_with("WRONGPASS") => {
                    NodeError::new(NodeErrorKind::Auth, WRONG_CREDENTIALS)
                }
                false => NodeError::tidied(
                    NodeErrorKind::Auth,
                    &format!("the server refused AUTH: {}", error.detail),
                ),
            });
        }
        if select && let Err(failure) = next() {
            return Err(failure.error);
        }
        for script in scripts::ALL {
            match next() {
                Ok(Response::Data(sha))
                    if Some(sha.as_slice()) == scripts::digest(script).map(str::as_bytes) => {}
                Err(failure) => return Err(failure.error),
                Ok(_) => {
                    return Err(NodeError::new(
                        NodeErrorKind::Protocol,
                        "SCRIPT LOAD returned other SHA1 digests than the scripts have \
                         (is this a Redis server?)",
                    ));
                }
            }
        }
        let mut text = || match next() {
            Ok(Response::Data(bytes)) => String::from_utf8(bytes).ok(),
            _ => None,
        };
        let (info, memory, persistence) = (text(), text(), text());
        // An ACL user without CONFIG reads no appendfsync: AOF alone says.
        // CONFIG GET answers [name, value].
        let appendfsync = match next() {
            Ok(Response::Array(pair)) => match pair.into_iter().nth(1) {
                Some(Response::Data(bytes)) => String::from_utf8(bytes).ok(),
                _ => None,
            },
            _ => None,
        };
        Ok(redlock_core::Connected::from_info(
            info.as_deref(),
            memory.as_deref(),
            persistence.as_deref(),
            appendfsync.as_deref(),
        ))
    }

    /// [`connect`](Self::connect) for a cluster node: the cluster client
    /// reads the slot map from a seed; the scripts are loaded on every node
    /// and `INFO server` read from every master.
    async fn connect_cluster(&self, cluster: &ClusterClient) -> Result<Connected, NodeError> {
        let attempt = async {
            let connection = cluster
                .get_async_connection()
                .await
                .map_err(|err| map_error(&err))?;
            let loads = scripts::ALL.iter().map(|script| {
                let mut connection = connection.clone();
                async move {
                    let mut load = redis::cmd("SCRIPT");
                    load.arg("LOAD").arg(*script);
                    // Every node, replicas too: a failover then finds the
                    // scripts in place.
                    connection
                        .route_command(
                            load,
                            RoutingInfo::MultiNode((
                                MultipleNodeRoutingInfo::AllNodes,
                                Some(ResponsePolicy::AllSucceeded),
                            )),
                        )
                        .await
                }
            });
            let info = |section: &'static str| {
                let mut connection = connection.clone();
                async move {
                    let mut info = redis::cmd("INFO");
                    info.arg(section);
                    connection
                        .route_command(
                            info,
                            RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None)),
                        )
                        .await
                }
            };
            let appendfsync = {
                let mut connection = connection.clone();
                async move {
                    let mut config = redis::cmd("CONFIG");
                    config.arg("GET").arg("appendfsync");
                    connection
                        .route_command(
                            config,
                            RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None)),
                        )
                        .await
                }
            };
            let (loads, (info, memory, persistence, appendfsync)) = futures::future::join(
                futures::future::join_all(loads),
                futures::future::join4(
                    info("server"),
                    info("memory"),
                    info("persistence"),
                    appendfsync,
                ),
            )
            .await;
            if let Some(Err(err)) = loads.into_iter().find(Result::is_err) {
                // A shard down: it loads them on its first NOSCRIPT.
                debug!(node = %self.name, error = %map_error(&err), "scripts not loaded on every shard");
            }
            let (server, memory) = (by_master(info, text), by_master(memory, text));
            let persistence = by_master(persistence, text);
            // CONFIG GET answers [name, value].
            let fsync = by_master(appendfsync, |answer| {
                redis::from_redis_value::<Vec<String>>(answer)
                    .ok()?
                    .into_iter()
                    .nth(1)
            });
            let mut masters: Vec<&String> = server
                .keys()
                .chain(memory.keys())
                .chain(persistence.keys())
                .collect();
            masters.sort();
            masters.dedup();
            let found = redlock_core::Connected::of_cluster(masters.into_iter().map(|master| {
                let found = redlock_core::Connected::from_info(
                    read(&server, master),
                    read(&memory, master),
                    read(&persistence, master),
                    read(&fsync, master),
                );
                (master.clone(), found)
            }));
            Ok(Connected {
                connection: Connection::Cluster(connection),
                found,
                wire: None,
            })
        };
        match tokio::time::timeout(self.connect_timeout, attempt).await {
            Ok(result) => result,
            Err(_) => Err(NodeError::new(
                NodeErrorKind::Connection,
                format!(
                    "no working cluster connection within the connect timeout of {} ms",
                    self.connect_timeout.as_millis()
                ),
            )),
        }
    }
}

impl Node {
    /// One connection attempt, as the core asked
    /// ([`Output::Connect`](redlock_core::Output::Connect)): on success the
    /// node is up again and what its server is is returned, for the core;
    /// on failure the error stays with the node, for the requests that
    /// meet it down, and is returned.
    pub(crate) async fn reconnect(
        self: std::sync::Arc<Self>,
    ) -> Result<redlock_core::Connected, NodeError> {
        if self.closed.load(std::sync::atomic::Ordering::Relaxed) {
            return Err(NodeError::new(
                NodeErrorKind::Connection,
                "the client was shut down",
            ));
        }
        match self.connect().await {
            Ok(connected) => {
                info!(node = %self.name, "connected");
                let found = connected.found.clone();
                self.set_link(Ok(connected));
                Ok(found)
            }
            Err(error) => {
                debug!(node = %self.name, error = %error, "reconnection failed");
                self.set_link(Err(error.clone()));
                Err(error)
            }
        }
    }
}

/// Each master's answer to a command routed to every master, by its
/// address, read by `read`; none where the command failed.
fn by_master(
    answers: redis::RedisResult<Value>,
    read: impl Fn(Value) -> Option<String>,
) -> HashMap<String, String> {
    let Ok(Value::Map(answers)) = answers else {
        return HashMap::new();
    };
    answers
        .into_iter()
        .filter_map(|(master, answer)| {
            Some((
                redis::from_redis_value::<String>(master).ok()?,
                read(answer)?,
            ))
        })
        .collect()
}

/// What `master` answered, in `answers` ([`by_master`]).
fn read<'a>(answers: &'a HashMap<String, String>, master: &str) -> Option<&'a str> {
    answers.get(master).map(String::as_str)
}

/// An `INFO` answer's text.
fn text(answer: Value) -> Option<String> {
    redis::from_redis_value::<String>(answer).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cores_digests_are_the_ones_redis_names_the_scripts_by() {
        for script in scripts::ALL {
            assert_eq!(
                scripts::digest(script),
                Some(redis::Script::new(script).get_hash())
            );
        }
    }
}
