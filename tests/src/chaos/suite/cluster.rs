//! The **cluster** scenario (in model): one of the three Redlock nodes is a
//! whole Redis Cluster of three shards, the other two plain masters. Four
//! worker processes contend for keys spread over every shard while a seeded
//! schedule pauses a shard master, kills a shard master and restarts it
//! (empty, with its cluster configuration, so that it takes its slots back)
//! only after the TTL, and kills a plain master and restarts it after the
//! TTL. Each fault leaves two of the three nodes up for every key, so locks
//! must keep being granted, and no two holds may overlap.
//!
//! No proxies: the cluster client learns the shards' own addresses from the
//! cluster, so faults are on the processes. Fencing is off: a shard master
//! that restarts empty forgets its fencing counters, outside what fencing
//! assumes (masters keep their data); the overlap check is the safety check
//! here.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

use super::instruments::Probe;
use super::schedule::{ScheduledFault, between};
use super::{
    Context, Finished, GRANT_CAP, MIXED_TTL, NODE_TIMEOUT, ScenarioResult, blocking, hold_open,
};
use crate::chaos::checker::Window;
use crate::chaos::clock::{mono_ns, ms};
use crate::{RedisNode, ShardedNode};

/// Shards of the cluster node.
const SHARDS: usize = 3;

/// The masters of the scenario: node 1 is the cluster, nodes 0 and 2 are
/// plain masters.
struct Nodes {
    plain: [RedisNode; 2],
    cluster: ShardedNode,
}

impl Nodes {
    fn start() -> Self {
        fn join<T>(handle: std::thread::ScopedJoinHandle<'_, T>) -> T {
            handle
                .join()
                .unwrap_or_else(|p| std::panic::resume_unwind(p))
        }
        std::thread::scope(|scope| {
            let cluster = scope.spawn(|| ShardedNode::start(SHARDS));
            let a = scope.spawn(RedisNode::start);
            let b = scope.spawn(RedisNode::start);
            Nodes {
                plain: [join(a), join(b)],
                cluster: join(cluster),
            }
        })
    }

    fn urls(&self) -> Vec<String> {
        vec![self.plain[0].url(), self.cluster.url(), self.plain[1].url()]
    }

    /// Best effort, after a failure: everything running again.
    fn restore_all(&self) {
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            for node in self.plain.iter().chain(self.cluster.shards()) {
                if node.is_running() {
                    node.resume();
                }
            }
            for node in &self.plain {
                if !node.is_running() {
                    node.restart();
                }
            }
            for shard in self.cluster.shards() {
                if !shard.is_running() {
                    shard.restart_keeping_data();
                }
            }
            self.cluster.wait_until_ok();
        }));
    }
}

/// One fault of the schedule.
#[derive(Clone, Copy, Debug)]
enum Fault {
    /// SIGSTOP a shard master for this long.
    ShardPause { shard: usize, length: Duration },
    /// SIGKILL a shard master; restart it after the TTL and this much.
    ShardKill { shard: usize, extra: Duration },
    /// SIGKILL a plain master; restart it empty after the TTL and this much.
    PlainKill { node: usize, extra: Duration },
}

impl ScheduledFault for Fault {
    fn class(&self) -> &'static str {
        match self {
            Fault::ShardPause { .. } => "cluster_shard_pause",
            Fault::ShardKill { .. } => "cluster_shard_kill",
            Fault::PlainKill { .. } => "cluster_plain_kill",
        }
    }

    /// The client reconnects to a restarted plain master with a backoff;
    /// a restarted shard's slots are found again through the cluster.
    fn breaks_connections(&self) -> bool {
        matches!(self, Fault::PlainKill { .. })
    }
}

fn plan(rng: &mut StdRng, cycles: usize) -> Vec<Fault> {
    let mut faults = Vec::new();
    for _ in 0..cycles {
        faults.push(Fault::ShardPause {
            shard: rng.random_range(0..SHARDS),
            length: between(rng, 300, 1200),
        });
        faults.push(Fault::ShardKill {
            shard: rng.random_range(0..SHARDS),
            extra: between(rng, 200, 700),
        });
        faults.push(Fault::PlainKill {
            node: rng.random_range(0..2),
            extra: between(rng, 200, 700),
        });
    }
    faults
}

/// Resource names with at least two keys on every shard of `cluster`.
fn keys_on_every_shard(cluster: &ShardedNode) -> Vec<String> {
    let mut per_shard = [0usize; SHARDS];
    let mut keys = Vec::new();
    for i in 0..10_000 {
        let key = format!("c{i}");
        let shard = cluster.shard_index(&key);
        if per_shard[shard] < 2 {
            per_shard[shard] += 1;
            keys.push(key);
        }
        if per_shard.iter().all(|&n| n == 2) {
            break;
        }
    }
    keys
}

impl Context<'_> {
    /// The cluster scenario: see the module docs.
    pub(super) async fn cluster(&self, seed: u64, cycles: usize) -> ScenarioResult {
        let started = Instant::now();
        let name = format!("{}/cluster", self.part);
        let dir = self.dir("cluster");
        let mut rng = StdRng::seed_from_u64(seed);
        let nodes = Arc::new(blocking(Nodes::start).await);
        let faults = plan(&mut rng, cycles);
        let run_for =
            (Duration::from_secs(8) + GRANT_CAP) * faults.len() as u32 + Duration::from_secs(60);
        let urls = nodes.urls();
        let keys = keys_on_every_shard(&nodes.cluster);
        let mut notes = vec![format!(
            "2 plain masters and 1 cluster node of {SHARDS} shards (process faults, no proxies); TTL {} ms, per-node timeout {} ms, keys {}; fencing off (a restarted shard forgets its counters)",
            MIXED_TTL.as_millis(),
            NODE_TIMEOUT.as_millis(),
            keys.join(",")
        )];
        self.log.say(format!(
            "{name}: seed {seed}, {} faults, 4 worker processes",
            faults.len()
        ));
        let configs = (0..4u32)
            .map(|worker| {
                let mut config = self.worker_config(
                    &dir,
                    "cluster",
                    worker,
                    &urls,
                    MIXED_TTL,
                    rng.random(),
                    run_for,
                );
                config.keys = keys.clone();
                config.fencing = false;
                config.keep_alive_share = 0.2;
                config.extend_share = 0.1;
                config.hold_ms = (0, 30);
                config
            })
            .collect();
        let (probe, monitor, workers) = self
            .start_run(&name, &dir, configs, (&urls, MIXED_TTL), run_for)
            .await;

        let mut failures = Vec::new();
        let windows = self
            .run_schedule(
                (&name, &faults),
                &mut rng,
                (&mut notes, &mut failures),
                async |_, &fault, _: &mut StdRng| inject(&nodes, &probe, fault).await.map(Some),
                async || {
                    let nodes = Arc::clone(&nodes);
                    blocking(move || nodes.restore_all()).await;
                },
                |_| String::new(),
            )
            .await;
        let Finished {
            analysis,
            reports,
            probes,
            ..
        } = self
            .finish_run(
                &dir,
                (probe, monitor, workers),
                &windows,
                &mut notes,
                &mut failures,
            )
            .await;
        let faults = windows.len();
        ScenarioResult {
            name,
            in_model: true,
            analysis,
            windows: reports,
            faults,
            probes,
            notes,
            failures,
            seconds: started.elapsed().as_secs_f64(),
        }
    }
}

/// Applies one fault, keeps it while the probe has not been granted a lock
/// (up to [`GRANT_CAP`] more), undoes it; the window is the time it was in
/// force.
async fn inject(nodes: &Arc<Nodes>, probe: &Probe, fault: Fault) -> std::io::Result<Window> {
    let act = |f: Box<dyn FnOnce(&Nodes) + Send>| {
        let nodes = Arc::clone(nodes);
        async move {
            tokio::task::spawn_blocking(move || f(&nodes))
                .await
                .map_err(|err| std::io::Error::other(format!("a fault action panicked: {err}")))
        }
    };
    let window = |label: String, start_ns: u64| Window {
        label,
        class: fault.class().to_owned(),
        majority_up: true,
        start_ns,
        end_ns: mono_ns(),
    };
    Ok(match fault {
        Fault::ShardPause { shard, length } => {
            act(Box::new(move |n| n.cluster.shard(shard).pause())).await?;
            let start = mono_ns();
            hold_open(probe, start, length).await;
            let w = window(
                format!("pause shard {} of the cluster node", shard + 1),
                start,
            );
            act(Box::new(move |n| n.cluster.shard(shard).resume())).await?;
            w
        }
        Fault::ShardKill { shard, extra } => {
            act(Box::new(move |n| n.cluster.shard(shard).kill())).await?;
            let start = mono_ns();
            hold_open(probe, start, MIXED_TTL + extra).await;
            let w = window(
                format!(
                    "kill shard {} of the cluster node, restart it empty after {:.0} ms",
                    shard + 1,
                    ms(mono_ns() - start)
                ),
                start,
            );
            act(Box::new(move |n| {
                // With its cluster configuration (nodes.conf), so that it
                // takes its slots back; its keys are gone.
                n.cluster.shard(shard).restart_keeping_data();
                n.cluster.wait_until_ok();
            }))
            .await?;
            w
        }
        Fault::PlainKill { node, extra } => {
            act(Box::new(move |n| n.plain[node].kill())).await?;
            let start = mono_ns();
            hold_open(probe, start, MIXED_TTL + extra).await;
            let w = window(
                format!(
                    "kill plain master {}, restart it empty after {:.0} ms",
                    if node == 0 { 1 } else { 3 },
                    ms(mono_ns() - start)
                ),
                start,
            );
            act(Box::new(move |n| n.plain[node].restart())).await?;
            w
        }
    })
}
