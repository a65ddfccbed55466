//! `redlock status`: who holds a lock, on which nodes, for how long.

use std::fmt::Write as _;
use std::time::Duration;

use redlock_tokio::{NodeInspection, Redlock};
use serde_json::{Value, json};

use crate::cli::StatusArgs;
use crate::connect::connect;
use crate::failure;
use crate::output::{Human, Output, millis, text_of};

pub(crate) async fn run(args: StatusArgs, output: &Output) -> u8 {
    let redlock = match connect(&args.common, |builder| builder).await {
        Ok(redlock) => redlock,
        Err(failure) => return failure.report(output),
    };
    let inspections = redlock.inspect(&args.key).await;
    let status = Status::new(&redlock, &args.key, inspections);
    output.result(|| status.text(), || status.json());
    if status.answered < status.quorum {
        failure::NO_QUORUM
    } else {
        failure::SUCCESS
    }
}

/// The summary of every node's answer.
struct Status {
    key: String,
    redis_key: String,
    quorum: usize,
    answered: usize,
    nodes: Vec<NodeInspection>,
    /// The value held on at least a quorum of nodes, how many hold it, and
    /// for how long a quorum of them still will (unless extended).
    holder: Option<(Vec<u8>, usize, Option<Duration>)>,
}

impl Status {
    fn new(redlock: &Redlock, key: &str, nodes: Vec<NodeInspection>) -> Self {
        let quorum = redlock.settings().quorum();
        let answered = nodes.iter().filter(|node| node.result.is_ok()).count();
        let mut values: Vec<(&[u8], Vec<Option<Duration>>)> = Vec::new();
        for holding in nodes
            .iter()
            .filter_map(|node| node.result.as_ref().ok()?.as_ref())
        {
            match values
                .iter_mut()
                .find(|(value, _)| *value == holding.value.as_slice())
            {
                Some((_, ttls)) => ttls.push(holding.pttl),
                None => values.push((&holding.value, vec![holding.pttl])),
            }
        }
        let holder = values
            .into_iter()
            .find(|(_, ttls)| ttls.len() >= quorum)
            .map(|(value, mut ttls)| {
                // The lock stands while a quorum holds the key: the quorum-th
                // longest PTTL. A key without expiry (`None`) lasts longest.
                ttls.sort_by(|a, b| b.unwrap_or(Duration::MAX).cmp(&a.unwrap_or(Duration::MAX)));
                (value.to_vec(), ttls.len(), ttls[quorum - 1])
            });
        Self {
            key: key.to_owned(),
            redis_key: text_of(redlock.settings().key(key.as_bytes()).as_bytes()),
            quorum,
            answered,
            nodes,
            holder,
        }
    }

    /// `held`, `not_held` or `unknown` (too few nodes answered to tell).
    fn state(&self) -> &'static str {
        if self.holder.is_some() {
            "held"
        } else if self.answered < self.quorum {
            "unknown"
        } else {
            "not_held"
        }
    }

    fn text(&self) -> String {
        let total = self.nodes.len();
        let mut text = String::new();
        let _ = match (&self.holder, self.state()) {
            (Some((value, count, left)), _) => {
                let left = match left {
                    Some(left) => format!("for about {} more unless extended", Human(*left)),
                    None => "with no expiry (not set by redlock)".to_owned(),
                };
                writeln!(
                    text,
                    "lock {}: held on {count} of {total} nodes (quorum {}), {left}\nvalue: {}",
                    self.key,
                    self.quorum,
                    text_of(value)
                )
            }
            (None, "unknown") => writeln!(
                text,
                "lock {}: unknown: only {} of {total} nodes answered (quorum {})",
                self.key, self.answered, self.quorum
            ),
            (None, _) => {
                let held = self
                    .nodes
                    .iter()
                    .filter(|node| matches!(node.result, Ok(Some(_))))
                    .count();
                if held == 0 {
                    writeln!(text, "lock {}: free on every node that answered", self.key)
                } else {
                    writeln!(
                        text,
                        "lock {}: not held by a quorum (the key is on {held} of {total} nodes; quorum {}): \
                         an acquire in progress, or keys left to expire",
                        self.key, self.quorum
                    )
                }
            }
        };
        for node in &self.nodes {
            let _ = write!(text, "  {}: ", node.node);
            let _ = match &node.result {
                Err(error) => write!(text, "error: {error}"),
                Ok(None) => write!(text, "free"),
                Ok(Some(holding)) => {
                    let _ = write!(text, "held");
                    match &self.holder {
                        Some((value, _, _)) if *value == holding.value => {}
                        _ => {
                            let _ = write!(text, " by value {}", text_of(&holding.value));
                        }
                    }
                    match holding.pttl {
                        Some(pttl) => write!(text, ", expires in {}", Human(pttl)),
                        None => write!(text, ", no expiry"),
                    }
                }
            };
            if let Some(counter) = node.fencing_counter {
                let _ = write!(text, ", fencing counter {counter}");
            }
            text.push('\n');
        }
        text
    }

    fn json(&self) -> Value {
        let nodes: Vec<Value> = self
            .nodes
            .iter()
            .map(|node| {
                let (state, value, pttl, error) = match &node.result {
                    Err(error) => ("error", None, None, Some(error.to_string())),
                    Ok(None) => ("free", None, None, None),
                    Ok(Some(holding)) => (
                        "held",
                        Some(text_of(&holding.value)),
                        holding.pttl.map(millis),
                        None,
                    ),
                };
                json!({
                    "node": node.node,
                    "state": state,
                    "value": value,
                    "pttl_ms": pttl,
                    "fencing_counter": node.fencing_counter,
                    "error": error,
                })
            })
            .collect();
        let holder = self.holder.as_ref().map(|(value, count, left)| {
            json!({
                "value": text_of(value),
                "nodes": count,
                "remaining_ms": left.map(millis),
            })
        });
        json!({
            "event": "status",
            "key": self.key,
            "redis_key": self.redis_key,
            "state": self.state(),
            "quorum": self.quorum,
            "nodes_total": self.nodes.len(),
            "nodes_answered": self.answered,
            "holder": holder,
            "nodes": nodes,
        })
    }
}
