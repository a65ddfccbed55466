//! `redlock release`: delete a known value's lock on every node.

use std::fmt::Write as _;

use redlock_tokio::core::{LockValue, NodeVote};
use serde_json::json;

use crate::cli::{Common, ReleaseArgs};
use crate::connect::connect;
use crate::failure::{self, Failure};
use crate::output::{Output, release_json};

pub(crate) async fn run(common: &Common, args: ReleaseArgs, output: &Output) -> u8 {
    if args.value.is_empty() {
        return Failure::usage(
            "--value is empty: give the lock's value, as `redlock status` shows it",
        )
        .report(output);
    }
    let redlock = match connect(common, |builder| builder).await {
        Ok(redlock) => redlock,
        Err(failure) => return failure.report(output),
    };
    let value = LockValue::from_string(args.value.as_str());
    let report = redlock.release_value(&args.key, &value).await;
    let key = args.key.as_str();
    let total = report.votes().votes().len();
    let freed = report.frees_lock();
    // A value held nowhere (mistyped, or a lock already expired or released)
    // has its own exit code, so that a script does not take a typo for a
    // release.
    let not_held = report.held_nowhere();
    output.result(
        || {
            let mut text = if report.released() == 0 && report.failed() == 0 {
                format!("{key}: not held: the value was not held on any node (expired, released, mistyped or never held); nothing deleted\n")
            } else if not_held {
                format!(
                    "{key}: not held: the value was not held on any node that answered (expired, released, mistyped or never held); nothing deleted, failed on {}\n",
                    report.failed()
                )
            } else {
                format!(
                    "{key}: released on {} of {total} nodes, not held on {}, failed on {}\n",
                    report.released(),
                    report.not_held(),
                    report.failed()
                )
            };
            for (node, vote) in report.votes().iter() {
                let what = match vote {
                    NodeVote::Granted => "released".to_owned(),
                    NodeVote::Missing => "not held (no such key)".to_owned(),
                    NodeVote::HeldByOther(_) => {
                        "not held (another value holds it; left alone)".to_owned()
                    }
                    NodeVote::Failed(error) => {
                        format!("failed ({error}); the value may stay until its TTL")
                    }
                    other => other.to_string(),
                };
                let _ = writeln!(text, "  {node}: {what}");
            }
            if !freed {
                let _ = writeln!(
                    text,
                    "too many nodes failed (quorum {}): the value may still hold the lock until its TTL",
                    report.quorum()
                );
            }
            text
        },
        || {
            json!({
                "event": "released",
                "key": key,
                "released": report.released(),
                "not_held": report.not_held(),
                "failed": report.failed(),
                "quorum": report.quorum(),
                "freed": freed,
                "held": !not_held,
                "nodes": release_json(report.votes()),
            })
        },
    );
    if not_held {
        failure::NOT_HELD
    } else if freed {
        failure::SUCCESS
    } else {
        failure::NO_QUORUM
    }
}
