//! Leader election on the lock: campaign, lead, resign, proclaim, observe.
//! Every decision is the core's ([`Term`], [`ElectionTiming`],
//! [`LeaderWatch`]); this file only drives its machines.

use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures::Stream;
use redlock_core::{
    ElectionTiming, Leader, LeaderRead, LeaderReport, LeaderWatch, LeadershipLoss, Lock, LockSpec,
    ReleaseReport, RoundId, Term, TermEvent,
};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tracing::{debug, info};

use crate::driver::{drive, drive_until};
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
            timing: ElectionTiming::default_for(self.settings()),
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
    timing: ElectionTiming,
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
    /// client-go's: lease validity > renew deadline > 1.2 x retry period,
    /// else [`Error::Config`].
    pub fn timing(
        mut self,
        lease: Duration,
        renew_deadline: Duration,
        retry_period: Duration,
    ) -> Result<Self, Error> {
        self.timing =
            ElectionTiming::new(self.client.settings(), lease, renew_deadline, retry_period)?;
        Ok(self)
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
        let guard = self
            .client
            .acquire(
                LockSpec::Fenced(&self.name),
                Arc::clone(&self.name),
                Some(self.timing.lease().as_duration()),
                self.wait.attempts(),
            )
            .await?;
        let lock = guard.into_lock();
        let term = Term::new(lock.clone(), &self.timing)
            .expect("a campaign takes a fenced lock, which has a token");
        info!(term = term.term(), "elected");
        Ok(Leadership::start(
            self.client.clone(),
            lock,
            term,
            self.timing.renew_deadline(),
        ))
    }

    /// Leads whenever elected: campaigns, runs `work` with the leadership,
    /// and on loss cancels the work, waits for it to end, calls `stopped`
    /// with the reason, and campaigns again. Returns once a `work` returns
    /// by itself (after resigning), or with a campaign's error.
    /// `stopped` is called only for a term this process held.
    pub async fn run<F, Fut>(
        &self,
        mut work: F,
        mut stopped: impl FnMut(&LeadershipLoss),
    ) -> Result<(), Error>
    where
        F: FnMut(Leadership) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        loop {
            let mut leadership = self.campaign().await?;
            let mut task = tokio::spawn(work(leadership.clone()));
            tokio::select! {
                ended = &mut task => {
                    leadership.resign().await;
                    // The work's panic is the caller's, not a quiet return.
                    if let Err(error) = ended
                        && error.is_panic()
                    {
                        std::panic::resume_unwind(error.into_panic());
                    }
                    return Ok(());
                }
                reason = leadership.lost() => {
                    task.abort();
                    let _ = task.await;
                    stopped(&reason);
                }
            }
        }
    }

    /// Who leads, as one read of every server tells (per server, and the
    /// id held on a quorum: [`LeaderReport::leader`]). Advisory: the leader
    /// may have stepped down by the time the answer arrives; a resource
    /// that must refuse a deposed leader checks the term.
    pub async fn leader(&self) -> LeaderReport {
        let read = LeaderRead::new(
            self.client.settings(),
            &self.name,
            RoundId(0),
            crate::sim::now(),
        );
        drive(Box::new(read), &self.client).await.0
    }

    /// The leaders one after another, terms only rising
    /// ([`LeaderWatch`]): a read of every server each retry period.
    pub fn observe(&self) -> impl Stream<Item = Leader> + Send + 'static {
        let election = self.clone();
        futures::stream::unfold(
            (election, LeaderWatch::new(), true),
            |(election, mut watch, mut first)| async move {
                loop {
                    // One read per retry period, also right after a change.
                    if !first {
                        tokio::time::sleep(election.timing.retry_period()).await;
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

/// The renewing task, which gives the term back when it ends, and how to
/// stop it.
type Renewing = (JoinHandle<Box<Term>>, oneshot::Sender<()>);

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
    /// The renewing task and how to stop it, while it runs.
    running: Mutex<Option<Renewing>>,
    /// The renewing term's key on the driver, while it runs.
    renewing: Arc<Mutex<Option<u64>>>,
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
                running: Mutex::new(None),
                renewing: Arc::new(Mutex::new(None)),
                resigning: tokio::sync::Mutex::new(()),
            }),
        };
        this.renew(Box::new(term));
        this
    }

    /// Drives the term in the background until it ends or is stopped. The
    /// task holds what it tells, not the leadership: dropping the last
    /// handle stops it ([`Inner`]'s drop).
    fn renew(&self, term: Box<Term>) {
        let (stop, stopped) = oneshot::channel::<()>();
        let status = Arc::clone(&self.inner.status);
        let client = self.inner.client.clone();
        let number = self.inner.term;
        let renewing = Arc::clone(&self.inner.renewing);
        let task = tokio::spawn(async move {
            let tell = |event: &TermEvent| match event {
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
            let record = |key| *renewing.lock().unwrap_or_else(PoisonError::into_inner) = Some(key);
            let stopped = async {
                let _ = stopped.await;
            };
            match drive_until(term, &client, record, tell, stopped).await {
                Ok((event, term)) => {
                    tell(&event);
                    term
                }
                Err(term) => term,
            }
        });
        *self.lock_running() = Some((task, stop));
    }

    fn lock_running(&self) -> std::sync::MutexGuard<'_, Option<Renewing>> {
        self.inner
            .running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
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
            // The clock knows before a paused renewal task does.
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
        let running = self.lock_running().take();
        let (task, stop) = running?;
        let _ = stop.send(());
        let mut term = task.await.ok()?;
        let Some(release) = term.resign(crate::sim::now()) else {
            // Lost already: our value may still be on some servers, where
            // it would hold off the next leader until its TTL.
            crate::guard::spawn_release(self.inner.client.clone(), term.lock().clone(), None);
            return None;
        };
        let (report, _) = drive(Box::new(release), &self.inner.client).await;
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
    /// successor's.
    pub async fn proclaim(&self, value: impl AsRef<[u8]>) -> Result<(), Error> {
        let proclaim = redlock_core::Proclaim::new(
            &self.inner.lock,
            self.inner.term,
            value.as_ref(),
            crate::sim::now(),
        );
        drive(Box::new(proclaim), &self.inner.client).await.0?;
        Ok(())
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // The last handle is gone: stop renewing and release our value,
        // in the background, as a dropped lock guard does.
        let running = self
            .running
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let Some((task, _stop)) = running else {
            return;
        };
        // The renewal stops and the lock it holds (every renewal applied:
        // the servers a restore filled) is released behind what it sent.
        task.abort();
        let renewing = self
            .renewing
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        crate::guard::spawn_release(self.client.clone(), self.lock.clone(), renewing);
    }
}
