//! The marketplace of "Redis in Action" (chapter 6), as a workload for
//! locks: its data on one server, and the audit that says whether a run
//! kept it consistent.
//!
//! Sellers list items from their inventories into the market, a sorted set
//! scored by price; buyers take an item off the market, pay its seller and
//! put it in their own inventory. The layout, on the data server:
//!
//! | key | type | what |
//! |---|---|---|
//! | `users:<user>` | hash | field `funds`: the user's money |
//! | `inventory:<user>` | set | the items the user owns |
//! | `market` | sorted set | items for sale, scored by price |
//! | `sales` | hash | item to how many times it was sold (every buy adds 1) |
//! | `tokens` | hash | item to the highest fencing token a write for it carried |
//!
//! Users are `s<i>` (sellers) and `b<j>` (buyers); an item is
//! `<seller>.<n>`, so its seller is in its name. The benchmark
//! (`make bench-market`), the example (`tests/examples/marketplace.rs`) and
//! the real-server test (`tests/tests/marketplace.rs`) share this layout and
//! [`audit`]: money is conserved, no item is sold twice, every item is in
//! exactly one place (a seller's inventory, the market, or one buyer's
//! inventory), and no lock key is left on a lock server ([`lock_keys_left`]).

use std::collections::HashMap;
use std::fmt;

use redis::AsyncCommands;
use redis::aio::MultiplexedConnection;

/// The market's sorted set.
pub const MARKET: &str = "market";
/// Sales per item.
pub const SALES: &str = "sales";
/// The highest fencing token per item.
pub const TOKENS: &str = "tokens";
/// Every buyer's money at the start.
pub const BUYER_FUNDS: i64 = 1_000_000_000_000;

/// `users:<user>`.
pub fn user_key(user: &str) -> String {
    format!("users:{user}")
}

/// `inventory:<user>`.
pub fn inventory_key(user: &str) -> String {
    format!("inventory:{user}")
}

/// The seller's user name: `s<i>`.
pub fn seller(i: usize) -> String {
    format!("s{i}")
}

/// The buyer's user name: `b<j>`.
pub fn buyer(j: usize) -> String {
    format!("b{j}")
}

/// Item `n` of seller `i`: `s<i>.<n>`.
pub fn item(seller_index: usize, n: u64) -> String {
    format!("s{seller_index}.{n}")
}

/// The seller of `item` (the part before the dot).
pub fn seller_of(item: &str) -> &str {
    item.split_once('.').map_or(item, |(seller, _)| seller)
}

/// The write of a purchase where it is fenced: refuses a token smaller
/// than the highest one recorded for the item, else records it and moves
/// the money, the item and the sale in one step.
///
/// - `KEYS`: `tokens`, `market`, `users:<buyer>`, `users:<seller>`,
///   `inventory:<buyer>`, `sales`.
/// - `ARGV`: the item, the token, the price.
///
/// Returns `1` when written, `0` when the token is stale (a later holder
/// of the item's lock wrote first: ours had expired).
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

/// Who trades: how many sellers and buyers.
#[derive(Clone, Debug)]
pub struct Shape {
    /// Number of sellers.
    pub sellers: usize,
    /// Number of buyers.
    pub buyers: usize,
}

/// Creates the users on an empty data server: every seller with no money
/// and an empty inventory, every buyer with [`BUYER_FUNDS`].
pub async fn seed(data: &mut MultiplexedConnection, shape: &Shape) -> redis::RedisResult<()> {
    let mut pipe = redis::pipe();
    for i in 0..shape.sellers {
        pipe.hset(user_key(&seller(i)), "funds", 0).ignore();
    }
    for j in 0..shape.buyers {
        pipe.hset(user_key(&buyer(j)), "funds", BUYER_FUNDS)
            .ignore();
    }
    pipe.query_async(data).await
}

/// Puts items `from..to` of seller `seller_index` in its inventory.
pub async fn stock(
    data: &mut MultiplexedConnection,
    seller_index: usize,
    from: u64,
    to: u64,
) -> redis::RedisResult<()> {
    let items: Vec<String> = (from..to).map(|n| item(seller_index, n)).collect();
    if items.is_empty() {
        return Ok(());
    }
    data.sadd(inventory_key(&seller(seller_index)), items).await
}

/// What a run left on the data server, and whether it is consistent.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Audit {
    /// Items on the market or bought: every listing that took effect.
    pub listed: u64,
    /// Items bought (sold at least once).
    pub bought: u64,
    /// The money all users hold together, and what it must be.
    pub money: i64,
    /// What `money` must be: the buyers' funds at the start.
    pub money_expected: i64,
    /// Items sold more than once.
    pub double_sales: u64,
    /// Items in no place or in more than one (a seller's inventory, the
    /// market, a buyer's inventory), or found where no seller stocked them.
    pub misplaced: u64,
    /// Bought items that are not in exactly one buyer's inventory.
    pub bought_misplaced: u64,
}

impl Audit {
    /// Money is conserved.
    pub fn conserved(&self) -> bool {
        self.money == self.money_expected
    }

    /// Every check passed.
    pub fn passed(&self) -> bool {
        self.conserved()
            && self.double_sales == 0
            && self.misplaced == 0
            && self.bought_misplaced == 0
    }
}

impl fmt::Display for Audit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "money {} (expected {}, {}), double sales {}, items out of place {}, bought items not in exactly one inventory {}",
            self.money,
            self.money_expected,
            if self.conserved() {
                "conserved"
            } else {
                "NOT CONSERVED"
            },
            self.double_sales,
            self.misplaced,
            self.bought_misplaced
        )
    }
}

/// Reads the whole market back and checks it. `stocked[i]` is how many
/// items seller `i` was given ([`stock`] from 0).
pub async fn audit(
    data: &mut MultiplexedConnection,
    shape: &Shape,
    stocked: &[u64],
) -> redis::RedisResult<Audit> {
    let mut audit = Audit {
        money_expected: BUYER_FUNDS * shape.buyers as i64,
        ..Audit::default()
    };
    let users = (0..shape.sellers)
        .map(seller)
        .chain((0..shape.buyers).map(buyer));
    for user in users {
        let funds: Option<i64> = data.hget(user_key(&user), "funds").await?;
        audit.money += funds.unwrap_or(0);
    }
    let sales: HashMap<String, u64> = data.hgetall(SALES).await?;
    audit.bought = sales.len() as u64;
    audit.double_sales = sales.values().filter(|&&count| count > 1).count() as u64;

    // Where each item is: places it was found in, and buyers holding it.
    let mut places: HashMap<String, (u32, u32)> = HashMap::new();
    for i in 0..shape.sellers {
        let items: Vec<String> = data.smembers(inventory_key(&seller(i))).await?;
        for item in items {
            places.entry(item).or_default().0 += 1;
        }
    }
    let market: Vec<String> = data.zrange(MARKET, 0, -1).await?;
    audit.listed = market.len() as u64 + audit.bought;
    for item in market {
        places.entry(item).or_default().0 += 1;
    }
    for j in 0..shape.buyers {
        let items: Vec<String> = data.smembers(inventory_key(&buyer(j))).await?;
        for item in items {
            let place = places.entry(item).or_default();
            place.0 += 1;
            place.1 += 1;
        }
    }
    for (i, &count) in stocked.iter().enumerate() {
        for n in 0..count {
            let found = places.get(&item(i, n)).map_or(0, |place| place.0);
            if found != 1 {
                audit.misplaced += 1;
            }
        }
    }
    // Items found that no seller was given.
    let known = places
        .keys()
        .filter(|item| {
            let Some((seller_name, n)) = item.split_once('.') else {
                return false;
            };
            let index = seller_name
                .strip_prefix('s')
                .and_then(|i| i.parse::<usize>().ok());
            let n = n.parse::<u64>().ok();
            matches!((index, n), (Some(i), Some(n)) if i < stocked.len() && n < stocked[i])
        })
        .count() as u64;
    audit.misplaced += places.len() as u64 - known;
    audit.bought_misplaced = sales
        .keys()
        .filter(|item| places.get(*item).map_or(0, |place| place.1) != 1)
        .count() as u64;
    Ok(audit)
}

/// Lock keys left on a server: the keys matching `pattern` (`*` on a lock
/// server, the lock keys' prefix on the data server) but the ones a lock
/// keeps on purpose (fencing counters, waiters' marks, whose names hold a
/// `\0`).
pub async fn lock_keys_left(
    server: &mut MultiplexedConnection,
    pattern: &str,
) -> redis::RedisResult<u64> {
    let keys: Vec<Vec<u8>> = redis::cmd("KEYS").arg(pattern).query_async(server).await?;
    Ok(keys.iter().filter(|key| !key.contains(&0)).count() as u64)
}
