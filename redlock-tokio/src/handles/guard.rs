//! The lock guard: validity, extend, release, keep-alive, the loss signal.

mod loss;

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redlock_core::{KeepAlive, Key, Lock, LockValue, OpEvent, Operation, ReleaseReport, Votes};
use tracing::{Instrument, debug, info_span};

use crate::driver::{Sink, drive, kind, run};
use crate::metrics::{self, End};
use crate::{Error, LossReason, Redlock};

pub use loss::LossSignal;
use loss::{Shared, kept_alive};

/// A lock held on a quorum of nodes, made by awaiting a
/// [`LockRequest`](crate::LockRequest).
///
/// The lock is ours only while validity is left: check
/// [`validity`](Self::validity) before each step of work, or watch
/// [`lost`](Self::lost), which completes the moment the lock can no longer
/// be counted on (its validity ran out, or, kept alive, an extension failed
/// for good). End it with [`release`](Self::release), which reports what
/// each node did.
///
/// Dropping the guard releases the lock in the background, on the client's
/// driver task (on every node, since any of them may hold our value),
/// behind its keep-alive's extensions. When that runtime is shutting down (a guard alive or dropped as
/// `main` returns, through `?`, a panic or plainly) or there is none, the
/// release goes out on blocking connections, each waiting at most one
/// connect timeout and one per-node timeout. Only a process that ends
/// without running destructors ([`std::process::exit`], `abort`, a signal)
/// leaves its locks to expire at their TTL; call
/// [`Redlock::shutdown`] first there.
#[must_use = "dropping the guard releases the lock at once"]
pub struct LockGuard {
    client: Redlock,
    resource: Arc<[u8]>,
    /// The lock as acquired: key, value, token, votes (never changes).
    acquired: Lock,
    /// The lock as extended, and its loss.
    shared: Arc<Shared>,
    /// Released or forgotten: nothing left to do on drop.
    done: bool,
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("key", self.key())
            .field("ttl", &self.ttl())
            .field("validity", &self.validity())
            .field("extensions", &self.extensions())
            .field(
                "kept_alive",
                &self.shared.with(|kept| kept.keep_alive_key.is_some()),
            )
            .field("loss", &self.loss())
            .finish_non_exhaustive()
    }
}

/// A client's live guards, for its shutdown to release.
#[derive(Default)]
pub(crate) struct Guards(std::sync::Mutex<GuardList>);

#[derive(Default)]
struct GuardList {
    live: Vec<std::sync::Weak<Shared>>,
    /// Set by the shutdown: a guard made from now on (its lock granted as
    /// the shutdown began) is released at once.
    closed: bool,
}

impl Guards {
    /// Lists a new guard; `false` once the client is shut down (not listed).
    fn add(&self, shared: &Arc<Shared>) -> bool {
        let mut guards = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if guards.closed {
            return false;
        }
        // Dropped guards are swept before the list would grow: amortized
        // O(1) a guard.
        if guards.live.len() == guards.live.capacity() {
            guards.live.retain(|guard| guard.strong_count() > 0);
        }
        guards.live.push(Arc::downgrade(shared));
        true
    }

    /// Takes every live guard's lock (with its keep-alive) to release:
    /// each guard is lost ([`LossReason::Closed`]) and releases nothing
    /// more. A guard made afterwards is released as it is made.
    pub(crate) fn close(&self) -> Vec<(Option<u64>, Box<Lock>)> {
        let guards = {
            let mut list = self
                .0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            list.closed = true;
            std::mem::take(&mut list.live)
        };
        guards
            .iter()
            .filter_map(std::sync::Weak::upgrade)
            .filter_map(|shared| shared.close())
            .map(|(kept, lock)| (kept, Box::new(lock)))
            .collect()
    }
}

impl LockGuard {
    pub(crate) fn new(client: Redlock, resource: Arc<[u8]>, lock: Lock) -> Self {
        let shared = Arc::new(Shared::new(lock.clone()));
        if !client.guards().add(&shared)
            && let Some((kept, lock)) = shared.close()
        {
            // Granted as the client shut down: lost at once (`Closed`), and
            // released as the shutdown releases the others (it awaits this
            // release when it began before the shutdown's driver ended).
            spawn_release(client.clone(), lock, kept);
        }
        Self {
            client,
            resource,
            shared,
            acquired: lock,
            done: false,
        }
    }

    /// The resource name, as given to `lock` (the first one, for
    /// `lock_all`).
    pub fn resource(&self) -> &[u8] {
        &self.resource
    }

    /// The Redis key: the key prefix followed by the resource name.
    pub fn key(&self) -> &Key {
        self.acquired.key()
    }

    /// Our unique value on the nodes; where the protected resource can
    /// compare values, a compare-and-set token. Whoever knows it can
    /// release the lock ([`Redlock::release_value`]): keep it out of logs.
    pub fn value(&self) -> &LockValue {
        self.acquired.value()
    }

    /// The fencing token, for a lock asked with
    /// [`fencing`](crate::LockRequest::fencing): larger than the token of
    /// every earlier holder of this resource, and the same after
    /// extensions. Send it with every write to the protected resource,
    /// which should refuse a token lower than one it has seen
    /// ([`core::scripts::CHECK_TOKEN`](crate::core::scripts::CHECK_TOKEN)
    /// does that for a resource kept in Redis). `None` for other locks.
    pub fn fencing_token(&self) -> Option<u64> {
        self.acquired.fencing_token()
    }

    /// The votes of the round that acquired the lock.
    pub fn votes(&self) -> &Votes {
        self.acquired.votes()
    }

    /// When the acquisition round that won the lock was sent: the validity
    /// is measured from this instant, not from when the lock was handed
    /// out.
    pub fn acquired_at(&self) -> Instant {
        self.acquired.acquired_at()
    }

    /// Validity left now: the lock is ours for this long at most, as far as
    /// this client's clock can tell. Zero once lost, even if the last
    /// validity window has not ended.
    pub fn validity(&self) -> Duration {
        self.shared.validity()
    }

    /// The instant the validity window of the last successful acquire or
    /// extension ends. A lock can be lost before then (another owner, our
    /// value released): [`validity`](Self::validity) and
    /// [`is_lost`](Self::is_lost) say so.
    pub fn valid_until(&self) -> Instant {
        self.shared.with(|kept| kept.lock.valid_until())
    }

    /// The TTL of the last acquire or extension.
    pub fn ttl(&self) -> Duration {
        self.shared.with(|kept| kept.lock.ttl().as_duration())
    }

    /// Successful extensions so far, by hand or by the keep-alive.
    pub fn extensions(&self) -> u64 {
        self.shared.with(|kept| kept.lock.extensions())
    }

    /// Whether the lock is lost: its validity ran out, or an extension
    /// failed for good. Kept alive, an extension that could not count
    /// (too few nodes answered) is tried again while validity is left, so
    /// such a lock is lost when its validity ends, with that reason.
    pub fn is_lost(&self) -> bool {
        self.shared.loss().is_some()
    }

    /// Why the lock was lost, once it is.
    pub fn loss(&self) -> Option<LossReason> {
        self.shared.loss()
    }

    /// Completes when the lock is lost, with the reason: when its validity
    /// runs out, or, kept alive, when an extension fails for good or the
    /// extension limit is reached (before the validity ends). Cancel-safe;
    /// may be awaited any number of times.
    pub async fn lost(&self) -> LossReason {
        self.shared.lost().await
    }

    /// The loss signal as a handle of its own, to give to tasks the work
    /// spawns: cheap to clone, it outlives the guard's borrow.
    pub fn loss_signal(&self) -> LossSignal {
        LossSignal::new(Arc::clone(&self.shared))
    }

    /// Extends the lock to `ttl` from now, on a quorum of nodes, and
    /// returns the new validity.
    ///
    /// Fails with [`ExtendError::Expired`] when no validity is left (someone
    /// else may hold the lock by now), [`ExtendError::Lost`] when another
    /// owner holds it and [`ExtendError::Gone`] when our value is gone from
    /// more nodes than a quorum can spare (released by its value): the lock
    /// is then lost ([`lost`](Self::lost) fires). [`ExtendError::NoQuorum`]
    /// (too few nodes answered) leaves the lock as it was, until its
    /// validity runs out. With keep-alive on, an extension by hand runs
    /// beside it. Cancel-safe: a dropped extension changes nothing here.
    ///
    /// [`ExtendError::Expired`]: crate::core::ExtendError::Expired
    /// [`ExtendError::Lost`]: crate::core::ExtendError::Lost
    /// [`ExtendError::Gone`]: crate::core::ExtendError::Gone
    /// [`ExtendError::NoQuorum`]: crate::core::ExtendError::NoQuorum
    pub async fn extend(&mut self, ttl: Duration) -> Result<Duration, Error> {
        let ttl = self.client.settings().ttl(ttl)?;
        let mut lock = self.shared.with(|kept| kept.lock.clone());
        let span = info_span!("redlock.extend", resource = %lock.key(), ttl_ms = ttl.as_millis());
        let extension =
            Operation::extend(&mut lock, ttl, crate::sim::now()).inspect_err(|error| {
                metrics::extended(Err(error));
                span.in_scope(|| debug!(error = %error, "lock not extended"));
            })?;
        let (outcome, _) = drive::<kind::Extend>(extension, &self.client)
            .instrument(span.clone())
            .await?;
        metrics::extended(outcome.as_ref().map(|_| ()));
        let _entered = span.enter();
        // Applied to the guard's lock; whether it lost the lock is the
        // core's to say.
        self.shared.tell(&OpEvent::Extend(outcome.clone()));
        match outcome {
            Ok(extended) => {
                let validity = self.validity();
                debug!(validity_ms = validity.as_millis() as u64, votes = %extended.votes, "lock extended");
                Ok(validity)
            }
            Err(error) => {
                debug!(error = %error, "lock not extended");
                Err(error.into())
            }
        }
    }

    /// Starts the keep-alive ([`LockRequest::keep_alive`](crate::LockRequest::keep_alive)):
    /// the core's keep-alive on the client's driver, whose events the
    /// driver applies to this guard's copy of the lock as they come.
    pub(crate) fn start_keep_alive(&mut self, options: KeepAlive) {
        let kept = self
            .shared
            .with(|kept| Operation::keep_alive(kept.lock.clone(), options));
        let span = info_span!("redlock.keep_alive", resource = %self.key());
        let told = Arc::clone(&self.shared);
        let sink = Sink::Callback(Box::new(move |message| {
            let _entered = span.enter();
            kept_alive(&told, message);
        }));
        match self.client.driver().start(kept, Some(sink)) {
            Ok(key) => self.shared.with(|kept| kept.keep_alive_key = Some(key)),
            // Only outside any runtime, where no acquire completes.
            Err(_) => debug!("no runtime for the keep-alive; the lock ends with its validity"),
        }
    }

    /// Stops the keep-alive: its operation is cancelled on the driver now,
    /// so that whatever this client sends from now on goes after its
    /// extensions (which may set a missing key again) on every node.
    fn stop_keep_alive(&mut self) {
        if let Some(key) = self.shared.with(|kept| kept.keep_alive_key.take()) {
            self.client.driver().cancel(key);
        }
    }

    /// Releases the lock on every node (stopping its keep-alive first);
    /// `.await` it for the report. It is decided as soon as the outcome is
    /// certain: once fewer than a quorum of nodes can still hold our value
    /// (with 5 nodes, once 3 answered), so a node that does not answer
    /// costs nothing while the others answer; the deletes not waited for
    /// go on in the background, in order on each node, and the report
    /// counts them ([`ReleaseReport::pending`]). [`Releasing::every_node`]
    /// waits for every node instead. Ends within one per-node timeout,
    /// also when nodes are down or the lock has expired. Only our value is
    /// ever deleted.
    ///
    /// Cancel-safe: if the future is dropped, the release continues in the
    /// background.
    pub fn release(self) -> Releasing {
        Releasing {
            guard: self,
            every_node: false,
        }
    }

    /// Releases the lock; `done` once it has, so that the drop that follows
    /// does nothing (and a release cancelled before is redone by `Drop`).
    async fn release_with(&mut self, every_node: bool) -> ReleaseReport {
        self.stop_keep_alive();
        let lost = self.shared.end();
        // Boxed, as the machine in `release_lock`: see `Releasing`.
        let mut lock = self.shared.with(|kept| Box::new(kept.lock.clone()));
        let report = release_lock(&self.client, &mut lock, every_node).await;
        if !lost {
            // A lost lock's hold ended with the loss.
            metrics::held(&lock, End::Released);
        }
        // Only now: a release cancelled above is redone by `Drop`.
        self.done = true;
        report
    }

    /// The lock as it stands, handed to another owner (an election's
    /// term): the guard no longer releases it.
    pub(crate) fn into_lock(mut self) -> Lock {
        self.stop_keep_alive();
        self.shared.end();
        self.done = true;
        self.shared.with(|kept| kept.lock.clone())
    }

    /// Stops tracking the lock (and its keep-alive) without releasing it,
    /// and returns its value: the key stays on the nodes until it expires
    /// or someone releases the value with [`Redlock::release_value`].
    pub fn forget(self) -> LockValue {
        self.into_lock().value().clone()
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        // Released by the client's shutdown, if not by this guard.
        if self.done || self.shared.with(|kept| kept.closed) {
            return;
        }
        let lost = self.shared.end();
        let lock = self.shared.with(|kept| kept.lock.clone());
        if !lost {
            metrics::held(&lock, End::Released);
        }
        // Stopped by the release below, which goes behind its extensions.
        let kept = self.shared.with(|kept| kept.keep_alive_key.take());
        spawn_release(self.client.clone(), lock, kept);
    }
}

/// Releases `lock` in the background, on the client's driver, queued
/// there behind everything the client sent before; where the keep-alive or
/// term `kept` (its key on the driver) still runs, it is stopped first and
/// the lock it holds is released. Outside any runtime, where the driver
/// runs on a runtime that runs tasks by itself (multi-thread), the release
/// goes there and this thread waits until every node answered it, within
/// one per-node timeout (the caller may be about to end the process, and a
/// quorum's answers alone leave the last delete in flight); where it
/// cannot (no driver running, or a current-thread runtime nobody drives
/// now), it goes out on blocking connections.
pub(crate) fn spawn_release(client: Redlock, lock: Lock, kept: Option<u64>) {
    let driver = client.driver();
    let inside = tokio::runtime::Handle::try_current().is_ok();
    let wait =
        !inside && driver.runtime_flavor() == Some(tokio::runtime::RuntimeFlavor::MultiThread);
    let lock = if inside || wait {
        let (sink, mut messages) = crate::driver::mailbox();
        let sink = wait.then_some(crate::driver::Sink::Channel(sink));
        match driver.release(kept, Box::new(lock), sink) {
            Ok(()) => {
                debug!("lock dropped; releasing in the background");
                // Never on a runtime's thread: this one runs none.
                if wait
                    && crate::node::check_may_block("waiting for a release from outside a runtime")
                {
                    while let Some(crate::driver::Message::Event(_)) =
                        futures::executor::block_on(messages.recv())
                    {}
                }
                return;
            }
            Err(lock) => *lock,
        }
    } else {
        lock
    };
    debug!("lock dropped outside a Tokio runtime; releasing on blocking connections");
    crate::driver::release_lock_blocking(client.node_handles(), lock);
}

/// A lock's release ([`LockGuard::release`]): `.await` it for the report.
/// Dropped before it is awaited, the guard it holds is dropped, which
/// releases the lock in the background.
#[must_use = "a release does nothing until awaited (dropped, its guard releases in the background)"]
#[derive(Debug)]
pub struct Releasing {
    guard: LockGuard,
    every_node: bool,
}

impl Releasing {
    /// Waits for every node's answer (or its per-node timeout) before
    /// reporting, for the complete per-node story: no node is left
    /// [`pending`](ReleaseReport::pending), at the cost of waiting for the
    /// slowest node (one per-node timeout for a node that does not answer).
    pub fn every_node(mut self) -> Self {
        self.every_node = true;
        self
    }
}

impl std::future::IntoFuture for Releasing {
    type Output = ReleaseReport;
    type IntoFuture = std::pin::Pin<Box<dyn std::future::Future<Output = ReleaseReport> + Send>>;

    /// The future is allocated whole, like every acquire's: it holds the
    /// guard once (an `async fn` taking it by value would hold it twice),
    /// and the lock and the release machine it drives are boxed apart, so
    /// that every block stays under 1 KiB, which glibc's allocator serves
    /// from the thread's own cache; a larger one takes a shared arena's
    /// lock (measured: about a tenth of the client's CPU in the 64-task
    /// benchmark).
    fn into_future(self) -> Self::IntoFuture {
        let Releasing {
            mut guard,
            every_node,
        } = self;
        Box::pin(async move { guard.release_with(every_node).await })
    }
}

pub(crate) async fn release_lock(
    client: &Redlock,
    lock: &mut Lock,
    every_node: bool,
) -> ReleaseReport {
    let span = info_span!("redlock.release", resource = %lock.key());
    let started = crate::sim::now();
    // The core plans it (the script, not a plain `DELIFEQ`, where this
    // client's waiters wait).
    let mut release = Operation::release(lock, started);
    if every_node {
        release = release.every_node();
    }
    async {
        let (report, _) = run::<kind::Release>(release, client).await;
        client.log_release(&report);
        metrics::node_misses(lock.node_misses(&report, started));
        report
    }
    .instrument(span)
    .await
}
