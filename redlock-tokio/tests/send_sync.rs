//! The handles and futures a user moves across tasks and threads are `Send`
//! (and the handles `Sync` and `Clone`): checked when this compiles.

use redlock_tokio::{Election, Error, Leadership, LockGuard, LossSignal, Redlock, Wait, core};

fn assert_send_sync_clone<T: Send + Sync + Clone>() {}
fn assert_send<T: Send>(_: &T) {}

#[test]
fn handles_are_send_and_sync() {
    assert_send_sync_clone::<Redlock>();
    assert_send_sync_clone::<Error>();
    assert_send_sync_clone::<LossSignal>();
    assert_send_sync_clone::<Election>();
    assert_send_sync_clone::<Leadership>();
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<LockGuard>();
}

#[allow(dead_code, clippy::diverging_sub_expression, unreachable_code)]
fn futures_are_send(
    redlock: Redlock,
    guard: LockGuard,
    election: Election,
    mut leadership: Leadership,
) {
    use std::future::IntoFuture;
    assert_send(&redlock.lock("r").into_future());
    assert_send(
        &redlock
            .lock("r")
            .ttl(std::time::Duration::from_secs(1))
            .wait(Wait::No)
            .into_future(),
    );
    assert_send(&redlock.release_value("r", &core::LockValue::from_string("v")));
    assert_send(&redlock.lock("r").run(async |lock| {
        tokio::task::yield_now().await;
        Ok(lock.validity())
    }));
    assert_send(&redlock.inspect("r"));
    assert_send(&guard.lost());
    assert_send(&guard.release());
    assert_send(&election.campaign());
    assert_send(&election.leader());
    assert_send(&election.run(|_| async {}, |_| {}));
    assert_send(&leadership.lost());
    assert_send(&leadership.proclaim("v"));
    assert_send(&leadership.resign());
}

/// Work under `run` can be spawned: the future is `Send + 'static`.
#[allow(dead_code)]
fn run_can_be_spawned(redlock: Redlock) {
    tokio::spawn(async move {
        redlock
            .lock("r")
            .run(async |lock| {
                tokio::task::yield_now().await;
                Ok(lock.fencing_token())
            })
            .await
    });
}
