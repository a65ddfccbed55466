//! Leader election for the blocking client: [`Redlock::election`], the
//! async [`crate::Election`] driven on the client's thread.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::stream::BoxStream;

use super::{Redlock, Shared, may_block};
use crate::{Error, Leader, LeaderReport, LeadershipLoss, ReleaseReport, Wait};

impl Redlock {
    /// The election `name`, as [`crate::Redlock::election`].
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// # fn step(_term: u64) {}
    /// # fn example(redlock: &redlock_tokio::blocking::Redlock) -> Result<(), redlock_tokio::Error> {
    /// let election = redlock.election("scheduler").timing(
    ///     Duration::from_secs(10),
    ///     Duration::from_secs(6),
    ///     Duration::from_secs(1),
    /// );
    /// loop {
    ///     let mut leadership = election.campaign()?;
    ///     // Synchronous work cannot be interrupted: check between steps.
    ///     while !leadership.is_lost() {
    ///         step(leadership.term());
    ///     }
    ///     leadership.resign()?;
    /// }
    /// # }
    /// ```
    pub fn election(&self, name: impl AsRef<[u8]>) -> Election {
        Election {
            election: self.shared.client.election(name),
            shared: Arc::clone(&self.shared),
        }
    }
}

/// One election, made by [`Redlock::election`]: the options of
/// [`crate::Election`], and its calls as blocking ones.
#[derive(Clone)]
pub struct Election {
    election: crate::Election,
    shared: Arc<Shared>,
}

impl fmt::Debug for Election {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("blocking::Election")
            .field(&self.election)
            .finish()
    }
}

impl Election {
    /// The lease, renew deadline and retry period, checked when a
    /// campaign starts ([`crate::Election::timing`]).
    pub fn timing(
        mut self,
        lease: Duration,
        renew_deadline: Duration,
        retry_period: Duration,
    ) -> Self {
        self.election = self.election.timing(lease, renew_deadline, retry_period);
        self
    }

    /// How long a campaign waits ([`crate::Election::wait`]).
    pub fn wait(mut self, wait: Wait) -> Self {
        self.election = self.election.wait(wait);
        self
    }

    /// Campaigns until elected or the wait runs out
    /// ([`crate::Election::campaign`]); the term is renewed on the client's
    /// thread.
    pub fn campaign(&self) -> Result<Leadership, Error> {
        let leadership = self.shared.block_on(self.election.campaign())??;
        Ok(Leadership {
            leadership: Some(leadership),
            shared: Arc::clone(&self.shared),
        })
    }

    /// Leads whenever elected, as [`crate::Election::run`]: campaigns, runs
    /// `work` with the leadership, and campaigns again after a loss,
    /// calling `stopped` with the reason; returns once a `work` returns
    /// with the term still held (after resigning), or with a campaign's
    /// error. Synchronous work cannot be stopped at the loss: it checks
    /// [`Leadership::is_lost`] between its steps and returns, and the
    /// resource checks [`Leadership::term`] for the step under way.
    ///
    /// ```no_run
    /// # fn step(_term: u64) {}
    /// # fn example(redlock: &redlock_tokio::blocking::Redlock) -> Result<(), redlock_tokio::Error> {
    /// redlock.election("scheduler").run(
    ///     |leadership| {
    ///         while !leadership.is_lost() {
    ///             step(leadership.term());
    ///         }
    ///     },
    ///     |loss| eprintln!("stopped leading: {loss}"),
    /// )?;
    /// # Ok(()) }
    /// ```
    pub fn run(
        &self,
        mut work: impl FnMut(&Leadership),
        mut stopped: impl FnMut(&LeadershipLoss),
    ) -> Result<(), Error> {
        loop {
            let mut leadership = self.campaign()?;
            work(&leadership);
            match leadership.loss() {
                Some(reason) => stopped(&reason),
                None => {
                    leadership.resign()?;
                    return Ok(());
                }
            }
        }
    }

    /// Who leads, as one read of every node tells: advisory
    /// ([`crate::Election::leader`]).
    pub fn leader(&self) -> Result<LeaderReport, Error> {
        self.shared.block_on(self.election.leader())
    }

    /// The leaders one after another, terms only rising
    /// ([`crate::Election::observe`]): each `next` blocks until the next
    /// leader is seen, and gives `None` once the client is shut down.
    pub fn observe(&self) -> Observe {
        Observe {
            leaders: self.election.observe().boxed(),
            shared: Arc::clone(&self.shared),
        }
    }
}

/// The leaders of an election, from [`Election::observe`].
pub struct Observe {
    leaders: BoxStream<'static, Leader>,
    shared: Arc<Shared>,
}

impl fmt::Debug for Observe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("blocking::Observe").finish_non_exhaustive()
    }
}

impl Iterator for Observe {
    type Item = Result<Leader, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        match self.shared.block_on(self.leaders.next()) {
            Ok(leader) => leader.map(Ok),
            Err(error) => Some(Err(error)),
        }
    }
}

/// A term this process leads, from [`Election::campaign`]: the accessors
/// of [`crate::Leadership`], and its calls as blocking ones. Dropping it
/// stops the renewals and releases the name on the client's thread,
/// without waiting.
#[must_use = "dropping the leadership resigns at once"]
pub struct Leadership {
    /// `None` only while dropped.
    leadership: Option<crate::Leadership>,
    shared: Arc<Shared>,
}

impl fmt::Debug for Leadership {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("blocking::Leadership")
            .field(self.inner())
            .finish()
    }
}

impl Leadership {
    fn inner(&self) -> &crate::Leadership {
        self.leadership.as_ref().expect("taken only by drop")
    }

    forward! {
        /// The term, a fencing token ([`crate::Leadership::term`]).
        term -> u64;
        /// This leader's id ([`crate::Leadership::id`]).
        id -> &str;
        /// When this leader steps down unless renewed
        /// ([`crate::Leadership::valid_until`]).
        valid_until -> Instant;
        /// Why the term ended, once it has ([`crate::Leadership::loss`]).
        loss -> Option<LeadershipLoss>;
    }

    /// Whether the term is over: check it between steps of the work.
    pub fn is_lost(&self) -> bool {
        self.loss().is_some()
    }

    /// Blocks until the term ends ([`crate::Leadership::lost`]).
    pub fn wait_lost(&self) -> Result<LeadershipLoss, Error> {
        self.shared.block_on(self.inner().lost())
    }

    /// Steps down, our value only; `None` once the term is over
    /// ([`crate::Leadership::resign`]).
    pub fn resign(&mut self) -> Result<Option<ReleaseReport>, Error> {
        may_block()?;
        let leadership = self.leadership.as_mut().expect("taken only by drop");
        self.shared.block_on(leadership.resign())
    }

    /// Writes the leader's value under this term
    /// ([`crate::Leadership::proclaim`]).
    pub fn proclaim(&self, value: impl AsRef<[u8]>) -> Result<(), Error> {
        self.shared.block_on(self.inner().proclaim(value))?
    }
}

impl Drop for Leadership {
    fn drop(&mut self) {
        if let Some(leadership) = self.leadership.take() {
            // Stopped and released by tasks of the client's thread.
            let _entered = self.shared.handle.enter();
            drop(leadership);
        }
    }
}
