//! The operations, by kind: each a [`Machine`](crate::Machine) of its own
//! that the [`Client`](crate::Client) runs (or a caller drives alone), with
//! what they share (the machine trait, retries).

pub(crate) mod acquire;
pub(crate) mod election;
pub(crate) mod election_read;
pub(crate) mod extend;
pub(crate) mod keep_alive;
pub(crate) mod lock;
pub(crate) mod machine;
pub(crate) mod read_all;
pub(crate) mod release;
pub(crate) mod retry;
pub(crate) mod semaphore;
pub(crate) mod standing;
pub(crate) mod status;
