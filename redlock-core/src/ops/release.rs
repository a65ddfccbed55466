//! Releasing a lock on every node.

use std::collections::VecDeque;
use std::time::Instant;

use crate::native::Native;
use crate::ops::machine::Machine;
use crate::quorum::{Round, quorum};
use crate::wire::interpret;
use std::sync::Arc;

use crate::{
    Command, HandOver, Key, LockKind, LockValue, NodeErrorKind, NodeVote, Reply, Request, RoundId,
    Settings, Ttl, Votes,
};

/// What a release did on each node.
#[derive(Clone, Debug, PartialEq)]
pub struct ReleaseReport {
    votes: Votes,
    notices_refused: usize,
}

impl ReleaseReport {
    /// Nodes where our key was deleted.
    pub fn released(&self) -> usize {
        self.votes.granted()
    }

    /// Nodes where our value was no longer there: the key had expired, or
    /// another owner holds it (and was left alone).
    pub fn not_held(&self) -> usize {
        self.votes
            .votes()
            .iter()
            .filter(|v| {
                matches!(
                    v,
                    NodeVote::Missing | NodeVote::NotOurs | NodeVote::HeldByOther(_)
                )
            })
            .count()
    }

    /// Nodes that failed or timed out; our key may remain there until its TTL.
    pub fn failed(&self) -> usize {
        self.votes.failed()
    }

    /// Nodes the release did not wait for: it was decided without them
    /// (see [`Operation::release`](crate::Operation::release)). Their deletes go on in the background, in order
    /// after every earlier request of ours on each node; until they land,
    /// our value may stay there, on fewer than a quorum of nodes.
    pub fn pending(&self) -> usize {
        self.votes.pending()
    }

    /// True when every node answered and none failed: the key is gone from
    /// every node (or was never ours there).
    pub fn is_complete(&self) -> bool {
        self.failed() == 0 && self.pending() == 0
    }

    /// Nodes a lock needs: the quorum of the nodes released on.
    pub fn quorum(&self) -> usize {
        quorum(self.votes.votes().len())
    }

    /// True when the lock is free for others: fewer than a quorum of nodes
    /// failed or were not waited for, so even if our value stays on those
    /// until its TTL, it cannot hold the lock.
    pub fn frees_lock(&self) -> bool {
        if planted!(ReleaseDecidesEarly) {
            return self.failed() < self.quorum();
        }
        self.failed() + self.pending() < self.quorum()
    }

    /// True when the value was deleted nowhere and too few nodes failed for
    /// it to hold the lock: it was not held (expired, released, mistyped or
    /// never held), so the release did nothing.
    pub fn held_nowhere(&self) -> bool {
        self.released() == 0 && self.frees_lock()
    }

    /// The per-node results.
    pub fn votes(&self) -> &Votes {
        &self.votes
    }

    /// Nodes where the key was deleted but the server refused to publish the
    /// release notice (an ACL user without rights on the `<key>\0released`
    /// channel). The release counts there all the same; waiting clients
    /// just retry on their timer. Switch notices off
    /// ([`Config::release_notices`](crate::Config::release_notices)) for such
    /// users.
    pub fn notices_refused(&self) -> usize {
        self.notices_refused
    }
}

impl std::fmt::Display for ReleaseReport {
    /// `released on 3 of 3 nodes in 0.4 ms [a: released; b: released; c: released]`,
    /// in the words of a release: a node that deleted our key "released",
    /// never "granted"; a node whose answer the outcome did not need
    /// "finishing in the background" (`released on 2 of 3 nodes, 1
    /// finishing in the background`), never a failure.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "released on {} of {} nodes",
            self.released(),
            self.votes.votes().len()
        )?;
        if self.not_held() > 0 {
            write!(f, ", not held on {}", self.not_held())?;
        }
        if self.failed() > 0 {
            write!(f, ", failed on {}", self.failed())?;
        }
        if self.pending() > 0 {
            // Not a failure: the outcome was certain before their answers
            // (the lock free, or not), and their deletes still go out.
            write!(f, ", {} finishing in the background", self.pending())?;
        }
        write!(f, " in {} [", crate::limits::Millis(self.votes.elapsed()))?;
        for (i, (name, vote)) in self.votes.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            match vote {
                NodeVote::Granted | NodeVote::Restored => write!(f, "{name}: released")?,
                NodeVote::Missing => write!(f, "{name}: not held (key already gone)")?,
                NodeVote::NotOurs | NodeVote::HeldByOther(_) => {
                    write!(f, "{name}: not held (another value; left alone)")?
                }
                NodeVote::Pending => write!(f, "{name}: finishing in the background")?,
                other => write!(f, "{name}: {other}")?,
            }
        }
        f.write_str("]")
    }
}

/// Releasing one lock value on every node, made by [`Operation::release`](crate::Operation::release)
/// or [`Operation::release_value`](crate::Operation::release_value) (for a value known from elsewhere).
///
/// Driven like every `Machine`; `poll_event` gives the
/// report as soon as the outcome is certain:
///
/// - the lock is **free**: fewer than a quorum of nodes can still hold our
///   value (every other node deleted it, or said it was not ours), so no
///   answer still to come can change that; with 5 nodes, once 3 answered.
///   A node that does not answer (paused, partitioned) therefore costs a
///   release nothing while the others form a quorum;
/// - the lock **stays** until its TTL: a quorum of nodes failed;
/// - otherwise once every node answered or the per-node timeout passed, so
///   releasing an expired lock, or one whose nodes are down, ends within
///   one timeout.
///
/// The report counts the nodes not waited for
/// ([`ReleaseReport::pending`]); their requests were sent with the others
/// and complete in the background, in order on each node (a driver's
/// requests in flight at the final event). [`every_node`](Self::every_node)
/// waits for every node instead, for the complete per-node story.
///
/// Nodes the lock's value was never sent to ([`Lock::untouched`](crate::Lock::untouched))
/// are not asked: their vote is [`NodeVote::NotAsked`].
///
/// On a node whose server has `DELIFEQ` (Valkey 9) the release is that one
/// command, which deletes our value only where no waiter marked it
/// ([`waited`](crate::waited)). Where it deletes nothing, the release
/// script follows it on that node's connection ([`Request::follow_up`]),
/// whoever reads the answer: the release while it waits, the client's
/// background for a node not waited for. The script's answer is the node's
/// (deleted and published, another holder, gone), so a `DELIFEQ` that
/// found our value marked is never counted as not held, and a node not
/// waited for deletes our value, marked or not, as the others did. Such a
/// release is final only once answered, so it hands over to its client's
/// waiters (`HandOver::Queued`) only then; where the client's own waiters
/// wait, its hub sends the script at once instead
/// (`Hub::plan_release`), which hands over as
/// soon as it is queued.
#[cfg_attr(feature = "model-check", derive(Clone))]
#[derive(Debug)]
#[cfg_attr(not(feature = "simulation"), allow(unreachable_pub))]
pub struct Release {
    round: Round,
    notices_refused: usize,
    requests: VecDeque<Request>,
    /// The key on whose channel the release hands over, until given
    /// ([`Machine::poll_hand_over`]).
    hand_over: Option<Key>,
    /// The channel on which it tells, once answered, whether another
    /// client's waiter was marked (an exclusive lock's), until given.
    answer: Option<Key>,
    /// Nodes that deleted our key and said that no other client's waiter
    /// is marked there ([`scripts::RELEASE_IF_WAITED`](crate::scripts::RELEASE_IF_WAITED)
    /// answering `1`), and nodes that deleted it and did not.
    alone: usize,
    not_alone: usize,
    /// The request sent to every node (the first node's): sent again
    /// without the waiters' marks to a node that refuses them
    /// ([`without_marks`](Self::without_marks)); and the nodes it was.
    sent: Option<Request>,
    unmarked: Vec<crate::NodeId>,
    /// Its driver stopped before every node answered.
    abandoned: bool,
    /// Decide only once every node answered or timed out.
    every_node: bool,
    report: Option<ReleaseReport>,
    done: bool,
}

#[cfg_attr(not(feature = "simulation"), allow(unreachable_pub))]
impl Release {
    /// Releases `value` on `key` on every node, starting at `now`, with the
    /// per-node timeout of every release,
    /// [`Settings::release_timeout`].
    pub fn new(
        settings: &Settings,
        key: Key,
        value: LockValue,
        attempt: RoundId,
        now: Instant,
    ) -> Self {
        Self::of(
            settings,
            (
                Arc::from([key]),
                LockKind::Exclusive,
                settings.default_ttl(),
            ),
            None,
            value,
            (attempt, &[]),
            now,
        )
    }

    /// `untouched`: nodes the value was never sent to, not asked.
    /// `ttl`: the longest TTL the value was set with (see
    /// [`Request::give_up_at`]). `semaphore`: a permit's semaphore keys
    /// ([`Lock::semaphore`](crate::Lock)), which its release names.
    pub(crate) fn of(
        settings: &Settings,
        (keys, kind, ttl): (Arc<[Key]>, LockKind, Ttl),
        semaphore: Option<Arc<[Key]>>,
        value: LockValue,
        (id, untouched): (RoundId, &[crate::NodeId]),
        now: Instant,
    ) -> Self {
        let mut round = Round::new(id, settings, now, settings.release_timeout());
        round.settle(untouched, &NodeVote::NotAsked);
        let command = settings.release_command(&kind);
        let hand_over = (settings.release_notices() && hands_over(&kind)).then(|| keys[0].clone());
        let answer = hand_over
            .clone()
            .filter(|_| matches!(kind, LockKind::Exclusive) && command == Command::Release);
        let semaphore = semaphore.filter(|_| !planted!(PermitReleaseKeepsPermits));
        let keys = settings.release_keys(keys, &kind, command, semaphore.as_deref());
        let permits = semaphore.as_deref().map(permits_payload);
        // Named by its client, the release publishes nothing for the
        // client's own waiters: the client tells them (`poll_hand_over`).
        let client = answer.as_ref().and(settings.client_tag());
        // Sized up front: collected from a filter, the queue would grow
        // twice for five nodes, the second time past 1 KiB.
        let mut requests = VecDeque::with_capacity(round.nodes().len());
        requests.extend(
            round
                .fan_out(&keys, &kind, &value, command, round.deadline)
                .filter(|request| !untouched.contains(&request.node))
                .map(|request| Request {
                    client: client.cloned(),
                    // A permit's release is its script, never a plain
                    // `DELIFEQ`, which would leave the permits key.
                    native: request.native && permits.is_none(),
                    payload: permits.clone(),
                    ..request.undoing(ttl, settings.drift(ttl))
                }),
        );
        let sent = requests.front().cloned();
        Self {
            round,
            notices_refused: 0,
            sent,
            unmarked: Vec::new(),
            requests,
            hand_over,
            answer,
            alone: 0,
            not_alone: 0,
            abandoned: false,
            every_node: false,
            report: None,
            done: false,
        }
    }

    /// This release, deciding only once every node answered or the
    /// per-node timeout passed: its report then tells what each node did,
    /// with no node left [`pending`](ReleaseReport::pending), at the cost
    /// of waiting for the slowest node (one per-node timeout for a node
    /// that does not answer).
    #[must_use]
    pub fn every_node(mut self) -> Self {
        self.every_node = true;
        self
    }

    /// Whether the outcome is certain (see the type's docs).
    fn decided(&self) -> bool {
        if self.round.all_answered() {
            return true;
        }
        if self.every_node {
            return false;
        }
        let needed = quorum(self.round.nodes().len());
        let failed = self.round.count(|vote| matches!(vote, NodeVote::Failed(_)));
        let may_hold = failed + self.round.count(|vote| matches!(vote, NodeVote::Pending));
        let free = if planted!(ReleaseDecidesEarly) {
            may_hold <= needed
        } else {
            may_hold < needed
        };
        free || failed >= needed
    }

    /// This release for a driver that gives its hand-over to nobody (one
    /// that sends its requests and reads no answer): it does not name its
    /// client, so it publishes for every marked waiter, the client's own
    /// too; and it is the script on every node, never a plain `DELIFEQ`,
    /// after which nobody would read the answer to send the script.
    #[must_use]
    pub fn unattended(mut self) -> Self {
        for request in self.requests.iter_mut().chain(&mut self.sent) {
            request.client = None;
            request.native = false;
        }
        self.hand_over = None;
        self.answer = None;
        self
    }

    /// This release, for a client some of whose waiters wait for the lock
    /// ([`Hub::plan_release`](crate::Hub::plan_release)): the release
    /// script on every node, never a plain `DELIFEQ`. One of them may have
    /// marked our value as waited for ([`waited`](crate::waited)), and a
    /// `DELIFEQ` would then delete nothing: the script that deletes it
    /// would follow its answer ([`Request::follow_up`]), behind the
    /// attempt a hand-over sent meanwhile. Sent at once, the script is
    /// queued ahead of that attempt on every node, so the hand-over comes
    /// when the release is queued ([`HandOver::Queued`]), one round trip
    /// before its answers; and it is one command per node, not two.
    pub(crate) fn for_own_waiters(mut self) -> Self {
        for request in self.requests.iter_mut().chain(&mut self.sent) {
            request.native = false;
        }
        self
    }

    /// The release channel on which this release hands over, if it does.
    pub(crate) fn hand_over_channel(&self) -> Option<Key> {
        self.hand_over.as_ref().map(crate::config::release_channel)
    }

    /// Whether every node frees our value with the request queued for it:
    /// its script. A release that may go as a plain `DELIFEQ` (an exclusive
    /// lock's, where the node has it) frees a value marked as waited for
    /// only with the script that follows the `DELIFEQ`'s answer
    /// ([`Request::follow_up`]), queued behind whatever was sent to that
    /// node meanwhile: it is final only once answered.
    fn final_once_queued(&self) -> bool {
        let may_follow_up = self.sent.as_ref().is_some_and(|request| {
            request.native
                && request.kind == LockKind::Exclusive
                && request.command == Command::Release
        });
        !may_follow_up || planted!(HandOverBeforeFollowUp)
    }

    /// Whether `reply`, where it deleted our key, says that the notice was
    /// refused, and that no other client's waiter is marked there.
    fn notice(reply: &Reply) -> (bool, bool) {
        use crate::Response::Int;
        match (reply.native, &reply.result) {
            // The release script: 2 the notice refused, 1 nobody else marked.
            (None, Ok(Int(2))) => (true, false),
            (None, Ok(Int(1))) => (false, true),
            // The plain release deletes our value only unmarked: nobody
            // waited for it there.
            (Some(Native::DelIfEq), Ok(Int(1))) => (false, true),
            _ => (false, false),
        }
    }

    /// The request to send again after `reply`, if it is a node's refusal
    /// of a release that names the waiters' marks (`NOPERM`: an ACL user
    /// whose key patterns cover the lock key but not the marks next to
    /// it): the same release without the marks, which publishes whenever
    /// it deletes our value ([`scripts::RELEASE_IF_WAITED`](crate::scripts::RELEASE_IF_WAITED)
    /// with the lock key alone), so that the lock is released there and
    /// every waiter hears of it. Once per node: a refusal of that one
    /// counts as the node's answer.
    fn without_marks(&mut self, reply: &Reply) -> Option<Request> {
        let refused =
            matches!(&reply.result, Err(error) if error.kind == NodeErrorKind::NoPermission);
        if !refused || self.unmarked.contains(&reply.node) {
            return None;
        }
        let marked = self
            .sent
            .as_ref()
            .filter(|request| request.round == reply.round && request.names_marks())?;
        self.unmarked.push(reply.node);
        // A permit's goes as an exclusive lock's: its slot alone, so the
        // permits key stays there until it expires.
        Some(Request {
            node: reply.node,
            keys: Arc::from(&marked.keys[..1]),
            native: false,
            payload: None,
            ..marked.clone()
        })
    }

    /// Whether the release was decided with nodes not heard from.
    fn report_pending(&self) -> bool {
        self.round.count(|vote| matches!(vote, NodeVote::Pending)) > 0
    }

    fn finish(&mut self, now: Instant) {
        self.done = true;
        self.report = Some(ReleaseReport {
            votes: self.round.votes(now),
            notices_refused: self.notices_refused,
        });
    }
}

/// What a permit's release names beside its keys (its [`Request::payload`]):
/// its semaphore's k, in decimal, from the semaphore's keys (its slots,
/// then its permits key). It makes the release
/// [`scripts::SEMAPHORE_RELEASE`](crate::scripts::SEMAPHORE_RELEASE).
pub(crate) fn permits_payload(semaphore: &[Key]) -> Arc<[u8]> {
    Arc::from((semaphore.len() - 1).to_string().as_bytes())
}

/// Whether releasing a lock of `kind` hands it over to this client's
/// waiters: a fair lock's (its waiters attempt at once, and the masters'
/// queues decide who is next) and an exclusive lock's, whose release
/// tells whether a waiter of another client is marked: its own first
/// waiter, told first, would win before other clients' waiters, who hear
/// of the release from the masters, so the
/// [`WaitQueue`](crate::WaitQueue) tells it only while none is.
pub(crate) fn hands_over(kind: &LockKind) -> bool {
    matches!(kind, LockKind::Fair { .. } | LockKind::Exclusive)
}

impl Machine for Release {
    /// The report, once the outcome is certain (see [`Operation::release`](crate::Operation::release)).
    type Event = ReleaseReport;

    fn poll_request(&mut self) -> Option<Request> {
        self.requests.pop_front()
    }

    fn poll_event(&mut self) -> Option<ReleaseReport> {
        self.report.take()
    }

    /// The lock's channels, once the release is queued for every node: the
    /// client's waiters learn of it at once (who may attempt then is the
    /// [`WaitQueue`](crate::WaitQueue)'s rule), and an attempt sent from
    /// now on runs after the release on each node. A release that may be a
    /// plain `DELIFEQ` is final only once its nodes answered (the script
    /// that deletes a marked value follows the answer): it hands over then,
    /// just before it tells what they answered.
    fn poll_hand_over(&mut self) -> Option<HandOver> {
        if !self.requests.is_empty() {
            return None;
        }
        if (self.done || self.final_once_queued())
            && let Some(key) = self.hand_over.take()
        {
            let channels = vec![crate::config::release_channel(&key)];
            return Some(HandOver::Queued { channels });
        }
        if !self.done {
            return None;
        }
        let key = self.answer.take()?;
        // Nodes not waited for are judged by those that answered (a waiter
        // marks every node before it attempts), except that where no
        // answered node deleted our key, one not waited for may delete it
        // and publish nothing: the worst case then, as for an abandoned
        // release.
        let silent = self.alone == 0 && self.not_alone == 0 && self.report_pending();
        Some(HandOver::Answered {
            channels: vec![crate::config::release_channel(&key)],
            others_waiting: self.abandoned || self.alone == 0 || self.not_alone > 0,
            unheard: self.abandoned || self.alone > 0 || silent,
        })
    }

    /// Its driver stops before every node answered: what it does not know
    /// it tells as the worst case, another client waiting and a node that
    /// published nothing ([`HandOver::Answered`]), so that the client's
    /// own first waiter attempts rather than waiting for a notice that may
    /// never come.
    fn abandon(&mut self, _now: Instant) {
        if !self.done {
            self.abandoned = true;
            self.done = true;
        }
    }

    fn poll_timeout(&self) -> Option<Instant> {
        (!self.done).then_some(self.round.deadline)
    }

    fn handle_reply(&mut self, reply: Reply, now: Instant) {
        if self.done {
            return;
        }
        if let Some(again) = self.without_marks(&reply) {
            self.requests.push_back(again);
            return;
        }
        let (refused, alone) = Self::notice(&reply);
        let vote = interpret(Command::Release, reply.native, reply.result);
        let granted = matches!(vote, NodeVote::Granted);
        // Counted once per node: a repeated answer is not recorded again.
        if !self.round.record(reply.round, reply.node, vote) {
            return;
        }
        if refused && granted {
            self.notices_refused += 1;
        }
        match (granted, alone) {
            (true, true) => self.alone += 1,
            (true, false) => self.not_alone += 1,
            (false, _) => {}
        }
        if self.decided() {
            self.finish(now);
        }
    }

    /// Times out the nodes that have not answered.
    fn handle_timeout(&mut self, now: Instant) {
        if !self.done && now >= self.round.deadline {
            self.round.expire();
            self.finish(now);
        }
    }

    fn is_done(&self) -> bool {
        self.done
    }
}

impl Request {
    /// The request that follows this one on its node once `reply` answers
    /// it, whoever reads that answer (the machine that sent it, or the
    /// client's background once the machine decided without this node):
    /// the script after a plain `DELIFEQ` (a release, or a withdraw) that
    /// deleted nothing, since our value may be there marked as waited for
    /// ([`waited`](crate::waited)), by a waiter of any client. The script
    /// deletes it, marked or not, and a release's publishes the notice the
    /// waiters wait for. The reply the sender then reads is the script's;
    /// the script is never followed. (A failed attempt's withdraw, whose
    /// `DELIFEQ` mostly finds another holder's value, is the script itself
    /// where this client's waiters listen.)
    ///
    /// ```
    /// # use std::{sync::Arc, time::Instant};
    /// # use redlock_core::*;
    /// # use redlock_core::native::Native;
    /// let settings = Config::new(["a"]).validate().unwrap();
    /// let key = Key::from(&b"job"[..]);
    /// let value = LockValue::from_string("v");
    /// let mut release = Release::new(&settings, key, value, RoundId(1), Instant::now());
    /// let request = release.poll_request().unwrap();
    /// let zero = |native| Reply { native, ..Reply::to(&request, Ok(Response::Int(0))) };
    /// // Sent as `DELIFEQ`, deleted nothing: the script follows.
    /// let script = request.follow_up(&zero(Some(Native::DelIfEq))).unwrap();
    /// assert!(!script.native);
    /// // The script's own answer is final.
    /// assert!(script.follow_up(&zero(None)).is_none());
    /// ```
    pub fn follow_up(&self, reply: &Reply) -> Option<Request> {
        let deleted_nothing = matches!(
            (reply.native, &reply.result),
            (Some(Native::DelIfEq), Ok(crate::Response::Int(0)))
        );
        let undoes = matches!(self.command, Command::Release | Command::Withdraw);
        (deleted_nothing && undoes && reply.node == self.node).then(|| Request {
            native: false,
            form: crate::Form::Digest,
            ..self.clone()
        })
    }
}

impl crate::Lock {
    machinery_fn! {
        /// Starts releasing the lock on every node at `now`, with the per-node
        /// timeout of every release ([`Settings::release_timeout`]).
        fn release(&mut self, now: Instant) -> Release {
            let attempt = self.next_round();
            // The release timeout does not depend on the TTL: see
            // `Settings::release_timeout`.
            Release::of(
                &self.settings,
                (self.keys.clone(), self.kind.clone(), self.longest_ttl),
                self.semaphore.clone(),
                self.value.clone(),
                (attempt, &self.untouched),
                now,
            )
        }
    }
}
