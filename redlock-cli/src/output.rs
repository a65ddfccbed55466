//! Messages in plain words or JSON lines, and where each goes.
//!
//! Plain messages go to stderr, prefixed with `redlock: `; stdout carries
//! only results (`status`, `release`, `leader`) or nothing at all (`exec`,
//! `elect`: stdout belongs to the command). With `--json`, every message is
//! one JSON object on one line instead, with an `"event"` field: on stderr
//! for `exec` and `elect`, on stdout for the others.

use std::fmt;
use std::io::Write;
use std::time::Duration;

use redlock_tokio::core::{NodeVote, Votes};
use serde_json::{Value, json};

/// How much a plain message matters, for `--quiet`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Level {
    /// Progress: hidden by `--quiet`.
    Progress,
    /// An expected refusal (the lock is busy): hidden by `--quiet`, as
    /// `flock -n` is silent.
    Busy,
    /// Something went wrong: always shown.
    Error,
}

/// Where JSON lines go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum JsonTo {
    Stdout,
    Stderr,
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct Output {
    json: Option<JsonTo>,
    quiet: bool,
}

impl Output {
    pub(crate) fn new(json: bool, json_to: JsonTo, quiet: bool) -> Self {
        Self {
            json: json.then_some(json_to),
            quiet,
        }
    }

    /// A message: `text` in plain mode, `event` in JSON mode. Both are built
    /// only when needed.
    pub(crate) fn event(
        &self,
        level: Level,
        text: impl FnOnce() -> String,
        event: impl FnOnce() -> Value,
    ) {
        match self.json {
            Some(to) => self.json_line(to, &event()),
            None if self.quiet && level != Level::Error => {}
            None => {
                // A closed stderr must not turn into a panic or an exit code.
                let _ = writeln!(std::io::stderr().lock(), "redlock: {}", text());
            }
        }
    }

    /// An event only worth a JSON line (plain mode says nothing).
    pub(crate) fn json_only(&self, event: impl FnOnce() -> Value) {
        if let Some(to) = self.json {
            self.json_line(to, &event());
        }
    }

    /// A result: `text` (any number of lines) on stdout in plain mode,
    /// `event` in JSON mode. `--quiet` does not hide results.
    pub(crate) fn result(&self, text: impl FnOnce() -> String, event: impl FnOnce() -> Value) {
        match self.json {
            Some(to) => self.json_line(to, &event()),
            None => {
                let _ = write!(std::io::stdout().lock(), "{}", text());
            }
        }
    }

    fn json_line(&self, to: JsonTo, event: &Value) {
        let line = format!("{event}\n");
        let _ = match to {
            JsonTo::Stdout => std::io::stdout().lock().write_all(line.as_bytes()),
            JsonTo::Stderr => std::io::stderr().lock().write_all(line.as_bytes()),
        };
    }
}

/// A duration for people: `450ms`, `9s 900ms`, `2m 5s`.
pub(crate) struct Human(pub(crate) Duration);

impl fmt::Display for Human {
    /// As `humantime::format_duration` writes it (`450ms`, `9s 800ms`,
    /// `2m 5s`, `19days 19h 12m`), rounded down to a precision that grows
    /// with the duration, so that a validity never reads longer than it is
    /// and a long one is not written to the microsecond.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const SECOND: u128 = 1_000;
        const MINUTE: u128 = 60 * SECOND;
        const HOUR: u128 = 60 * MINUTE;
        let millis = self.0.as_millis();
        let step = if millis < SECOND {
            1
        } else if millis < MINUTE {
            100
        } else if millis < HOUR {
            SECOND
        } else {
            MINUTE
        };
        let rounded = u64::try_from(millis - millis % step).unwrap_or(u64::MAX);
        write!(
            f,
            "{}",
            humantime::format_duration(Duration::from_millis(rounded))
        )
    }
}

/// Milliseconds for JSON.
pub(crate) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// Every node's vote, for JSON: `[{"node": ..., "vote": ..., "detail": ...}]`.
/// Never contains another owner's value.
pub(crate) fn votes_json(votes: &Votes) -> Value {
    votes
        .iter()
        .map(|(node, vote)| {
            json!({
                "node": node,
                "vote": vote_name(vote),
                "detail": vote_detail(vote),
            })
        })
        .collect()
}

/// Every node's part in a release, for JSON:
/// `[{"node": ..., "result": "released" | "not_held" | "failed", "detail": ...}]`.
pub(crate) fn release_json(votes: &Votes) -> Value {
    votes
        .iter()
        .map(|(node, vote)| {
            json!({
                "node": node,
                "result": match vote {
                    NodeVote::Granted => "released",
                    NodeVote::Missing | NodeVote::HeldByOther(_) | NodeVote::NotOurs => "not_held",
                    NodeVote::Failed(_) => "failed",
                    other => vote_name(other),
                },
                "detail": release_detail(vote),
            })
        })
        .collect()
}

/// A node's part in a release in words: a vote's own words say what it
/// meant for a lock ("granted"), not what the release did.
fn release_detail(vote: &NodeVote) -> String {
    match vote {
        NodeVote::Granted => "key deleted".to_owned(),
        // Not a failure: the outcome was certain before its answer.
        NodeVote::Pending => "finishing in the background".to_owned(),
        vote => vote_detail(vote),
    }
}

/// A one-word name for a vote, stable for scripts.
pub(crate) fn vote_name(vote: &NodeVote) -> &'static str {
    match vote {
        NodeVote::Pending => "pending",
        NodeVote::Granted => "granted",
        NodeVote::Restored => "restored",
        NodeVote::HeldByOther(_) => "held_by_other",
        NodeVote::Missing => "missing",
        NodeVote::NotOurs => "not_ours",
        NodeVote::Failed(_) => "failed",
        _ => "other",
    }
}

/// A vote in words. A round is decided as soon as its outcome is certain,
/// and a node whose answer had not come by then may be up or down: the
/// core's "not waited for", with the reason, for a reader of the JSON.
fn vote_detail(vote: &NodeVote) -> String {
    match vote {
        NodeVote::Pending => "not waited for: the round was decided before its answer".to_owned(),
        vote => vote.to_string(),
    }
}

pub(crate) use crate::cli::command_line;

/// Bytes as text: UTF-8 as it is, other bytes as `\xNN`.
pub(crate) fn text_of(bytes: &[u8]) -> String {
    redlock_tokio::core::Key::from(bytes).to_string()
}

#[cfg(test)]
pub(crate) mod tests {
    use std::sync::Arc;
    use std::time::Instant;

    use rand::SeedableRng;
    use rand::rngs::StdRng;
    use redlock_tokio::core::{
        AcquireError, AcquireEvent, Acquisition, Attempts, Config, Machine, NodeError,
        NodeErrorKind, Reply, Response,
    };

    use super::*;

    /// A node's answer to an acquire: granted, held by another owner,
    /// connection refused.
    pub(crate) type Answer = fn() -> Result<Response, NodeError>;
    pub(crate) const GRANTED: Answer = || Ok(Response::Int(1));
    pub(crate) const HELD: Answer = || Ok(Response::Data(b"another".to_vec()));
    pub(crate) const REFUSED: Answer = || Err(NodeError::new(NodeErrorKind::Connection, "refused"));

    /// One acquire attempt on nodes `a`, `b` and `c` (quorum 2), as the
    /// client's core decides it: `answers` come from the first nodes in
    /// order, and the round ends as soon as its outcome is certain (the
    /// other nodes are not waited for). The lock's votes, or the error.
    pub(crate) fn round(answers: &[Answer]) -> Result<Votes, AcquireError> {
        let settings = Arc::new(Config::new(["a", "b", "c"]).validate().expect("valid"));
        let now = Instant::now();
        let mut acquire = Acquisition::new(
            Arc::clone(&settings),
            b"k",
            settings.default_ttl(),
            Attempts::Once,
            now,
            StdRng::seed_from_u64(7),
        );
        let requests: Vec<_> = std::iter::from_fn(|| acquire.poll_request()).collect();
        for (request, answer) in requests.iter().zip(answers) {
            acquire.handle_reply(Reply::to(request, answer()), now);
            match acquire.poll_event() {
                Some(AcquireEvent::Acquired(lock)) => return Ok(lock.votes().clone()),
                Some(AcquireEvent::Failed(error)) => return Err(error),
                _ => {}
            }
        }
        panic!("{} answers left the round undecided", answers.len());
    }

    #[test]
    fn a_vote_not_waited_for_is_not_said_to_be_coming() {
        let votes = round(&[GRANTED, GRANTED]).expect("acquired");
        let json = votes_json(&votes);
        assert_eq!(json[2]["node"], "c");
        assert_eq!(json[2]["vote"], "pending");
        let detail = json[2]["detail"].as_str().expect("a detail");
        assert!(detail.starts_with("not waited for"), "{detail}");
        assert!(!detail.contains("yet"), "{detail}");
        assert_eq!(json[0]["detail"], "granted");
    }

    /// A node where the release deleted the key says so, not "granted".
    #[test]
    fn a_release_says_what_it_did_on_each_node() {
        let votes = round(&[GRANTED, HELD, GRANTED]).expect("acquired");
        let json = release_json(&votes);
        assert_eq!(json[0]["result"], "released");
        assert_eq!(json[0]["detail"], "key deleted");
        assert_eq!(json[1]["result"], "not_held");
        assert_eq!(json[1]["detail"], "held by another owner");
    }

    #[test]
    fn durations_read_well() {
        let human = |millis: u64| Human(Duration::from_millis(millis)).to_string();
        assert_eq!(human(0), "0s");
        assert_eq!(human(450), "450ms");
        assert_eq!(human(9_870), "9s 800ms");
        assert_eq!(human(125_400), "2m 5s");
        // A validity of 20 days, less its drift: no "1425599m 60.0s".
        let day = 24 * 3600 * 1000;
        assert_eq!(human(20 * day - day / 5 - 2), "19days 19h 11m");
        // humantime's years and months are 365.25 and 30.44 days.
        assert_eq!(human(1000 * day), "2years 8months 25days 23h 31m 12s");
    }

    #[test]
    fn command_lines_are_quoted() {
        let args: Vec<std::ffi::OsString> = ["make", "deploy", "it's here", ""]
            .into_iter()
            .map(Into::into)
            .collect();
        assert_eq!(command_line(&args), r"make deploy 'it'\''s here' ''");
    }

    #[test]
    fn binary_values_are_escaped() {
        assert_eq!(text_of(b"ab\xffc"), r"ab\xffc");
    }
}
