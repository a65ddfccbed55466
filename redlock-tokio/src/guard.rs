//! The lock guard: validity, extend, release, auto-extension.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use redlock_core::{KeptLock, KeptLockEvent, Key, Lock, LockValue, ReleaseReport, Votes};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug, info, info_span};

use crate::driver::{drive, drive_with};
use crate::metrics::{self, End};
use crate::{Error, KeepAlive, LossReason, Redlock};

/// A lock held on a quorum of nodes.
///
/// Check [`validity`](Self::validity) (or [`is_valid`](Self::is_valid))
/// before each step of work: the lock is only ours while validity is left.
/// End it with [`release`](Self::release), which waits for the nodes and
/// reports what each did.
///
/// Dropping the guard without releasing releases the lock in a background
/// task on the current Tokio runtime (on every node, since any of them may
/// hold our value). When that runtime is shutting down (a guard alive or
/// dropped as `main` returns, through `?`, a panic or plainly) or there is
/// none, the release goes out on blocking connections, each waiting at most
/// one connect timeout and one per-node timeout. Only a process that ends
/// without running destructors ([`std::process::exit`], `abort`, a signal)
/// leaves its locks to expire at their TTL; call
/// [`Redlock::shutdown`](crate::Redlock::shutdown) first there.
#[must_use = "dropping the guard releases the lock at once"]
pub struct LockGuard {
    client: Redlock,
    resource: Arc<[u8]>,
    /// `None` only once released, forgotten or handed to a keep-alive.
    lock: Option<Lock>,
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = f.debug_struct("LockGuard");
        if let Some(lock) = &self.lock {
            s.field("key", lock.key())
                .field("ttl", &lock.ttl())
                .field("validity", &lock.validity(crate::sim::now()))
                .field("extensions", &lock.extensions());
        }
        s.finish_non_exhaustive()
    }
}

impl LockGuard {
    pub(crate) fn new(client: Redlock, resource: Arc<[u8]>, lock: Lock) -> Self {
        Self {
            client,
            resource,
            lock: Some(lock),
        }
    }

    fn core(&self) -> &Lock {
        // Every method that takes the lock out consumes the guard.
        self.lock
            .as_ref()
            .expect("a live guard always holds its lock")
    }

    /// The resource name, as given to `lock`.
    pub fn resource(&self) -> &[u8] {
        &self.resource
    }

    /// The Redis key: the key prefix followed by the resource name.
    pub fn key(&self) -> &Key {
        self.core().key()
    }

    /// Our unique value on the nodes. Whoever knows it can release the lock
    /// ([`Redlock::release_value`]).
    pub fn value(&self) -> &LockValue {
        self.core().value()
    }

    /// Validity left now: the lock is ours for this long at most, as far as
    /// this client's clock can tell. Zero once expired.
    pub fn validity(&self) -> Duration {
        self.core().validity(crate::sim::now())
    }

    /// Whether any validity is left now.
    pub fn is_valid(&self) -> bool {
        self.core().is_valid(crate::sim::now())
    }

    /// The instant the validity ends.
    pub fn valid_until(&self) -> Instant {
        self.core().valid_until()
    }

    /// When the acquisition round that won the lock was sent: the validity
    /// is measured from this instant, not from when the lock was handed
    /// out.
    pub fn acquired_at(&self) -> Instant {
        self.core().acquired_at()
    }

    /// The TTL of the last acquire or extend.
    pub fn ttl(&self) -> Duration {
        self.core().ttl().as_duration()
    }

    /// Successful extensions so far.
    pub fn extensions(&self) -> u64 {
        self.core().extensions()
    }

    /// The fencing token, for a lock taken with fencing
    /// ([`LockOptions::fencing`](crate::LockOptions::fencing)): larger than
    /// the token of every earlier holder of this resource, and the same
    /// after extensions. Send it with every write to the protected resource,
    /// which should refuse a token lower than one it has seen
    /// ([`scripts::CHECK_TOKEN`](redlock_core::scripts::CHECK_TOKEN) does
    /// that for a resource kept in Redis).
    pub fn fencing_token(&self) -> Option<u64> {
        self.core().fencing_token()
    }

    /// The votes of the round that acquired the lock.
    pub fn votes(&self) -> &Votes {
        self.core().votes()
    }

    /// Extends the lock to `ttl` from now, on a quorum of nodes, and returns
    /// the new validity.
    ///
    /// Fails with [`ExtendError::Expired`] when no validity is left (someone
    /// else may hold the lock by now), [`ExtendError::Lost`] when another
    /// owner holds it, [`ExtendError::Gone`] when our value is gone from more
    /// nodes than a quorum can spare (released by its value, for example by
    /// `redlock release --value`: the keys are then not re-created), and
    /// [`ExtendError::NoQuorum`] when too few nodes answered. After a
    /// failure, treat the lock as lost; the guard still releases on drop.
    /// Cancel-safe: a dropped extension changes nothing here.
    ///
    /// [`ExtendError::Expired`]: crate::ExtendError::Expired
    /// [`ExtendError::Lost`]: crate::ExtendError::Lost
    /// [`ExtendError::Gone`]: crate::ExtendError::Gone
    /// [`ExtendError::NoQuorum`]: crate::ExtendError::NoQuorum
    pub async fn extend(&mut self, ttl: Duration) -> Result<Duration, Error> {
        let ttl = self.client.settings().ttl(ttl)?;
        let client = self.client.clone();
        let lock = self
            .lock
            .as_mut()
            .expect("a live guard always holds its lock");
        let span = info_span!("redlock.extend", resource = %lock.key(), ttl_ms = ttl.as_millis());
        let mut extension = lock.extend(ttl, crate::sim::now()).inspect_err(|error| {
            metrics::extended(Err(error));
            span.in_scope(|| debug!(error = %error, "lock not extended"));
        })?;
        let outcome = drive(&mut extension, &client)
            .instrument(span.clone())
            .await;
        metrics::extended(outcome.as_ref().map(|_| ()));
        span.in_scope(|| match outcome {
            Ok(extended) => {
                lock.apply(&extended);
                let validity = lock.validity(crate::sim::now());
                debug!(validity_ms = validity.as_millis() as u64, votes = %extended.votes, "lock extended");
                Ok(validity)
            }
            Err(error) => {
                debug!(error = %error, "lock not extended");
                Err(error.into())
            }
        })
    }

    /// Releases the lock on every node and reports what each did. Ends
    /// within one per-node timeout, also when nodes are down or the lock
    /// has expired. Only our value is ever deleted.
    ///
    /// Cancel-safe: if this future is dropped, the release continues in the
    /// background.
    pub async fn release(mut self) -> ReleaseReport {
        let lock = self
            .lock
            .as_mut()
            .expect("a live guard always holds its lock");
        let report = release_lock(&self.client, lock).await;
        metrics::held(lock, End::Released);
        // Only now: a release cancelled above is redone by `Drop`.
        self.lock = None;
        report
    }

    /// Stops tracking the lock without releasing it and returns its value:
    /// the key stays on the nodes until it expires or someone releases the
    /// value with [`Redlock::release_value`].
    pub fn forget(mut self) -> LockValue {
        let lock = self
            .lock
            .take()
            .expect("a live guard always holds its lock");
        lock.value().clone()
    }

    /// Keeps the lock alive in a background task: it is extended to its TTL
    /// whenever the validity left drops to
    /// [`KeepAlive::extend_when_left`] of the TTL, until
    /// [`KeepAlive::max_extensions`], a failed extension, or release.
    ///
    /// Watch [`KeepAliveGuard::lost`] or [`KeepAliveGuard::lost_token`]: they
    /// fire the moment the lock can no longer be counted on.
    ///
    /// # Panics
    /// Outside a Tokio runtime, like `tokio::spawn`.
    pub fn keep_alive(mut self, options: KeepAlive) -> KeepAliveGuard {
        let lock = self
            .lock
            .take()
            .expect("a live guard always holds its lock");
        let key = lock.key().clone();
        let value = lock.value().clone();
        let fencing_token = lock.fencing_token();
        let shared = Arc::new(Shared {
            state: Mutex::new(Kept { lock, loss: None }),
            lost: CancellationToken::new(),
        });
        let span = info_span!("redlock.keep_alive", resource = %key);
        let task = tokio::spawn(
            keep_alive(self.client.clone(), Arc::clone(&shared), options).instrument(span),
        );
        KeepAliveGuard {
            client: self.client.clone(),
            resource: Arc::clone(&self.resource),
            key,
            value,
            fencing_token,
            shared,
            task: Some(task),
            released: false,
        }
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if let Some(lock) = self.lock.take() {
            metrics::held(&lock, End::Released);
            spawn_release(self.client.clone(), lock, None);
        }
    }
}

/// Releases `lock` in the background, after `task` (a keep-alive whose
/// extensions must not overtake the release) has stopped. If the runtime
/// drops that task first (it is shutting down: `main` returned with the
/// guard alive or just dropped), or there is no runtime, the release goes
/// out on blocking connections instead, at once.
fn spawn_release(client: Redlock, lock: Lock, task: Option<JoinHandle<()>>) {
    let unreleased = Unreleased {
        client,
        lock: Some(lock),
    };
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        release_from_outside(unreleased, task);
        return;
    };
    debug!("lock dropped; releasing in the background");
    let background = unreleased.client.background().clone();
    background.spawn_on(
        async move {
            let mut unreleased = unreleased;
            if let Some(task) = task {
                task.abort();
                let _ = task.await;
            }
            // From the first poll of the release on, its requests are sent
            // and see to themselves (`driver::send`, rule 4).
            let mut lock = unreleased.lock.take().expect("taken only here");
            release_lock(&unreleased.client, &mut lock).await;
        },
        &runtime,
    );
}

/// Releases a lock dropped outside any Tokio runtime, and returns once it
/// is answered. Requests of the lock may still be in flight on the runtime
/// of the client's drain (an acquire's answer from a node after the
/// quorum): a release on a connection of its own could reach that node
/// first and leave the key there. So where that runtime runs tasks by
/// itself (multi-thread), the release goes there, after them on each
/// node's connection, and this thread waits for it; otherwise (no drain
/// running, or a current-thread runtime nobody drives now) it goes out on
/// blocking connections.
fn release_from_outside(unreleased: Unreleased, task: Option<JoinHandle<()>>) {
    // A keep-alive's extensions must not follow the release.
    if let Some(task) = &task {
        task.abort();
    }
    let Some(runtime) =
        unreleased.client.drain().runtime().filter(|runtime| {
            runtime.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread
        })
    else {
        debug!("lock dropped outside a Tokio runtime; releasing on blocking connections");
        return;
    };
    debug!("lock dropped outside a Tokio runtime; releasing on the client's runtime");
    // As long as a release may take: one per-node timeout, once connected.
    let patience = unreleased.client.settings().release_timeout() * 2 + Duration::from_secs(1);
    let (done, answered) = std::sync::mpsc::channel::<()>();
    runtime.spawn(async move {
        // Dropped unpolled (the runtime shuts down), `unreleased` sends
        // the release on blocking connections.
        let mut unreleased = unreleased;
        if let Some(task) = task {
            let _ = task.await;
        }
        let mut lock = unreleased.lock.take().expect("taken only here");
        release_lock(&unreleased.client, &mut lock).await;
        drop(done);
    });
    // Disconnected once the task is done or dropped.
    let _ = answered.recv_timeout(patience);
}

/// A lock whose release has not been sent yet; dropped so, it is released
/// on blocking connections.
struct Unreleased {
    client: Redlock,
    lock: Option<Lock>,
}

impl Drop for Unreleased {
    fn drop(&mut self) {
        if let Some(mut lock) = self.lock.take() {
            // Nobody reads its answers: it publishes for this client's
            // waiters too, which no hand-over tells.
            let release = lock.release(crate::sim::now()).unattended();
            crate::driver::release_blocking(&self.client, release);
        }
    }
}

pub(crate) async fn release_lock(client: &Redlock, lock: &mut Lock) -> ReleaseReport {
    let span = info_span!("redlock.release", resource = %lock.key());
    let started = crate::sim::now();
    let mut release = lock.release(started);
    async {
        let report = drive(&mut release, client).await;
        client.log_release(&report);
        metrics::node_misses(lock.node_misses(&report, started));
        report
    }
    .instrument(span)
    .await
}

struct Shared {
    state: Mutex<Kept>,
    lost: CancellationToken,
}

struct Kept {
    lock: Lock,
    loss: Option<LossReason>,
}

impl Shared {
    fn with<R>(&self, f: impl FnOnce(&mut Kept) -> R) -> R {
        // Every update is a single assignment or `Lock::apply`; a panic cannot
        // leave the state half-written.
        f(&mut self.state.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Validity left now; zero once the lock is lost.
    fn validity(&self) -> Duration {
        self.with(|kept| match kept.loss {
            Some(_) => Duration::ZERO,
            None => kept.lock.validity(crate::sim::now()),
        })
    }

    async fn lost(&self) -> LossReason {
        self.lost.cancelled().await;
        self.with(|kept| kept.loss.clone())
            .expect("the loss reason is stored before the token is cancelled")
    }

    fn lose(&self, reason: LossReason) {
        // What an operator acts on, and what the loss signal reports to
        // the code that held the lock.
        info!(reason = %reason, "lock lost");
        self.with(|kept| kept.loss.get_or_insert(reason).clone());
        self.lost.cancel();
    }
}

/// A lock kept alive by a background task, made by
/// [`LockGuard::keep_alive`].
///
/// The lock is lost when an extension fails for good (another owner, our
/// value released on a quorum of nodes, or validity ran out) or the
/// extension limit is reached; then
/// [`lost`](Self::lost) completes and [`lost_token`](Self::lost_token) is
/// cancelled, at once. An extension that fails only because too few nodes
/// answered is retried while validity is left, so the loss is signalled at
/// the latest when the validity runs out.
///
/// Dropping it stops the extensions and releases the lock in the
/// background, like [`LockGuard`].
#[must_use = "dropping the guard releases the lock at once"]
pub struct KeepAliveGuard {
    client: Redlock,
    resource: Arc<[u8]>,
    key: Key,
    value: LockValue,
    fencing_token: Option<u64>,
    shared: Arc<Shared>,
    task: Option<JoinHandle<()>>,
    released: bool,
}

impl fmt::Debug for KeepAliveGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeepAliveGuard")
            .field("key", &self.key)
            .field("validity", &self.validity())
            .field("extensions", &self.extensions())
            .field("loss", &self.loss())
            .finish_non_exhaustive()
    }
}

impl KeepAliveGuard {
    /// The resource name, as given to `lock`.
    pub fn resource(&self) -> &[u8] {
        &self.resource
    }

    /// The Redis key.
    pub fn key(&self) -> &Key {
        &self.key
    }

    /// Our unique value on the nodes.
    pub fn value(&self) -> &LockValue {
        &self.value
    }

    /// Validity left now; zero once the lock is lost, even if the last
    /// validity window has not ended.
    pub fn validity(&self) -> Duration {
        self.shared.validity()
    }

    /// Whether validity is left and the lock is not lost.
    pub fn is_valid(&self) -> bool {
        !self.validity().is_zero()
    }

    /// The instant the current validity ends (moved on by each extension);
    /// `None` once the lock is lost.
    pub fn valid_until(&self) -> Option<Instant> {
        self.shared.with(|kept| match kept.loss {
            Some(_) => None,
            None => Some(kept.lock.valid_until()),
        })
    }

    /// What work under this lock may know of it, to hand to that work
    /// ([`Redlock::with_lock`] passes one to its closure).
    pub(crate) fn context(&self) -> LockContext {
        LockContext {
            resource: Arc::clone(&self.resource),
            key: self.key.clone(),
            value: self.value.clone(),
            fencing_token: self.fencing_token,
            shared: Arc::clone(&self.shared),
        }
    }

    /// The fencing token, for a fenced lock; extensions keep it.
    pub fn fencing_token(&self) -> Option<u64> {
        self.fencing_token
    }

    /// Successful extensions so far.
    pub fn extensions(&self) -> u64 {
        self.shared.with(|kept| kept.lock.extensions())
    }

    /// Why the lock was lost, once it is.
    pub fn loss(&self) -> Option<LossReason> {
        self.shared.with(|kept| kept.loss.clone())
    }

    /// Whether the lock is lost.
    pub fn is_lost(&self) -> bool {
        self.shared.lost.is_cancelled()
    }

    /// Completes when the lock is lost, with the reason. Cancel-safe; may be
    /// awaited any number of times.
    pub async fn lost(&self) -> LossReason {
        self.shared.lost().await
    }

    /// A token cancelled the moment the lock is lost, to hand to work that
    /// should stop then (`token.cancelled().await`, or
    /// `token.run_until_cancelled(work)`). Cancelling it yourself does not
    /// affect the lock.
    pub fn lost_token(&self) -> CancellationToken {
        self.shared.lost.child_token()
    }

    /// Stops extending and releases the lock on every node.
    ///
    /// Cancel-safe: if this future is dropped, the release continues in the
    /// background.
    pub async fn release(mut self) -> ReleaseReport {
        if let Some(task) = self.task.take() {
            // Wait until the keep-alive has stopped, so that no extension
            // (which may set a missing key again) is sent after the release.
            task.abort();
            let _ = task.await;
        }
        let (mut lock, lost) = self
            .shared
            .with(|kept| (kept.lock.clone(), kept.loss.is_some()));
        let report = release_lock(&self.client, &mut lock).await;
        if !lost {
            // A lost lock's hold ended with the loss.
            metrics::held(&lock, End::Released);
        }
        self.released = true;
        report
    }
}

/// The lock as the work under [`Redlock::with_lock`] sees it: its fencing
/// token, value and validity, and the signal that it is lost.
///
/// The lock is kept alive in the background while the work runs, so
/// [`validity`](Self::validity) is refreshed by every extension. Cheap to
/// clone (a few `Arc`s); clones see the same lock. It holds no lock itself:
/// `with_lock` releases the lock when the work ends, whatever becomes of
/// the context.
///
/// ```no_run
/// # async fn demo(redlock: redlock_tokio::Redlock) -> Result<(), redlock_tokio::Error> {
/// use std::time::Duration;
///
/// let written = redlock
///     .with_lock("ledger", async |lock| {
///         // With `Builder::fencing(true)` every lock has a token: send it
///         // with each write, so the ledger refuses a late writer.
///         let token = lock.fencing_token();
///         for step in 0..3 {
///             if lock.validity() < Duration::from_secs(1) {
///                 break; // not enough time left for one more step
///             }
///             // ... write step `step` with `token` ...
///             # let _ = (step, token);
///         }
///         // Long waits can give up as soon as the lock is lost (the work
///         // is also dropped at its next `.await` then).
///         tokio::select! {
///             reason = lock.lost() => println!("lost: {reason}"),
///             () = tokio::time::sleep(Duration::from_millis(10)) => {}
///         }
///         3
///     })
///     .await?;
/// # let _ = written;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct LockContext {
    resource: Arc<[u8]>,
    key: Key,
    value: LockValue,
    fencing_token: Option<u64>,
    shared: Arc<Shared>,
}

impl fmt::Debug for LockContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockContext")
            .field("key", &self.key)
            .field("fencing_token", &self.fencing_token)
            .field("validity", &self.validity())
            .field("lost", &self.is_lost())
            .finish_non_exhaustive()
    }
}

impl LockContext {
    /// The resource name, as given to `with_lock`.
    pub fn resource(&self) -> &[u8] {
        &self.resource
    }

    /// The Redis key: the key prefix followed by the resource name.
    pub fn key(&self) -> &Key {
        &self.key
    }

    /// Our unique value on the nodes; where the protected resource can
    /// compare values, a compare-and-set token. Whoever knows it can
    /// release the lock: keep it out of logs.
    pub fn value(&self) -> &LockValue {
        &self.value
    }

    /// The fencing token, for a lock taken with fencing
    /// ([`Builder::fencing`](crate::Builder::fencing)); see
    /// [`LockGuard::fencing_token`].
    pub fn fencing_token(&self) -> Option<u64> {
        self.fencing_token
    }

    /// Validity left now, as extended in the background; zero once the lock
    /// is lost.
    pub fn validity(&self) -> Duration {
        self.shared.validity()
    }

    /// Whether the lock is lost.
    pub fn is_lost(&self) -> bool {
        self.shared.lost.is_cancelled()
    }

    /// Completes when the lock is lost, with the reason. Cancel-safe.
    pub async fn lost(&self) -> LossReason {
        self.shared.lost().await
    }

    /// A token cancelled the moment the lock is lost, to hand to tasks the
    /// work spawns. Cancelling it yourself does not affect the lock.
    pub fn lost_token(&self) -> CancellationToken {
        self.shared.lost.child_token()
    }
}

impl Drop for KeepAliveGuard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        let (lock, lost) = self
            .shared
            .with(|kept| (kept.lock.clone(), kept.loss.is_some()));
        if !lost {
            metrics::held(&lock, End::Released);
        }
        spawn_release(self.client.clone(), lock, self.task.take());
    }
}

/// The keep-alive: the core's [`KeptLock`] (the schedule and its
/// extensions, one machine) run by the one driver, which sleeps until the
/// instant the core names and sends what it queues. Each extension is
/// applied to the guard's copy of the lock as it is reported; the final
/// event is the loss.
async fn keep_alive(client: Redlock, shared: Arc<Shared>, options: KeepAlive) {
    let mut kept = shared.with(|kept| KeptLock::new(kept.lock.clone(), options));
    let event = drive_with(&mut kept, &client, |event| match event {
            KeptLockEvent::Extended(extended) => {
                metrics::extended(Ok(()));
                debug!(validity_ms = extended.validity.as_millis() as u64, votes = %extended.votes, "lock extended");
                shared.with(|kept| kept.lock.apply(extended));
            }
            KeptLockEvent::ExtendFailed(error) => {
                metrics::extended(Err(error));
                // Nodes down are reported by their connections; the loss,
                // if it comes, at INFO.
                debug!(error = %error, "extension failed");
            }
            KeptLockEvent::LimitReached { extensions } => {
                debug!(
                    extensions,
                    "extension limit reached; the lock ends with its validity"
                );
            }
            other => debug!(event = ?other, "keep-alive"),
    })
    .await;
    let KeptLockEvent::Lost(reason) = event else {
        unreachable!("a kept lock's final event is its loss, not {event:?}");
    };
    metrics::lost(&reason);
    shared.with(|kept| metrics::held(&kept.lock, End::Lost));
    shared.lose(reason);
}
