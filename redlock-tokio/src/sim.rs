//! What a simulation swaps in to run this client, unchanged otherwise, in
//! virtual time (the `tests` crate's client sim: `tests/src/sim/`): plain
//! masters reached through an injected connector instead of TCP, lock values
//! and jitter drawn from a seeded RNG instead of the OS's, and optionally a
//! bounded connection queue (a planted bug: the client's own connection
//! makes no sender wait, see `node/plain.rs`).
//!
//! Hidden from the docs and outside the API's stability promise. A client
//! built without it never looks at it beyond one `Option` per connection
//! attempt and per acquire.

use std::convert::Infallible;
use std::fmt;
use std::io;
use std::sync::{Arc, Mutex, PoisonError};

use futures::future::BoxFuture;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng, TryRng};
use tokio::io::{AsyncRead, AsyncWrite};

/// A byte stream to one simulated master.
pub trait Stream: AsyncRead + AsyncWrite + Unpin + Send + 'static {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> Stream for T {}

type Connect = dyn Fn(usize) -> BoxFuture<'static, io::Result<Box<dyn Stream>>> + Send + Sync;
type ConnectBlocking =
    dyn Fn(usize) -> io::Result<Box<dyn redis::ConnectionLike + Send>> + Send + Sync;

/// The hooks of a simulated client; give it to
/// [`Builder::simulation`](crate::Builder::simulation).
#[derive(Clone)]
pub struct Simulation {
    connect: Arc<Connect>,
    connect_blocking: Option<Arc<ConnectBlocking>>,
    connection_queue: Option<usize>,
    rng: Arc<Mutex<StdRng>>,
}

impl fmt::Debug for Simulation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Simulation")
            .field("connection_queue", &self.connection_queue)
            .finish_non_exhaustive()
    }
}

impl Simulation {
    /// Connections to node `i` (in the builder's order) come from
    /// `connect(i)`; randomness from an RNG seeded with `seed`.
    pub fn new<F>(seed: u64, connect: F) -> Self
    where
        F: Fn(usize) -> BoxFuture<'static, io::Result<Box<dyn Stream>>> + Send + Sync + 'static,
    {
        Self {
            connect: Arc::new(connect),
            connect_blocking: None,
            connection_queue: None,
            rng: Arc::new(Mutex::new(StdRng::seed_from_u64(seed))),
        }
    }

    /// The blocking connections of releases sent when no runtime can (the
    /// process exiting with guards alive). Without it they fail at once.
    #[must_use]
    pub fn connect_blocking<F>(mut self, connect: F) -> Self
    where
        F: Fn(usize) -> io::Result<Box<dyn redis::ConnectionLike + Send>> + Send + Sync + 'static,
    {
        self.connect_blocking = Some(Arc::new(connect));
        self
    }

    /// How many batches of requests wait for their answers on a connection
    /// before a sender waits for room. The client's own connection makes
    /// no sender wait; a bound is a planted bug.
    #[must_use]
    pub fn connection_queue(mut self, requests: usize) -> Self {
        self.connection_queue = Some(requests);
        self
    }

    pub(crate) fn queue(&self) -> Option<usize> {
        self.connection_queue
    }

    pub(crate) fn connect(&self, node: usize) -> BoxFuture<'static, io::Result<Box<dyn Stream>>> {
        (self.connect)(node)
    }

    pub(crate) fn blocking(
        &self,
        node: usize,
    ) -> redis::RedisResult<Box<dyn redis::ConnectionLike + Send>> {
        match &self.connect_blocking {
            Some(connect) => Ok(connect(node)?),
            None => Err(io::Error::new(
                io::ErrorKind::ConnectionRefused,
                "no blocking connections in this simulation",
            )
            .into()),
        }
    }

    /// A fresh RNG drawn from the seeded one.
    pub(crate) fn rng(&self) -> StdRng {
        StdRng::from_rng(&mut *self.rng.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// A random generator: drawn from the simulation's seeded one in a
/// simulation, the thread's otherwise. With [`now`], the one place the
/// client reads the real world's clock and randomness, so that a
/// simulation replays.
pub(crate) fn rng(simulation: Option<&Simulation>) -> ClientRng {
    match simulation {
        Some(simulation) => ClientRng::Seeded(Box::new(simulation.rng())),
        None => ClientRng::Thread,
    }
}

/// The client's random generator, as an acquisition holds it: 16 bytes.
/// Outside a simulation each draw is the thread's generator's
/// (`rand::rng()`: ChaCha12, seeded from the OS and reseeded as it goes),
/// so an acquire neither seeds a generator of its own nor carries one's
/// 300-byte state in its future (every acquire's future is allocated, and
/// glibc's allocator serves a block over 1 KiB from a shared arena under a
/// lock, where a smaller one comes from the thread's own cache).
#[derive(Debug)]
pub(crate) enum ClientRng {
    /// The thread's generator.
    Thread,
    /// A simulation's: drawn from its seeded generator.
    Seeded(Box<StdRng>),
}

impl TryRng for ClientRng {
    type Error = Infallible;

    fn try_next_u32(&mut self) -> Result<u32, Infallible> {
        Ok(match self {
            Self::Thread => rand::rng().next_u32(),
            Self::Seeded(rng) => rng.next_u32(),
        })
    }

    fn try_next_u64(&mut self) -> Result<u64, Infallible> {
        Ok(match self {
            Self::Thread => rand::rng().next_u64(),
            Self::Seeded(rng) => rng.next_u64(),
        })
    }

    fn try_fill_bytes(&mut self, dst: &mut [u8]) -> Result<(), Infallible> {
        match self {
            Self::Thread => rand::rng().fill_bytes(dst),
            Self::Seeded(rng) => rng.fill_bytes(dst),
        }
        Ok(())
    }
}

/// Now, on Tokio's clock: the same as [`std::time::Instant::now`] unless
/// the runtime's time is paused (Tokio's `test-util`), which is how a
/// simulation runs this client in virtual time.
pub(crate) fn now() -> std::time::Instant {
    tokio::time::Instant::now().into_std()
}
