//! Real server processes (`redis-server` or `valkey-server`) and fake TCP servers for tests.
//!
//! See the [crate docs](crate) for an overview.

mod cluster;
mod fake_server;
mod node;
mod process;
mod server;
mod sharded;
mod tls;

pub use cluster::RedisCluster;
pub use fake_server::{GARBAGE_REPLY, GarbageServer, SilentServer};
pub use node::{CLIENT_TIMEOUT, NodeOptions, RedisNode, STARTUP_TIMEOUT, TlsOptions};
pub use process::{HARNESS_DIR_ENV, harness_root};
pub use server::{REDIS_SERVER_ENV, SERVER_BIN_ENV, Server, ServerKind, server};
pub use sharded::{CLUSTER_READY_TIMEOUT, ShardedNode};
pub use tls::TestCerts;
