//! Errors, split by concern: configuration, acquiring, extending.
//!
//! Every error about a round carries the per-node [`Votes`] (which node said
//! what, in the node's own words), reached through `votes()`. `Display` is one
//! short line: the tally and the names of the nodes that refused or failed,
//! never the votes in full.

use std::time::Duration;

use crate::limits::{MAX_TTL_MS, MAX_VALUE_LEN, MIN_VALIDITY, MIN_VALUE_LEN, Millis};
use crate::{Key, NodeErrorKind, NodeVote, Votes};

/// A configuration value that cannot work, found by
/// [`Config::validate`](crate::Config::validate) or
/// [`Settings::ttl`](crate::Settings::ttl).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The node list is empty.
    #[error("no nodes given: Redlock needs at least one node (an odd number, such as 3 or 5)")]
    NoNodes,
    /// The same node appears twice; it would count twice towards the quorum.
    #[error("node {node} is listed twice: each node may count only once towards the quorum")]
    DuplicateNode {
        /// The repeated node.
        node: String,
    },
    /// An even number of nodes, not allowed by
    /// [`Config::allow_even_nodes`](crate::Config::allow_even_nodes).
    #[error(
        "{count} nodes given: use an odd number (3, 5, ...); the quorum of {} tolerates no more \
         failed nodes than {} would (allow_even_nodes(true) accepts them anyway)",
        crate::quorum(*count),
        Nodes(count.saturating_sub(1))
    )]
    EvenNodes {
        /// The number of nodes given.
        count: usize,
    },
    /// Two node addresses reach the same Redis server (found by adapters,
    /// which compare the `run_id` each server reports): it would count twice
    /// towards the quorum.
    #[error(
        "{first} and {second} reach the same Redis server: each server may count only once towards the quorum"
    )]
    SameServer {
        /// The first address, as given (credentials removed).
        first: String,
        /// The other address, as given (credentials removed).
        second: String,
    },
    /// A server may evict lock keys under memory pressure (its
    /// `maxmemory-policy` is not `noeviction`,
    /// [`Connected::evicting`](crate::Connected::evicting)): a lock evicted there is
    /// granted again while its holder still counts that server. Allowed by
    /// the adapter's `allow_eviction(true)`.
    #[error(
        "{node} may evict lock keys (maxmemory-policy {policy}): a lock evicted there is granted \
         to another client while its holder still counts it; set maxmemory-policy noeviction on \
         it, or accept the risk with allow_eviction(true)"
    )]
    EvictingServer {
        /// The server, as given (credentials removed).
        node: String,
        /// Its eviction policy.
        policy: String,
    },
    /// A server may lose the locks it granted when it restarts
    /// ([`Connected::weak_persistence`](crate::Connected::weak_persistence)), and the client
    /// was told to refuse such servers.
    #[error(
        "{node} may lose locks when it restarts ({reason}); run it with appendonly yes and \
         appendfsync always, or accept the risk with weak_persistence(WeakPersistence::Warn)"
    )]
    WeakPersistence {
        /// The server, as given (credentials removed).
        node: String,
        /// What it lacks, in words.
        reason: String,
    },
    /// [`Config::wait_for_aof`](crate::Config::wait_for_aof) is on and a
    /// server cannot confirm that its AOF has a write
    /// ([`Connected::no_waitaof`](crate::Connected::no_waitaof)).
    #[error(
        "{node} cannot confirm that its AOF has a write ({reason}); waiting for the AOF needs \
         Redis 7.2 or later, or Valkey, with appendonly yes and appendfsync always \
         (turn wait_for_aof off to count votes without it)"
    )]
    NoWaitAof {
        /// The server, as given (credentials removed).
        node: String,
        /// What it lacks, in words.
        reason: String,
    },
    /// The TTL is zero.
    #[error("the TTL is zero: a lock must live for at least a few milliseconds")]
    ZeroTtl,
    /// The TTL is beyond [`MAX_TTL_MS`] (30 days).
    #[error("the TTL {ttl:?} is too long: at most {} ms (30 days)", MAX_TTL_MS)]
    TtlTooLarge {
        /// The TTL asked for.
        ttl: Duration,
    },
    /// The drift allowance takes the whole TTL, so no lock would ever be valid.
    #[error("the TTL {ttl:?} leaves no validity after the clock drift allowance of {}", Millis(*drift))]
    TtlBelowDrift {
        /// The TTL asked for.
        ttl: Duration,
        /// The drift allowance for that TTL.
        drift: Duration,
    },
    /// The TTL would leave less than [`MIN_VALIDITY`] once the drift
    /// allowance and one per-node timeout are taken from it: a lock granted
    /// with it could not be used.
    #[error(
        "the TTL {ttl:?} is too short: after the drift allowance of {} and a per-node timeout of {} it leaves less than {} of validity",
        Millis(*drift), Millis(*node_timeout), Millis(MIN_VALIDITY)
    )]
    TtlTooShort {
        /// The TTL asked for.
        ttl: Duration,
        /// The drift allowance for that TTL.
        drift: Duration,
        /// The per-node timeout for that TTL.
        node_timeout: Duration,
    },
    /// The drift factor is outside `[0, 1)`.
    #[error(
        "the drift factor {factor} is outside [0, 1): it is the share of the TTL set aside for clock drift"
    )]
    DriftFactor {
        /// The factor given.
        factor: f64,
    },
    /// The per-node timeout is zero.
    #[error("the per-node timeout is zero: every node would count as failed")]
    ZeroNodeTimeout,
    /// The per-node timeout is not below the TTL.
    #[error("the per-node timeout {} is not below the TTL {ttl:?}: one slow node could use up the whole lock", Millis(*node_timeout))]
    NodeTimeoutNotBelowTtl {
        /// The per-node timeout.
        node_timeout: Duration,
        /// The TTL.
        ttl: Duration,
    },
    /// The value length is outside the accepted range.
    #[error(
        "a lock value of {len} random bytes is outside {}..={}: too short is guessable, too long is waste",
        MIN_VALUE_LEN,
        MAX_VALUE_LEN
    )]
    ValueLength {
        /// The length given.
        len: usize,
    },
    /// The acquire deadline ([`Config::acquire_deadline`](crate::Config::acquire_deadline)),
    /// or one call's wait limit ([`Attempts::Within`](crate::Attempts::Within)), is zero.
    #[error("the acquire deadline (or wait limit) is zero: no attempt could ever start")]
    ZeroDeadline,
    /// An election's timings cannot keep one leader: its lease's validity
    /// (the TTL less the drift allowance) must exceed the renew deadline,
    /// and the renew deadline 1.2 times the retry period, as Kubernetes'
    /// client-go checks ([`ElectionTiming::new`](crate::ElectionTiming::new)).
    #[error(
        "election timings: need lease validity {} > renew deadline {} > 1.2 x retry period {}",
        Millis(*validity), Millis(*renew_deadline), Millis(*retry_period)
    )]
    ElectionTiming {
        /// The lease's validity: its TTL less the drift allowance.
        validity: Duration,
        /// How long a leader keeps trying to renew before it steps down.
        renew_deadline: Duration,
        /// The pause between campaign attempts and between renewals.
        retry_period: Duration,
    },
    /// A multi-resource lock names no resource.
    #[error("a multi-resource lock needs at least one resource")]
    NoResources,
    /// The keys of one lock fall in different hash slots, and a node is a
    /// Redis Cluster, where one script may only touch keys of one slot.
    /// Nothing was sent. A multi-resource lock over such keys could only be
    /// held on part of that node, which is never done: give the resources
    /// one hash tag (`{order:42}:payment`, `{order:42}:stock`) so they share
    /// a slot. A read-write or fenced lock meets this only for a resource
    /// name with a `}` and no hash tag ([`Key::derived`](crate::Key::derived)).
    #[error(
        "{first} and {second} are in different hash slots ({first_slot} and {second_slot}), and node \
         {node} is a Redis Cluster, where one lock's keys must share a slot: give the resources one \
         hash tag, such as {{order:42}}:a and {{order:42}}:b"
    )]
    CrossSlot {
        /// The cluster node.
        node: String,
        /// One key of the lock.
        first: crate::Key,
        /// Its slot.
        first_slot: u16,
        /// A key of the lock in another slot.
        second: crate::Key,
        /// That key's slot.
        second_slot: u16,
    },
    /// A semaphore of no permit, or of more than [`MAX_PERMITS`](crate::MAX_PERMITS).
    #[error("a semaphore needs 1 to {max} permits, not {permits}", max = crate::MAX_PERMITS)]
    Permits {
        /// The number given.
        permits: u32,
    },
    /// A reentrant lock has an empty owner id.
    #[error("a reentrant lock needs a non-empty owner id: it decides who may take the lock again")]
    EmptyOwner,
    /// A node's address could not be used (reported by adapters, which
    /// parse and resolve them): an unparsable URL, or a host name that does
    /// not exist.
    #[error("node \"{node}\": {reason}")]
    InvalidNode {
        /// The node as given, credentials removed.
        node: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A TLS option could not be used: an unreadable or empty certificate
    /// file, a key that does not match its certificate, ... (reported by
    /// adapters, which read the files).
    #[error("TLS: {reason}")]
    InvalidTls {
        /// What is wrong, naming the file.
        reason: String,
    },
}

/// Why a lock was not acquired.
///
/// In every case the state machine has already asked every node to release
/// whatever this acquisition might have set there.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum AcquireError {
    /// Another owner holds the lock on enough nodes that no quorum was possible.
    #[error("held by another owner on {} after {attempts} attempt(s)", holders(.votes))]
    Held {
        /// The last attempt's votes.
        votes: Votes,
        /// Attempts made: the first, its retries, and any attempt a release
        /// notice brought forward.
        attempts: u32,
    },
    /// Too many nodes failed or timed out for a quorum, whoever holds the lock.
    #[error("no quorum after {attempts} attempt(s): {}", failures(.votes))]
    NoQuorum {
        /// The last attempt's votes.
        votes: Votes,
        /// Attempts made: the first, its retries, and any attempt a release
        /// notice brought forward.
        attempts: u32,
    },
    /// A quorum said yes, but so late that no validity was left (slow nodes or a
    /// paused client). The lock was released again.
    #[error("a quorum was reached but after {}, which left no validity of the {} TTL; the lock was released", Millis(votes.elapsed()), Millis(*ttl))]
    ValidityExhausted {
        /// The last attempt's votes.
        votes: Votes,
        /// The TTL asked for.
        ttl: Duration,
        /// Attempts made: the first, its retries, and any attempt a release
        /// notice brought forward.
        attempts: u32,
    },
    /// A key of the lock holds a value of another type on enough nodes that
    /// no quorum is possible: a list, a hash, a set, ... where the lock's
    /// string is expected (or a string where a reentrant lock's hash is).
    ///
    /// Some other program uses the key, so this is a mistake in naming, not
    /// a lock held by someone: the acquire fails at once, without retries
    /// (waiting would not change the key), and writes nothing to it (the
    /// scripts fail on the key before any write). Rename the lock (or its
    /// [key prefix](crate::Config::key_prefix)), or remove the key if nothing
    /// needs it. The key may also be one of the lock's helper keys: the
    /// fencing counter, a read-write lock's readers or writer-waiting mark.
    ///
    /// A node is counted here when it answered with the Redis error code
    /// `WRONGTYPE` ([`NodeErrorKind::WrongType`](crate::NodeErrorKind::WrongType)).
    /// On fewer nodes, the other nodes can still grant the lock, and a failed
    /// attempt is reported (and retried) as usual.
    #[error("{} holds a value of another type, not a lock (on {}): not retried; {votes}", key_list(.keys), wrong_type(.votes))]
    WrongType {
        /// The locked keys: the lock key, or every key of a multi-resource
        /// lock (one of them is the culprit).
        keys: Vec<Key>,
        /// The attempt's votes.
        votes: Votes,
        /// Attempts made: the first, its retries, and any attempt a release
        /// notice brought forward.
        attempts: u32,
    },
    /// A semaphore was asked for with another number of permits than the
    /// one its masters keep ([`Settings::permits_key`](crate::Settings::permits_key)):
    /// a master answered that it keeps `theirs`, and this request asked for
    /// `ours`. Users of one semaphore who counted different permits would
    /// break the bound of the smaller number, so the masters refuse the
    /// second number while the first is in use.
    ///
    /// Not retried (a retry would meet the same number), and nothing is
    /// left held: whatever the attempt set on other masters is withdrawn.
    /// Give the number the others use; to change it, release every
    /// permit, then ask for the new number (see `docs/semaphore.md`).
    #[error(
        "semaphore {key} has {theirs} permits on the masters, this request asked for {ours}: not retried"
    )]
    PermitsMismatch {
        /// The semaphore's lock key (the key prefix, then its name).
        key: Key,
        /// The number of permits this request asked for.
        ours: u32,
        /// The number a master keeps (`0`: what it keeps is not a number).
        theirs: u32,
        /// The attempt's votes.
        votes: Votes,
        /// Attempts made: the first, its retries, and any attempt a release
        /// notice brought forward.
        attempts: u32,
    },
    /// The overall acquire deadline passed before an attempt succeeded.
    #[error("the acquire deadline of {} passed after {attempts} attempt(s){}", Millis(*deadline), last_error(.last))]
    DeadlineExceeded {
        /// The deadline that applied: the call's wait limit
        /// ([`Attempts::Within`](crate::Attempts::Within)) or the
        /// configured acquire deadline.
        deadline: Duration,
        /// Attempts made (the last one may have been cut short).
        attempts: u32,
        /// Why the last finished attempt failed, if one finished.
        last: Option<Box<AcquireError>>,
    },
}

impl AcquireError {
    /// The per-node votes of the last attempt, when one finished.
    pub fn votes(&self) -> Option<&Votes> {
        match self {
            AcquireError::Held { votes, .. }
            | AcquireError::NoQuorum { votes, .. }
            | AcquireError::WrongType { votes, .. }
            | AcquireError::PermitsMismatch { votes, .. }
            | AcquireError::ValidityExhausted { votes, .. } => Some(votes),
            AcquireError::DeadlineExceeded { last, .. } => last.as_deref().and_then(Self::votes),
        }
    }

    /// Attempts made: the first one, the retries
    /// ([`RetryConfig::count`](crate::RetryConfig::count), up to 10 by
    /// default), and any attempt a release notice brought forward, which uses
    /// up no retry. So 12 attempts with 10 retries is one notice-led attempt.
    pub fn attempts(&self) -> u32 {
        match self {
            AcquireError::Held { attempts, .. }
            | AcquireError::NoQuorum { attempts, .. }
            | AcquireError::WrongType { attempts, .. }
            | AcquireError::PermitsMismatch { attempts, .. }
            | AcquireError::ValidityExhausted { attempts, .. }
            | AcquireError::DeadlineExceeded { attempts, .. } => *attempts,
        }
    }

    /// True when a key of the lock holds a value of another type
    /// ([`AcquireError::WrongType`]): a permanent error, not worth retrying.
    pub fn is_wrong_type(&self) -> bool {
        matches!(self, AcquireError::WrongType { .. })
    }

    /// True when the masters keep another number of permits for the
    /// semaphore ([`AcquireError::PermitsMismatch`]): a permanent error, not
    /// worth retrying.
    pub fn is_permits_mismatch(&self) -> bool {
        matches!(self, AcquireError::PermitsMismatch { .. })
    }

    /// True when the lock is held by someone else (as opposed to nodes failing).
    pub fn is_held_by_other(&self) -> bool {
        match self {
            AcquireError::Held { .. } => true,
            AcquireError::DeadlineExceeded { last, .. } => {
                last.as_deref().is_some_and(Self::is_held_by_other)
            }
            _ => false,
        }
    }
}

/// Why an extension did not take effect.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ExtendError {
    /// The lock's validity had run out before the extension could count.
    #[error("the lock expired {} before the extension could take effect; it may be held by someone else now", Millis(*expired_for))]
    Expired {
        /// How long ago the validity ended, at the time of the decision.
        expired_for: Duration,
        /// The votes, when a round was run.
        votes: Option<Votes>,
    },
    /// Another owner holds the key on too many nodes: the lock was lost. Our
    /// value is released wherever it is left (see
    /// [`Operation::extend`](crate::Operation::extend)); another owner's is never touched.
    #[error("the lock was lost to another owner, which holds it on {}", holders(.votes))]
    Lost {
        /// The votes.
        votes: Votes,
    },
    /// Our value was gone from more nodes than a quorum can spare: released
    /// by someone who knows the value (`redlock release --value`,
    /// [`Operation::release_value`](crate::Operation::release_value)), or expired or lost by the
    /// nodes. The lock had ended there, so someone else could have taken it
    /// since: it is lost, nothing is set again, and our value is released
    /// where it is left (see [`Operation::extend`](crate::Operation::extend)).
    #[error("the lock was lost: its value is gone from {} (released by its value, or lost by the nodes), more than the {spare} node(s) a quorum can spare; nothing was re-created: {votes}", gone(.votes))]
    Gone {
        /// How many nodes a quorum can do without: N minus the quorum.
        spare: usize,
        /// The votes.
        votes: Votes,
    },
    /// Too many nodes failed or timed out to extend on a quorum.
    #[error("no quorum to extend the lock: {}", failures(.votes))]
    NoQuorum {
        /// The votes.
        votes: Votes,
    },
}

impl ExtendError {
    /// Whether the lock is lost with this failure: it expired, another
    /// owner holds it, or our value is gone from too many nodes. Only
    /// [`NoQuorum`](Self::NoQuorum) (too few nodes answered) leaves the
    /// lock as it was, until its validity runs out; a keep-alive tries
    /// again while validity is left.
    pub fn loses_lock(&self) -> bool {
        !matches!(self, ExtendError::NoQuorum { .. })
    }

    /// The per-node votes, when a round was run.
    pub fn votes(&self) -> Option<&Votes> {
        match self {
            ExtendError::Expired { votes, .. } => votes.as_ref(),
            ExtendError::Lost { votes }
            | ExtendError::Gone { votes, .. }
            | ExtendError::NoQuorum { votes } => Some(votes),
        }
    }

    /// True when the nodes showed that the lock is not ours any more (another
    /// owner holds it, or our value is gone from too many nodes), as opposed
    /// to an expired validity or nodes failing to answer.
    pub fn is_lost(&self) -> bool {
        matches!(self, ExtendError::Lost { .. } | ExtendError::Gone { .. })
    }
}

/// Node names in an error's one-line message stop after this many
/// characters ("and N more"): the whole story is in the votes.
const NAMES_BUDGET: usize = 100;

/// `names` joined by ", ", cut short with "and N more" past the budget.
fn short_list(names: impl ExactSizeIterator<Item = String>) -> String {
    let total = names.len();
    let mut text = String::new();
    for (shown, name) in names.enumerate() {
        if shown > 0 && text.len() + name.len() > NAMES_BUDGET {
            text.push_str(&format!(" and {} more", total - shown));
            break;
        }
        if shown > 0 {
            text.push_str(", ");
        }
        text.push_str(&name);
    }
    text
}

fn gone(votes: &Votes) -> String {
    let names: Vec<String> = votes
        .iter()
        .filter_map(|(name, vote)| match vote {
            NodeVote::Missing => Some(format!("{name} (missing)")),
            NodeVote::HeldByOther(_) => Some(format!("{name} (another owner)")),
            NodeVote::Failed(error) if error.kind == NodeErrorKind::WrongType => {
                Some(format!("{name} (another type)"))
            }
            _ => None,
        })
        .collect();
    names.join(", ")
}

fn key_list(keys: &[Key]) -> String {
    match keys {
        [key] => format!("the key {key}"),
        keys => {
            let names: Vec<String> = keys.iter().map(ToString::to_string).collect();
            format!("one of the keys {}", names.join(", "))
        }
    }
}

fn wrong_type(votes: &Votes) -> String {
    let names: Vec<&str> = votes
        .iter()
        .filter(|(_, vote)| {
            matches!(vote, NodeVote::Failed(error) if error.kind == NodeErrorKind::WrongType)
        })
        .map(|(name, _)| name)
        .collect();
    names.join(", ")
}

/// A count of nodes, with its noun: "1 node", "2 nodes".
struct Nodes(usize);

impl std::fmt::Display for Nodes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            1 => f.write_str("1 node"),
            n => write!(f, "{n} nodes"),
        }
    }
}

/// "2 of 3 nodes (a:1/0, b:2/0)": where another owner holds the key.
fn holders(votes: &Votes) -> String {
    let names: Vec<String> = votes.holders().map(str::to_owned).collect();
    if names.is_empty() {
        return "no node".to_owned();
    }
    format!(
        "{} of {} nodes ({}{})",
        names.len(),
        votes.votes().len(),
        short_list(names.into_iter()),
        not_waited_for(votes)
    )
}

/// "; 1 not waited for": a round ends as soon as its outcome is
/// certain, so the nodes that had not answered by then are neither holders
/// nor refusals (all three nodes holding a lock read "held on 2 of 3 nodes"
/// without it), and may be up or down ("still answering" was false for both).
fn not_waited_for(votes: &Votes) -> String {
    match votes.pending() {
        0 => String::new(),
        pending => format!("; {pending} not waited for"),
    }
}

/// "1 of 3 nodes granted, quorum 2; failed: a:1/0 unreachable, ...": the
/// tally and the failed nodes by class of failure, without the nodes' own
/// words, which [`Votes`] keeps.
fn failures(votes: &Votes) -> String {
    let list: Vec<String> = votes
        .failures()
        .map(|(name, error)| format!("{name} {}", kind_label(error.kind)))
        .collect();
    let tally = format!(
        "{} of {} nodes granted, quorum {}",
        votes.granted(),
        votes.votes().len(),
        crate::quorum(votes.votes().len())
    );
    let held = votes.held_by_other();
    let mut held = if held > 0 {
        format!(", {held} held by another owner")
    } else {
        String::new()
    };
    // A node not waited for is not a node that refused: without this, a
    // round decided by two fast failures reads "0 of 3 granted" although the
    // third node may be up.
    let pending = votes.pending();
    if pending > 0 {
        held.push_str(&format!(", {pending} not waited for"));
    }
    if list.is_empty() {
        format!("{tally}{held}")
    } else {
        format!("{tally}{held}; failed: {}", short_list(list.into_iter()))
    }
}

/// A node failure's class in a few words.
fn kind_label(kind: crate::NodeErrorKind) -> &'static str {
    use crate::NodeErrorKind as Kind;
    match kind {
        Kind::Timeout => "timed out",
        Kind::Connection => "unreachable",
        Kind::Auth => "authentication failed",
        Kind::WrongType => "key of another type",
        Kind::Server => "server error",
        Kind::NoPermission => "not permitted",
        Kind::Protocol => "unexpected answer",
        Kind::Tls => "TLS handshake refused",
        Kind::Slow => "known slow, not asked",
        Kind::Restarted => "restarted, not counted yet",
        Kind::NotOnDisk => "not in its AOF in time",
        Kind::NoScript => "script cache flushed",
    }
}

fn last_error(last: &Option<Box<AcquireError>>) -> String {
    // The gist only, to keep the line short: the votes tell the rest.
    match last.as_deref() {
        None => String::new(),
        Some(AcquireError::Held { votes, .. }) => format!(
            "; last attempt: held by another owner on {} of {} nodes{}",
            votes.held_by_other(),
            votes.votes().len(),
            not_waited_for(votes)
        ),
        Some(AcquireError::NoQuorum { votes, .. }) => format!(
            "; last attempt: no quorum, {} of {} nodes granted, {} failed",
            votes.granted(),
            votes.votes().len(),
            votes.failed()
        ),
        Some(AcquireError::ValidityExhausted { .. }) => {
            "; last attempt: a quorum too late to leave any validity".to_owned()
        }
        Some(error) => format!("; last attempt: {error}"),
    }
}
