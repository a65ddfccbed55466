//! Running one request on a node: its command in the form the core
//! picked, its answer as a `Response`, and which node errors are logged how.

use std::sync::Arc;

use redis::aio::ConnectionLike;
use redis::{RedisError, Value};
use redlock_core::{Argument, Command, NodeError, NodeErrorKind, Reply, Request, Response};
use tracing::{debug, warn};

use super::Node;
use super::connect::Connection;
use super::encode::command;
use super::reply::{map_error, map_value};

impl Node {
    /// Runs one request in the form the core picked for it
    /// ([`Request::words`]), and returns the reply. A `NOSCRIPT` answer (the
    /// node lost its script cache: `SCRIPT FLUSH`, or a restart behind a
    /// proxy that kept our connection) goes back to the core like any
    /// other, which sends the request again in full where it may.
    ///
    /// Where the core says another request follows the answer on this
    /// node ([`Request::follow_up`]: the script after a `DELIFEQ` that
    /// deleted nothing), it is sent next, and its reply is the one
    /// returned: so it happens whoever reads the reply, the machine or
    /// nobody (a node the machine decided without).
    ///
    /// No timeout here: the caller applies the request's deadline.
    pub(crate) async fn execute(self: &Arc<Self>, request: &Request) -> Reply {
        let reply = self.execute_once(request).await;
        match request.follow_up(&reply) {
            // Rare (someone waited), so boxed: inline, this future would
            // hold two requests' states at once, and every request's future
            // is allocated (`driver::send`).
            Some(next) => Box::pin(self.execute_once(&next)).await,
            None => reply,
        }
    }

    /// Runs `requests`, all for this plain master, as one pipeline: one
    /// write, one answer for all. Each is what [`execute`](Self::execute)
    /// makes of it (its command, its follow-up); the replies come in the
    /// order of `requests`, which is also the order the node runs them in.
    ///
    /// Where some of them wait for the node's AOF ([`Request::aof`]), one
    /// `WAITAOF` ends the pipeline ([`redlock_core::waitaof`]) and judges
    /// each of their replies ([`Reply::on_disk`]); a follow-up sent after
    /// it is covered by one more `WAITAOF` after the batch.
    pub(crate) async fn execute_many(self: &Arc<Self>, requests: &[Request]) -> Vec<Reply> {
        debug_assert!(self.cluster.is_none(), "a cluster node routes each request");
        let (connection, generation) = match self.connection() {
            Ok(link) => link,
            Err(error) => {
                return requests
                    .iter()
                    .map(|request| Reply::to(request, Err(error.clone())))
                    .collect();
            }
        };
        // The clock is read only for a batch that waits.
        let waitaof = requests
            .iter()
            .any(|request| request.aof)
            .then(|| redlock_core::waitaof(requests, crate::sim::now()))
            .flatten();
        let words: Vec<Vec<Argument<'_>>> = requests
            .iter()
            .map(Request::words)
            .chain(waitaof.iter().map(|words| words.to_vec()))
            .collect();
        let mut answers = connection.run(&words).await;
        // The WAITAOF's answer, last in the pipeline.
        let mut on_disk = waitaof.is_some().then(|| answers.pop()).flatten();
        let mut late = false;
        let mut replies = Vec::with_capacity(requests.len());
        for (request, answer) in requests.iter().zip(answers) {
            let reply = Reply::to(request, self.finish(request.command, generation, answer));
            replies.push(match request.follow_up(&reply) {
                Some(next) => {
                    late = true;
                    Box::pin(self.execute_once(&next)).await
                }
                None => reply,
            });
        }
        if late && let Some(words) = redlock_core::waitaof(requests, crate::sim::now()) {
            on_disk = connection.run(&[words.to_vec()]).await.pop();
        }
        let on_disk = on_disk.map(|answer| answer.map_err(|failure| failure.error));
        match on_disk {
            Some(answer) => replies
                .into_iter()
                .zip(requests)
                .map(|(reply, request)| reply.on_disk(request, &answer))
                .collect(),
            None => replies,
        }
    }

    /// [`execute`](Self::execute) without the follow-up.
    async fn execute_once(self: &Arc<Self>, request: &Request) -> Reply {
        let (connection, generation) = match self.connection() {
            Ok(link) => link,
            Err(error) => return Reply::to(request, Err(error)),
        };
        let answer = connection.run(&[request.words()]).await.pop();
        let answer = answer.expect("one answer per command");
        Reply::to(request, self.finish(request.command, generation, answer))
    }

    /// The node's answer as a `Response`; an error that leaves the
    /// connection unusable starts the reconnection.
    pub(super) fn finish(
        &self,
        command: Command,
        generation: u64,
        answer: Result<Response, Failure>,
    ) -> Result<Response, NodeError> {
        match answer {
            Ok(response) => {
                if let Response::Other(text) = &response {
                    // No script returns a status or a map: not a Redis
                    // server, or not the script we loaded.
                    warn!(node = %self.name, command = command.name(), answer = %text, "unexpected answer from node");
                }
                Ok(response)
            }
            Err(Failure { error, broke }) => {
                // A cluster connection reconnects to its shards by itself:
                // one shard down must not cut the node off from the others.
                if broke && self.cluster.is_none() {
                    self.connection_failed(generation, &error);
                } else if error.kind == NodeErrorKind::NoPermission {
                    self.not_permitted(command, &error);
                } else if is_anomaly(error.kind) {
                    warn!(node = %self.name, command = command.name(), error = %error, "node refused the request");
                }
                Err(error)
            }
        }
    }

    /// Logs a `NOPERM` at WARN once per node, then at DEBUG: an ACL user
    /// without rights on the waiters' marks meets one on every release
    /// (refused whole and sent again without them).
    pub(super) fn not_permitted(&self, command: Command, error: &NodeError) {
        let command = command.name();
        if self
            .no_permission_logged
            .swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            debug!(node = %self.name, command, error = %error, "not permitted");
            return;
        }
        warn!(node = %self.name, command, error = %error,
            "the server refused a key or channel to this ACL user (logged once per node); \
             a release whose waiters' marks are refused costs a round trip or a notice more: \
             give the user the pattern ~{{<prefix>* as well");
    }
}

/// Node errors worth a WARN: the node is up but refused or garbled the
/// request (an error reply, a key of another type, credentials, garbage),
/// which retrying will not fix. A node down or slow is reported once by its
/// connection instead, at INFO.
fn is_anomaly(kind: NodeErrorKind) -> bool {
    matches!(
        kind,
        NodeErrorKind::Server
            | NodeErrorKind::Protocol
            | NodeErrorKind::WrongType
            | NodeErrorKind::Auth
    )
}

/// Why a command has no answer, and whether its connection broke with it.
pub(super) struct Failure {
    pub(super) error: NodeError,
    pub(super) broke: bool,
}

impl Failure {
    fn fewer() -> Self {
        Failure {
            error: NodeError::new(
                NodeErrorKind::Protocol,
                "fewer answers than commands in the pipeline",
            ),
            broke: false,
        }
    }
}

impl Connection {
    /// Runs the commands of `words`, in order, as one pipeline (one
    /// message, one write) where there are several, and returns exactly one
    /// answer for each.
    pub(super) async fn run(&self, words: &[Vec<Argument<'_>>]) -> Vec<Result<Response, Failure>> {
        let mut answers = match self {
            Connection::Plain(plain) => {
                let call = plain.call(words.len(), |out| {
                    for command in words {
                        redlock_core::resp::encode(command, out);
                    }
                });
                match call.await {
                    Ok(answers) => answers
                        .into_iter()
                        .map(|answer| {
                            answer.map_err(|error| Failure {
                                error,
                                broke: false,
                            })
                        })
                        .collect(),
                    Err(error) => broken(words.len(), &error),
                }
            }
            Connection::Single(connection) => run_redis(connection.clone(), words).await,
            Connection::Cluster(connection) => run_redis(connection.clone(), words).await,
        };
        // A server that answers fewer (it cannot, but) leaves the rest
        // unanswered, as garbage does.
        answers.resize_with(words.len(), || Err(Failure::fewer()));
        answers
    }
}

/// [`Connection::run`] on a connection of the `redis` crate.
async fn run_redis(
    mut connection: impl ConnectionLike,
    words: &[Vec<Argument<'_>>],
) -> Vec<Result<Response, Failure>> {
    let answers = match words {
        [one] => command(one)
            .query_async::<Value>(&mut connection)
            .await
            .map(|value| vec![value]),
        _ => {
            let mut pipeline = redis::Pipeline::with_capacity(words.len());
            for one in words {
                pipeline.add_command(command(one));
            }
            connection
                .req_packed_commands(&pipeline, 0, words.len())
                .await
        }
    };
    match answers {
        Ok(values) => values
            .into_iter()
            .map(|value| value.extract_error().map(map_value).map_err(failure))
            .collect(),
        Err(error) => (0..words.len())
            .map(|_| Err(failure(error.clone())))
            .collect(),
    }
}

/// `count` failures of a connection that broke with `error`.
fn broken(count: usize, error: &NodeError) -> Vec<Result<Response, Failure>> {
    (0..count)
        .map(|_| {
            Err(Failure {
                error: error.clone(),
                broke: true,
            })
        })
        .collect()
}

/// A redis error as a [`Failure`]: it broke the connection if the crate
/// says it cannot be used again.
fn failure(error: RedisError) -> Failure {
    Failure {
        broke: error.is_unrecoverable_error(),
        error: map_error(&error),
    }
}
