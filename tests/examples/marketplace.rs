//! A purchase in a game's marketplace ("Redis in Action", chapter 6) under a
//! fine-grained, fenced lock: one lock per item, held on a majority of
//! three masters, and a data server that refuses a write whose fencing
//! token is older than the item's last.
//!
//! The part to copy is `purchase` and its script (and `list_item`, the
//! classic listing, which needs no lock): a purchase locks the item, reads its price and the buyer's funds, decides,
//! and writes the money, the item and the sale in one script that first
//! checks the token. A holder paused past its lock's validity (a GC, a
//! swapped page) then cannot overwrite the next holder's purchase: its
//! token is smaller, and the write is refused.
//!
//! `main` starts three lock masters and a data server on loopback (the
//! test harness's `redis-server`, or `$REDLOCK_SERVER_BIN`), lets 3 sellers
//! and 3 buyers trade for 2 s (`MARKET_SECONDS`), then audits the market:
//! money conserved, no item sold twice, every item in one place, no lock
//! key left. Run it with
//! `cargo run -p redlock-tests --example marketplace`; `make bench-market`
//! measures it against `WATCH`/`MULTI`/`EXEC` and a lock on the whole
//! market. The real-server test `tests/tests/marketplace.rs` runs the same
//! code.

use std::sync::LazyLock;
use std::time::{Duration, Instant};

use redis::Script;
use redis::aio::MultiplexedConnection;
use redlock_tokio::{BoxError, Redlock, Wait};

/// The write of a purchase: refuses a token smaller than the highest one
/// recorded for the item (`0`), else records it and moves the money, the
/// item and the sale at once (`1`).
///
/// `KEYS`: `tokens`, `market`, `users:<buyer>`, `users:<seller>`,
/// `inventory:<buyer>`, `sales`; `ARGV`: item, token, price.
pub const FENCED_BUY: &str = r#"local last = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
local token = tonumber(ARGV[2])
if token < last then
  return 0
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
local price = tonumber(ARGV[3])
redis.call('HINCRBY', KEYS[4], 'funds', price)
redis.call('HINCRBY', KEYS[3], 'funds', -price)
redis.call('SADD', KEYS[5], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('HINCRBY', KEYS[6], ARGV[1], 1)
return 1
"#;

static BUY: LazyLock<Script> = LazyLock::new(|| Script::new(FENCED_BUY));

/// How long an item's lock lives unless kept alive; `run` extends it while
/// the purchase runs, and a lost lock cancels the purchase.
const ITEM_LOCK_TTL: Duration = Duration::from_secs(5);
/// How long a purchase waits for an item someone else is selling or buying.
const ITEM_LOCK_WAIT: Duration = Duration::from_secs(2);

/// An item is `<seller>.<n>`: its seller is in its name.
fn seller_of(item: &str) -> &str {
    item.split_once('.').map_or(item, |(seller, _)| seller)
}

/// How a purchase ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Purchase {
    /// Paid for, and in the buyer's inventory.
    Bought,
    /// The item was sold, or repriced, before we held its lock; or the
    /// buyer cannot pay.
    Gone,
    /// The data server refused our token: our lock had expired and a later
    /// holder wrote first. Nothing was written.
    Refused,
}

/// Puts `item` of `seller` on the market at `price`: "Redis in Action"'s
/// `list_item`, `WATCH` on the seller's inventory then `MULTI`/`EXEC`. No
/// lock: buyers cannot see the item before it is listed, and only its
/// seller lists it. `false` when the item is not in the inventory.
pub async fn list_item(
    data: &mut MultiplexedConnection,
    seller: &str,
    item: &str,
    price: u64,
) -> Result<bool, BoxError> {
    let inventory = format!("inventory:{seller}");
    loop {
        let (owned,): (bool,) = redis::pipe()
            .cmd("WATCH")
            .arg(&inventory)
            .ignore()
            .sismember(&inventory, item)
            .query_async(data)
            .await?;
        if !owned {
            redis::cmd("UNWATCH").exec_async(data).await?;
            return Ok(false);
        }
        let committed: redis::Value = redis::pipe()
            .atomic()
            .zadd("market", item, price)
            .ignore()
            .srem(&inventory, item)
            .ignore()
            .query_async(data)
            .await?;
        if committed != redis::Value::Nil {
            return Ok(true); // else the inventory changed under the WATCH: again
        }
    }
}

/// Buys `item`, seen on the market at `price`, for `buyer`: lock the item,
/// read, decide, write with the lock's fencing token.
pub async fn purchase(
    redlock: &Redlock,
    data: &mut MultiplexedConnection,
    buyer: &str,
    item: &str,
    price: u64,
) -> Result<Purchase, BoxError> {
    let purchase = redlock
        .lock(format!("lock:{item}"))
        .fencing()
        .ttl(ITEM_LOCK_TTL)
        .wait(Wait::AtMost(ITEM_LOCK_WAIT))
        .run(async |lock| {
            let buyer_key = format!("users:{buyer}");
            let (listed, funds): (Option<f64>, Option<i64>) = redis::pipe()
                .zscore("market", item)
                .hget(&buyer_key, "funds")
                .query_async(data)
                .await?;
            let on_sale = listed.is_some_and(|listed| listed as u64 == price);
            if !on_sale || funds.unwrap_or(0) < price as i64 {
                return Ok(Purchase::Gone);
            }
            let token = lock.fencing_token().expect("a fenced lock has a token");
            let written: i64 = BUY
                .key("tokens")
                .key("market")
                .key(&buyer_key)
                .key(format!("users:{}", seller_of(item)))
                .key(format!("inventory:{buyer}"))
                .key("sales")
                .arg(item)
                .arg(token)
                .arg(price)
                .invoke_async(data)
                .await?;
            Ok(if written == 1 {
                Purchase::Bought
            } else {
                Purchase::Refused
            })
        })
        .await?;
    Ok(purchase)
}

// ---------------------------------------------------------------------------
// The rest drives the two functions above: sellers and buyers on loopback.

use redlock_tests::market;

/// What the traders did.
#[derive(Clone, Copy, Debug, Default)]
pub struct Trades {
    /// Items put on the market.
    pub listed: u64,
    /// Purchases made.
    pub bought: u64,
    /// Purchases that found the item sold (or repriced) first.
    pub gone: u64,
    /// Purchases the data server refused for a stale token.
    pub refused: u64,
}

/// `sellers` sellers (each given `stock` items) and `buyers` buyers trade
/// on a seeded data server for `length`, each on its own connection.
pub async fn trade(
    redlock: &Redlock,
    data_url: &str,
    sellers: usize,
    buyers: usize,
    stock: u64,
    length: Duration,
) -> Result<Trades, BoxError> {
    let client = redis::Client::open(data_url)?;
    let deadline = Instant::now() + length;
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..sellers {
        let mut data = client.get_multiplexed_async_connection().await?;
        tasks.spawn(async move {
            let mut trades = Trades::default();
            let seller = market::seller(i);
            for n in 0..stock {
                if Instant::now() >= deadline {
                    break;
                }
                let price = 1 + (n * 7919 + i as u64 * 104_729) % 1_000;
                if list_item(&mut data, &seller, &market::item(i, n), price).await? {
                    trades.listed += 1;
                }
            }
            Ok::<_, BoxError>(trades)
        });
    }
    for j in 0..buyers {
        let (redlock, mut data) = (
            redlock.clone(),
            client.get_multiplexed_async_connection().await?,
        );
        tasks.spawn(async move {
            let mut trades = Trades::default();
            let buyer = market::buyer(j);
            while Instant::now() < deadline {
                let picked: Vec<(String, f64)> = redis::cmd("ZRANDMEMBER")
                    .arg("market")
                    .arg(1)
                    .arg("WITHSCORES")
                    .query_async(&mut data)
                    .await?;
                let Some((item, price)) = picked.into_iter().next() else {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    continue;
                };
                match purchase(&redlock, &mut data, &buyer, &item, price as u64).await? {
                    Purchase::Bought => trades.bought += 1,
                    Purchase::Gone => trades.gone += 1,
                    Purchase::Refused => trades.refused += 1,
                }
            }
            Ok::<_, BoxError>(trades)
        });
    }
    let mut total = Trades::default();
    while let Some(done) = tasks.join_next().await {
        let trades = done??;
        total.listed += trades.listed;
        total.bought += trades.bought;
        total.gone += trades.gone;
        total.refused += trades.refused;
    }
    Ok(total)
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let seconds: f64 = std::env::var("MARKET_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2.0);
    let masters = redlock_tests::RedisCluster::start(3);
    let data = redlock_tests::RedisNode::start();
    let redlock = Redlock::connect(masters.urls()).await?;
    let shape = market::Shape {
        sellers: 3,
        buyers: 3,
    };
    let stock = 100_000;
    let mut conn = redis::Client::open(data.url())?
        .get_multiplexed_async_connection()
        .await?;
    market::seed(&mut conn, &shape).await?;
    for i in 0..shape.sellers {
        market::stock(&mut conn, i, 0, stock).await?;
    }
    let trades = trade(
        &redlock,
        &data.url(),
        shape.sellers,
        shape.buyers,
        stock,
        Duration::from_secs_f64(seconds),
    )
    .await?;
    redlock.shutdown().await;
    println!(
        "{seconds} s: {} listed, {} bought, {} found sold, {} refused for a stale token",
        trades.listed, trades.bought, trades.gone, trades.refused
    );
    let audit = market::audit(&mut conn, &shape, &[stock; 3]).await?;
    let mut keys_left = 0;
    for url in masters.urls() {
        let mut master = redis::Client::open(url)?
            .get_multiplexed_async_connection()
            .await?;
        keys_left += market::lock_keys_left(&mut master, "*").await?;
    }
    println!("audit: {audit}; lock keys left: {keys_left}");
    if !audit.passed() || keys_left > 0 {
        return Err("the market is inconsistent".into());
    }
    Ok(())
}
