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

    /// A helper key of this lock (readers, writer mark, fencing counter)
    /// that lands in the same Redis Cluster hash slot as this key, so that
    /// every script of the lock stays single-slot on a cluster node.
    ///
    /// - A key with a hash tag (`user:{42}:lock`) is followed by `suffix`:
    ///   the tag still decides the slot (`user:{42}:lock\0readers`).
    /// - Any other key is wrapped in a tag of its own: `{res}\0readers`
    ///   hashes `res`, as the lock key `res` does. The lock key itself is
    ///   never changed, so exclusive locks keep the standard Redlock key
    ///   (`SET res value NX PX ttl`) that other clients use.
    /// - A key without a tag that contains `}` (`a}b`), or the empty key,
    ///   cannot be put in a tag: it is followed by `suffix` as before, in another slot. Plain
    ///   nodes do not care; a cluster node refuses such a lock before
    ///   anything is sent ([`ConfigError::CrossSlot`](crate::ConfigError::CrossSlot)).
    ///
    /// ```
    /// use redlock_core::Key;
    /// let plain = Key::from(&b"res"[..]);
    /// assert_eq!(plain.derived(b"\0readers").as_bytes(), b"{res}\0readers");
    /// assert_eq!(plain.derived(b"\0readers").slot(), plain.slot());
    /// let tagged = Key::from(&b"user:{42}:lock"[..]);
    /// assert_eq!(tagged.derived(b"\0readers").as_bytes(), b"user:{42}:lock\0readers");
    /// ```
    pub fn derived(&self, suffix: &[u8]) -> Key {
        let bytes = self.as_bytes();
        if bytes.is_empty() || hash_tag(bytes).is_some() || bytes.contains(&b'}') {
            return self.with_suffix(suffix);
        }
        Key([b"{", bytes, b"}", suffix].concat().into())
    }

    /// The Redis Cluster hash slot of this key (0..16384): CRC16 (XMODEM)
    /// of its hash tag (the bytes between the first `{` and the first `}`
    /// after it, when there are any), else of the whole key, modulo 16384.
    ///
    /// ```
    /// use redlock_core::Key;
    /// // The examples of the Redis Cluster specification.
    /// assert_eq!(Key::from(&b"123456789"[..]).slot(), 0x31C3 % 16384);
    /// assert_eq!(Key::from(&b"{user1000}.following"[..]).slot(), Key::from(&b"user1000"[..]).slot());
    /// ```
    pub fn slot(&self) -> u16 {
        let bytes = self.as_bytes();
        crc16(hash_tag(bytes).unwrap_or(bytes)) % 16384
    }
}

/// The hash tag of a key as Redis Cluster finds it: the bytes between the
/// first `{` and the first `}` after it, if there are any.
fn hash_tag(key: &[u8]) -> Option<&[u8]> {
    let open = key.iter().position(|&b| b == b'{')?;
    let rest = &key[open + 1..];
    let close = rest.iter().position(|&b| b == b'}')?;
    (close > 0).then(|| &rest[..close])
}

/// CRC16-CCITT (XMODEM), the checksum Redis Cluster hashes keys with.
fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in bytes {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
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
    /// Printable text as it is; a NUL (the separator of the keys the
    /// library derives, `{pool}\0permit2`) as `\0`, other control
    /// characters and bytes that are not UTF-8 as `\xNN`: a log line or a
    /// terminal never gets a raw control byte.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for chunk in self.0.utf8_chunks() {
            let text = chunk.valid();
            let mut printed = 0;
            for (at, c) in text.char_indices().filter(|(_, c)| c.is_control()) {
                f.write_str(&text[printed..at])?;
                match c {
                    '\0' => f.write_str("\\0")?,
                    c if c.is_ascii() => write!(f, "\\x{:02x}", c as u8)?,
                    c => write!(f, "{}", c.escape_unicode())?,
                }
                printed = at + c.len_utf8();
            }
            f.write_str(&text[printed..])?;
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
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        // One buffer, on the stack for the usual sizes: one allocation per
        // lock, the value's own. The bytes are drawn into its first half
        // and spelled in place from the end: byte `i` becomes characters
        // `2i` and `2i + 1`, never over a byte still to be read.
        let (mut stack, mut heap) = ([0u8; 64], Vec::new());
        let hex: &mut [u8] = if 2 * len <= stack.len() {
            &mut stack[..2 * len]
        } else {
            heap.resize(2 * len, 0);
            &mut heap
        };
        rng.fill_bytes(&mut hex[..len]);
        for i in (0..len).rev() {
            let byte = hex[i];
            hex[2 * i] = DIGITS[usize::from(byte >> 4)];
            hex[2 * i + 1] = DIGITS[usize::from(byte & 0xf)];
        }
        Self(
            std::str::from_utf8(hex)
                .expect("hex digits are ASCII")
                .into(),
        )
    }

    /// A value known from elsewhere (for example to release a lock by hand).
    pub fn from_string(value: impl Into<String>) -> Self {
        Self(value.into().into())
    }

    /// The whole value as sent to Redis: the secret that releases the lock.
    ///
    /// The one way to read it in full (`Display` and `Debug` show only a
    /// prefix, so that a value formatted into a log cannot be used): for a
    /// release by hand (`redlock release --value`), a compare-and-set token,
    /// or the command run under `redlock exec` (`REDLOCK_VALUE`).
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The value's bytes as sent to Redis.
    pub fn as_bytes(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

impl LockValue {
    /// The first characters, enough to tell values apart in a log, too few
    /// to release the lock with.
    fn redacted(&self) -> impl fmt::Display + '_ {
        struct Prefix<'a>(&'a str);
        impl fmt::Display for Prefix<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                let prefix: String = self.0.chars().take(8).collect();
                write!(f, "{prefix}…")
            }
        }
        Prefix(&self.0)
    }
}

impl fmt::Debug for LockValue {
    /// Only a prefix: whoever knows the whole value can release the lock, and
    /// `Debug` output ends up in logs. [`LockValue::as_str`] gives the whole
    /// value when it is really needed.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LockValue({})", self.redacted())
    }
}

impl fmt::Display for LockValue {
    /// Only a prefix, as [`Debug`](fmt::Debug): `format!("{value}")` in a log
    /// line must not hand out the lock. [`LockValue::as_str`] gives the whole
    /// value.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.redacted())
    }
}

/// What to lock: the kind of lock and its resource(s), for a call that
/// takes any kind (the Tokio client's `Redlock::lock_spec`, the core's
/// [`Operation::acquire`](crate::Operation::acquire)).
///
/// `LockSpec::Read(b"catalog")` is a read lock on `catalog`; the plain
/// methods (`lock`, `read_lock`, `lock_all`, ...) build one for you.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LockSpec<'a> {
    /// An exclusive lock on one resource.
    Exclusive(&'a [u8]),
    /// An exclusive lock with a fencing token ([`Operation::acquire`](crate::Operation::acquire)).
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
    /// An exclusive lock whose waiters are served first come, first served
    /// across processes, while a quorum of masters is up.
    ///
    /// Each master keeps a queue of waiter ids next to the key
    /// (`{<key>}\0queue`, in the order the master first saw each waiter,
    /// and `{<key>}\0queue-expiry`, both in the key's hash slot); its
    /// acquire script ([`scripts::FAIR_ACQUIRE`](crate::scripts::FAIR_ACQUIRE))
    /// adds or renews the caller's entry and grants a free key only to the
    /// head of the live queue. So while a quorum is up, the lock goes to
    /// the waiter the quorum saw first.
    ///
    /// - **Masters that saw waiters arrive in different orders** come to
    ///   agree: each waiter carries a ticket, the highest place score a
    ///   master gave it, and a master raises its entry to it (ties go by
    ///   waiter id); an attempt that learns a higher ticket on a free key
    ///   tries again at once.
    ///
    /// - **A dead waiter** holds the queue at most until its entry expires:
    ///   each attempt renews it for two retry delays and two per-node
    ///   timeouts, never longer than the lock's TTL.
    /// - **Masters that still disagree** (a head that died on some of them)
    ///   cannot deadlock it: an acquisition whose
    ///   attempts keep failing on a key that no quorum holds, with some
    ///   master saying "another waiter's turn" and its place in the queues
    ///   no better than before, takes the lock by the plain rule after
    ///   `FAIR_PATIENCE` such attempts in a row
    ///   (until an attempt finds the lock held by a quorum, or its place
    ///   improves).
    /// - **Nothing stays behind**: an acquisition that ends (got the lock,
    ///   gave up, was abandoned) leaves every queue
    ///   ([`Command::Leave`](crate::Command::Leave)); an emptied queue key is
    ///   gone.
    ///
    /// Fair locks exclude each other; they do not wait in line with plain
    /// exclusive locks of the same resource (those ignore the queue).
    Fair(&'a [u8]),
    /// One of `permits` permits of a counting semaphore: at most `permits`
    /// holders at once, while the lock's assumptions hold.
    ///
    /// Each permit is a slot lock (`{<key>}\0permit0` ..
    /// `{<key>}\0permit<permits-1>`) held on a quorum like an exclusive
    /// lock; one script per master takes a free slot, starting from the
    /// same slot on every master, so an uncontended acquire is one round
    /// trip. The lock handed out is an exclusive lock on its slot key:
    /// extend, keep alive and release it as any lock (an extension also
    /// keeps the semaphore's [permits key](crate::Settings::permits_key)).
    /// `permits` is 1 to [`MAX_PERMITS`](crate::MAX_PERMITS); the masters
    /// keep the number in use and refuse another
    /// ([`AcquireError::PermitsMismatch`](crate::AcquireError::PermitsMismatch)).
    /// See `docs/semaphore.md`.
    Semaphore {
        /// The resource: the semaphore's name.
        resource: &'a [u8],
        /// How many holders at most.
        permits: u32,
    },
    /// As [`Semaphore`](Self::Semaphore), with a fencing token per permit
    /// ([`Lock::fencing_token`](crate::Lock::fencing_token)): larger than
    /// the token of every earlier holder of the same permit slot, as a
    /// fenced lock's is on its key. Each slot keeps its own counter
    /// (`{<key>}\0permit<i>\0fencing`, the slot key's
    /// `Settings::fencing_key`); the lock
    /// handed out is a fenced lock on its slot key. A protected resource
    /// checks the token per slot ([`Lock::key`](crate::Lock::key) names
    /// it): see `docs/semaphore.md`.
    FencedSemaphore {
        /// The resource: the semaphore's name.
        resource: &'a [u8],
        /// How many holders at most.
        permits: u32,
    },
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

#[cfg(test)]
mod slot_tests {
    use super::*;

    fn key(bytes: &[u8]) -> Key {
        Key::from(bytes)
    }

    #[test]
    fn slots_follow_the_cluster_specification() {
        // CRC16 of "123456789" is 0x31C3 (the specification's check value).
        assert_eq!(key(b"123456789").slot(), 0x31C3);
        assert_eq!(key(b"{user1000}.following").slot(), key(b"user1000").slot());
        // An empty tag does not count: the whole key is hashed.
        assert_eq!(key(b"foo{}{bar}").slot(), crc16(b"foo{}{bar}") % 16384);
        assert_eq!(key(b"foo{{bar}}zap").slot(), key(b"{bar").slot());
        assert_eq!(key(b"foo{bar}{zap}").slot(), key(b"bar").slot());
    }

    #[test]
    fn derived_keys_share_the_lock_keys_slot_when_they_can() {
        for name in [
            &b"res"[..],
            b"lock:res",
            b"a{b",
            b"{}",
            b"x{}y",
            b"user:{42}:lock",
            b"",
        ] {
            let lock = key(name);
            let derived = lock.derived(b"\0readers");
            if name.is_empty() || (name.contains(&b'}') && hash_tag(name).is_none()) {
                // `{}`, `x{}y` and the empty key cannot be put in a tag.
                assert_eq!(derived.as_bytes(), [name, b"\0readers"].concat());
                continue;
            }
            assert_eq!(derived.slot(), lock.slot(), "{lock} -> {derived}");
        }
        assert_eq!(key(b"a}b").derived(b"\0x").as_bytes(), b"a}b\0x");
    }
}

#[cfg(test)]
mod tests {
    use super::{Key, LockValue};

    #[test]
    fn a_key_is_shown_without_raw_control_bytes() {
        let shown = |bytes: &[u8]| Key::from(bytes).to_string();
        assert_eq!(shown(b"{exports}\0permit2"), "{exports}\\0permit2");
        assert_eq!(shown(b"tab\there\x1b[0m"), "tab\\x09here\\x1b[0m");
        assert_eq!(shown(b"bin\xff\x00ary"), "bin\\xff\\0ary");
        assert_eq!(shown("caf\u{e9} \u{85}".as_bytes()), "caf\u{e9} \\u{85}");
        assert_eq!(shown(b"plain:key"), "plain:key");
    }

    #[test]
    fn a_random_value_spells_its_bytes_in_hex_at_any_length() {
        use rand::{Rng, SeedableRng};
        for len in [0, 1, 8, 20, 32, 33, 100] {
            let mut rng = rand::rngs::StdRng::seed_from_u64(len as u64);
            let mut same = rand::rngs::StdRng::seed_from_u64(len as u64);
            let value = LockValue::random(&mut rng, len);
            let mut bytes = vec![0u8; len];
            same.fill_bytes(&mut bytes);
            let expected: String = bytes.iter().map(|byte| format!("{byte:02x}")).collect();
            assert_eq!(value.as_str(), expected, "{len} bytes");
        }
    }

    #[test]
    fn a_lock_value_formats_redacted_and_reads_whole_only_on_request() {
        let secret = "5f1c0b1d2e3f40516273849aabbccddeeff00112";
        let value = LockValue::from_string(secret);
        assert_eq!(value.to_string(), "5f1c0b1d…");
        assert_eq!(format!("{value:?}"), "LockValue(5f1c0b1d…)");
        assert!(!format!("{value} {value:?} {value:#?}").contains(secret));
        assert_eq!(value.as_str(), secret);
    }
}
