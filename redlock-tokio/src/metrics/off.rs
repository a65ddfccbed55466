//! The metrics with the `metrics` feature off: empty functions and
//! zero-sized types with the same names as in `on`, so callers need no `cfg`.

use std::time::Instant;

use redlock_core::{ExtendError, Lock, LossReason, ReleaseReport};

use super::{End, Kind, Outcome, Voted};

// Empty functions of this crate: the compiler inlines them away.
pub(crate) fn describe() {}
pub(crate) fn held(_: &Lock, _: End) {}
pub(crate) fn extended(_: Result<(), &ExtendError>) {}
pub(crate) fn lost(_: &LossReason) {}
pub(crate) fn released(_: &ReleaseReport) {}
pub(crate) fn node_misses(_: usize) {}
pub(crate) fn node_slow(_: &str, _: bool) {}
pub(crate) fn timed<F: std::future::Future>(driver: F) -> F {
    driver
}

pub(crate) struct Acquire;

impl Acquire {
    pub(crate) fn start(_: Kind, _: Instant) -> Self {
        Acquire
    }
    pub(crate) fn sent(&mut self) {}
    pub(crate) fn finish(self, _: Outcome, _: u32) {}
}

#[derive(Clone)]
pub(crate) struct Nodes;

impl Nodes {
    pub(crate) fn new<'a>(_: impl IntoIterator<Item = &'a str>) -> Self {
        Nodes
    }
    pub(crate) fn notice(&self, _: usize) {}
}

pub(crate) struct Rounds;

impl Rounds {
    pub(crate) fn new() -> Self {
        Rounds
    }
    pub(crate) fn event(&mut self, _: &Nodes, _: &impl Voted) {}
}
