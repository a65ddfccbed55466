//! What a chaos worker records: one JSON object per line, one file per
//! process.
//!
//! Times are nanoseconds on the host's `CLOCK_MONOTONIC`
//! ([`mono_ns`](super::clock::mono_ns)), so records of different processes
//! compare. Every object has a `kind`: `attempt` (one acquire call, waiting
//! or not), `grant` (written, and flushed, the moment a lock is granted),
//! `extended` (the validity the client was promised moved on), `hold` (the
//! whole hold, written when it ends) or `write` (one write to the protected
//! resource). A worker killed mid-hold leaves a `grant` without its `hold`:
//! the checker takes such an open hold to last until the end of the last
//! validity the client was promised.

use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::path::Path;

use serde::{Deserialize, Serialize};

/// One line of a worker's file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Record {
    /// One call to `lock`/`try_lock`, whatever its outcome.
    Attempt(Attempt),
    /// A lock was just granted; its `hold` record comes when it ends.
    Grant(Grant),
    /// A hold's validity was extended.
    Extended(Extended),
    /// A granted lock, once it ended.
    Hold(Hold),
    /// A write to the protected resource.
    Write(Write),
}

/// Which acquire call a worker made.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Api {
    /// `lock(..)`: retries with jitter.
    Lock,
    /// `lock(..).wait(Wait::No)`: one attempt.
    TryLock,
}

/// How an acquire call ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The lock was granted.
    Granted,
    /// Another owner held it (`AcquireError::Held`).
    Held,
    /// Too few nodes answered (`AcquireError::NoQuorum`).
    NoQuorum,
    /// A quorum said yes too late (`AcquireError::ValidityExhausted`).
    ValidityExhausted,
    /// The acquire deadline passed (`AcquireError::DeadlineExceeded`).
    DeadlineExceeded,
    /// Anything else (the record's `error` says what).
    Other,
}

/// One acquire call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Attempt {
    /// The worker process's id in the scenario.
    pub worker: u32,
    /// The resource name.
    pub key: String,
    /// Which call.
    pub api: Api,
    /// When the call was made.
    pub start_ns: u64,
    /// When it returned.
    pub end_ns: u64,
    /// How it ended.
    pub outcome: Outcome,
    /// The error's text, for outcomes other than `granted` and `held`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The start of a hold, recorded before any work under the lock.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Grant {
    /// The worker process's id in the scenario.
    pub worker: u32,
    /// The hold's number within its worker.
    pub hold: u64,
    /// The resource name.
    pub key: String,
    /// When `lock` returned the guard.
    pub granted_ns: u64,
    /// The end of the validity at the grant.
    pub valid_until_ns: u64,
    /// When the acquisition round that won the lock started (`valid_until`
    /// minus the TTL less drift): exact whatever the machine's load, since
    /// the client measured validity from that instant.
    pub round_started_ns: u64,
    /// The lock's fencing token, when it was taken with fencing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fencing_token: Option<u64>,
}

/// The validity a hold's client was promised moved on (an extension).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Extended {
    /// The worker process's id in the scenario.
    pub worker: u32,
    /// The hold's number within its worker.
    pub hold: u64,
    /// The new end of the validity.
    pub valid_until_ns: u64,
}

/// A granted lock: the window in which its holder believed it held it.
///
/// The window starts when `lock` returned the guard (`granted_ns`) and ends
/// at `end_ns`, the earlier of the release call and the end of the validity
/// the client was last promised. Redlock's safety property is that two such
/// windows of one key never overlap.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Hold {
    /// The worker process's id in the scenario.
    pub worker: u32,
    /// The hold's number within its worker (writes refer to it).
    pub hold: u64,
    /// The resource name.
    pub key: String,
    /// When `lock` returned the guard.
    pub granted_ns: u64,
    /// The end of the validity at the grant.
    pub valid_until_ns: u64,
    /// When the acquisition round that won the lock started.
    pub round_started_ns: u64,
    /// The end of the window: the release call, or the end of the last
    /// validity the client was promised, whichever came first.
    pub end_ns: u64,
    /// When the worker called `release`.
    pub released_ns: u64,
    /// The lock's fencing token, when it was taken with fencing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fencing_token: Option<u64>,
    /// Whether the lock was kept alive.
    pub keep_alive: bool,
    /// Successful extensions (explicit or by the keep-alive).
    pub extensions: u64,
    /// The longest time between two consecutive steps of the worker inside
    /// the hold, in ms: a stopped process (SIGSTOP) shows up here.
    pub longest_stall_ms: f64,
    /// Whether a stall outlasted the validity the client had.
    pub paused_past_validity: bool,
    /// Whether the worker, once running again, saw that the lock was gone
    /// (`validity()` zero, or the keep-alive's loss signal). Set when the
    /// validity ran out before the release.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub noticed_loss: Option<bool>,
    /// The keep-alive's loss reason, when it signalled one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss: Option<String>,
    /// Whether the hold never ended in its worker (the process was killed
    /// mid-hold): rebuilt by the checker from its `grant` and `extended`
    /// records, lasting until the last validity promised.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub open: bool,
}

impl Hold {
    /// A hold whose worker never wrote its end: it lasts until the end of
    /// the last validity its client was promised.
    pub fn open(grant: &Grant, valid_until_ns: u64) -> Self {
        Self {
            worker: grant.worker,
            hold: grant.hold,
            key: grant.key.clone(),
            granted_ns: grant.granted_ns,
            valid_until_ns: grant.valid_until_ns,
            round_started_ns: grant.round_started_ns,
            end_ns: valid_until_ns,
            released_ns: valid_until_ns,
            fencing_token: grant.fencing_token,
            keep_alive: false,
            extensions: 0,
            longest_stall_ms: 0.0,
            paused_past_validity: false,
            noticed_loss: None,
            loss: None,
            open: true,
        }
    }
}

#[cfg(test)]
impl Hold {
    /// A made-up hold of the checkers' tests: held over `[granted, end)`,
    /// ended by a release, nothing else to tell.
    pub(crate) fn made_up(worker: u32, hold: u64, key: &str, granted_ns: u64, end_ns: u64) -> Self {
        let grant = Grant {
            worker,
            hold,
            key: key.to_owned(),
            granted_ns,
            valid_until_ns: end_ns,
            round_started_ns: granted_ns,
            fencing_token: None,
        };
        Self {
            open: false,
            ..Self::open(&grant, end_ns)
        }
    }
}

/// What a write to the protected resource carried as its token.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TokenKind {
    /// The lock's fencing token (`LockGuard::fencing_token`).
    Fencing,
    /// A stand-in for locks taken without fencing: the grant instant on the
    /// host's monotonic clock. It orders non-overlapping holds like a
    /// fencing token would, but only because every process shares one
    /// clock; no real deployment has such an oracle.
    GrantInstant,
}

/// One write to the protected resource.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Write {
    /// The worker process's id in the scenario.
    pub worker: u32,
    /// The hold it was made under.
    pub hold: u64,
    /// The resource name.
    pub key: String,
    /// The token sent with the write.
    pub token: u64,
    /// What the token is.
    pub token_kind: TokenKind,
    /// When the write was sent.
    pub sent_ns: u64,
    /// When the resource's answer arrived.
    pub done_ns: u64,
    /// Whether the client still believed it held the lock (validity left,
    /// no loss signalled) just before sending.
    pub believed_valid: bool,
    /// Whether the resource accepted it (its token was not lower than the
    /// highest it had seen).
    pub accepted: bool,
    /// The resource's order of application, across all writers.
    pub seq: u64,
}

/// Reads a worker's file. A last line cut short (a worker killed while
/// writing) is skipped; any other unparsable line is an error.
pub fn read_records(path: &Path) -> io::Result<Vec<Record>> {
    let lines: Vec<String> = BufReader::new(File::open(path)?)
        .lines()
        .collect::<io::Result<_>>()?;
    let mut records = Vec::with_capacity(lines.len());
    for (i, line) in lines.iter().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str(line) {
            Ok(record) => records.push(record),
            Err(_) if i + 1 == lines.len() => {}
            Err(err) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{}:{}: {err}", path.display(), i + 1),
                ));
            }
        }
    }
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_as_tagged_json_lines() {
        let record = Record::Write(Write {
            worker: 2,
            hold: 7,
            key: "k".into(),
            token: 41,
            token_kind: TokenKind::Fencing,
            sent_ns: 10,
            done_ns: 20,
            believed_valid: true,
            accepted: false,
            seq: 3,
        });
        let line = serde_json::to_string(&record).unwrap();
        assert!(line.starts_with(r#"{"kind":"write","worker":2"#), "{line}");
        assert_eq!(serde_json::from_str::<Record>(&line).unwrap(), record);
    }

    #[test]
    fn a_truncated_last_line_is_skipped() {
        let dir = std::env::temp_dir().join(format!("chaos-record-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("w.jsonl");
        let attempt = Record::Attempt(Attempt {
            worker: 0,
            key: "k".into(),
            api: Api::TryLock,
            start_ns: 1,
            end_ns: 2,
            outcome: Outcome::Held,
            error: None,
        });
        let line = serde_json::to_string(&attempt).unwrap();
        std::fs::write(&path, format!("{line}\n{}", &line[..10])).unwrap();
        assert_eq!(read_records(&path).unwrap(), vec![attempt]);
        std::fs::write(&path, format!("{}\n{line}\n", &line[..10])).unwrap();
        assert!(read_records(&path).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
