//! Small value types shared by every state machine.

use std::fmt;
use std::sync::Arc;

use rand_core::Rng;

/// The index of a node in [`Settings::nodes`](crate::Settings::nodes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeId(pub usize);

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "node #{}", self.0)
    }
}

/// Tags every request of one round (one fan-out to all nodes).
///
/// Ids are drawn from the caller's RNG, so they are unique across state
/// machines as well as across the rounds of one.
///
/// A reply carries the id of the request it answers; a state machine counts it
/// only if the id is the one of its current round, so a late reply from an
/// earlier round can never be taken for a vote.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RoundId(pub u64);

impl fmt::Display for RoundId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "round {:016x}", self.0)
    }
}

/// A Redis key: the configured prefix followed by the resource name.
/// Cheap to clone.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key(Arc<[u8]>);

impl Key {
    /// The key's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// This key followed by `suffix`: the helper keys and channels of a lock.
    pub(crate) fn with_suffix(&self, suffix: &[u8]) -> Key {
        Key([self.as_bytes(), suffix].concat().into())
    }
}

impl From<Vec<u8>> for Key {
    fn from(bytes: Vec<u8>) -> Self {
        Self(bytes.into())
    }
}

impl From<&[u8]> for Key {
    fn from(bytes: &[u8]) -> Self {
        Self(bytes.into())
    }
}

impl From<&str> for Key {
    fn from(text: &str) -> Self {
        Self(text.as_bytes().into())
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Key({self})")
    }
}

impl fmt::Display for Key {
    /// Printable bytes as they are, others as `\xNN`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for chunk in self.0.utf8_chunks() {
            f.write_str(chunk.valid())?;
            for byte in chunk.invalid() {
                write!(f, "\\x{byte:02x}")?;
            }
        }
        Ok(())
    }
}

/// The unique, unguessable value one acquisition writes on every node.
///
/// Random bytes from the caller's RNG, hex-encoded so that the value reads
/// well in `redis-cli` and logs. Only the holder of the value can release or
/// extend the lock. Cheap to clone.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct LockValue(Arc<str>);

impl LockValue {
    /// A fresh value of `len` random bytes (`2 * len` hex characters).
    pub fn random<R: Rng + ?Sized>(rng: &mut R, len: usize) -> Self {
        let mut bytes = vec![0u8; len];
        rng.fill_bytes(&mut bytes);
        let mut hex = String::with_capacity(len * 2);
        for byte in bytes {
            const DIGITS: &[u8; 16] = b"0123456789abcdef";
            hex.push(DIGITS[usize::from(byte >> 4)] as char);
            hex.push(DIGITS[usize::from(byte & 0xf)] as char);
        }
        Self(hex.into())
    }

    /// A value known from elsewhere (for example to release a lock by hand).
    pub fn from_string(value: impl Into<String>) -> Self {
        Self(value.into().into())
    }

    /// The value as sent to Redis.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The value's bytes as sent to Redis.
    pub fn as_bytes(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

impl fmt::Debug for LockValue {
    /// Only a prefix: whoever knows the whole value can release the lock, and
    /// `Debug` output ends up in logs. [`Display`](fmt::Display) and
    /// [`LockValue::as_str`] give the whole value when it is really needed.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let prefix: String = self.0.chars().take(8).collect();
        write!(f, "LockValue({prefix}…)")
    }
}

impl fmt::Display for LockValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What to lock, for [`Acquisition::with_spec`](crate::Acquisition::with_spec).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LockSpec<'a> {
    /// An exclusive lock on one resource.
    Exclusive(&'a [u8]),
    /// An exclusive lock with a fencing token ([`Acquisition::fenced`](crate::Acquisition::fenced)).
    Fenced(&'a [u8]),
    /// A read lock: many readers at once, no writer.
    ///
    /// Policy: a writer that finds readers marks the lock as writer-waiting
    /// on those nodes; new readers are then refused there until the writer
    /// has its lock (or stops retrying and the mark expires, after the retry
    /// interval plus two per-node timeouts). Readers already in finish
    /// normally. So a stream of readers cannot starve a writer, and a writer
    /// waits at most for the readers that came before it.
    Read(&'a [u8]),
    /// The write lock of a read-write lock: one writer, no reader.
    Write(&'a [u8]),
    /// A lock that `owner` may take again while holding it. Each acquisition
    /// has its own value and must be released on its own; the lock is free
    /// once every acquisition is released or expired. The owner id is what
    /// makes acquisitions reentrant, so it must be unique per logical owner
    /// (a job id, a UUID per worker): anyone who knows it can enter.
    Reentrant {
        /// The resource.
        resource: &'a [u8],
        /// The owner id.
        owner: &'a str,
    },
    /// All of these resources at once, atomically on each node, or none.
    /// Each resource's key is an ordinary exclusive lock key, so a
    /// multi-resource lock excludes single locks on any of its resources.
    Multi(&'a [&'a [u8]]),
}

/// A TTL checked against the settings: whole milliseconds, positive validity
/// after drift, longer than the per-node timeout, within what Redis accepts.
///
/// Made by [`Settings::ttl`](crate::Settings::ttl) (or taken from
/// [`Settings::default_ttl`](crate::Settings::default_ttl)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Ttl(pub(crate) u64);

impl Ttl {
    /// Zero: only for the readers hold-off of a writer that will not retry.
    pub(crate) const NONE: Ttl = Ttl(0);

    /// The TTL in milliseconds, as sent to Redis.
    pub fn as_millis(self) -> u64 {
        self.0
    }

    /// The TTL as a duration.
    pub fn as_duration(self) -> std::time::Duration {
        std::time::Duration::from_millis(self.0)
    }
}

impl fmt::Display for Ttl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ms", self.0)
    }
}
