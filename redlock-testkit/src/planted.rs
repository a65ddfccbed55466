//! A divergence of the nodes from real servers, planted on purpose so that
//! the project's differential test (`tests/tests/kit_differential.rs`)
//! shows it finds one: a release or withdraw that ignores the value and
//! deletes whatever holds the key.

use std::cell::Cell;

use redlock_core::{Command, LockKind, LockValue, Request};

use crate::model::Store;

thread_local! {
    static RELEASE_IGNORES_VALUE: Cell<bool> = const { Cell::new(false) };
}

/// Plants the divergence on this thread (the test's runtime thread, which
/// runs every node of a current-thread runtime), or takes it out.
pub fn plant_release_ignoring_value(on: bool) {
    RELEASE_IGNORES_VALUE.with(|planted| planted.set(on));
}

/// The request a divergent node runs instead of `request`, if it diverges
/// there: an exclusive release carrying the value that holds the key.
pub(crate) fn divergent_release(
    request: &Request,
    store: &mut Store,
    clock: f64,
) -> Option<Request> {
    if !RELEASE_IGNORES_VALUE.with(Cell::get)
        || !matches!(request.command, Command::Release | Command::Withdraw)
        || !matches!(request.kind, LockKind::Exclusive | LockKind::Write { .. })
    {
        return None;
    }
    let held = store.string(request.key().as_bytes(), clock)?;
    Some(Request {
        value: LockValue::from_string(String::from_utf8_lossy(&held).into_owned()),
        ..request.clone()
    })
}
