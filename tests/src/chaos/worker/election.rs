//! The worker's election mode ([`Config::election`](super::Config::election)):
//! campaign for the election `keys[0]` through the public API (`campaign`,
//! then `Leadership::lost` raced against the work), lead, resign, campaign
//! again.
//!
//! A leadership is recorded as a hold: a `grant` at the campaign's return
//! (its fencing token the term), an `extended` record each time a renewal
//! moves the instant the leader would step down, and a `hold` whose end is
//! the moment its loss signal fired, or the moment it stopped leading to
//! resign, whichever came first, capped by that instant. A leader killed
//! mid-term leaves an open hold that lasts until the last such instant its
//! client was promised (the checker's rule for open holds).
//!
//! While leading, the worker writes to the protected resource with its term
//! as the token every [`WRITE_EVERY`]. When the term ends by a loss it sends
//! one more write anyway: a write already in flight when the leader was
//! deposed (a process stopped past its lease sends it when it runs again),
//! which the resource must refuse once a newer leader wrote.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rand::RngExt;
use rand::rngs::StdRng;
use redlock_tokio::{Leadership, LeadershipLoss, Wait};
use serde::{Deserialize, Serialize};

use super::{STEP, Shared, Steps, WriteId, task_rng, uniform};
use crate::chaos::clock::{instant_ns, mono_ns, nanos};
use crate::chaos::record::{Api, Extended, Grant, Hold, Record, TokenKind};

/// An election worker's timings (the lease is [`Config::ttl_ms`](super::Config::ttl_ms)).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ElectionConfig {
    /// A leader steps down this long after its last confirmed renewal (ms).
    pub renew_deadline_ms: u64,
    /// Between renewals (ms).
    pub retry_period_ms: u64,
    /// How long a leader leads before it resigns, uniform in this range
    /// (ms), unless its term ends before or a `resign` line comes.
    pub lead_ms: (u64, u64),
    /// The client's delay between two campaign attempts, and its jitter (ms).
    pub retry_delay_ms: u64,
}

impl ElectionConfig {
    /// The client's retry delay (and jitter).
    pub fn retry_delay(&self) -> Duration {
        Duration::from_millis(self.retry_delay_ms)
    }
}

/// How long one campaign call waits before the worker looks at its stop
/// flag again (a campaign dropped is cancelled cleanly).
const CAMPAIGN_WAIT: Duration = Duration::from_secs(1);

/// Between two writes of a leader.
const WRITE_EVERY: Duration = Duration::from_millis(100);

/// How many times a resign whose release did not free the name is tried.
const RESIGN_TRIES: usize = 3;

/// Campaigns, leads and resigns until stopped.
pub(super) async fn campaign(shared: Arc<Shared>, timing: ElectionConfig) -> Result<(), String> {
    let config = &shared.config;
    let name = config
        .keys
        .first()
        .cloned()
        .ok_or("an election worker needs a name (keys[0])")?;
    let election = shared
        .redlock
        .election(name.as_str())
        .timing(
            Duration::from_millis(config.ttl_ms),
            Duration::from_millis(timing.renew_deadline_ms),
            Duration::from_millis(timing.retry_period_ms),
        )
        .wait(Wait::AtMost(CAMPAIGN_WAIT));
    let mut rng = task_rng(config, 0);
    let mut hold = 0;
    while shared.running() {
        let start_ns = mono_ns();
        let result = election.campaign().await;
        let end_ns = mono_ns();
        shared.record_attempt(&name, Api::Lock, (start_ns, end_ns), &result);
        match result {
            Ok(leadership) => {
                let term = Term {
                    name: &name,
                    hold,
                    granted_ns: end_ns,
                };
                term.lead(&shared, &timing, &mut rng, leadership).await;
                hold += 1;
                tokio::time::sleep(uniform(&mut rng, config.idle_ms)).await;
            }
            // The campaign waited its time already.
            Err(error) if error.is_held_by_other() => {}
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(rng.random_range(5..=20))).await;
            }
        }
    }
    Ok(())
}

/// One leadership, as the records name it.
struct Term<'a> {
    name: &'a str,
    hold: u64,
    granted_ns: u64,
}

impl Term<'_> {
    /// Leads until the loss signal, the planned length, a `resign` line or
    /// the worker's stop; records the leadership as a hold.
    async fn lead(
        &self,
        shared: &Shared,
        timing: &ElectionConfig,
        rng: &mut StdRng,
        mut leadership: Leadership,
    ) {
        let config = &shared.config;
        let resigns_at_grant = shared.resigns.load(Ordering::Relaxed);
        let term = leadership.term();
        let mut last_until = leadership.valid_until();
        let valid_until_ns = instant_ns(last_until);
        let grant = Grant {
            worker: config.worker,
            hold: self.hold,
            key: self.name.to_owned(),
            granted_ns: self.granted_ns,
            valid_until_ns,
            // The step-down instant is the winning round's start plus the
            // renew deadline (capped by the lock's validity).
            round_started_ns: valid_until_ns
                .saturating_sub(nanos(Duration::from_millis(timing.renew_deadline_ms))),
            fencing_token: Some(term),
        };
        shared.record(Record::Grant(grant.clone()));
        if config.announce {
            println!("held {} {}", self.name, self.hold);
        }
        let id = WriteId {
            worker: config.worker,
            hold: self.hold,
            key: self.name,
            token: term,
            token_kind: TokenKind::Fencing,
        };
        let mut resource = shared.resource.clone();
        let mut write = async |believed_valid: bool| {
            if let Some(w) = id.write(&mut resource, believed_valid).await {
                shared.record(Record::Write(w));
            }
        };
        write(true).await;
        let end = Instant::now() + uniform(rng, timing.lead_ms);
        let mut promised = valid_until_ns;
        let mut renewals = 0;
        let mut steps = Steps::new();
        let mut next_write = Instant::now() + WRITE_EVERY;
        let signalled = {
            let lost = leadership.lost();
            tokio::pin!(lost);
            let mut signalled = None;
            // Bounded by `end`; the count bound is a second guard.
            for _ in 0..1_000_000 {
                tokio::select! {
                    // A process stopped past its term sees the loss first.
                    biased;
                    reason = &mut lost => {
                        signalled = Some(reason);
                        break;
                    }
                    () = tokio::time::sleep(STEP) => {}
                }
                steps.tick(STEP, promised);
                let until = leadership.valid_until();
                if until > last_until {
                    last_until = until;
                    let until_ns = instant_ns(until);
                    promised = promised.max(until_ns);
                    renewals += 1;
                    shared.record(Record::Extended(Extended {
                        worker: config.worker,
                        hold: self.hold,
                        valid_until_ns: until_ns,
                    }));
                }
                if Instant::now() >= next_write {
                    next_write = Instant::now() + WRITE_EVERY;
                    write(leadership.loss().is_none()).await;
                }
                if Instant::now() >= end
                    || shared.resigns.load(Ordering::Relaxed) > resigns_at_grant
                    || !shared.running()
                {
                    break;
                }
            }
            signalled
        };
        steps.tick(STEP, promised);
        let loss: Option<LeadershipLoss> = signalled.or_else(|| leadership.loss());
        let ended_ns = if loss.is_some() {
            let ended_ns = mono_ns();
            // The write in flight when the term ended.
            write(false).await;
            ended_ns
        } else {
            write(true).await;
            mono_ns()
        };
        shared.record(Record::Hold(Hold {
            end_ns: ended_ns.min(promised),
            released_ns: ended_ns,
            keep_alive: true,
            extensions: renewals,
            longest_stall_ms: steps.longest as f64 / 1e6,
            paused_past_validity: steps.paused_past_validity,
            noticed_loss: (steps.paused_past_validity || loss.is_some()).then_some(loss.is_some()),
            loss: loss.as_ref().map(ToString::to_string),
            open: false,
            ..Hold::open(&grant, promised)
        }));
        if loss.is_none() {
            // A release that did not free the name leaves the leadership
            // standing: resign again; dropped, it is released in the
            // background.
            for _ in 0..RESIGN_TRIES {
                match leadership.resign().await {
                    Some(report) if !report.frees_lock() => {}
                    _ => break,
                }
            }
        }
    }
}
