//! The scripts on a node: their SHA1 digests, computed once, and sending a
//! script by `EVALSHA`, loading it again on `NOSCRIPT`.

use std::borrow::Cow;
use std::sync::{Arc, LazyLock};

use redis::{Cmd, ErrorKind, RedisError, ServerErrorKind, Value};
use redlock_core::{NodeError, NodeErrorKind, Request, Response, scripts};
use tracing::debug;

use super::Node;
use super::connect::Connection;
use super::encode::evalsha;
use super::reply::map_error;
use crate::node::order::Ticket;

/// Every script the core may ask for, with its SHA1, computed once.
pub(super) struct Script {
    pub(super) source: &'static str,
    pub(super) sha: String,
}

pub(super) static SCRIPTS: LazyLock<[Script; scripts::ALL.len()]> = LazyLock::new(|| {
    scripts::ALL.map(|source| Script {
        source,
        sha: redis::Script::new(source).get_hash().to_owned(),
    })
});

pub(super) fn sha_of(source: &'static str) -> Cow<'static, str> {
    SCRIPTS
        .iter()
        // The core hands out its own constants: the pointer check is
        // enough, and skips comparing the texts of a dozen scripts.
        .find(|script| std::ptr::eq(script.source, source) || script.source == source)
        .map(|script| Cow::Borrowed(script.sha.as_str()))
        // A command added to the core later: hash its script on the fly.
        .unwrap_or_else(|| Cow::Owned(redis::Script::new(source).get_hash().to_owned()))
}

impl Node {
    pub(super) async fn evalsha(
        self: &Arc<Self>,
        connection: &mut Connection,
        generation: u64,
        request: &Request,
        script: &'static str,
    ) -> Result<Response, NodeError> {
        let sha = sha_of(script);
        let call = evalsha(&sha, request);
        // Every request carries the lock key first.
        let key = &request.keys[0];
        let mut ticket = None;
        let first = self
            .order
            .send(key, &mut ticket, call.query_async::<Value>(connection))
            .await;
        self.answer_script(connection, generation, request, script, first, ticket)
            .await
    }

    /// `first`, the node's answer to `request` sent as `EVALSHA` of
    /// `script` with `ticket` its place, as the core's answer; on `NOSCRIPT`
    /// the script is loaded and the request sent again if it still may be
    /// ([`reload`](Self::reload)).
    pub(super) async fn answer_script(
        self: &Arc<Self>,
        connection: &mut Connection,
        generation: u64,
        request: &Request,
        script: &'static str,
        first: Result<Value, RedisError>,
        ticket: Option<Ticket<'_>>,
    ) -> Result<Response, NodeError> {
        let result = match (first, ticket) {
            (Err(err), Some(ticket))
                if err.kind() == ErrorKind::Server(ServerErrorKind::NoScript) =>
            {
                let call = evalsha(&sha_of(script), request);
                // Boxed: the rare path would otherwise more than double
                // the size of every request's future (allocated per request,
                // past the allocator's fast sizes).
                Box::pin(self.reload(connection, request, script, &call, ticket)).await?
            }
            (first, _) => first,
        };
        self.finish(request, generation, result)
    }

    /// After `NOSCRIPT`: loads `script` and sends `call` again, unless a
    /// later request for its key was sent meanwhile (then the request
    /// fails, and the script is loaded for the requests to come).
    async fn reload(
        &self,
        connection: &mut Connection,
        request: &Request,
        script: &'static str,
        call: &Cmd,
        mut ticket: Ticket<'_>,
    ) -> Result<Result<Value, RedisError>, NodeError> {
        let command = request.command;
        // The load and the request go out back to back, so nothing
        // queued after them runs between the two.
        let mut loading = connection.clone();
        let mut load = redis::cmd("SCRIPT");
        load.arg("LOAD").arg(script);
        let load = load.query_async::<String>(&mut loading);
        let again = call.query_async::<Value>(connection);
        match self
            .order
            .resend(&mut ticket, futures::future::join(load, again))
            .await
        {
            Some((_, again)) => {
                debug!(node = %self.name, command = command.name(), "NOSCRIPT: script loaded and request sent again");
                Ok(again)
            }
            None => {
                // Load the script for the requests to come all the same;
                // this one failed.
                let load = redis::cmd("SCRIPT")
                    .arg("LOAD")
                    .arg(script)
                    .query_async::<String>(connection)
                    .await;
                if let Err(err) = load {
                    return Err(map_error(&err));
                }
                debug!(node = %self.name, command = command.name(), "NOSCRIPT: not sent again, a later request for the key was sent already");
                Err(NodeError::new(
                    NodeErrorKind::Server,
                    "NOSCRIPT: the node's script cache was flushed; the request \
                     was not sent again, to keep the key's commands in order",
                ))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shas_match_redis_script() {
        for script in SCRIPTS.iter() {
            assert_eq!(script.sha.len(), 40);
            assert_eq!(sha_of(script.source), script.sha);
        }
    }
}
