//! The seeded fault schedule of the mixed scenarios, and the sharp
//! scenarios' faults.

use std::time::Duration;

use rand::RngExt;
use rand::rngs::StdRng;

use super::MIXED_TTL;

/// How one master is taken away in a majority-down fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Method {
    Kill,
    Pause,
    Partition,
}

/// One fault of the mixed schedule.
#[derive(Clone, Debug)]
pub(super) enum Planned {
    NodeKill {
        node: usize,
        down: Duration,
    },
    NodePause {
        node: usize,
        length: Duration,
    },
    Partition {
        node: usize,
        length: Duration,
        reset: bool,
    },
    SlowLossy {
        node: usize,
        length: Duration,
        latency: Duration,
        jitter: Duration,
        loss: f64,
    },
    MajorityDown {
        nodes: Vec<(usize, Method)>,
        length: Duration,
    },
    /// The victim worker stopped (SIGSTOP) inside a hold, past its validity.
    ClientPause {
        length: Duration,
    },
    /// The victim worker killed (SIGKILL) inside a hold; a new process takes
    /// its part.
    ClientKill,
}

impl Planned {
    /// Whether undoing it leaves clients reconnecting (a master was killed).
    pub(super) fn breaks_connections(&self) -> bool {
        match self {
            Planned::NodeKill { .. } => true,
            Planned::MajorityDown { nodes, .. } => nodes.iter().any(|(_, m)| *m == Method::Kill),
            _ => false,
        }
    }

    pub(super) fn class(&self) -> &'static str {
        match self {
            Planned::NodeKill { .. } => "node_kill_delayed_restart",
            Planned::NodePause { .. } => "node_pause",
            Planned::Partition { .. } => "partition",
            Planned::SlowLossy { .. } => "latency_loss",
            Planned::MajorityDown { .. } => "majority_down",
            Planned::ClientPause { .. } => "client_pause",
            Planned::ClientKill => "client_kill",
        }
    }
}

pub(super) fn between(rng: &mut StdRng, low_ms: u64, high_ms: u64) -> Duration {
    Duration::from_millis(rng.random_range(low_ms..=high_ms))
}

/// The mixed schedule: `cycles` rounds of every class in a shuffled order.
pub(super) fn schedule(rng: &mut StdRng, cycles: usize, nodes: usize) -> Vec<Planned> {
    let ttl_ms = MIXED_TTL.as_millis() as u64;
    let mut plan = Vec::new();
    for _ in 0..cycles {
        let mut cycle = vec![
            Planned::NodeKill {
                node: rng.random_range(0..nodes),
                // Delayed restart: down for longer than the TTL.
                down: between(rng, ttl_ms + 200, ttl_ms + 700),
            },
            Planned::NodePause {
                node: rng.random_range(0..nodes),
                length: between(rng, 150, 1200),
            },
            Planned::Partition {
                node: rng.random_range(0..nodes),
                length: between(rng, 200, 1500),
                reset: rng.random_bool(0.5),
            },
            Planned::SlowLossy {
                node: rng.random_range(0..nodes),
                length: between(rng, 1500, 3000),
                latency: Duration::from_micros(rng.random_range(1_000..=8_000)),
                jitter: Duration::from_micros(rng.random_range(0..=2_000)),
                loss: rng.random_range(0.02..=0.1),
            },
            {
                let mut all: Vec<usize> = (0..nodes).collect();
                let mut down = Vec::new();
                for _ in 0..(nodes / 2 + 1) {
                    let node = all.remove(rng.random_range(0..all.len()));
                    let method = match rng.random_range(0..3) {
                        0 => Method::Kill,
                        1 => Method::Pause,
                        _ => Method::Partition,
                    };
                    down.push((node, method));
                }
                Planned::MajorityDown {
                    nodes: down,
                    // Long enough that killed masters come back after the TTL.
                    length: between(rng, ttl_ms + 300, ttl_ms + 1000),
                }
            },
            Planned::ClientPause {
                length: between(rng, ttl_ms * 3 / 2, ttl_ms * 3),
            },
            Planned::ClientKill,
        ];
        // Fisher-Yates with the schedule's RNG.
        for i in (1..cycle.len()).rev() {
            cycle.swap(i, rng.random_range(0..=i));
        }
        plan.extend(cycle);
    }
    plan
}

/// The sharp scenarios' fault on master 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Sharp {
    RestartDelayed,
    RestartEmpty,
    ClockJump,
}

impl Sharp {
    pub(super) fn name(self) -> &'static str {
        match self {
            Sharp::RestartDelayed => "restart_delayed",
            Sharp::RestartEmpty => "restart_empty",
            Sharp::ClockJump => "clock_jump",
        }
    }

    pub(super) fn in_model(self) -> bool {
        self == Sharp::RestartDelayed
    }
}
