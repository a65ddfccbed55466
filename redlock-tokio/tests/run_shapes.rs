//! The shapes in which users write work under a lock or a leadership, each
//! as they wrote it: no type annotation on the work's error. Each one is
//! checked twice: it compiles (the point: `run`'s error type is inferred),
//! and it runs on the kit's in-memory nodes with the result it names.

use std::error::Error as StdError;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use redlock_testkit::Quorum;
use redlock_tokio::{Error, Redlock, RunError, Wait};

/// An error type of the user's own, not convertible from ours.
#[derive(Debug, PartialEq)]
struct Stale(u64);

impl std::fmt::Display for Stale {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "stale at token {}", self.0)
    }
}

impl StdError for Stale {}

async fn io_step(fail: bool) -> std::io::Result<u64> {
    if fail {
        Err(std::io::Error::other("disk full"))
    } else {
        Ok(7)
    }
}

async fn client(quorum: &Quorum) -> Redlock {
    quorum.client().build().await.expect("a client")
}

/// `run`'s result returned straight out of a function.
async fn returned_straight(redlock: &Redlock) -> Result<u64, RunError> {
    redlock.lock("straight").run(async |_lock| Ok(42)).await
}

/// Read with `?` in a function of `Box<dyn Error>`, the closure using `?`
/// on an I/O error and returning `Err("...".into())`.
async fn question_marks(redlock: &Redlock, fail: bool) -> Result<u64, Box<dyn StdError>> {
    let rows = redlock
        .lock("marks")
        .fencing()
        .run(async |lock| {
            if lock.fencing_token().is_none() {
                return Err("a fenced lock without a token".into());
            }
            Ok(io_step(fail).await?)
        })
        .await?;
    Ok(rows)
}

#[tokio::test(start_paused = true)]
async fn a_result_returned_straight_or_read_with_question_marks() {
    let quorum = Quorum::new(3);
    let redlock = client(&quorum).await;
    assert_eq!(returned_straight(&redlock).await.expect("granted"), 42);
    assert_eq!(question_marks(&redlock, false).await.expect("granted"), 7);
    let failed = question_marks(&redlock, true).await.expect_err("disk full");
    let run = failed.downcast_ref::<RunError>().expect("run's error");
    let io = run
        .as_work()
        .and_then(|work| work.downcast_ref::<std::io::Error>());
    assert_eq!(io.map(ToString::to_string).as_deref(), Some("disk full"));
}

#[tokio::test(start_paused = true)]
async fn a_result_bound_to_a_name_and_matched() {
    let quorum = Quorum::new(3);
    let redlock = client(&quorum).await;
    let other = client(&quorum).await;
    let held = other.lock("bound").await.expect("free");
    // Not returned from a function, and no annotation: `Ok(..)` alone.
    let result = redlock
        .lock("bound")
        .wait(Wait::No)
        .run(async |_lock| Ok("never"))
        .await;
    match result {
        Err(RunError::Lock(error)) => assert!(error.is_held_by_other(), "{error}"),
        other => panic!("refused, got {other:?}"),
    }
    held.release().every_node().await;
    let result = redlock.lock("bound").run(async |_lock| Ok("ran")).await;
    assert_eq!(result.expect("free"), "ran");
}

#[tokio::test(start_paused = true)]
async fn the_users_own_error_comes_back_typed() {
    let quorum = Quorum::new(3);
    let redlock = client(&quorum).await;
    let result = redlock
        .lock("own")
        .fencing()
        .run(async |lock| {
            let token = lock.fencing_token().expect("fenced");
            if token > 0 {
                return Err(Stale(token).into());
            }
            Ok(())
        })
        .await;
    let error = result.expect_err("stale");
    assert!(!error.is_lock_lost() && !error.is_held_by_other());
    let stale = error
        .as_work()
        .and_then(|work| work.downcast_ref::<Stale>());
    assert!(matches!(stale, Some(Stale(token)) if *token > 0), "{error}");
    // `Display` is the work's own.
    assert!(error.to_string().starts_with("stale at token"), "{error}");
}

#[tokio::test(start_paused = true)]
async fn the_locks_own_errors_inside_the_work_take_a_question_mark() {
    let quorum = Quorum::new(3);
    let redlock = client(&quorum).await;
    let result = redlock
        .lock("outer")
        .run(async |_outer| {
            // Another lock inside the work: its `Error` takes a `?` too.
            let inner = redlock.lock("inner").wait(Wait::No).await?;
            inner.release().await;
            Ok(())
        })
        .await;
    result.expect("both free");
    // The inner refusal comes back as the work's error, boxed.
    let _holder = redlock.lock("inner").await.expect("free");
    let result = redlock
        .lock("outer")
        .run(async |_outer| {
            let _inner = redlock.lock("inner").wait(Wait::No).await?;
            Ok(())
        })
        .await;
    let error = result.expect_err("inner held");
    let inner = error
        .as_work()
        .and_then(|work| work.downcast_ref::<Error>());
    assert!(inner.is_some_and(Error::is_held_by_other), "{error}");
}

#[tokio::test(start_paused = true)]
async fn a_run_spawned_on_a_task_with_a_move_closure() {
    let quorum = Quorum::new(3);
    let redlock = client(&quorum).await;
    let ran = Arc::new(AtomicU32::new(0));
    let count = Arc::clone(&ran);
    let task = tokio::spawn(async move {
        redlock
            .lock("spawned")
            .run(async move |_lock| {
                count.fetch_add(1, Ordering::SeqCst);
                Ok(())
            })
            .await
    });
    task.await.expect("not panicked").expect("granted");
    assert_eq!(ran.load(Ordering::SeqCst), 1);
}

/// `Election::run` in its two shapes: an async closure, and a closure that
/// returns an `async move` block. The work returns by itself, so `run`
/// resigns and returns.
#[tokio::test(start_paused = true)]
async fn an_elections_work_as_an_async_closure_or_a_closure_of_a_block() {
    let quorum = Quorum::new(3);
    let redlock = client(&quorum).await;
    let terms = Arc::new(AtomicU32::new(0));
    let seen = Arc::clone(&terms);
    redlock
        .election("shapes-async")
        .run(
            async |leadership| {
                assert!(leadership.term() > 0);
                seen.fetch_add(1, Ordering::SeqCst);
            },
            |loss| panic!("not lost: {loss}"),
        )
        .await
        .expect("elected");
    let seen = Arc::clone(&terms);
    let mut stops = 0;
    redlock
        .election("shapes-block")
        .run(
            |leadership| {
                let seen = Arc::clone(&seen);
                async move {
                    assert!(leadership.term() > 0);
                    seen.fetch_add(1, Ordering::SeqCst);
                }
            },
            |_loss| stops += 1,
        )
        .await
        .expect("elected");
    assert_eq!((terms.load(Ordering::SeqCst), stops), (2, 0));
}

/// The blocking client's shapes: the same, in real time (its runtime is its
/// own, on its own thread).
#[cfg(feature = "blocking")]
mod blocking {
    use super::*;
    use redlock_tokio::blocking;

    fn io_step(fail: bool) -> std::io::Result<u64> {
        if fail {
            Err(std::io::Error::other("disk full"))
        } else {
            Ok(7)
        }
    }

    fn client(quorum: &Quorum) -> blocking::Redlock {
        quorum.client().build_blocking().expect("a client")
    }

    fn returned_straight(redlock: &blocking::Redlock) -> Result<u64, RunError> {
        redlock.lock("straight").run(|_lock| Ok(42))
    }

    fn question_marks(redlock: &blocking::Redlock, fail: bool) -> Result<u64, Box<dyn StdError>> {
        let rows = redlock.lock("marks").fencing().run(|lock| {
            if lock.fencing_token().is_none() {
                return Err("a fenced lock without a token".into());
            }
            Ok(io_step(fail)?)
        })?;
        Ok(rows)
    }

    #[test]
    fn blocking_shapes_infer_and_run() {
        let quorum = Quorum::new(3);
        let redlock = client(&quorum);
        assert_eq!(returned_straight(&redlock).expect("granted"), 42);
        assert_eq!(question_marks(&redlock, false).expect("granted"), 7);
        let failed = question_marks(&redlock, true).expect_err("disk full");
        assert_eq!(failed.to_string(), "disk full");

        // Bound to a name and matched; the user's own error, typed.
        let result = redlock.lock("own").fencing().run(|lock| {
            let token = lock.fencing_token().expect("fenced");
            if token > 0 {
                return Err(Stale(token).into());
            }
            Ok(())
        });
        let error = result.expect_err("stale");
        assert!(
            error
                .as_work()
                .is_some_and(|work| work.downcast_ref::<Stale>().is_some()),
            "{error}"
        );

        // A lock's error inside the work takes a `?`.
        let result = redlock.lock("outer").run(|_outer| {
            redlock.lock("inner").wait(Wait::No).acquire()?.release()?;
            Ok(())
        });
        result.expect("both free");

        // From another thread, with a move closure.
        let moved = redlock.clone();
        let ran = std::thread::spawn(move || moved.lock("thread").run(move |_lock| Ok(1)))
            .join()
            .expect("not panicked");
        assert_eq!(ran.expect("granted"), 1);
    }

    #[test]
    fn a_blocking_elections_work_as_a_closure() {
        let quorum = Quorum::new(3);
        let redlock = client(&quorum);
        let mut terms = Vec::new();
        redlock
            .election("shapes")
            .run(
                |leadership| terms.push(leadership.term()),
                |loss| panic!("not lost: {loss}"),
            )
            .expect("elected");
        assert_eq!(terms.len(), 1);
    }
}
