//! Encoding the core's commands for the `redis` crate, each sized up front.

use redlock_core::Argument;
#[cfg(doc)]
use redlock_core::Request;

/// The command of `words` (name first, [`Request::words`]), sized up
/// front: growing its buffers argument by argument (reallocating at 8, 16,
/// 32, ... bytes) cost more than all the rest of building it.
pub(super) fn command(words: &[Argument<'_>]) -> redis::Cmd {
    let bytes = words
        .iter()
        .map(|word| match word {
            Argument::Bytes(bytes) => bytes.len(),
            Argument::Int(_) => 20,
        })
        .sum();
    let mut command = redis::Cmd::with_capacity(words.len(), bytes);
    for word in words {
        match *word {
            Argument::Bytes(bytes) => command.arg(bytes),
            Argument::Int(number) => command.arg(number),
        };
    }
    command
}
