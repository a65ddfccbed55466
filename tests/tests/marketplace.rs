//! The marketplace example's purchase under fenced item locks keeps the
//! market consistent on real servers, and the audit that says so catches a
//! purchase made without its lock.
//!
//! Behaviour only: how many items were traded is printed, never asserted.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redlock_tests::market::{self, Shape};
use redlock_tests::{RedisCluster, RedisNode};
use redlock_tokio::Redlock;
use tokio::sync::Barrier;

#[path = "../examples/marketplace.rs"]
#[allow(dead_code, unreachable_pub)]
mod example;

async fn connect(url: &str) -> MultiplexedConnection {
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_item_locks_keep_the_market_consistent() {
    // The example carries its own copy of the script, for users to copy:
    // the bench's and the audit's layout must be the same.
    assert_eq!(example::FENCED_BUY, market::FENCED_BUY);

    let masters = RedisCluster::start(3);
    let data = RedisNode::start();
    let redlock = Redlock::connect(masters.urls()).await.unwrap();
    let shape = Shape {
        sellers: 3,
        buyers: 4,
    };
    let stock = 10_000;
    let mut conn = connect(&data.url()).await;
    market::seed(&mut conn, &shape).await.unwrap();
    for i in 0..shape.sellers {
        market::stock(&mut conn, i, 0, stock).await.unwrap();
    }
    let trades = example::trade(
        &redlock,
        &data.url(),
        shape.sellers,
        shape.buyers,
        stock,
        Duration::from_millis(1_500),
    )
    .await
    .unwrap();
    redlock.shutdown().await;
    println!("{trades:?}");
    assert!(trades.listed > 0, "the sellers listed nothing: {trades:?}");

    let audit = market::audit(&mut conn, &shape, &[stock; 3]).await.unwrap();
    assert!(audit.passed(), "{audit}");
    assert_eq!(audit.listed, trades.listed, "{audit}");
    assert_eq!(audit.bought, trades.bought, "{audit}");
    for master in masters.nodes() {
        let mut lock_server = connect(&master.url()).await;
        let left = market::lock_keys_left(&mut lock_server, "*").await.unwrap();
        assert_eq!(left, 0, "lock keys left on {}", master.url());
    }
}

/// The planted race: two buyers read the same item on sale, then both
/// write their purchase, with no lock between the read and the write.
async fn buy_without_the_lock(
    mut data: MultiplexedConnection,
    buyer: String,
    item: String,
    both_read: Arc<Barrier>,
) {
    let buyer_key = market::user_key(&buyer);
    let (listed, funds): (Option<f64>, Option<i64>) = redis::pipe()
        .zscore(market::MARKET, &item)
        .hget(&buyer_key, "funds")
        .query_async(&mut data)
        .await
        .unwrap();
    both_read.wait().await;
    let price = listed.expect("on sale when read") as i64;
    assert!(funds.unwrap() >= price);
    let () = redis::pipe()
        .atomic()
        .hincr(market::user_key(market::seller_of(&item)), "funds", price)
        .hincr(&buyer_key, "funds", -price)
        .sadd(market::inventory_key(&buyer), &item)
        .zrem(market::MARKET, &item)
        .hincr(market::SALES, &item, 1)
        .query_async(&mut data)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_catches_a_purchase_without_its_lock() {
    let masters = RedisCluster::start(3);
    let data = RedisNode::start();
    let redlock = Redlock::connect(masters.urls()).await.unwrap();
    let shape = Shape {
        sellers: 1,
        buyers: 2,
    };
    let mut conn = connect(&data.url()).await;
    market::seed(&mut conn, &shape).await.unwrap();
    market::stock(&mut conn, 0, 0, 1).await.unwrap();
    let item = market::item(0, 0);
    assert!(
        example::list_item(&mut conn, &market::seller(0), &item, 250)
            .await
            .unwrap()
    );
    let clean = market::audit(&mut conn, &shape, &[1]).await.unwrap();
    assert!(clean.passed(), "{clean}");

    let both_read = Arc::new(Barrier::new(2));
    let buyers: Vec<_> = (0..2)
        .map(|j| {
            let both_read = Arc::clone(&both_read);
            let item = item.clone();
            let url = data.url();
            tokio::spawn(async move {
                buy_without_the_lock(connect(&url).await, market::buyer(j), item, both_read).await;
            })
        })
        .collect();
    for buyer in buyers {
        buyer.await.unwrap();
    }
    let audit = market::audit(&mut conn, &shape, &[1]).await.unwrap();
    println!("after the planted race: {audit}");
    assert!(!audit.passed(), "the audit missed a double sale: {audit}");
    assert_eq!(audit.double_sales, 1, "{audit}");
    assert_eq!(audit.bought_misplaced, 1, "in two inventories: {audit}");
    assert_eq!(audit.misplaced, 1, "in two places: {audit}");
    // The seller was paid twice and each buyer paid once: money alone
    // cannot see a double sale, which is why the audit counts sales.
    assert!(audit.conserved(), "{audit}");
    redlock.shutdown().await;
}
