//! The keys and channels a lock uses: the lock key of a resource, and beside
//! it, in its hash slot, the fencing counter, the leader record, the
//! waiters' marks, the keys each command names, and the release channel.

use super::Settings;
use crate::Ttl;
use crate::error::ConfigError;
use crate::limits::MAX_TTL_MS;

impl Settings {
    /// The Redis key of a resource: the prefix followed by the resource name.
    pub fn key(&self, resource: &[u8]) -> crate::Key {
        let mut key = Vec::with_capacity(self.key_prefix.len() + resource.len());
        key.extend_from_slice(&self.key_prefix);
        key.extend_from_slice(resource);
        crate::Key::from(key)
    }

    machinery_fn! {
        /// The key of a resource's fencing counter: the lock key followed by a NUL
        /// byte and `fencing`, in the lock key's hash slot ([`Key::derived`](crate::Key::derived):
        /// `{res}\0fencing` for the lock key `res`). No resource name can produce it
        /// by accident unless it contains that NUL byte.
        fn fencing_key(&self, key: &crate::Key) -> crate::Key {
            key.derived(b"\0fencing")
        }
    }

    /// The key that keeps a semaphore's number of permits on each master
    /// (`{name}\0permits` for the semaphore `name`), in the lock key's hash
    /// slot. [`scripts::SEMAPHORE_ACQUIRE`](crate::scripts::SEMAPHORE_ACQUIRE)
    /// writes it with the first grant and refuses a request for another
    /// number while it lives; it lives at least as long as every slot
    /// held on that master (each grant and each extension of a permit
    /// keeps it so), and goes with the withdraw or the release
    /// ([`scripts::SEMAPHORE_RELEASE`](crate::scripts::SEMAPHORE_RELEASE))
    /// that leaves no slot held on its master; where none reached the
    /// master, it expires within one TTL of its last slot.
    pub fn permits_key(&self, key: &crate::Key) -> crate::Key {
        key.derived(b"\0permits")
    }

    machinery_fn! {
        /// The key of an election's leader record (`{name}\0leader` for the
        /// election `name`): the leader's term, id and value, written by
        /// [`scripts::PROCLAIM`](crate::scripts::PROCLAIM) in the lock key's
        /// hash slot.
        fn leader_key(&self, key: &crate::Key) -> crate::Key {
            key.derived(b"\0leader")
        }
    }

    machinery_fn! {
        /// The key where waiters of an exclusive lock announce themselves
        /// ([`scripts::MARK_WAITING`](crate::scripts::MARK_WAITING)): the lock
        /// key followed by a NUL byte and `waiters`, in the lock key's hash slot
        /// (`{res}\0waiters` for the lock key `res`). A release publishes its
        /// notice only while this key lives
        /// ([`scripts::RELEASE_IF_WAITED`](crate::scripts::RELEASE_IF_WAITED)).
        /// It expires on its own, one retry interval or so after the last
        /// waiter's last attempt ([`Settings::waiters_mark_ttl`]).
        fn waiters_key(&self, key: &crate::Key) -> crate::Key {
            key.derived(b"\0waiters")
        }
    }

    machinery_fn! {
        /// The key that says a waiter of another client was marked
        /// ([`scripts::MARK_WAITING`](crate::scripts::MARK_WAITING)): the
        /// waiters mark holds the client that marked last, and a waiter that
        /// overwrites another client's mark sets this one for as long as that
        /// mark had left. The lock key followed by a NUL byte and `others`, in
        /// the lock key's hash slot (`{res}\0others` for the lock key `res`).
        fn others_waiting_key(&self, key: &crate::Key) -> crate::Key {
            key.derived(b"\0others")
        }
    }

    /// The keys a waiter's mark for the lock key `key` sends
    /// ([`scripts::MARK_WAITING`](crate::scripts::MARK_WAITING)).
    pub(crate) fn mark_keys(&self, key: &crate::Key) -> std::sync::Arc<[crate::Key]> {
        std::sync::Arc::from([
            key.clone(),
            self.waiters_key(key),
            self.others_waiting_key(key),
        ])
    }

    /// This client, as its waiters' marks and its releases name it to the
    /// masters ([`with_client_tag`](Self::with_client_tag)).
    pub fn client_tag(&self) -> Option<&crate::LockValue> {
        self.client_tag.as_ref()
    }

    /// These settings for a client that `tag` names to the masters: a
    /// random value, the same for every lock of the client and its
    /// clones, and unique among clients (the adapter draws it, 8 random
    /// bytes or more). Its waiters mark themselves with it, and an
    /// exclusive lock's release reports whether a waiter of another client
    /// is marked ([`scripts::RELEASE_IF_WAITED`](crate::scripts::RELEASE_IF_WAITED)):
    /// only while none is does the client hand such a lock over to its own
    /// next waiter (`WaitQueue`). Without a tag every
    /// waiter counts as another client's, and plain locks are never handed
    /// over.
    #[must_use]
    pub fn with_client_tag(mut self, tag: crate::LockValue) -> Self {
        self.client_tag = Some(tag);
        self
    }

    /// The keys a release of a lock with `keys` sends: an exclusive lock's
    /// release with a notice publishes only for a waiter that announced
    /// itself ([`scripts::RELEASE_IF_WAITED`](crate::scripts::RELEASE_IF_WAITED)),
    /// so it reads the waiters mark, not the fencing counter a fenced lock
    /// carries. Where the mark cannot share the lock key's hash slot (a
    /// name with a `}` and no hash tag, on a cluster node) the release
    /// sends the lock key alone, and the script then always publishes.
    /// Every release of a held lock goes through here: its own release and
    /// the clean-up of an extension that found it gone.
    ///
    /// A semaphore's permit (`semaphore`: the semaphore's slot keys, then
    /// its permits key) sends its slot, the slot's marks, then every key of
    /// the semaphore, with or without notices
    /// ([`scripts::SEMAPHORE_RELEASE`](crate::scripts::SEMAPHORE_RELEASE)):
    /// the permits key goes with the last slot held. They are all in the
    /// semaphore's hash slot, where it has one (a cluster node refuses a
    /// semaphore whose name cannot be put in a tag before anything is sent).
    pub(crate) fn release_keys(
        &self,
        keys: std::sync::Arc<[crate::Key]>,
        kind: &crate::LockKind,
        command: crate::Command,
        semaphore: Option<&[crate::Key]>,
    ) -> std::sync::Arc<[crate::Key]> {
        if let Some(semaphore) = semaphore {
            let key = keys[0].clone();
            let marks = [self.waiters_key(&key), self.others_waiting_key(&key)];
            let keys = std::iter::once(key).chain(marks);
            return keys.chain(semaphore.iter().cloned()).collect();
        }
        if *kind != crate::LockKind::Exclusive || command != crate::Command::Release {
            return keys;
        }
        let key = keys[0].clone();
        let mark = self.waiters_key(&key);
        if mark.slot() == key.slot() {
            let others = self.others_waiting_key(&key);
            std::sync::Arc::from([key, mark, others])
        } else {
            std::sync::Arc::from([key])
        }
    }

    /// How long a waiter's mark surely lives, measured on our clock from
    /// when it was sent: [`waiters_mark_ttl`](Self::waiters_mark_ttl)
    /// without the drift allowance (a node counts the TTL from when the
    /// mark reached it, and its clock may run fast by that allowance).
    pub(crate) fn waiters_mark_span(
        &self,
        node_timeout: std::time::Duration,
    ) -> std::time::Duration {
        let retry = self.retry();
        retry
            .delay
            .saturating_add(retry.jitter)
            .saturating_add(node_timeout.saturating_mul(2))
    }

    machinery_fn! {
        /// How long a waiter's mark lives after one of its attempts: until its
        /// next attempt has surely reached the node and marked again, that is,
        /// the longest retry wait (`delay + jitter`) plus two per-node
        /// timeouts (the attempt that marked, and the next one on its way),
        /// plus the drift allowance of a node's clock (1% + 2 ms of the span,
        /// as for a lock). About 0.3 s with the defaults.
        fn waiters_mark_ttl(&self, node_timeout: std::time::Duration) -> crate::Ttl {
            let span = self.waiters_mark_span(node_timeout);
            let span = span
                .saturating_add(span / 100)
                .saturating_add(std::time::Duration::from_millis(2));
            let millis = u64::try_from(span.as_millis()).unwrap_or(u64::MAX).max(1);
            crate::Ttl(millis)
        }
    }

    /// The script keys and lock kind for a spec (see
    /// [`LockSpec`](crate::LockSpec)).
    pub(crate) fn lock_keys(
        &self,
        spec: crate::LockSpec<'_>,
        ttl: Ttl,
    ) -> Result<(std::sync::Arc<[crate::Key]>, crate::LockKind), ConfigError> {
        use crate::{LockKind, LockSpec};
        Ok(match spec {
            LockSpec::Exclusive(resource) => (vec![self.key(resource)].into(), LockKind::Exclusive),
            LockSpec::Fenced(resource) => {
                let key = self.key(resource);
                let fencing = self.fencing_key(&key);
                (vec![key, fencing].into(), LockKind::Exclusive)
            }
            LockSpec::Read(resource) | LockSpec::Write(resource) => {
                let key = self.key(resource);
                let keys = vec![key.derived(b"\0readers"), key.derived(b"\0writer-waiting")];
                let keys: std::sync::Arc<[crate::Key]> = std::iter::once(key).chain(keys).collect();
                let kind = if matches!(spec, LockSpec::Read(_)) {
                    LockKind::Read
                } else {
                    // Long enough to cover the writer's next retry.
                    let node_timeout = self.node_timeout_for(ttl);
                    let hold_off = self.retry.delay + self.retry.jitter + node_timeout * 2;
                    let millis = u64::try_from(hold_off.as_millis())
                        .unwrap_or(MAX_TTL_MS)
                        .clamp(1, MAX_TTL_MS);
                    LockKind::Write {
                        readers_hold_off: Ttl(millis),
                    }
                };
                (keys, kind)
            }
            LockSpec::Reentrant { resource, owner } => {
                if owner.is_empty() {
                    return Err(ConfigError::EmptyOwner);
                }
                (
                    vec![self.key(resource)].into(),
                    LockKind::Reentrant {
                        owner: owner.into(),
                    },
                )
            }
            LockSpec::Fair(resource) => {
                let key = self.key(resource);
                let keys = vec![key.derived(b"\0queue"), key.derived(b"\0queue-expiry")];
                let keys: std::sync::Arc<[crate::Key]> = std::iter::once(key).chain(keys).collect();
                // Renewed by every attempt: two retry delays and two
                // round trips cover the next one; a dead waiter's entry
                // dies then, and never outlives the lock's own TTL.
                let node_timeout = self.node_timeout_for(ttl);
                let entry = (self.retry.delay + self.retry.jitter + node_timeout) * 2;
                let millis = u64::try_from(entry.as_millis())
                    .unwrap_or(MAX_TTL_MS)
                    .clamp(1, ttl.as_millis());
                (
                    keys,
                    LockKind::Fair {
                        // Drawn by the acquisition, from its RNG.
                        waiter: "".into(),
                        entry: Ttl(millis),
                        by_queue: true,
                        ticket: 0,
                    },
                )
            }
            LockSpec::Multi(resources) => {
                let mut keys: Vec<crate::Key> = resources
                    .iter()
                    .map(|resource| self.key(resource))
                    .collect();
                // Sorted and without repeats: one order on every node, and a
                // resource named twice is locked once.
                keys.sort();
                keys.dedup();
                if keys.is_empty() {
                    return Err(ConfigError::NoResources);
                }
                (keys.into(), LockKind::Multi)
            }
            LockSpec::Semaphore { resource, permits }
            | LockSpec::FencedSemaphore { resource, permits } => {
                if permits == 0 || permits > crate::MAX_PERMITS {
                    return Err(ConfigError::Permits { permits });
                }
                let key = self.key(resource);
                let slots = crate::ops::semaphore::slot_keys(&key, permits);
                let keys = slots.iter().cloned().chain([self.permits_key(&key)]);
                (keys.collect(), LockKind::Semaphore { start: 0 })
            }
        })
    }

    /// The pub/sub channel on which a node announces that the lock on `key`
    /// was released: the key followed by a NUL byte and `released`.
    #[cfg(feature = "simulation")]
    pub fn release_channel(&self, key: &crate::Key) -> crate::Key {
        release_channel(key)
    }
}

/// [`Settings::release_channel`].
pub(crate) fn release_channel(key: &crate::Key) -> crate::Key {
    key.with_suffix(b"\0released")
}

/// The keys of a lock of `kind` that a holder holds, each with its release
/// channel and waiters' marks: every key of a multi-resource lock, every
/// slot of a semaphore (not its permits key, the last), the first key (the
/// resource's own) for the other kinds.
pub(crate) fn held_keys<'a>(keys: &'a [crate::Key], kind: &crate::LockKind) -> &'a [crate::Key] {
    let count = match kind {
        crate::LockKind::Multi => keys.len(),
        crate::LockKind::Semaphore { .. } => keys.len() - 1,
        _ => 1,
    };
    &keys[..count.min(keys.len())]
}

/// The channels a release of a lock of `kind` on `keys` announces on, and
/// its waiters listen to: those of its [`held_keys`].
pub(crate) fn release_channels(keys: &[crate::Key], kind: &crate::LockKind) -> Vec<crate::Key> {
    held_keys(keys, kind).iter().map(release_channel).collect()
}
