//! The Redis masters a scenario breaks: `redis-server` processes of the
//! harness, or the containers of a compose project. Every action is
//! blocking; the suite runs them on Tokio's blocking pool.

use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::thread;
use std::time::{Duration, Instant};

use super::docker::Container;
use crate::{NodeOptions, RedisCluster, RedisNode};

/// The variable naming a second server binary for every second local
/// master (for example Valkey next to Redis).
pub const MIX_SERVER_ENV: &str = "REDLOCK_MIX_SERVER_BIN";

/// How long a restarted master may take to answer `PING`.
const READY_TIMEOUT: Duration = Duration::from_secs(15);

/// N independent masters.
#[derive(Debug)]
pub enum Masters {
    /// `redis-server` processes on loopback (the harness).
    Local(RedisCluster),
    /// Containers of a compose project, published on loopback.
    Compose {
        /// One per master, in order.
        containers: Vec<Container>,
        /// Whether `tc netem` works in their namespaces.
        netem: bool,
    },
}

impl Masters {
    /// Starts `n` local masters; the first `shifted` of them get `env` (the
    /// clock-shift library). With [`MIX_SERVER_ENV`] set, every second
    /// master (1, 3, ...) runs that binary instead: old and new servers in
    /// one quorum (Redis 7 takes `SET NX PX GET`, Valkey 9 also `DELIFEQ`).
    pub fn local(n: usize, shifted: usize, env: Vec<(String, String)>) -> Self {
        let mix = std::env::var_os(MIX_SERVER_ENV)
            .filter(|bin| !bin.is_empty())
            .map(|bin| std::path::absolute(&bin).unwrap_or_else(|_| bin.into()));
        if shifted == 0 && mix.is_none() {
            return Masters::Local(RedisCluster::start(n));
        }
        // Nodes start in parallel; the shifted ones with their environment.
        let nodes: Vec<RedisNode> = thread::scope(|scope| {
            let starts: Vec<_> = (0..n)
                .map(|i| {
                    let options = NodeOptions {
                        env: if i < shifted { env.clone() } else { vec![] },
                        bin: mix.clone().filter(|_| i % 2 == 1),
                        ..NodeOptions::default()
                    };
                    scope.spawn(move || RedisNode::start_with(options))
                })
                .collect();
            starts
                .into_iter()
                .map(|s| s.join().expect("a master starts"))
                .collect()
        });
        Masters::Local(RedisCluster::from_nodes(nodes))
    }

    /// The masters of compose `project`, services `redis1`.. published on
    /// `ports`.
    pub fn compose(project: &str, ports: &[u16]) -> io::Result<Self> {
        let containers = ports
            .iter()
            .enumerate()
            .map(|(i, &port)| Container::find(project, &format!("redis{}", i + 1), port))
            .collect::<io::Result<Vec<_>>>()?;
        let netem = containers[0].netem_available();
        Ok(Masters::Compose { containers, netem })
    }

    /// `"process"` or `"compose"`.
    pub fn kind(&self) -> &'static str {
        match self {
            Masters::Local(_) => "process",
            Masters::Compose { .. } => "compose",
        }
    }

    /// How many masters.
    pub fn len(&self) -> usize {
        match self {
            Masters::Local(cluster) => cluster.len(),
            Masters::Compose { containers, .. } => containers.len(),
        }
    }

    /// True without masters.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Master `i`'s address on loopback.
    pub fn addr(&self, i: usize) -> SocketAddr {
        let port = match self {
            Masters::Local(cluster) => cluster.node(i).port(),
            Masters::Compose { containers, .. } => containers[i].port,
        };
        SocketAddr::from((Ipv4Addr::LOCALHOST, port))
    }

    /// Every master's URL, without a proxy.
    pub fn urls(&self) -> Vec<String> {
        (0..self.len())
            .map(|i| format!("redis://{}", self.addr(i)))
            .collect()
    }

    /// Whether `tc netem` adds latency (else the proxy does).
    pub fn netem(&self) -> bool {
        matches!(self, Masters::Compose { netem: true, .. })
    }

    /// Kills master `i` (SIGKILL; `docker kill`).
    pub fn kill(&self, i: usize) -> io::Result<()> {
        match self {
            Masters::Local(cluster) => {
                cluster.node(i).kill();
                Ok(())
            }
            Masters::Compose { containers, .. } => containers[i].kill(),
        }
    }

    /// Starts master `i` again, empty, and waits until it answers (kills it
    /// first when it runs: a crash and an immediate restart).
    pub fn restart(&self, i: usize) -> io::Result<()> {
        match self {
            Masters::Local(cluster) => {
                cluster.node(i).restart();
                Ok(())
            }
            Masters::Compose { containers, .. } => {
                let container = &containers[i];
                if container.pid().unwrap_or(0) != 0 {
                    container.kill()?;
                }
                container.start()?;
                self.wait_ready(i)
            }
        }
    }

    /// Pauses master `i` (SIGSTOP; `docker pause`).
    pub fn pause(&self, i: usize) -> io::Result<()> {
        match self {
            Masters::Local(cluster) => {
                cluster.node(i).pause();
                Ok(())
            }
            Masters::Compose { containers, .. } => containers[i].pause(),
        }
    }

    /// Resumes a paused master `i`.
    pub fn resume(&self, i: usize) -> io::Result<()> {
        match self {
            Masters::Local(cluster) => {
                cluster.node(i).resume();
                Ok(())
            }
            Masters::Compose { containers, .. } => containers[i].unpause(),
        }
    }

    /// Partitions master `i` at the node (iptables in its namespace);
    /// `false` when the masters are processes and the proxy must do it.
    pub fn partition(&self, i: usize) -> io::Result<bool> {
        match self {
            Masters::Local(_) => Ok(false),
            Masters::Compose { containers, .. } => containers[i].partition().map(|()| true),
        }
    }

    /// Undoes [`partition`](Self::partition).
    pub fn heal(&self, i: usize) -> io::Result<()> {
        match self {
            Masters::Local(_) => Ok(()),
            Masters::Compose { containers, .. } => containers[i].heal(),
        }
    }

    /// Drops packets of master `i` with probability `rate` at the node;
    /// `false` when the proxy must emulate it.
    pub fn lose_packets(&self, i: usize, rate: f64) -> io::Result<bool> {
        match self {
            Masters::Local(_) => Ok(false),
            Masters::Compose { containers, .. } => containers[i].lose_packets(rate).map(|()| true),
        }
    }

    /// Undoes [`lose_packets`](Self::lose_packets).
    pub fn stop_losing_packets(&self, i: usize, rate: f64) -> io::Result<()> {
        match self {
            Masters::Local(_) => Ok(()),
            Masters::Compose { containers, .. } => containers[i].stop_losing_packets(rate),
        }
    }

    /// Adds latency at the node with netem; `false` when unavailable.
    pub fn delay(&self, i: usize, latency: Duration, jitter: Duration) -> io::Result<bool> {
        match self {
            Masters::Compose {
                containers,
                netem: true,
            } => containers[i].netem_delay(latency, jitter).map(|()| true),
            _ => Ok(false),
        }
    }

    /// Undoes [`delay`](Self::delay).
    pub fn clear_delay(&self, i: usize) -> io::Result<()> {
        match self {
            Masters::Compose {
                containers,
                netem: true,
            } => containers[i].netem_clear(),
            _ => Ok(()),
        }
    }

    /// Waits until master `i` answers `PING`.
    pub fn wait_ready(&self, i: usize) -> io::Result<()> {
        let deadline = Instant::now() + READY_TIMEOUT;
        let url = format!("redis://{}", self.addr(i));
        loop {
            let ping = redis::Client::open(url.as_str()).and_then(|client| {
                let mut con = client.get_connection_with_timeout(Duration::from_millis(200))?;
                con.set_read_timeout(Some(Duration::from_millis(200)))?;
                redis::cmd("PING").query::<String>(&mut con)
            });
            if ping.is_ok() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("master {} not ready after {READY_TIMEOUT:?}", self.addr(i)),
                ));
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// Best effort, after a failure: resumes paused masters, starts killed
    /// ones (empty), and removes partitions, packet loss and added latency.
    pub fn restore_all(&self) {
        for i in 0..self.len() {
            match self {
                Masters::Local(cluster) => {
                    let node = cluster.node(i);
                    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        if node.is_running() {
                            node.resume();
                        } else {
                            node.restart();
                        }
                    }));
                }
                Masters::Compose { containers, netem } => {
                    let _ = containers[i].unpause();
                    if containers[i].pid().unwrap_or(0) == 0 {
                        let _ = containers[i].start();
                    }
                    let _ = containers[i].flush_rules();
                    if *netem {
                        let _ = containers[i].netem_clear();
                    }
                }
            }
        }
    }
}
