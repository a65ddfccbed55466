//! A blocking client, for programs without an async runtime (feature
//! `blocking`).
//!
//! The same client, driven by one background thread per client that runs a
//! current-thread Tokio runtime (reqwest's model): connections, keep-alive,
//! release notices and loss detection run there while the caller's
//! synchronous code runs. The vocabulary is the async client's: the same
//! [`Builder`](crate::Builder) ([`build_blocking`](crate::Builder::build_blocking)),
//! the same request modifiers, the same guard accessors; a request ends in
//! [`acquire`](LockRequest::acquire) or [`run`](LockRequest::run) instead of
//! `.await`.
//!
//! ```no_run
//! use std::time::Duration;
//! use redlock_tokio::{Wait, blocking::Redlock};
//!
//! fn report(redlock: &Redlock) -> Result<(), redlock_tokio::Error> {
//!     let guard = redlock.lock("nightly-report").wait(Wait::AtMost(Duration::from_secs(2))).acquire()?;
//!     println!("locked for {:?}", guard.validity());
//!     println!("{}", guard.release()?);
//!     Ok(())
//! }
//!
//! // Work under a lock kept alive in the background; one `?`.
//! fn export(redlock: &Redlock) -> Result<u64, redlock_tokio::RunError> {
//!     redlock.lock("nightly-export").fencing().run(|lock| {
//!         let token = lock.fencing_token().expect("fenced");
//!         Ok(token)
//!     })
//! }
//!
//! let redlock = Redlock::connect([
//!     "redis://127.0.0.1:7001",
//!     "redis://127.0.0.1:7002",
//!     "redis://127.0.0.1:7003",
//! ])?;
//! report(&redlock)?;
//! println!("exported {}", export(&redlock)?);
//! # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
//! ```
//!
//! - **Anywhere but a current-thread runtime.** From a plain thread, from
//!   [`tokio::task::spawn_blocking`] and even from a task of a multi-thread
//!   runtime, a call blocks its thread and nothing else (on a runtime's
//!   thread through [`tokio::task::block_in_place`], which first hands
//!   that worker's other tasks to the rest). On a current-thread runtime
//!   (`#[tokio::test]`, `flavor = "current_thread"`), whose one thread
//!   runs every task, each call returns [`Error::InsideRuntime`] instead of
//!   stalling them, in its `spawn_blocking` closures too (Tokio does not
//!   let a library tell those apart): use the async client there.
//! - **Dropping** a guard releases the lock on the client's thread, without
//!   blocking the caller. Dropping the last handle of a client (its
//!   [`Redlock`] and every guard) shuts it down
//!   ([`crate::Redlock::shutdown`]) and stops the thread, waiting for both
//!   on a thread that runs no runtime (on one that does, the client's
//!   thread finishes them unwaited): a guard alive or
//!   dropped when `main` returns is released before the process exits, as
//!   long as the client is dropped too (keep it in `main`'s scope, not in a
//!   `static`). Work under [`run`](LockRequest::run) is not interrupted
//!   when the lock is lost (synchronous code has no `.await` to stop at):
//!   check [`LockGuard::is_lost`] between steps; `run` then reports the
//!   loss as [`Error::LockLost`] whatever the work returned.

use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;

use redlock_core::LockValue;
use tokio::runtime::Handle;
use tokio::sync::oneshot;

use crate::{Error, ReleaseReport, kind};

/// Accessors of a blocking handle ([`LockGuard`], [`Leadership`]): each
/// forwards to the async one's method of the same name.
macro_rules! forward {
    ($($(#[$doc:meta])* $name:ident -> $ty:ty;)*) => {
        $($(#[$doc])* pub fn $name(&self) -> $ty { self.inner().$name() })*
    };
}

mod builder;
mod election;
mod lock;
pub use builder::Builder;
pub use election::{Election, Leadership, Observe};
pub use lock::{LockGuard, LockRequest};

/// A blocking Redlock client: [`crate::Redlock`] driven by a thread of its
/// own. Cheap to clone; clones share the thread and the connections.
#[derive(Clone)]
pub struct Redlock {
    shared: Arc<Shared>,
}

/// The client and the thread that drives it; dropped with the last handle.
struct Shared {
    client: crate::Redlock,
    handle: Handle,
    stop: Mutex<Option<oneshot::Sender<()>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl fmt::Debug for Redlock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("blocking::Redlock")
            .field(&self.shared.client)
            .finish()
    }
}

/// Refuses to block the one thread of a current-thread runtime: every
/// task of it would stall. Any other thread may block (see [`blocking`]).
fn may_block() -> Result<(), Error> {
    match Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() != tokio::runtime::RuntimeFlavor::MultiThread => {
            Err(Error::InsideRuntime)
        }
        _ => Ok(()),
    }
}

/// Runs `f`, which blocks, where that stalls no runtime: on a thread that
/// runs none (a plain thread, `main`), or on a thread of a multi-thread
/// runtime through [`tokio::task::block_in_place`] (a worker hands its
/// tasks to the others first; a `spawn_blocking` thread just runs it).
/// Refused on a current-thread runtime ([`may_block`]), whose
/// `spawn_blocking` threads Tokio does not let a library tell from the one
/// that runs its tasks.
fn blocking<R>(f: impl FnOnce() -> R) -> Result<R, Error> {
    may_block()?;
    match Handle::try_current() {
        Ok(_) => Ok(tokio::task::block_in_place(f)),
        Err(_) => Ok(f()),
    }
}

impl Shared {
    /// Runs `future` to completion on this thread, with the client's
    /// runtime driving its I/O and timers.
    fn block_on<F: Future>(&self, future: F) -> Result<F::Output, Error> {
        blocking(|| self.handle.block_on(future))
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // Waited for only on a thread that runs no runtime: a drop may run
        // while a runtime shuts down, where not even `block_in_place` may
        // block. Elsewhere the thread is only told to stop, and its
        // runtime's end sends what is still owed (on blocking connections).
        // Bounded: each release waits for its node at most until what it
        // undoes has expired.
        let plain_thread = Handle::try_current().is_err();
        if plain_thread {
            self.handle.block_on(self.client.shutdown());
        }
        if let Some(stop) = self
            .stop
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            let _ = stop.send(());
        }
        let thread = self
            .thread
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(thread) = thread
            && plain_thread
        {
            let _ = thread.join();
        }
    }
}

impl crate::Builder {
    /// Validates the options and connects, as [`build`](Self::build) does,
    /// for a [`blocking::Redlock`](Redlock): the client runs on a thread of
    /// its own (feature `blocking`). Fails with [`Error::InsideRuntime`]
    /// on a current-thread runtime (see [the module](crate::blocking)).
    pub fn build_blocking(self) -> Result<Redlock, Error> {
        may_block()?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|error| Error::Runtime(Arc::new(error)))?;
        let handle = runtime.handle().clone();
        let (stop, stopped) = oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("redlock-client".to_owned())
            .spawn(move || {
                // Drives every task and connection of the client until the
                // last handle is dropped.
                runtime.block_on(async {
                    let _ = stopped.await;
                });
            })
            .map_err(|error| Error::Runtime(Arc::new(error)))?;
        let stop = Mutex::new(Some(stop));
        let thread = Mutex::new(Some(thread));
        match blocking(|| handle.block_on(self.build()))? {
            Ok(client) => Ok(Redlock {
                shared: Arc::new(Shared {
                    client,
                    handle,
                    stop,
                    thread,
                }),
            }),
            Err(error) => {
                if let Some(stop) = stop.into_inner().unwrap_or_else(PoisonError::into_inner) {
                    let _ = stop.send(());
                }
                if let Some(thread) = thread.into_inner().unwrap_or_else(PoisonError::into_inner) {
                    let _ = thread.join();
                }
                Err(error)
            }
        }
    }
}

impl Redlock {
    /// Connects to these nodes with every option at its default, as
    /// [`crate::Redlock::connect`] does; [`builder`](Self::builder) for
    /// other options.
    pub fn connect<I, S>(urls: I) -> Result<Self, Error>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Self::builder(urls).build()
    }

    /// A builder for these servers, as [`crate::Redlock::builder`]: the
    /// same options, and a [`build`](Builder::build) that blocks.
    pub fn builder<I, S>(urls: I) -> Builder
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Builder::new(crate::Redlock::builder(urls))
    }

    /// The name this client gives the node at `url`, as
    /// [`crate::Redlock::node_name`].
    pub fn node_name(url: &str) -> Result<String, crate::ConfigError> {
        crate::Redlock::node_name(url)
    }

    /// The validated settings, as [`crate::Redlock::settings`].
    pub fn settings(&self) -> &crate::core::Settings {
        self.shared.client.settings()
    }

    /// The nodes' canonical addresses, as [`crate::Redlock::nodes`].
    pub fn nodes(&self) -> &[String] {
        self.shared.client.nodes()
    }

    /// What the client knows of each server, as [`crate::Redlock::servers`].
    pub fn servers(&self) -> Vec<crate::ServerReport> {
        self.shared.client.servers()
    }

    /// How many nodes have a connection up, as
    /// [`crate::Redlock::connected_nodes`].
    pub fn connected_nodes(&self) -> usize {
        self.shared.client.connected_nodes()
    }

    /// The nodes known slow now, as [`crate::Redlock::slow_nodes`].
    pub fn slow_nodes(&self) -> Vec<&str> {
        self.shared.client.slow_nodes()
    }

    /// How many release-notice connections are up, as
    /// [`crate::Redlock::release_notice_connections`].
    pub fn release_notice_connections(&self) -> usize {
        self.shared.client.release_notice_connections()
    }

    /// What every node holds of the lock on `resource`, as
    /// [`crate::Redlock::inspect`].
    pub fn inspect(&self, resource: impl AsRef<[u8]>) -> Result<Vec<crate::NodeInspection>, Error> {
        self.shared.block_on(self.shared.client.inspect(resource))
    }

    /// Who holds permit `slot` of the semaphore on `resource`, as
    /// [`crate::Redlock::inspect_permit`].
    pub fn inspect_permit(
        &self,
        resource: impl AsRef<[u8]>,
        slot: u32,
    ) -> Result<Vec<crate::NodeInspection>, Error> {
        self.shared
            .block_on(self.shared.client.inspect_permit(resource, slot))
    }

    /// The number of permits each master keeps for the semaphore on
    /// `resource`, as [`crate::Redlock::inspect_permits`].
    pub fn inspect_permits(
        &self,
        resource: impl AsRef<[u8]>,
    ) -> Result<Vec<crate::NodeInspection>, Error> {
        self.shared
            .block_on(self.shared.client.inspect_permits(resource))
    }

    /// Waits until nothing runs in the background, closing nothing, as
    /// [`crate::Redlock::settled`].
    pub fn settled(&self) -> Result<(), Error> {
        self.shared.block_on(self.shared.client.settled())
    }

    /// A lock on `resource`, as [`crate::Redlock::lock`]: end it with
    /// [`acquire`](LockRequest::acquire) or [`run`](LockRequest::run).
    pub fn lock(&self, resource: impl AsRef<[u8]>) -> LockRequest {
        LockRequest {
            request: self.shared.client.lock(resource),
            shared: Arc::clone(&self.shared),
        }
    }

    /// One lock over all of `resources`, as [`crate::Redlock::lock_all`].
    pub fn lock_all<R: AsRef<[u8]>>(
        &self,
        resources: impl IntoIterator<Item = R>,
    ) -> LockRequest<kind::Chosen> {
        LockRequest {
            request: self.shared.client.lock_all(resources),
            shared: Arc::clone(&self.shared),
        }
    }

    /// Releases `value` on `resource` on every node, as
    /// [`crate::Redlock::release_value`].
    pub fn release_value(
        &self,
        resource: impl AsRef<[u8]>,
        value: &LockValue,
    ) -> Result<ReleaseReport, Error> {
        let client = &self.shared.client;
        self.shared.block_on(client.release_value(resource, value))
    }

    /// Shuts the client down, as [`crate::Redlock::shutdown`]: its live
    /// guards are released and lost, later calls fail with
    /// [`Error::Closed`], and it returns once the releases are answered.
    /// Dropping the last handle does it too.
    pub fn shutdown(&self) -> Result<(), Error> {
        self.shared.block_on(self.shared.client.shutdown())
    }

    /// The async client this one drives, for what only it offers
    /// ([`inspect`](crate::Redlock::inspect), settings, node names). Its
    /// futures need a runtime: this client's is not yours to enter.
    pub fn client(&self) -> &crate::Redlock {
        &self.shared.client
    }
}
