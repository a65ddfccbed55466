//! Leader election on the lock: campaign, lead, resign, proclaim, observe.
//! Every decision is the core's ([`Term`], [`ElectionTiming`],
//! [`LeaderWatch`]); this file only drives its machines.

use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures::Stream;
use redlock_core::{
    ElectionTiming, Leader, LeaderReport, LeaderWatch, LeadershipLoss, Lock, LockSpec, Operation,
    ReleaseReport, Term, TermEvent,
};
use tokio::sync::watch;
use tracing::{debug, info};

use crate::driver::{Message, Sink, drive, kind, run};
use crate::{Error, Redlock, Wait};

impl Redlock {
    /// The election `name`: a fenced lock on `name` whose holder leads, its
    /// fencing token the leader's term (see `docs/election.md`). The
    /// timings default to [`ElectionTiming::default_for`] the client's TTL;
    /// a campaign waits [`Wait::Forever`] unless told otherwise.
    pub fn election(&self, name: impl AsRef<[u8]>) -> Election {
        Election {
            client: self.clone(),
            name: name.as_ref().into(),
            timing: Ok(ElectionTiming::default_for(self.settings())),
            retry_period: ElectionTiming::default_for(self.settings()).retry_period(),
            wait: Wait::Forever,
        }
    }
}

/// One election, made by [`Redlock::election`]: [`campaign`](Self::campaign)
/// for a [`Leadership`], [`run`](Self::run) work while leading,
/// [`leader`](Self::leader) or [`observe`](Self::observe) who leads.
#[derive(Clone)]
pub struct Election {
    client: Redlock,
    name: Arc<[u8]>,
    /// Checked at [`campaign`](Election::campaign): the retry period an
    /// observer polls at is used as given.
    timing: Result<ElectionTiming, redlock_core::ConfigError>,
    retry_period: Duration,
    wait: Wait,
}

impl fmt::Debug for Election {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Election")
            .field("name", &String::from_utf8_lossy(&self.name))
            .field("timing", &self.timing)
            .field("wait", &self.wait)
            .finish_non_exhaustive()
    }
}

impl Election {
    /// The lease (the lock's TTL), the renew deadline (a leader steps down
    /// this long after its last confirmed renewal) and the retry period
    /// (between renewals, and between polls of an observer). Checked like
    /// client-go's (lease validity > renew deadline > 1.2 x retry period)
    /// when a campaign starts, which fails with [`Error::Config`] otherwise,
    /// as a lock's [`ttl`](crate::LockRequest::ttl) is checked when the
    /// lock is asked for.
    pub fn timing(
        mut self,
        lease: Duration,
        renew_deadline: Duration,
        retry_period: Duration,
    ) -> Self {
        self.timing =
            ElectionTiming::new(self.client.settings(), lease, renew_deadline, retry_period);
        self.retry_period = retry_period;
        self
    }

    /// How long a campaign waits for the name (the lock's [`Wait`]).
    pub fn wait(mut self, wait: Wait) -> Self {
        self.wait = wait;
        self
    }

    /// Campaigns until elected, or until the wait runs out. Cancel-safe
    /// like a lock request: dropped, it releases whatever its attempt in
    /// flight set. Waits by release notices, like a waiting lock.
    pub async fn campaign(&self) -> Result<Leadership, Error> {
        let timing = self.timing.clone()?;
        let guard = self
            .client
            .acquire(
                LockSpec::Fenced(&self.name),
                Arc::clone(&self.name),
                Some(timing.lease().as_duration()),
                self.wait.attempts(),
            )
            .await?;
        let lock = guard.into_lock();
        let term = Term::new(lock.clone(), &timing)
            .expect("a campaign takes a fenced lock, which has a token");
        info!(term = term.term(), "elected");
        Ok(Leadership::start(
            self.client.clone(),
            lock,
            term,
            timing.renew_deadline(),
        ))
    }

    /// Leads whenever elected: campaigns, runs `work` with the leadership,
    /// and on loss drops the work at its current `.await`, calls `stopped`
    /// with the reason, and campaigns again. Returns once a `work` returns
    /// by itself (after resigning), or with a campaign's error.
    /// `stopped` is called only for a term this process held.
    ///
    /// The work runs in the caller's task and is never polled again once
    /// the term's validity ended ([`Leadership::valid_until`], asked of the
    /// clock before each poll): after a pause of the process past its
    /// lease, a deposed leader's work takes no further step. A step already
    /// under way when the pause came (no `.await` in between) still ends
    /// after it; the resource checks [`Leadership::term`] for that.
    pub async fn run<F, Fut>(
        &self,
        mut work: F,
        mut stopped: impl FnMut(&LeadershipLoss),
    ) -> Result<(), Error>
    where
        F: FnMut(Leadership) -> Fut,
        Fut: Future<Output = ()>,
    {
        loop {
            let mut leadership = self.campaign().await?;
            let held = crate::handles::held::while_held(
                work(leadership.clone()),
                || leadership.loss(),
                leadership.lost(),
            )
            .await;
            match held {
                Ok(()) => {
                    leadership.resign().await;
                    return Ok(());
                }
                Err(reason) => stopped(&reason),
            }
        }
    }

    /// Who leads, as one read of every server tells (per server, and the
    /// id held on a quorum: [`LeaderReport::leader`]). Advisory: the leader
    /// may have stepped down by the time the answer arrives; a resource
    /// that must refuse a deposed leader checks the term.
    pub async fn leader(&self) -> LeaderReport {
        let read = Operation::read_leader(self.client.settings(), &self.name, crate::sim::now());
        run::<kind::ReadLeader>(read, &self.client).await.0
    }

    /// The leaders one after another, each told once ([`LeaderWatch`]):
    /// another id or a higher term is a new leader, so the stream follows
    /// the leader there is even after the servers lost their data and
    /// terms started again low. A read of every server each retry period.
    pub fn observe(&self) -> impl Stream<Item = Leader> + Send + 'static {
        let election = self.clone();
        futures::stream::unfold(
            (election, LeaderWatch::new(), true),
            |(election, mut watch, mut first)| async move {
                loop {
                    // One read per retry period, also right after a change.
                    if !first {
                        tokio::time::sleep(election.retry_period).await;
                    }
                    first = false;
                    let report = election.leader().await;
                    if let Some(leader) = watch.handle_report(&report) {
                        return Some((leader, (election, watch, first)));
                    }
                }
            },
        )
    }
}

/// What a leadership's watchers see.
#[derive(Clone, Debug)]
struct Status {
    lose_at: Instant,
    loss: Option<LeadershipLoss>,
}

/// A term this process leads, made by [`Election::campaign`]. Cheap to
/// clone; clones share the term. The term is renewed in the background
/// until [`lost`](Self::lost) or [`resign`](Self::resign).
#[derive(Clone)]
pub struct Leadership {
    inner: Arc<Inner>,
}

struct Inner {
    client: Redlock,
    lock: Lock,
    term: u64,
    renew_deadline: Duration,
    /// Shared with the renewing task, which tells through it.
    status: Arc<watch::Sender<Status>>,
    /// The renewing term's key on the client's driver, while it runs.
    renewing: Mutex<Option<u64>>,
    /// The term, given back by the driver when it ended (lost).
    ended: Arc<Mutex<Option<Term>>>,
    /// One resign at a time.
    resigning: tokio::sync::Mutex<()>,
}

impl fmt::Debug for Leadership {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Leadership")
            .field("term", &self.term())
            .field("loss", &self.loss())
            .finish_non_exhaustive()
    }
}

impl Leadership {
    fn start(client: Redlock, lock: Lock, term: Term, renew_deadline: Duration) -> Self {
        let (status, _) = watch::channel(Status {
            lose_at: term.lose_at(),
            loss: None,
        });
        let status = Arc::new(status);
        let this = Self {
            inner: Arc::new(Inner {
                client,
                term: term.term(),
                renew_deadline,
                lock,
                status,
                renewing: Mutex::new(None),
                ended: Arc::new(Mutex::new(None)),
                resigning: tokio::sync::Mutex::new(()),
            }),
        };
        this.renew(term);
        this
    }

    /// Renews the term on the client's driver until it ends or is taken
    /// back ([`resign`](Self::resign)); the driver tells the leadership's
    /// watchers each renewal and the loss. Nothing of it holds the
    /// leadership: dropping the last handle stops it ([`Inner`]'s drop).
    fn renew(&self, term: Term) {
        let status = Arc::clone(&self.inner.status);
        let ended = Arc::clone(&self.inner.ended);
        let number = self.inner.term;
        let tell = move |event: &TermEvent| match event {
            TermEvent::Renewed { lose_at, .. } => {
                status.send_modify(|s| s.lose_at = *lose_at);
            }
            TermEvent::RenewFailed(error) => debug!(error = %error, "renewal failed"),
            TermEvent::Lost(reason) => {
                info!(term = number, reason = %reason, "leadership lost");
                status.send_modify(|s| s.loss = Some(reason.clone()));
            }
            _ => {}
        };
        let sink = Sink::Callback(Box::new(move |message| match message {
            Message::Event(redlock_core::OpEvent::Term(event)) => tell(&event),
            Message::Finished(finished) => {
                let (event, operation) = finished.take();
                match event {
                    redlock_core::OpEvent::Term(event) => tell(&event),
                    // Shut down: the core released the term's lock.
                    redlock_core::OpEvent::Closed => tell(&TermEvent::Lost(LeadershipLoss::Lock(
                        redlock_core::LossReason::Closed,
                    ))),
                    _ => {}
                }
                if let Some(term) = operation.into_term() {
                    *ended.lock().unwrap_or_else(PoisonError::into_inner) = Some(term);
                }
            }
            // The runtime shuts down: the renewal ends with it.
            _ => {}
        }));
        let driver = self.inner.client.driver();
        if let Ok(key) = driver.start(Operation::term(term), Some(sink)) {
            *self
                .inner
                .renewing
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = Some(key);
        }
    }

    /// The term, stopped: taken back from the driver while it renews, or
    /// as it ended; `None` once resigned.
    async fn stop_renewing(&self) -> Option<Term> {
        let renewing = self
            .inner
            .renewing
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(key) = renewing
            && let Ok(operation) = self.inner.client.driver().take(key).await
            && let Some(term) = operation.into_term()
        {
            return Some(term);
        }
        // It ended first: the driver handed it back then.
        self.inner
            .ended
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }

    /// The term: the election's fencing token, larger than every earlier
    /// leader's. Send it with every write to a resource that must refuse a
    /// deposed leader.
    pub fn term(&self) -> u64 {
        self.inner.term
    }

    /// This leader's id (its lock value).
    pub fn id(&self) -> &str {
        self.inner.lock.value().as_str()
    }

    /// The instant this leader steps down unless a renewal counts before:
    /// before any other process can be elected, while the timing
    /// assumptions hold.
    pub fn valid_until(&self) -> Instant {
        self.inner.status.borrow().lose_at
    }

    /// Why the term ended, once it has.
    pub fn loss(&self) -> Option<LeadershipLoss> {
        let status = self.inner.status.borrow();
        match &status.loss {
            Some(reason) => Some(reason.clone()),
            // The clock knows before a paused renewal does.
            None if crate::sim::now() >= status.lose_at => {
                Some(LeadershipLoss::RenewDeadline(self.inner.renew_deadline))
            }
            None => None,
        }
    }

    /// Waits for the end of the term: a loss, or a resign.
    pub async fn lost(&self) -> LeadershipLoss {
        let mut status = self.inner.status.subscribe();
        loop {
            let (lose_at, loss) = {
                let s = status.borrow_and_update();
                (s.lose_at, s.loss.clone())
            };
            if let Some(reason) = loss {
                return reason;
            }
            tokio::select! {
                changed = status.changed() => {
                    if changed.is_err() {
                        return LeadershipLoss::Resigned;
                    }
                }
                () = tokio::time::sleep_until(lose_at.into()) => {
                    if let Some(reason) = self.loss() {
                        return reason;
                    }
                }
            }
        }
    }

    /// Steps down: releases the name, our value only. `None` once the term
    /// is over (resigning twice changes nothing). When the release did not
    /// free the name ([`ReleaseReport::frees_lock`] false: too few servers
    /// answered), the leadership stands and is renewed as before; resign
    /// again.
    pub async fn resign(&mut self) -> Option<ReleaseReport> {
        let _one = self.inner.resigning.lock().await;
        let mut term = self.stop_renewing().await?;
        let Some(release) = term.resign(crate::sim::now()) else {
            // Lost already: our value may still be on some servers, where
            // it would hold off the next leader until its TTL.
            crate::handles::guard::spawn_release(
                self.inner.client.clone(),
                term.lock().clone(),
                None,
            );
            return None;
        };
        let (report, _) = run::<kind::Release>(release, &self.inner.client).await;
        term.handle_resigned(&report);
        if term.is_over() {
            self.inner
                .status
                .send_modify(|s| s.loss = Some(LeadershipLoss::Resigned));
        } else {
            self.renew(term);
        }
        Some(report)
    }

    /// Writes `value` (an address, say) in the election's leader record
    /// under this term: refused once another process holds the name or a
    /// higher term is stored, so a deposed leader never overwrites its
    /// successor's: [`Error::Proclaim`], deposed ([`Error::is_lock_lost`]) or
    /// short of answers ([`Error::is_unavailable`]).
    pub async fn proclaim(&self, value: impl AsRef<[u8]>) -> Result<(), Error> {
        let proclaim = Operation::proclaim(
            &self.inner.lock,
            self.inner.term,
            value.as_ref(),
            crate::sim::now(),
        );
        drive::<kind::Proclaim>(proclaim, &self.inner.client)
            .await?
            .0
            .map_err(Error::Proclaim)?;
        Ok(())
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // The last handle is gone: stop renewing and release our value, in
        // the background, as a dropped lock guard does: the core releases
        // the lock as the renewal holds it (every renewal applied: the
        // servers a restore filled), behind what it sent. The client's
        // shutdown released it already.
        if matches!(
            self.status.borrow().loss,
            Some(LeadershipLoss::Lock(redlock_core::LossReason::Closed))
        ) {
            return;
        }
        let renewing = self
            .renewing
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let ended = self
            .ended
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let lock = match (&renewing, ended) {
            (Some(_), _) => self.lock.clone(),
            // Lost: our value may still be on some servers, where it would
            // hold off the next leader until its TTL.
            (None, Some(term)) => term.lock().clone(),
            // Resigned.
            (None, None) => return,
        };
        crate::handles::guard::spawn_release(self.client.clone(), lock, renewing);
    }
}
