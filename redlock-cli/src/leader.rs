//! `redlock leader`: who leads an election, on every node.

use std::fmt::Write as _;

use redlock_tokio::LeaderReport;
use serde_json::{Value, json};

use crate::cli::{Common, LeaderArgs};
use crate::connect::connect;
use crate::failure;
use crate::output::{Output, text_of};

pub(crate) async fn run(common: &Common, args: LeaderArgs, output: &Output) -> u8 {
    let redlock = match connect(common, |builder| builder).await {
        Ok(redlock) => redlock,
        Err(failure) => return failure.report(output),
    };
    let report = redlock.election(&args.key).leader().await;
    let nodes = redlock.nodes();
    output.result(
        || text(&args.key, nodes, &report),
        || json(&args.key, nodes, &report),
    );
    let answered = report.reads.iter().filter(|read| read.is_ok()).count();
    if answered < redlock.settings().quorum() {
        failure::NO_QUORUM
    } else {
        failure::SUCCESS
    }
}

fn text(key: &str, nodes: &[String], report: &LeaderReport) -> String {
    let mut text = match report.leader() {
        Some(leader) => {
            let value = leader
                .value
                .as_deref()
                .map_or_else(|| "none proclaimed".to_owned(), text_of);
            format!(
                "election {key}: led by {} in term {}, value: {value}\n",
                text_of(&leader.id),
                leader.term
            )
        }
        None => format!("election {key}: no leader on a quorum of the nodes\n"),
    };
    for (node, read) in nodes.iter().zip(&report.reads) {
        let _ = write!(text, "  {node}: ");
        let _ = match read {
            Err(error) => write!(text, "error: {error}"),
            Ok(reply) => {
                let _ = match &reply.holder {
                    Some(id) => write!(text, "held by {}", text_of(id)),
                    None => write!(text, "free"),
                };
                if let Some(counter) = reply.counter {
                    let _ = write!(text, ", term counter {counter}");
                }
                match &reply.record {
                    Some((term, id, value)) => write!(
                        text,
                        ", proclaimed {} by {} in term {term}",
                        text_of(value),
                        text_of(id)
                    ),
                    None => Ok(()),
                }
            }
        };
        text.push('\n');
    }
    text
}

fn json(key: &str, nodes: &[String], report: &LeaderReport) -> Value {
    let leader = report.leader().map(|leader| {
        json!({
            "id": text_of(&leader.id),
            "term": leader.term,
            "value": leader.value.as_deref().map(text_of),
        })
    });
    let nodes: Vec<Value> = nodes
        .iter()
        .zip(&report.reads)
        .map(|(node, read)| match read {
            Err(error) => json!({ "node": node, "error": error.to_string() }),
            Ok(reply) => json!({
                "node": node,
                "holder": reply.holder.as_deref().map(text_of),
                "counter": reply.counter,
                "record": reply.record.as_ref().map(|(term, id, value)| json!({
                    "term": term,
                    "id": text_of(id),
                    "value": text_of(value),
                })),
            }),
        })
        .collect();
    json!({ "event": "leader", "key": key, "leader": leader, "nodes": nodes })
}
