//! `redlock status`: who holds a lock, on which nodes, for how long.

use std::fmt::Write as _;

use redlock_tokio::core::{LockState, LockStatus};
use redlock_tokio::{NodeInspection, Persistence, ServerReport};
use serde_json::{Value, json};

use crate::cli::{Common, StatusArgs};
use crate::connect::connect;
use crate::failure;
use crate::output::{Human, Output, millis, text_of};

pub(crate) async fn run(common: &Common, args: StatusArgs, output: &Output) -> u8 {
    let redlock = match connect(common, |builder| builder).await {
        Ok(redlock) => redlock,
        Err(failure) => return failure.report(output),
    };
    // A semaphore is found by the number of permits its masters keep.
    let kept = || async {
        let reads = redlock.inspect_permits(&args.key).await;
        LockStatus::from_reads(reads.iter().map(NodeInspection::read)).permits()
    };
    let permits = match args.permits {
        Some(permits) => Some(permits),
        None => kept().await,
    };
    if let Some(permits) = permits {
        return permits_status(&redlock, &args.key, permits, output).await;
    }
    let nodes = redlock.inspect(&args.key).await;
    let servers = redlock.servers();
    let status = Status {
        key: args.key.clone(),
        redis_key: text_of(redlock.settings().key(args.key.as_bytes()).as_bytes()),
        lock: LockStatus::from_reads(nodes.iter().map(NodeInspection::read)),
        nodes,
    };
    output.result(
        || status.text() + &servers_text(&servers),
        || with_servers(status.json(), &servers),
    );
    match status.lock.state() {
        LockState::Unknown => failure::NO_QUORUM,
        LockState::Held | LockState::NotHeld => failure::SUCCESS,
    }
}

/// `status --permits K`: each permit as a lock of its own, in slot order.
async fn permits_status(
    redlock: &redlock_tokio::Redlock,
    name: &str,
    permits: u32,
    output: &Output,
) -> u8 {
    let mut all = Vec::new();
    for slot in 0..permits {
        let nodes = redlock.inspect_permit(name, slot).await;
        all.push(Status {
            key: format!("{name} permit {slot}"),
            redis_key: text_of(
                redlock
                    .settings()
                    .permit_key(name.as_bytes(), slot)
                    .as_bytes(),
            ),
            lock: LockStatus::from_reads(nodes.iter().map(NodeInspection::read)),
            nodes,
        });
    }
    let held = all
        .iter()
        .filter(|status| status.lock.state() == LockState::Held)
        .count();
    let servers = redlock.servers();
    output.result(
        || {
            let mut text = format!("semaphore {name}: {held} of {permits} permits held\n");
            all.iter().for_each(|status| text.push_str(&status.text()));
            text + &servers_text(&servers)
        },
        || {
            let json = json!({
                "event": "status",
                "key": name,
                "permits": permits,
                "held": held,
                "slots": all.iter().map(Status::json).collect::<Vec<_>>(),
            });
            with_servers(json, &servers)
        },
    );
    if all
        .iter()
        .any(|status| status.lock.state() == LockState::Unknown)
    {
        failure::NO_QUORUM
    } else {
        failure::SUCCESS
    }
}

/// Every node's answer, and what they say together.
struct Status {
    key: String,
    redis_key: String,
    nodes: Vec<NodeInspection>,
    lock: LockStatus,
}

impl Status {
    /// `held`, `not_held` or `unknown` (too few nodes answered to tell).
    fn state(&self) -> &'static str {
        match self.lock.state() {
            LockState::Held => "held",
            LockState::NotHeld => "not_held",
            LockState::Unknown => "unknown",
        }
    }

    fn text(&self) -> String {
        let LockStatus {
            nodes: total,
            quorum,
            answered,
            with_key,
            ..
        } = self.lock;
        let mut text = String::new();
        let _ = match (&self.lock.holder, self.lock.state()) {
            (Some(holder), _) => {
                let left = match holder.remaining {
                    Some(left) => format!("for about {} more unless extended", Human(left)),
                    None => "with no expiry (not set by redlock)".to_owned(),
                };
                writeln!(
                    text,
                    "lock {}: held on {} of {total} nodes (quorum {quorum}), {left}\nvalue: {}",
                    self.key,
                    holder.nodes,
                    text_of(&holder.value)
                )
            }
            (None, LockState::Unknown) => writeln!(
                text,
                "lock {}: unknown: only {answered} of {total} nodes answered (quorum {quorum})",
                self.key
            ),
            (None, _) => {
                if with_key == 0 {
                    writeln!(text, "lock {}: free on every node that answered", self.key)
                } else {
                    writeln!(
                        text,
                        "lock {}: not held by a quorum (the key is on {with_key} of {total} nodes; quorum {quorum}): \
                         an acquire in progress, or keys left to expire",
                        self.key
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
                    match &self.lock.holder {
                        Some(holder) if holder.value == holding.value => {}
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
        let holder = self.lock.holder.as_ref().map(|holder| {
            json!({
                "value": text_of(&holder.value),
                "nodes": holder.nodes,
                "remaining_ms": holder.remaining.map(millis),
            })
        });
        json!({
            "event": "status",
            "key": self.key,
            "redis_key": self.redis_key,
            "state": self.state(),
            "quorum": self.lock.quorum,
            "nodes_total": self.lock.nodes,
            "nodes_answered": self.lock.answered,
            "holder": holder,
            "nodes": nodes,
        })
    }
}

/// What each server is and keeps, as the connection found it.
fn servers_text(servers: &[ServerReport]) -> String {
    let mut text = String::from("servers:\n");
    for server in servers {
        let _ = writeln!(text, "  {server}");
    }
    text
}

/// `json` with a `servers` array: each server's `node`, `connected`,
/// `server`, `run_ids`, `uptime_s`, `persistence` (`kept` / `weak` /
/// `unknown`), `persistence_risk` (why weak) and `eviction`.
fn with_servers(mut json: Value, servers: &[ServerReport]) -> Value {
    let servers: Vec<Value> = servers
        .iter()
        .map(|server| {
            let (persistence, risk) = match &server.persistence {
                Persistence::Kept => ("kept", None),
                Persistence::Weak(reason) => ("weak", Some(reason.clone())),
                _ => ("unknown", None),
            };
            json!({
                "node": server.node,
                "connected": server.connected,
                "server": server.server,
                "run_ids": server.run_ids,
                "uptime_s": server.uptime.map(|uptime| uptime.as_secs()),
                "persistence": persistence,
                "persistence_risk": risk,
                "eviction": server.eviction,
            })
        })
        .collect();
    json["servers"] = Value::Array(servers);
    json
}
