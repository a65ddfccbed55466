//! The examples of the guide's page `docs/testing.md`, run as they are
//! printed there (the last test checks that the page still prints them
//! word for word). No server: each runs minutes of virtual time in
//! milliseconds (`cargo nextest run -p redlock-testkit --test guide`
//! prints each one's wall time).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use redlock_testkit::Quorum;
use redlock_tokio::Wait;

#[tokio::test(start_paused = true)]
async fn the_nightly_export_stops_when_its_lock_is_lost() {
    let quorum = Quorum::new(3);
    let redlock = quorum
        .client()
        .ttl(Duration::from_secs(10))
        .build()
        .await
        .unwrap();
    // Two of the three nodes stop (SIGSTOP) 30 s into the export.
    quorum.at(Duration::from_secs(30), |q| {
        q.node(0).pause();
        q.node(1).pause();
    });
    let exported = redlock
        .lock("nightly-export")
        .run(async |_lock| {
            tokio::time::sleep(Duration::from_secs(600)).await; // the export
            Ok(())
        })
        .await;
    let error = exported.unwrap_err();
    assert!(error.is_lock_lost(), "{error}");
    // Stopped within a TTL of the pause, not after ten minutes.
    assert!(quorum.elapsed() < Duration::from_secs(41));
}

#[tokio::test(start_paused = true)]
async fn a_new_leader_takes_over_while_the_old_leaders_nodes_are_paused() {
    let quorum = Quorum::new(3);
    let (lease, deadline, period) = (
        Duration::from_secs(10),
        Duration::from_secs(6),
        Duration::from_secs(1),
    );
    let old_client = quorum.client().build().await.unwrap();
    let new_client = quorum.client().build().await.unwrap();
    let old = old_client
        .election("scheduler")
        .timing(lease, deadline, period);
    let new = new_client
        .election("scheduler")
        .timing(lease, deadline, period);

    let old_leader = old.campaign().await.unwrap();
    // The old leader's renewals stop reaching two nodes; they come back later.
    quorum.node(0).pause();
    quorum.node(1).pause();
    quorum.at(Duration::from_secs(20), |q| {
        q.node(0).resume();
        q.node(1).resume();
    });
    let campaign = tokio::spawn(async move { new.wait(Wait::Forever).campaign().await });
    old_leader.lost().await;
    let stepped_down = quorum.elapsed();
    let new_leader = campaign.await.unwrap().unwrap();
    let elected = quorum.elapsed_at(new_leader.valid_until()) - lease;

    assert!(stepped_down <= elected, "{stepped_down:?} > {elected:?}");
    assert!(new_leader.term() > old_leader.term());
    assert!(quorum.history().overlaps().is_empty());
}

#[tokio::test(start_paused = true)]
async fn the_export_pool_never_runs_more_than_three() {
    let quorum = Quorum::new(3);
    let running = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..8 {
        // Waiters wake on release notices: a long retry delay saves wall time.
        let redlock = quorum
            .client()
            .retry_delay(Duration::from_secs(1))
            .build()
            .await
            .unwrap();
        let (running, most) = (Arc::clone(&running), Arc::clone(&most));
        workers.spawn(async move {
            redlock
                .lock("exports")
                .permits(3)
                .wait(Wait::Forever)
                .run(async |_permit| {
                    let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_secs(30)).await; // one export
                    running.fetch_sub(1, Ordering::SeqCst);
                    Ok(())
                })
                .await
        });
    }
    // A node restarts (with its data) in the middle of it.
    quorum.at(Duration::from_secs(45), |q| q.node(2).restart());
    while let Some(worker) = workers.join_next().await {
        worker.unwrap().unwrap();
    }
    assert_eq!(most.load(Ordering::SeqCst), 3);
    assert!(quorum.history().overlaps().is_empty());
}

/// The page prints the three examples above word for word.
#[test]
fn the_guide_page_prints_these_examples() {
    let page = include_str!("../../docs/testing.md");
    let source = include_str!("guide.rs");
    for name in [
        "the_nightly_export_stops_when_its_lock_is_lost",
        "a_new_leader_takes_over_while_the_old_leaders_nodes_are_paused",
        "the_export_pool_never_runs_more_than_three",
    ] {
        let head = format!("#[tokio::test(start_paused = true)]\nasync fn {name}()");
        let start = source.find(&head).expect("the example is in this file");
        let end = start + source[start..].find("\n}\n").expect("its end") + 3;
        assert!(
            page.contains(&source[start..end]),
            "docs/testing.md does not print {name} as this file runs it"
        );
    }
}
