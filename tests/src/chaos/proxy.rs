//! A fault-injecting TCP proxy, one per Redis master.
//!
//! Clients connect to the proxy; the proxy forwards each connection to the
//! master and can, at any moment:
//!
//! - add **latency** (fixed plus uniform jitter) to every chunk of bytes in
//!   both directions, keeping each direction in order, as a longer link does;
//! - emulate **packet loss** as TCP shows it to an application: a lost
//!   segment is retransmitted after the retransmission timeout (200 ms
//!   minimum on Linux), so with probability `stall_rate` a chunk, and
//!   everything behind it, arrives `stall` late;
//! - **partition** the master (blackhole): bytes are held, in both
//!   directions, until the partition heals; they are then delivered (a
//!   short partition TCP survives) unless the connections are
//!   [reset](Proxy::reset_connections) (a long one it does not).
//!
//! It is what the process-level chaos uses where `tc netem` is not
//! available (this machine's kernel has no `sch_netem`), and it adds latency
//! for the compose part too.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::AbortHandle;
use tokio::time::Instant;

/// How long a connection to the master may take before the client's
/// connection is closed.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// What the proxy does to traffic right now.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum Fault {
    /// Forward at once.
    #[default]
    None,
    /// Delay every chunk by `latency` ± `jitter`; with probability
    /// `stall_rate` also by `stall` (a lost segment's retransmission).
    Slow {
        /// Added one-way delay.
        latency: Duration,
        /// Uniform jitter around `latency`.
        jitter: Duration,
        /// Chance that a chunk is "lost" and retransmitted.
        stall_rate: f64,
        /// The retransmission delay of a lost chunk.
        stall: Duration,
    },
    /// Hold all bytes until the fault changes.
    Blackhole,
}

struct Shared {
    fault: watch::Sender<Fault>,
    rng: Mutex<StdRng>,
    connections: Mutex<Vec<AbortHandle>>,
}

impl Shared {
    /// The delay to add to a chunk now, or `None` while blackholed.
    fn delay(&self) -> Option<Duration> {
        match *self.fault.borrow() {
            Fault::None => Some(Duration::ZERO),
            Fault::Blackhole => None,
            Fault::Slow {
                latency,
                jitter,
                stall_rate,
                stall,
            } => {
                let mut rng = self.rng.lock().unwrap_or_else(PoisonError::into_inner);
                let low = latency.saturating_sub(jitter);
                let high = latency + jitter;
                let mut delay = if high > low {
                    Duration::from_micros(
                        rng.random_range(low.as_micros() as u64..=high.as_micros() as u64),
                    )
                } else {
                    latency
                };
                if stall_rate > 0.0 && rng.random_bool(stall_rate.min(1.0)) {
                    delay += stall;
                }
                Some(delay)
            }
        }
    }
}

/// A proxy on a free loopback port in front of one master. Dropping it
/// closes the listener and every connection.
pub struct Proxy {
    addr: SocketAddr,
    upstream: SocketAddr,
    shared: Arc<Shared>,
    accept: AbortHandle,
}

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proxy")
            .field("addr", &self.addr)
            .field("upstream", &self.upstream)
            .field("fault", &*self.shared.fault.borrow())
            .finish()
    }
}

impl Proxy {
    /// Starts a proxy to `upstream` on the current Tokio runtime; `seed`
    /// drives its latency and loss draws.
    pub async fn start(upstream: SocketAddr, seed: u64) -> std::io::Result<Self> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            fault: watch::Sender::new(Fault::None),
            rng: Mutex::new(StdRng::seed_from_u64(seed)),
            connections: Mutex::new(Vec::new()),
        });
        let accept = tokio::spawn(accept_loop(listener, upstream, Arc::clone(&shared)));
        Ok(Self {
            addr,
            upstream,
            shared,
            accept: accept.abort_handle(),
        })
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `redis://<addr>`, for a client.
    pub fn url(&self) -> String {
        format!("redis://{}", self.addr)
    }

    /// The master behind it.
    pub fn upstream(&self) -> SocketAddr {
        self.upstream
    }

    /// The fault in force.
    pub fn fault(&self) -> Fault {
        *self.shared.fault.borrow()
    }

    /// Changes the fault for all traffic from now on (bytes already
    /// scheduled keep their delay; held bytes are released when a
    /// blackhole ends).
    pub fn set(&self, fault: Fault) {
        self.shared.fault.send_replace(fault);
    }

    /// Closes every open connection (clients reconnect), as a partition
    /// long enough for TCP to give up would.
    pub fn reset_connections(&self) {
        let connections = std::mem::take(
            &mut *self
                .shared
                .connections
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        for connection in connections {
            connection.abort();
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.reset_connections();
    }
}

async fn accept_loop(listener: TcpListener, upstream: SocketAddr, shared: Arc<Shared>) {
    loop {
        let Ok((client, _)) = listener.accept().await else {
            // Out of file descriptors or similar: let the client retry.
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let _ = client.set_nodelay(true);
        let task = tokio::spawn(serve(client, upstream, Arc::clone(&shared)));
        let mut connections = shared
            .connections
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        connections.retain(|c| !c.is_finished());
        connections.push(task.abort_handle());
    }
}

async fn serve(client: TcpStream, upstream: SocketAddr, shared: Arc<Shared>) {
    // A partition also stops new connections from getting through.
    let mut fault = shared.fault.subscribe();
    while matches!(*fault.borrow_and_update(), Fault::Blackhole) {
        if fault.changed().await.is_err() {
            return;
        }
    }
    let Ok(Ok(server)) = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(upstream)).await
    else {
        return;
    };
    let _ = server.set_nodelay(true);
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    tokio::join!(
        pump(client_read, server_write, &shared),
        pump(server_read, client_write, &shared),
    );
}

/// Forwards one direction: a reader that stamps each chunk with its release
/// time, and a writer that waits for it (and for a blackhole to end).
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    shared: &Shared,
) {
    let (tx, mut rx) = mpsc::channel::<(Instant, Vec<u8>)>(1024);
    let read = async move {
        let mut buf = vec![0u8; 16 * 1024];
        let mut last = Instant::now();
        loop {
            let n = match from.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            // While blackholed, the writer holds the bytes; no delay here.
            let delay = shared.delay().unwrap_or(Duration::ZERO);
            // In order, like one TCP stream.
            last = last.max(Instant::now() + delay);
            if tx.send((last, buf[..n].to_vec())).await.is_err() {
                break;
            }
        }
    };
    let write = async move {
        let mut fault = shared.fault.subscribe();
        while let Some((at, bytes)) = rx.recv().await {
            // Tokio's timer has a 1 ms resolution: never sleep for nothing.
            if at > Instant::now() {
                tokio::time::sleep_until(at).await;
            }
            while matches!(*fault.borrow_and_update(), Fault::Blackhole) {
                if fault.changed().await.is_err() {
                    return;
                }
            }
            if to.write_all(&bytes).await.is_err() {
                return;
            }
        }
        let _ = to.shutdown().await;
    };
    tokio::join!(read, write);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An echo server on loopback.
    async fn echo() -> SocketAddr {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 1024];
                    while let Ok(n) = stream.read(&mut buf).await {
                        if n == 0 || stream.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        addr
    }

    async fn round_trip(stream: &mut TcpStream) -> Duration {
        let start = Instant::now();
        stream.write_all(b"ping").await.unwrap();
        let mut buf = [0u8; 4];
        stream.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"ping");
        start.elapsed()
    }

    #[tokio::test]
    async fn forwards_delays_holds_and_resets() {
        let proxy = Proxy::start(echo().await, 7).await.unwrap();
        let mut stream = TcpStream::connect(proxy.addr()).await.unwrap();
        // Upper bounds are loose: a loaded machine can be slow, never fast.
        assert!(round_trip(&mut stream).await < Duration::from_millis(500));

        proxy.set(Fault::Slow {
            latency: Duration::from_millis(30),
            jitter: Duration::ZERO,
            stall_rate: 0.0,
            stall: Duration::ZERO,
        });
        // Delayed both ways.
        assert!(round_trip(&mut stream).await >= Duration::from_millis(60));

        proxy.set(Fault::Blackhole);
        stream.write_all(b"ping").await.unwrap();
        let mut buf = [0u8; 4];
        let held =
            tokio::time::timeout(Duration::from_millis(100), stream.read_exact(&mut buf)).await;
        assert!(held.is_err(), "nothing gets through a blackhole");
        proxy.set(Fault::None);
        // Healed: the held bytes arrive.
        tokio::time::timeout(Duration::from_secs(2), stream.read_exact(&mut buf))
            .await
            .expect("delivered after the heal")
            .unwrap();
        assert_eq!(&buf, b"ping");

        proxy.reset_connections();
        let n = tokio::time::timeout(Duration::from_secs(2), stream.read(&mut buf))
            .await
            .expect("closed at once");
        assert!(matches!(n, Ok(0) | Err(_)));
        let mut again = TcpStream::connect(proxy.addr()).await.unwrap();
        assert!(round_trip(&mut again).await < Duration::from_millis(500));
    }
}
