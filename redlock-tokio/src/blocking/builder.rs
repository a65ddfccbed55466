//! The blocking client's builder: the async one's options, and a `build`
//! that blocks.

use std::time::Duration;

use crate::{Error, Wait, WeakPersistence};

use super::Redlock;

/// Options for a [`blocking::Redlock`](Redlock), made by
/// [`blocking::Redlock::builder`](Redlock::builder): the options of
/// [`crate::Builder`], each of the same name and meaning, and a
/// [`build`](Self::build) that blocks.
#[derive(Debug)]
pub struct Builder(crate::Builder);

/// Each option, forwarded to the async builder's.
macro_rules! options {
    ($($(#[$attr:meta])* $name:ident($($arg:ident: $ty:ty),*);)*) => {
        $(
            #[doc = concat!("As [`crate::Builder::", stringify!($name), "`].")]
            $(#[$attr])*
            pub fn $name(self, $($arg: $ty),*) -> Self {
                Self(self.0.$name($($arg),*))
            }
        )*
    };
}

impl Builder {
    pub(super) fn new(builder: crate::Builder) -> Self {
        Self(builder)
    }

    options! {
        ttl(ttl: Duration);
        drift_factor(factor: f64);
        node_timeout(timeout: Duration);
        wait(wait: Wait);
        retry_delay(delay: Duration);
        retry_jitter(jitter: Duration);
        value_len(len: usize);
        key_prefix(prefix: impl Into<Vec<u8>>);
        connect_timeout(timeout: Duration);
        allow_even_nodes(allow: bool);
        allow_eviction(allow: bool);
        native_commands(on: bool);
        release_notices(on: bool);
        require_connected(count: usize);
        wait_for_aof(on: bool);
        weak_persistence(policy: WeakPersistence);
        #[cfg(feature = "tls")]
        tls_ca_file(path: impl Into<std::path::PathBuf>);
        #[cfg(feature = "tls")]
        tls_client_cert(cert_path: impl Into<std::path::PathBuf>, key_path: impl Into<std::path::PathBuf>);
    }

    /// Validates the options and connects, as [`crate::Builder::build`]
    /// does, blocking until done: the client runs on a thread of its own.
    /// Fails with [`Error::InsideRuntime`] on a current-thread runtime
    /// (see [the module](crate::blocking)).
    pub fn build(self) -> Result<Redlock, Error> {
        self.0.build_blocking()
    }
}
