//! Encoding the core's requests as Redis commands, each sized up front.

use redlock_core::{Argument, Request};

/// The plain command of `words` (name first), sized up front as
/// [`script_call`] is.
pub(super) fn plain(words: &[Argument<'_>]) -> redis::Cmd {
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

/// `EVALSHA sha` or `EVAL source` (`verb`, `script`) for `request`.
pub(super) fn script_call(verb: &str, script: &str, request: &Request) -> redis::Cmd {
    // Sized up front: growing the command's buffers argument by argument
    // (reallocating at 8, 16, 32, ... bytes) cost more than all the rest of
    // building it.
    let arguments = request.arguments().count();
    let bytes = verb.len()
        + script.len()
        + 3 // the key count
        + request.keys.iter().map(|key| key.as_bytes().len()).sum::<usize>()
        + request
            .arguments()
            .map(|argument| match argument {
                Argument::Bytes(bytes) => bytes.len(),
                Argument::Int(_) => 20,
            })
            .sum::<usize>();
    let mut call = redis::Cmd::with_capacity(3 + request.keys.len() + arguments, bytes);
    call.arg(verb).arg(script).arg(request.keys.len());
    for key in request.keys.iter() {
        call.arg(key.as_bytes());
    }
    for argument in request.arguments() {
        match argument {
            Argument::Bytes(bytes) => call.arg(bytes),
            Argument::Int(number) => call.arg(number),
        };
    }
    call
}
