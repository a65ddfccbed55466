//! A wait limit is waited out: a waiter whose holder releases before the
//! limit gets the lock, every time, also when its next timed retry would
//! start after the limit.

mod support;

use std::future::IntoFuture;
use std::time::Duration;

use redlock_tests::RedisCluster;
use redlock_tokio::Wait;
use support::{builder, client};

/// The holder releases about 200 ms into the waiter's wait. The waiter's
/// timed retries are 10 s apart, so only waiting on (for the release
/// notice, or the last retry before the limit) can get it the lock: a
/// waiter that gave up when its next retry fell past the limit failed at
/// once, 20 of 20. The limit leaves a second of margin for a loaded machine;
/// the decision at 200 ms of 300 ms is asserted in virtual time
/// (`redlock-core/tests/wait_limit.rs`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_gets_a_lock_released_before_its_limit() {
    let cluster = RedisCluster::start(3);
    let holder = client(&cluster).await;
    let waiter = builder(&cluster)
        .retry_delay(Duration::from_secs(10))
        .retry_jitter(Duration::ZERO)
        .build()
        .await
        .unwrap();
    let wait = Wait::AtMost(Duration::from_millis(1_200));
    let mut served = 0;
    for round in 0..20 {
        let guard = holder
            .lock("turn")
            .wait(Wait::No)
            .await
            .expect("a free lock");
        let holder_value = guard.value().clone();
        let waiting = tokio::spawn(waiter.lock("turn").wait(wait).into_future());
        tokio::time::sleep(Duration::from_millis(200)).await;
        guard.release().await;
        let got = waiting.await.unwrap();
        let guard = got.unwrap_or_else(|error| panic!("round {round}: {error}"));
        assert_ne!(guard.value(), &holder_value, "the waiter's own lock");
        served += 1;
        guard.release().await;
    }
    assert_eq!(served, 20);
}
