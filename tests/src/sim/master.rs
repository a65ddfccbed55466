//! The faults a seed chooses for one master, applied through the test
//! kit's controls (`redlock_testkit::Node`): the masters themselves are the
//! kit's nodes, RESP over in-memory streams answering from the kit's
//! script model (`redlock-testkit/src/model.rs`, which
//! `tests/tests/lua_model.rs` checks against the real Lua).

use std::time::Duration;

use redlock_testkit::Node;

/// The faults of one master, chosen by the seed.
#[derive(Clone, Debug, Default)]
pub struct MasterFaults {
    /// Each way, every command.
    pub latency: Duration,
    /// Up to this much more each way, drawn per command.
    pub jitter: Duration,
    /// Windows (from the start of the run) in which the master reads,
    /// runs and writes nothing, as a `SIGSTOP`ped process.
    pub pauses: Vec<(Duration, Duration)>,
    /// Per thousand commands, how many drop their connection: half before
    /// the command runs, half after it ran (its reply lost).
    pub drops_per_mille: u32,
    /// When the master restarts empty (out of Redlock's model: only in the
    /// restart mode), refusing connections for a moment.
    pub restart_at: Option<Duration>,
    /// The in-memory stream's buffer each way, in bytes: small ones make a
    /// paused master push back on the client's connection queue.
    pub buffer: usize,
    /// The master answers as Valkey 9.1.2, not Redis 7.0.15: it has
    /// `DELIFEQ` and `SET ... IFEQ ... GET`, so a client with native
    /// commands on releases with one `DELIFEQ` where nobody waited.
    pub valkey: bool,
}

impl MasterFaults {
    /// Sets these faults on `node` (all but the buffer and Valkey, which
    /// the quorum is made with), before any client connects.
    pub(crate) fn apply(&self, node: &Node) {
        node.latency(self.latency);
        node.jitter(self.jitter);
        node.drop_connections(self.drops_per_mille);
        for &(from, length) in &self.pauses {
            node.pause_between(from, length);
        }
        if let Some(at) = self.restart_at {
            node.restart_empty_at(at);
        }
    }
}
