//! TCP servers that are not Redis: one answers garbage, one never answers.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::{self, JoinHandle};

/// The bytes [`GarbageServer::start`] sends: an HTTP response, which is not RESP.
pub const GARBAGE_REPLY: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello";

/// A TCP server on a free `127.0.0.1` port that answers every connection, and
/// every chunk the client sends, with bytes that are not RESP, and keeps the
/// connection open. A Redis client sees a protocol (parse) error, not a timeout.
///
/// Dropping it closes the listener and every connection.
#[derive(Debug)]
pub struct GarbageServer {
    server: FakeServer,
}

impl GarbageServer {
    /// Starts a server that answers with [`GARBAGE_REPLY`].
    pub fn start() -> Self {
        Self::start_with_reply(GARBAGE_REPLY)
    }

    /// Starts a server that answers with `reply` (for example a truncated or
    /// malformed RESP frame).
    pub fn start_with_reply(reply: impl Into<Vec<u8>>) -> Self {
        let reply: Arc<[u8]> = reply.into().into();
        let server = FakeServer::start(move |mut stream| {
            let reply = Arc::clone(&reply);
            Some(thread::spawn(move || {
                let mut buf = [0_u8; 4096];
                if stream.write_all(&reply).is_err() {
                    return;
                }
                // Ends when the client closes or the server is dropped (shutdown).
                while let Ok(1..) = stream.read(&mut buf) {
                    if stream.write_all(&reply).is_err() {
                        return;
                    }
                }
            }))
        });
        Self { server }
    }

    /// The port on `127.0.0.1`.
    pub fn port(&self) -> u16 {
        self.server.addr.port()
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        self.server.url()
    }

    /// How many connections were accepted so far.
    pub fn accepted_connections(&self) -> usize {
        self.server.accepted.load(Ordering::SeqCst)
    }
}

/// A TCP server on a free `127.0.0.1` port that accepts connections and never
/// reads or writes: a black hole, or a server hung after `accept`. A Redis
/// client connects fine and then times out waiting for every reply.
///
/// Dropping it closes the listener and every connection.
#[derive(Debug)]
pub struct SilentServer {
    server: FakeServer,
}

impl SilentServer {
    /// Starts the server.
    pub fn start() -> Self {
        Self {
            server: FakeServer::start(|_| None),
        }
    }

    /// The port on `127.0.0.1`.
    pub fn port(&self) -> u16 {
        self.server.addr.port()
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        self.server.url()
    }

    /// How many connections were accepted so far.
    pub fn accepted_connections(&self) -> usize {
        self.server.accepted.load(Ordering::SeqCst)
    }
}

/// The accept loop shared by both fakes. It keeps a handle to every accepted
/// socket so that dropping the server can shut them all down.
#[derive(Debug)]
struct FakeServer {
    addr: SocketAddr,
    stopping: Arc<AtomicBool>,
    accepted: Arc<AtomicUsize>,
    connections: Arc<Mutex<Vec<TcpStream>>>,
    workers: Arc<Mutex<Vec<JoinHandle<()>>>>,
    acceptor: Option<JoinHandle<()>>,
}

impl FakeServer {
    /// `serve` gets each accepted connection and may return a worker thread
    /// to join on drop.
    fn start<F>(serve: F) -> Self
    where
        F: Fn(TcpStream) -> Option<JoinHandle<()>> + Send + 'static,
    {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .unwrap_or_else(|err| panic!("cannot bind a loopback port: {err}"));
        let addr = listener
            .local_addr()
            .unwrap_or_else(|err| panic!("listener has no address: {err}"));
        let stopping = Arc::new(AtomicBool::new(false));
        let accepted = Arc::new(AtomicUsize::new(0));
        let connections = Arc::new(Mutex::new(Vec::new()));
        let workers = Arc::new(Mutex::new(Vec::new()));

        let acceptor = {
            let stopping = Arc::clone(&stopping);
            let accepted = Arc::clone(&accepted);
            let connections = Arc::clone(&connections);
            let workers = Arc::clone(&workers);
            thread::spawn(move || {
                for stream in listener.incoming() {
                    if stopping.load(Ordering::SeqCst) {
                        return;
                    }
                    let Ok(stream) = stream else { continue };
                    accepted.fetch_add(1, Ordering::SeqCst);
                    if let Ok(handle) = stream.try_clone() {
                        lock(&connections).push(handle);
                    }
                    if let Some(worker) = serve(stream) {
                        lock(&workers).push(worker);
                    }
                }
            })
        };
        Self {
            addr,
            stopping,
            accepted,
            connections,
            workers,
            acceptor: Some(acceptor),
        }
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.addr.port())
    }
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        self.stopping.store(true, Ordering::SeqCst);
        // `accept` blocks; one more connection wakes the loop so it sees the flag.
        let _ = TcpStream::connect(self.addr);
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
        for connection in lock(&self.connections).drain(..) {
            let _ = connection.shutdown(Shutdown::Both);
        }
        for worker in lock(&self.workers).drain(..) {
            let _ = worker.join();
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
