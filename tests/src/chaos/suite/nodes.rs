//! The masters of the semaphore and election scenarios: harness nodes on
//! loopback, no proxies, with an fsynced AOF where a scenario keeps their
//! data across a restart; and the master faults both schedules share.

use std::sync::Arc;
use std::time::Duration;

use rand::RngExt;
use rand::rngs::StdRng;

use super::instruments::Probe;
use super::schedule::between;
use super::{blocking, hold_open};
use crate::chaos::checker::Window;
use crate::chaos::clock::{mono_ns, ms};
use crate::{NodeOptions, RedisNode};

/// Starts `count` masters; `persistent`: with AOF, fsync at every write
/// (a killed master comes back with its keys and fencing counters).
/// Master 1 gets `first_env` (the clock-shift library, say).
pub(super) fn start_masters(
    count: usize,
    persistent: bool,
    first_env: Vec<(String, String)>,
) -> Vec<RedisNode> {
    let extra_args = if persistent {
        ["--appendonly", "yes", "--appendfsync", "always"]
            .map(String::from)
            .to_vec()
    } else {
        Vec::new()
    };
    let options = NodeOptions {
        extra_args,
        ..NodeOptions::default()
    };
    std::thread::scope(|scope| {
        let starts: Vec<_> = (0..count)
            .map(|i| {
                let mut options = options.clone();
                if i == 0 {
                    options.env = first_env.clone();
                }
                scope.spawn(move || RedisNode::start_with(options))
            })
            .collect();
        starts
            .into_iter()
            .map(|start| {
                start
                    .join()
                    .unwrap_or_else(|p| std::panic::resume_unwind(p))
            })
            .collect()
    })
}

/// Best effort, after a failed fault: every master running again, with its
/// data.
fn restore_all(nodes: &[RedisNode]) {
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        for node in nodes {
            if node.is_running() {
                node.resume();
            } else {
                node.restart_keeping_data();
            }
        }
    }));
}

/// [`restore_all`] on the blocking pool.
pub(super) async fn restore_nodes(nodes: &Arc<Vec<RedisNode>>) {
    let nodes = Arc::clone(nodes);
    blocking(move || restore_all(&nodes)).await;
}

/// A fault action on the masters.
pub(super) type NodeAction = Box<dyn FnOnce(&[RedisNode]) + Send>;

/// Runs `f` on the masters, on the blocking pool.
pub(super) async fn act(nodes: &Arc<Vec<RedisNode>>, f: NodeAction) {
    let nodes = Arc::clone(nodes);
    blocking(move || f(&nodes)).await;
}

/// A fault on one master, in the semaphore and election schedules.
#[derive(Clone, Copy, Debug)]
pub(super) enum MasterFault {
    /// SIGSTOP master `node` for `length`.
    Pause { node: usize, length: Duration },
    /// SIGKILL master `node`; restart it with its data after `down`.
    Kill { node: usize, down: Duration },
}

impl MasterFault {
    /// A pause of 300 to 800 ms and a kill with a restart after 100 to
    /// 600 ms, each of one of `count` masters.
    pub(super) fn both(rng: &mut StdRng, count: usize) -> [Self; 2] {
        [
            MasterFault::Pause {
                node: rng.random_range(0..count),
                length: between(rng, 300, 800),
            },
            MasterFault::Kill {
                node: rng.random_range(0..count),
                down: between(rng, 100, 600),
            },
        ]
    }

    /// Applies it and keeps it for its length, then until the probe was
    /// granted a lock ([`hold_open`]), and undoes it: the window, as
    /// `class`.
    pub(super) async fn inject(
        self,
        nodes: &Arc<Vec<RedisNode>>,
        probe: &Probe,
        class: &str,
    ) -> Window {
        match self {
            MasterFault::Pause { node, length } => {
                act(nodes, Box::new(move |n| n[node].pause())).await;
                let start = mono_ns();
                hold_open(probe, start, length).await;
                let w = window(class, format!("pause master {}", node + 1), start);
                act(nodes, Box::new(move |n| n[node].resume())).await;
                w
            }
            MasterFault::Kill { node, down } => {
                act(nodes, Box::new(move |n| n[node].kill())).await;
                let start = mono_ns();
                hold_open(probe, start, down).await;
                let w = window(
                    class,
                    format!(
                        "kill master {}, restart it with its data after {:.0} ms",
                        node + 1,
                        ms(mono_ns() - start)
                    ),
                    start,
                );
                act(nodes, Box::new(move |n| n[node].restart_keeping_data())).await;
                w
            }
        }
    }
}

/// A window of fault `class` from `start_ns` to now, with a majority up.
fn window(class: &str, label: String, start_ns: u64) -> Window {
    Window {
        label,
        class: class.to_owned(),
        majority_up: true,
        start_ns,
        end_ns: mono_ns(),
    }
}
