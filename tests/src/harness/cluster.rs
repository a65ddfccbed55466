//! Several independent Redis masters, as Redlock uses them.

use std::panic;
use std::thread;

use super::node::{NodeOptions, RedisNode};

/// `n` independent [`RedisNode`]s: no replication, no Redis Cluster, just
/// separate masters on separate ports, which is what Redlock runs against.
///
/// The servers start in parallel. Dropping the cluster kills them all.
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<RedisNode>,
}

impl RedisCluster {
    /// Starts `n` servers with default [`NodeOptions`].
    ///
    /// # Panics
    /// If any server fails to start (the ones that did start are killed).
    pub fn start(n: usize) -> Self {
        Self::start_with(n, &NodeOptions::default())
    }

    /// Starts `n` servers, each with a copy of `options`.
    ///
    /// # Panics
    /// If any server fails to start (the ones that did start are killed).
    pub fn start_with(n: usize, options: &NodeOptions) -> Self {
        let results: Vec<thread::Result<RedisNode>> = thread::scope(|scope| {
            let starts: Vec<_> = (0..n)
                .map(|_| scope.spawn(|| RedisNode::start_with(options.clone())))
                .collect();
            starts.into_iter().map(|start| start.join()).collect()
        });
        let mut nodes = Vec::with_capacity(n);
        let mut failure = None;
        for result in results {
            match result {
                Ok(node) => nodes.push(node),
                Err(payload) => failure = failure.or(Some(payload)),
            }
        }
        if let Some(payload) = failure {
            drop(nodes);
            panic::resume_unwind(payload);
        }
        Self { nodes }
    }

    /// A cluster of nodes started elsewhere (for example with different
    /// [`NodeOptions`] each).
    pub fn from_nodes(nodes: Vec<RedisNode>) -> Self {
        Self { nodes }
    }

    /// All nodes, in start order.
    pub fn nodes(&self) -> &[RedisNode] {
        &self.nodes
    }

    /// Node `i`.
    ///
    /// # Panics
    /// If `i >= self.len()`.
    pub fn node(&self, i: usize) -> &RedisNode {
        &self.nodes[i]
    }

    /// Node `i`, mutably (every [`RedisNode`] method takes `&self`, so this is
    /// rarely needed).
    ///
    /// # Panics
    /// If `i >= self.len()`.
    pub fn node_mut(&mut self, i: usize) -> &mut RedisNode {
        &mut self.nodes[i]
    }

    /// The number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// True for a cluster of zero nodes.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Every node's [`RedisNode::url`], in node order.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisNode::url).collect()
    }
}
