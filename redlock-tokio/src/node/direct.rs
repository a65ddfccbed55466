//! Requests sent straight onto a plain master's connection by the client's
//! driver task, and their answers made the core's replies: the common
//! case, with no future, channel or copy of the request per request. A TLS
//! or cluster node, a batch that waits for the AOF, and a simulation that
//! plants a bounded queue go the other way ([`driver::send`](crate::driver::send)).

use redlock_core::native::Native;
use redlock_core::{Command, NodeError, NodeId, Reply, Request, RequestId, Response};

use super::connect::Connection;
use super::execute::Failure;
use super::{Link, Node};

/// What the answer to a request sent with [`Node::send_tagged`] needs to
/// become the core's reply, and whom it is for.
pub(crate) struct Tag {
    /// The driver task that sent it: a wire taken over by a later task
    /// (`Node::take_wire`) may still hand out answers to an earlier one's
    /// requests, which that task's core never sent.
    pub(crate) task: u64,
    pub(crate) id: RequestId,
    /// Its reply, but for the result ([`Reply::to`]).
    reply: Reply,
    command: Command,
    /// The generation of the connection it was sent on.
    generation: u64,
    /// The request itself, where another may follow its answer on this
    /// node ([`Request::follow_up`]: the script after a `DELIFEQ`).
    follow: Option<Box<Request>>,
}

impl Tag {
    /// The node it was sent to.
    pub(crate) fn node(&self) -> NodeId {
        self.reply.node
    }

    /// What it asked for.
    pub(crate) fn command(&self) -> Command {
        self.command
    }

    fn of(task: u64, id: RequestId, request: &Request, generation: u64) -> Self {
        let reply = Reply::to(request, Ok(Response::Nil));
        Self {
            task,
            id,
            follow: (reply.native == Some(Native::DelIfEq)).then(|| Box::new(request.clone())),
            reply,
            command: request.command,
            generation,
        }
    }
}

impl Node {
    /// Sends `requests` (this node's, in the order the core emitted them,
    /// named by `ids`) straight onto its plain connection, as one write:
    /// their answers come out of its wire, each with its [`Tag`]
    /// ([`landed`](Self::landed)), to driver task `task`, which polls the
    /// wire of the connection of generation `wire`. False, with nothing
    /// sent, where they cannot go so: no plain connection up, or not that
    /// one (its answers would come out elsewhere), some wait for the AOF
    /// (a `WAITAOF` ends their pipeline), or the connection bounds its
    /// batches (a simulation's planted bug).
    pub(crate) fn send_tagged(
        &self,
        task: u64,
        wire: u64,
        ids: &[RequestId],
        requests: &[Request],
    ) -> bool {
        if requests.iter().any(|request| request.aof) {
            return false;
        }
        let state = self.lock_state();
        let Link::Up {
            connection: Connection::Plain(plain),
            generation,
        } = &state.link
        else {
            return false;
        };
        if *generation != wire {
            return false;
        }
        plain.send(
            |out| {
                for request in requests {
                    redlock_core::resp::encode(&request.words(), out);
                }
            },
            ids.iter()
                .zip(requests)
                .map(|(id, request)| Tag::of(task, *id, request, *generation)),
        )
    }

    /// The reply to the request of `tag`, from the node's `answer` (`Err`
    /// with whether the connection ended first), judged as every answer is
    /// ([`finish`](Self::finish)). `None` where the core says another
    /// request follows it on this node ([`Request::follow_up`]): that one
    /// is sent now, under the same name, and its answer is the reply.
    pub(crate) fn landed(
        &self,
        tag: Tag,
        answer: Result<Response, (NodeError, bool)>,
    ) -> Option<(RequestId, Reply)> {
        let answer = answer.map_err(|(error, broke)| Failure { error, broke });
        let reply = Reply {
            result: self.finish(tag.command, tag.generation, answer),
            ..tag.reply
        };
        if let Some(request) = &tag.follow
            && let Some(next) = request.follow_up(&reply)
        {
            if self.send_tagged(
                tag.task,
                tag.generation,
                &[tag.id],
                std::slice::from_ref(&next),
            ) {
                return None;
            }
            return Some((tag.id, Reply::to(&next, Err(self.not_connected()))));
        }
        Some((tag.id, reply))
    }
}
