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
pub struct AttemptId(pub u64);

impl fmt::Display for AttemptId {
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
