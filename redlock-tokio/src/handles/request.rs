//! One lock request: every option of one acquire, as modifiers on a
//! future.

use std::fmt;
use std::future::{Future, IntoFuture};
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use redlock_core::{Attempts, KeepAlive, LockSpec};
use tracing::debug;

use crate::{BoxError, Error, LockGuard, LossReason, Redlock, RunError};

/// How long an acquire waits for a lock held by someone else: the client's
/// default ([`Builder::wait`](crate::Builder::wait)) or one call's
/// ([`LockRequest::wait`]).
///
/// Between attempts the acquire sleeps a random retry delay
/// ([`Builder::retry_delay`](crate::Builder::retry_delay)) **or** until the
/// holder's release notice, whichever comes first, so a wait ends about
/// one round trip after the release, not at the next retry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Wait {
    /// Not at all: one attempt (a try-lock).
    No,
    /// The first attempt and up to this many retries; attempts that a
    /// release notice brings forward do not count. The default,
    /// `Retries(10)`, gives up after about 0.5 to 2 s.
    Retries(u32),
    /// Retry until this long after the call started, however many
    /// attempts that takes. The limit is waited out (the call never gives
    /// up before it) and is hard (a quorum counted at or after it is
    /// released). Zero is an [`Error::Config`].
    AtMost(Duration),
    /// Until the lock is granted, or a permanent error
    /// ([`Error::is_config`]); also while nodes are down.
    Forever,
}

impl Default for Wait {
    fn default() -> Self {
        Wait::Retries(10)
    }
}

impl Wait {
    /// The core's name for it.
    pub(crate) fn attempts(self) -> Attempts {
        match self {
            Wait::No => Attempts::Once,
            Wait::Retries(count) => Attempts::Retries(count),
            Wait::AtMost(limit) => Attempts::Within(limit),
            Wait::Forever => Attempts::Within(Duration::MAX),
        }
    }
}

/// Which modifiers a [`LockRequest`] still takes: its kind can be chosen
/// once, so a combination that cannot work (a fenced read lock, a fair
/// multi-resource lock) does not compile.
pub mod kind {
    /// An exclusive lock whose kind can still be chosen:
    /// [`fencing`](crate::LockRequest::fencing),
    /// [`fair`](crate::LockRequest::fair),
    /// [`read`](crate::LockRequest::read),
    /// [`write`](crate::LockRequest::write),
    /// [`reentrant`](crate::LockRequest::reentrant) or
    /// [`permits`](crate::LockRequest::permits).
    #[derive(Debug)]
    pub enum Open {}
    /// A permit of a semaphore, which may still ask for a fencing token:
    /// [`fencing`](crate::LockRequest::fencing).
    #[derive(Debug)]
    pub enum Permits {}
    /// A request whose kind is chosen.
    #[derive(Debug)]
    pub enum Chosen {}
}

/// The kind of lock asked for, with what it names.
#[derive(Clone, Debug)]
enum Spec {
    Exclusive,
    Fenced,
    Fair,
    Read,
    Write,
    Reentrant(Arc<str>),
    Multi(Vec<Arc<[u8]>>),
    Semaphore { permits: u32, fenced: bool },
}

/// One acquire, made by [`Redlock::lock`] or [`Redlock::lock_all`]: await
/// it for a [`LockGuard`], or [`run`](Self::run) work under it.
///
/// Every option of one lock is a modifier here; the client's defaults
/// (TTL, wait) come from the [`Builder`](crate::Builder):
///
/// ```no_run
/// # async fn demo(redlock: redlock_tokio::Redlock) -> Result<(), redlock_tokio::Error> {
/// use std::time::Duration;
/// use redlock_tokio::Wait;
///
/// let guard = redlock
///     .lock("ledger")
///     .ttl(Duration::from_secs(30))
///     .fencing()
///     .wait(Wait::AtMost(Duration::from_secs(2)))
///     .await?;
/// let token = guard.fencing_token().expect("a fenced lock has a token");
/// # let _ = token;
/// guard.release().await;
/// # Ok(()) }
/// ```
///
/// Cancel-safe: dropping the future releases, in the background, whatever
/// its attempt in flight may have set on the nodes.
#[must_use = "a lock request does nothing until it is awaited or run"]
pub struct LockRequest<K = kind::Open> {
    client: Redlock,
    resource: Arc<[u8]>,
    spec: Spec,
    ttl: Option<Duration>,
    wait: Option<Wait>,
    keep_alive: Option<KeepAlive>,
    kind: PhantomData<K>,
}

impl<K> fmt::Debug for LockRequest<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockRequest")
            .field("resource", &String::from_utf8_lossy(&self.resource))
            .field("kind", &self.spec)
            .field("ttl", &self.ttl)
            .field("wait", &self.wait)
            .field("keep_alive", &self.keep_alive)
            .finish_non_exhaustive()
    }
}

impl LockRequest<kind::Open> {
    pub(crate) fn new(client: Redlock, resource: Arc<[u8]>) -> Self {
        Self {
            client,
            resource,
            spec: Spec::Exclusive,
            ttl: None,
            wait: None,
            keep_alive: None,
            kind: PhantomData,
        }
    }

    fn kind<K>(self, spec: Spec) -> LockRequest<K> {
        LockRequest {
            client: self.client,
            resource: self.resource,
            spec,
            ttl: self.ttl,
            wait: self.wait,
            keep_alive: self.keep_alive,
            kind: PhantomData,
        }
    }

    /// With a fencing token ([`LockGuard::fencing_token`]): larger than
    /// every earlier holder's while the nodes keep their data. Send it with
    /// every write to the protected resource, which refuses a token lower
    /// than one it has seen. Costs one more round trip, and keeps a counter
    /// key per resource on every node.
    pub fn fencing(self) -> LockRequest<kind::Chosen> {
        self.kind(Spec::Fenced)
    }

    /// Fair: waiters are served first come, first served across
    /// processes, while a quorum of nodes is up. Each node keeps a queue of
    /// waiters beside the key and grants a free key only to its head. A
    /// dead waiter holds the queue at most until its entry expires (two
    /// retry delays and two per-node timeouts), and nodes that disagree on
    /// the order fall back on the plain rule after a few attempts. Every
    /// client of the resource must ask for it: a plain lock does not queue.
    pub fn fair(self) -> LockRequest<kind::Chosen> {
        self.kind(Spec::Fair)
    }

    /// The read lock of a read-write lock: many readers at once, no writer.
    /// A writer that finds readers holds new readers off while it retries,
    /// so writers are not starved.
    pub fn read(self) -> LockRequest<kind::Chosen> {
        self.kind(Spec::Read)
    }

    /// The write lock of a read-write lock: excludes readers and other
    /// writers.
    pub fn write(self) -> LockRequest<kind::Chosen> {
        self.kind(Spec::Write)
    }

    /// One of `permits` permits of a counting semaphore: at most `permits`
    /// holders at once, on a quorum like a lock (see `docs/semaphore.md`).
    /// The guard is an ordinary [`LockGuard`] on the permit's slot
    /// ([`LockGuard::key`]): extend it, keep it alive, release it as a
    /// lock; a waiter wakes on a permit's release notice. `permits` is 1
    /// to [`MAX_PERMITS`](redlock_core::MAX_PERMITS), else
    /// [`Error::Config`]. The masters keep the number the semaphore's
    /// holders use, and refuse another one at once: `Error::Acquire` with
    /// [`AcquireError::PermitsMismatch`](redlock_core::AcquireError::PermitsMismatch)
    /// naming both ([`Error::is_config`]).
    ///
    /// Add [`fencing`](LockRequest::<kind::Permits>::fencing) for a fencing
    /// token per permit.
    pub fn permits(self, permits: u32) -> LockRequest<kind::Permits> {
        self.kind(Spec::Semaphore {
            permits,
            fenced: false,
        })
    }

    /// Reentrant for `owner`: the same owner id may take the lock again
    /// while holding it (from any task or process), and each guard releases
    /// only its own entry; the lock is free once all are released or
    /// expired. Name the owner explicitly (a job id, a UUID per worker):
    /// async tasks move between threads, so there is no implicit one, and
    /// anyone who knows the id can enter.
    pub fn reentrant(self, owner: impl Into<Arc<str>>) -> LockRequest<kind::Chosen> {
        self.kind(Spec::Reentrant(owner.into()))
    }
}

impl LockRequest<kind::Permits> {
    /// With a fencing token per permit ([`LockGuard::fencing_token`]):
    /// larger than the token of every earlier holder of the same permit
    /// slot ([`LockGuard::key`] names the slot) while the nodes keep their
    /// data. The protected resource keeps the highest token it accepted per
    /// slot and refuses a lower one: a holder paused past its TTL is
    /// refused once its slot's next holder has written. Costs one more
    /// round trip, and keeps a counter key per slot on every node (see
    /// `docs/semaphore.md`).
    pub fn fencing(self) -> LockRequest<kind::Chosen> {
        let Spec::Semaphore { permits, .. } = self.spec else {
            unreachable!("a `Permits` request is a semaphore's");
        };
        LockRequest {
            client: self.client,
            resource: self.resource,
            spec: Spec::Semaphore {
                permits,
                fenced: true,
            },
            ttl: self.ttl,
            wait: self.wait,
            keep_alive: self.keep_alive,
            kind: PhantomData,
        }
    }
}

impl LockRequest<kind::Chosen> {
    pub(crate) fn all(client: Redlock, resources: Vec<Arc<[u8]>>) -> Self {
        Self {
            client,
            resource: resources.first().cloned().unwrap_or_else(|| Arc::from([])),
            spec: Spec::Multi(resources),
            ttl: None,
            wait: None,
            keep_alive: None,
            kind: PhantomData,
        }
    }
}

impl<K> LockRequest<K> {
    /// How long the lock lives on each node unless extended or released;
    /// by default the client's ([`Builder::ttl`](crate::Builder::ttl)).
    /// Validated like the client's: out of bounds, the request fails with
    /// [`Error::Config`] before anything is sent.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// How long to wait for a lock held by someone else; by default the
    /// client's ([`Builder::wait`](crate::Builder::wait): [`Wait::Retries`]`(10)`).
    pub fn wait(mut self, wait: Wait) -> Self {
        self.wait = Some(wait);
        self
    }

    /// Keeps the lock alive once granted: extended in the background
    /// whenever the validity left drops to
    /// [`KeepAlive::extend_when_left`](crate::KeepAlive::extend_when_left)
    /// of the TTL, until the guard is released or dropped, an extension
    /// fails for good, or the extension limit is reached. The guard's
    /// [`lost`](LockGuard::lost) signal fires the moment the lock can no
    /// longer be counted on. [`run`](Self::run) keeps its lock alive with
    /// [`KeepAlive::default`] unless told otherwise here.
    pub fn keep_alive(mut self, options: KeepAlive) -> Self {
        self.keep_alive = Some(options);
        self
    }

    /// Runs `work` under the lock and releases it at the end, whatever the
    /// work returns. The lock is kept alive while the work runs
    /// ([`KeepAlive::default`], or the request's
    /// [`keep_alive`](Self::keep_alive)); the work sees it as a
    /// `&LockGuard` (fencing token, validity, loss signal).
    ///
    /// If the lock is lost, the work is dropped at its current `.await` and
    /// the result is [`Error::LockLost`]. The work runs in the caller's task
    /// and the clock is asked before each poll: once the validity ended
    /// (after a pause of the process, say) it is not polled again.
    ///
    /// The work fails with any error ([`BoxError`]), so `?` on any error
    /// type and `Err("...".into())` need no annotation, and the result is a
    /// [`RunError`]: the lock's failure, or the work's.
    ///
    /// ```no_run
    /// # async fn export(token: Option<u64>) -> std::io::Result<u64> { Ok(token.unwrap_or(0)) }
    /// async fn nightly(redlock: &redlock_tokio::Redlock) -> Result<u64, Box<dyn std::error::Error>> {
    ///     let rows = redlock
    ///         .lock("nightly-export")
    ///         .fencing()
    ///         .run(async |lock| Ok(export(lock.fencing_token()).await?))
    ///         .await?;
    ///     Ok(rows)
    /// }
    /// ```
    ///
    /// Dropping the work stops it only at an `.await`: check
    /// [`LockGuard::validity`] or [`LockGuard::is_lost`] in long
    /// synchronous sections.
    pub async fn run<T, F>(mut self, work: F) -> Result<T, RunError>
    where
        F: AsyncFnOnce(&LockGuard) -> Result<T, BoxError>,
    {
        self.keep_alive = Some(self.keep_alive.unwrap_or_default());
        let guard = self.acquire().await?;
        let outcome: Result<Result<T, BoxError>, LossReason> =
            crate::handles::held::while_held(work(&guard), || guard.loss(), guard.lost()).await;
        let key = guard.key().clone();
        let report = guard.release().await;
        debug!(key = %key, report = %report, "released after run");
        match outcome {
            Ok(done) => done.map_err(RunError::Work),
            Err(reason) => Err(Error::LockLost { key, reason }.into()),
        }
    }

    /// The keep-alive asked for, if any.
    #[cfg_attr(not(feature = "blocking"), allow(dead_code))]
    pub(crate) fn keep_alive_options(&self) -> Option<KeepAlive> {
        self.keep_alive
    }

    async fn acquire(self) -> Result<LockGuard, Error> {
        let names: Vec<&[u8]>;
        let spec = match &self.spec {
            Spec::Exclusive => LockSpec::Exclusive(&self.resource),
            Spec::Fenced => LockSpec::Fenced(&self.resource),
            Spec::Fair => LockSpec::Fair(&self.resource),
            Spec::Read => LockSpec::Read(&self.resource),
            Spec::Write => LockSpec::Write(&self.resource),
            Spec::Reentrant(owner) => LockSpec::Reentrant {
                resource: &self.resource,
                owner,
            },
            Spec::Multi(resources) => {
                names = resources.iter().map(|name| &name[..]).collect();
                LockSpec::Multi(&names)
            }
            Spec::Semaphore {
                permits,
                fenced: false,
            } => LockSpec::Semaphore {
                resource: &self.resource,
                permits: *permits,
            },
            Spec::Semaphore {
                permits,
                fenced: true,
            } => LockSpec::FencedSemaphore {
                resource: &self.resource,
                permits: *permits,
            },
        };
        let wait = self.wait.unwrap_or(self.client.default_wait());
        let mut guard = self
            .client
            .acquire(spec, Arc::clone(&self.resource), self.ttl, wait.attempts())
            .await?;
        if let Some(options) = self.keep_alive {
            guard.start_keep_alive(options);
        }
        Ok(guard)
    }
}

impl<K: Send + 'static> IntoFuture for LockRequest<K> {
    type Output = Result<LockGuard, Error>;
    type IntoFuture = Acquiring;

    fn into_future(self) -> Acquiring {
        Acquiring(Box::pin(self.acquire()))
    }
}

/// The future of an awaited [`LockRequest`]: the [`LockGuard`], or why the
/// lock was not granted.
#[must_use = "futures do nothing unless awaited"]
pub struct Acquiring(Pin<Box<dyn Future<Output = Result<LockGuard, Error>> + Send>>);

impl fmt::Debug for Acquiring {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Acquiring").finish_non_exhaustive()
    }
}

impl Future for Acquiring {
    type Output = Result<LockGuard, Error>;

    fn poll(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        self.0.as_mut().poll(cx)
    }
}
