//! Leader election on the lock: campaign, lead, resign, proclaim, observe.
//! Every decision is the core's ([`Term`], [`ElectionTiming`],
//! [`LeaderWatch`]); this file only drives its machines.

use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures::Stream;
use redlock_core::{
    ElectionTiming, Leader, LeaderReport, LeadershipLoss, Lock, LockSpec, OpEvent, Operation,
    ReleaseReport, Standing, Term, TermEvent,
};
use tokio::sync::watch;
use tracing::{debug, info};

use crate::driver::{Message, Sink, drive, kind, run, stream};
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
        Ok(Leadership::start(self.client.clone(), lock, term))
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

    /// The leaders one after another, each told once: another id or a
    /// higher term is a new leader, so the stream follows the leader there
    /// is even after the servers lost their data and terms started again
    /// low. A read of every server at once, then one each retry period
    /// ([`Operation::observe`]); the stream ends once the client is shut
    /// down, and dropping it stops the reads.
    pub fn observe(&self) -> impl Stream<Item = Leader> + Send + 'static {
        let observe = Operation::observe(
            self.client.settings_shared(),
            &self.name,
            self.retry_period,
            crate::sim::now(),
        );
        stream::<kind::Observe>(observe, self.client.clone())
    }
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
    /// Whether the term stands, as the core reads it: shared with the
    /// renewing term's driver, which tells through it.
    status: Arc<watch::Sender<Standing<LeadershipLoss>>>,
    /// The renewing term's operation on the client's driver.
    renewing: Arc<Mutex<Renewing>>,
    /// One resign at a time.
    resigning: tokio::sync::Mutex<()>,
}

/// Where the term's operation stands on the driver.
#[derive(Clone, Copy)]
enum Renewing {
    /// Not started yet, or no runtime could start it.
    Starting,
    /// It runs under this key.
    Key(u64),
    /// It ended: lost (the core released what it may have left), resigned
    /// or closed.
    Ended,
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
    fn start(client: Redlock, lock: Lock, term: Term) -> Self {
        let (status, _) = watch::channel(Standing::for_term(&term));
        let this = Self {
            inner: Arc::new(Inner {
                client,
                term: term.term(),
                lock,
                status: Arc::new(status),
                renewing: Arc::new(Mutex::new(Renewing::Starting)),
                resigning: tokio::sync::Mutex::new(()),
            }),
        };
        this.renew(term);
        this
    }

    /// Renews the term on the client's driver until it ends; the driver
    /// tells the leadership's watchers each renewal, a resignation that
    /// freed the name, and the loss. Nothing of it holds the leadership:
    /// dropping the last handle stops it ([`Inner`]'s drop).
    fn renew(&self, term: Term) {
        let status = Arc::clone(&self.inner.status);
        let number = self.inner.term;
        let tell = move |event: &OpEvent| {
            match event {
                OpEvent::Term(TermEvent::RenewFailed(error)) => {
                    debug!(error = %error, "renewal failed");
                }
                OpEvent::Term(TermEvent::Resigned(report)) if report.frees_lock() => {
                    info!(term = number, "resigned");
                }
                OpEvent::Term(TermEvent::Lost(reason)) if *reason != LeadershipLoss::Resigned => {
                    info!(term = number, reason = %reason, "leadership lost");
                }
                _ => {}
            }
            status.send_if_modified(|standing| {
                let until = standing.until();
                standing.handle_event(event) || standing.until() != until
            });
        };
        let ended = Arc::clone(&self.inner.renewing);
        let sink = Sink::Callback(Box::new(move |message| match message {
            Message::Event(event) => tell(&event),
            Message::Finished(finished) => {
                *ended.lock().unwrap_or_else(PoisonError::into_inner) = Renewing::Ended;
                tell(&finished.take().0);
            }
            // The runtime shuts down: the renewal ends with it, and the
            // last handle's drop releases the lock.
            Message::Returned(_) => {}
        }));
        if let Ok(key) = self
            .inner
            .client
            .driver()
            .start(Operation::term(term), Some(sink))
        {
            let mut renewing = self
                .inner
                .renewing
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            // Unless it ended already.
            if matches!(*renewing, Renewing::Starting) {
                *renewing = Renewing::Key(key);
            }
        }
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
        self.inner.status.borrow().until()
    }

    /// Why the term ended, once it has.
    pub fn loss(&self) -> Option<LeadershipLoss> {
        // The core reads the clock too: it knows before a paused renewal.
        self.inner.status.borrow().loss(crate::sim::now())
    }

    /// Waits for the end of the term: a loss, or a resign.
    pub async fn lost(&self) -> LeadershipLoss {
        let mut status = self.inner.status.subscribe();
        loop {
            let (loss, until) = {
                let standing = status.borrow_and_update();
                (standing.loss(crate::sim::now()), standing.poll_timeout())
            };
            if let Some(reason) = loss {
                return reason;
            }
            let end = async {
                match until {
                    Some(until) => tokio::time::sleep_until(until.into()).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                changed = status.changed() => {
                    if changed.is_err() {
                        return LeadershipLoss::Resigned;
                    }
                }
                () = end => {}
            }
        }
    }

    /// Steps down: releases the name, our value only. `None` once the term
    /// is over (resigning twice changes nothing; a term lost had what it
    /// may have left released then). When the release did not free the
    /// name ([`ReleaseReport::frees_lock`] false: too few servers
    /// answered), the leadership stands and is renewed as before; resign
    /// again.
    pub async fn resign(&mut self) -> Option<ReleaseReport> {
        let _one = self.inner.resigning.lock().await;
        let Renewing::Key(key) = *self
            .inner
            .renewing
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
        else {
            return None;
        };
        self.inner.client.driver().resign(key).await
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
        // servers a restore filled), behind what it sent. A term that
        // ended left nothing to release.
        let kept = match *self.renewing.lock().unwrap_or_else(PoisonError::into_inner) {
            Renewing::Key(key) => Some(key),
            Renewing::Starting => None,
            Renewing::Ended => return,
        };
        crate::handles::guard::spawn_release(self.client.clone(), self.lock.clone(), kept);
    }
}
