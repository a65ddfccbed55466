//! How a listing and a purchase keep the market consistent: Redis's own
//! optimistic transactions, a lock (one on the whole market, or one per
//! item) held on N masters with this library, the classic single-server
//! lock written by hand, or nothing at all.
//!
//! Every strategy does the same work: a purchase reads the item's price
//! and the buyer's funds, decides in the client, then writes the money,
//! the item and the sale in one `MULTI`/`EXEC` (or, fenced, one script that
//! first refuses a stale token). Only what guards the read-decide-write
//! changes. A listing takes the market's lock where there is one (a coarse
//! lock serialises everything); every other strategy lists the classic way
//! (`WATCH` on the seller's own inventory), as an item nobody can buy yet
//! needs no lock of its own.

use std::future::Future;
use std::task::Poll;
use std::time::{Duration, Instant};

use rand::RngExt;
use redis::aio::MultiplexedConnection;
use redis::{Script, Value};
use redlock_tests::market::{
    FENCED_BUY, MARKET, SALES, TOKENS, inventory_key, seller_of, user_key,
};
use redlock_tokio::{LockGuard, Redlock, Wait};

/// One way of guarding the market's writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Strategy {
    /// `WATCH` the market and the buyer, read, `MULTI`/`EXEC`; an aborted
    /// `EXEC` is a retry, until it commits.
    Watch,
    /// No guard at all: read, decide, write. Unsafe (two buyers can buy one
    /// item): the ceiling.
    NoLock,
    /// The classic lock on the data server itself, by hand: `SET NX PX`
    /// (retried 1 ms apart, as "Redis in Action" does), compare-and-delete
    /// to release. One lock on the whole market.
    SingleCoarse,
    /// The same, one lock per item.
    SingleFine,
    /// This library, one lock on the whole market, over N masters.
    Coarse(usize),
    /// This library, one lock per item, over N masters.
    Fine(usize),
    /// One lock per item with a fencing token, over N masters; the data
    /// server's write refuses a token smaller than the item's last.
    Fenced(usize),
    /// The raw-command floor of [`Fine`](Strategy::Fine): Redlock written
    /// by hand with the `redis` crate, `SET NX PX` sent to the N masters at
    /// once and granted on a majority (retried 1 ms apart; the granted
    /// ones given back), compare-and-delete on each to release. No
    /// validity check, no waiting by notices: the commands a Redlock
    /// cannot do without, and nothing else.
    RawFine(usize),
}

impl Strategy {
    /// The default run's rows, in table order.
    pub(crate) const DEFAULT: [Strategy; 12] = [
        Strategy::Watch,
        Strategy::NoLock,
        Strategy::SingleCoarse,
        Strategy::SingleFine,
        Strategy::Coarse(1),
        Strategy::Coarse(3),
        Strategy::Coarse(5),
        Strategy::Fine(1),
        Strategy::Fine(3),
        Strategy::Fine(5),
        Strategy::RawFine(3),
        Strategy::Fenced(3),
    ];

    /// Its name on the command line and in the tables: `watch`, `none`,
    /// `single-coarse`, `single-fine`, `coarse-3`, `fine-3`, `fenced-3`.
    pub(crate) fn name(self) -> String {
        match self {
            Strategy::Watch => "watch".to_owned(),
            Strategy::NoLock => "none".to_owned(),
            Strategy::SingleCoarse => "single-coarse".to_owned(),
            Strategy::SingleFine => "single-fine".to_owned(),
            Strategy::Coarse(n) => format!("coarse-{n}"),
            Strategy::Fine(n) => format!("fine-{n}"),
            Strategy::Fenced(n) => format!("fenced-{n}"),
            Strategy::RawFine(n) => format!("raw-fine-{n}"),
        }
    }

    pub(crate) fn parse(name: &str) -> Option<Self> {
        let (kind, nodes) = match name.rsplit_once('-') {
            Some((kind, n)) if n.chars().all(|c| c.is_ascii_digit()) => {
                (kind, n.parse::<usize>().ok()?)
            }
            _ => (name, 0),
        };
        match (kind, nodes) {
            ("watch", 0) => Some(Strategy::Watch),
            ("none", 0) => Some(Strategy::NoLock),
            ("single-coarse", 0) => Some(Strategy::SingleCoarse),
            ("single-fine", 0) => Some(Strategy::SingleFine),
            ("coarse", n @ (1 | 3 | 5)) => Some(Strategy::Coarse(n)),
            ("fine", n @ (1 | 3 | 5)) => Some(Strategy::Fine(n)),
            ("fenced", n @ (1 | 3 | 5)) => Some(Strategy::Fenced(n)),
            ("raw-fine", n @ (1 | 3 | 5)) => Some(Strategy::RawFine(n)),
            _ => None,
        }
    }

    /// What it is, for the tables.
    pub(crate) fn describe(self) -> String {
        match self {
            Strategy::Watch => "WATCH/MULTI/EXEC, retried".to_owned(),
            Strategy::NoLock => "no lock (unsafe, the ceiling)".to_owned(),
            Strategy::SingleCoarse => "market lock, SET NX on the data server".to_owned(),
            Strategy::SingleFine => "item locks, SET NX on the data server".to_owned(),
            Strategy::Coarse(n) => format!("market lock, Redlock over {n}"),
            Strategy::Fine(n) => format!("item locks, Redlock over {n}"),
            Strategy::Fenced(n) => format!("item locks + fencing, Redlock over {n}"),
            Strategy::RawFine(n) => format!("item locks, hand-written Redlock over {n}"),
        }
    }

    /// The lock masters this library's client uses, if any.
    pub(crate) fn masters(self) -> Option<usize> {
        match self {
            Strategy::Coarse(n) | Strategy::Fine(n) | Strategy::Fenced(n) => Some(n),
            _ => None,
        }
    }

    /// The lock masters the hand-written Redlock uses, if any.
    pub(crate) fn raw_masters(self) -> Option<usize> {
        match self {
            Strategy::RawFine(n) => Some(n),
            _ => None,
        }
    }

    /// Whether listings take the lock too: only the market's lock.
    pub(crate) fn locks_listings(self) -> bool {
        matches!(self, Strategy::SingleCoarse | Strategy::Coarse(_))
    }

    pub(crate) fn is_fenced(self) -> bool {
        matches!(self, Strategy::Fenced(_))
    }

    /// Whether its checks must pass: every strategy but no lock at all.
    pub(crate) fn is_safe(self) -> bool {
        self != Strategy::NoLock
    }
}

/// How long one acquire may wait before the operation counts a retry and
/// asks again.
const LOCK_WAIT: Duration = Duration::from_secs(2);
/// How long the hand-written lock lives on the data server.
const SINGLE_TTL_MS: u64 = 10_000;
/// The hand-written lock's pause between attempts ("Redis in Action":
/// `time.sleep(.001)`).
const SINGLE_RETRY: Duration = Duration::from_millis(1);

/// The classic compare-and-delete release.
const RELEASE: &str = r#"if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"#;

/// The scripts a task sends to the data server, loaded once per cell.
#[derive(Clone)]
pub(crate) struct Scripts {
    fenced_buy: Script,
    release: Script,
}

impl Scripts {
    pub(crate) fn new() -> Self {
        Self {
            fenced_buy: Script::new(FENCED_BUY),
            release: Script::new(RELEASE),
        }
    }

    /// Loads them, so that no call meets `NOSCRIPT` (an extra round trip).
    pub(crate) async fn load(&self, data: &mut MultiplexedConnection) -> redis::RedisResult<()> {
        for script in [&self.fenced_buy, &self.release] {
            script.load_async(data).await?;
        }
        Ok(())
    }
}

/// How one purchase ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Bought {
    Yes,
    /// The item was gone, or its price had changed, when the buyer looked
    /// under its guard: not a failure, another buyer was first.
    Gone,
    /// The data server refused the write's fencing token.
    Stale,
}

/// What one task needs to trade: its own data connection (a `WATCH` is
/// per connection), the strategy and its lock client.
pub(crate) struct Trader {
    pub(crate) data: MultiplexedConnection,
    pub(crate) strategy: Strategy,
    pub(crate) redlock: Option<Redlock>,
    /// The hand-written Redlock's masters (shared connections, one per
    /// master, as this library keeps).
    pub(crate) raw_masters: Vec<MultiplexedConnection>,
    pub(crate) scripts: Scripts,
    /// The purchase skips its lock (`--planted-race`): the audit must catch it.
    pub(crate) planted_race: bool,
    /// Purchases that had to be made again: aborted `EXEC`s, locks not
    /// granted within [`LOCK_WAIT`].
    pub(crate) retries: u64,
    /// Listings whose `EXEC` was aborted under `WATCH` (none: only the
    /// seller writes its inventory), or whose lock waits ran out.
    pub(crate) list_retries: u64,
    /// The hand-written lock's releases in flight ([`Trader::unlock`]).
    pub(crate) behind: tokio::task::JoinSet<Result<(), String>>,
    /// Releases of the hand-written lock that failed.
    pub(crate) release_errors: Vec<String>,
}

/// A lock held by a trader.
// One lives on a task's stack for one purchase: boxing the guard would add
// an allocation to every purchase, for no saving.
#[allow(clippy::large_enum_variant)]
enum Held {
    None,
    Redlock(LockGuard),
    Single { key: String, value: String },
    Raw { key: String, value: String },
}

impl Trader {
    fn lock_name(&self, item: &str) -> String {
        match self.strategy {
            Strategy::SingleCoarse | Strategy::Coarse(_) => "lock:market".to_owned(),
            _ => format!("lock:{item}"),
        }
    }

    /// Takes the strategy's lock for `item`, retrying until `deadline`.
    async fn lock(&mut self, item: &str, deadline: Instant) -> Result<Option<Held>, String> {
        match self.strategy {
            Strategy::Watch | Strategy::NoLock => Ok(Some(Held::None)),
            Strategy::SingleCoarse | Strategy::SingleFine => {
                let key = self.lock_name(item);
                let value = format!("{:016x}", rand::rng().random::<u64>());
                loop {
                    let set: Option<String> = redis::cmd("SET")
                        .arg(&key)
                        .arg(&value)
                        .arg("NX")
                        .arg("PX")
                        .arg(SINGLE_TTL_MS)
                        .query_async(&mut self.data)
                        .await
                        .map_err(|err| format!("SET NX: {err}"))?;
                    if set.is_some() {
                        return Ok(Some(Held::Single { key, value }));
                    }
                    if Instant::now() >= deadline {
                        return Ok(None);
                    }
                    tokio::time::sleep(SINGLE_RETRY).await;
                }
            }
            Strategy::RawFine(_) => {
                let key = self.lock_name(item);
                let value = format!("{:016x}", rand::rng().random::<u64>());
                let quorum = self.raw_masters.len() / 2 + 1;
                loop {
                    let sets = self.raw_masters.iter().map(|master| {
                        let mut master = master.clone();
                        let (key, value) = (&key, &value);
                        async move {
                            redis::cmd("SET")
                                .arg(key)
                                .arg(value)
                                .arg("NX")
                                .arg("PX")
                                .arg(SINGLE_TTL_MS)
                                .query_async::<Option<String>>(&mut master)
                                .await
                        }
                    });
                    let granted = futures::future::join_all(sets)
                        .await
                        .into_iter()
                        .filter(|set| matches!(set, Ok(Some(_))))
                        .count();
                    let held = Held::Raw {
                        key: key.clone(),
                        value: value.clone(),
                    };
                    if granted >= quorum {
                        return Ok(Some(held));
                    }
                    // Given back on every master: the ones that said no
                    // delete nothing.
                    self.unlock(held).await;
                    if Instant::now() >= deadline {
                        return Ok(None);
                    }
                    self.retries += 1;
                    tokio::time::sleep(SINGLE_RETRY).await;
                }
            }
            Strategy::Coarse(_) | Strategy::Fine(_) | Strategy::Fenced(_) => {
                let redlock = self
                    .redlock
                    .clone()
                    .expect("a Redlock strategy has a client");
                let name = self.lock_name(item);
                loop {
                    let request = redlock.lock(&name).wait(Wait::AtMost(LOCK_WAIT));
                    let granted = if self.strategy.is_fenced() {
                        request.fencing().await
                    } else {
                        request.await
                    };
                    match granted {
                        Ok(guard) => return Ok(Some(Held::Redlock(guard))),
                        Err(err) if err.is_held_by_other() || err.is_unavailable() => {
                            self.retries += 1;
                            if Instant::now() >= deadline {
                                return Ok(None);
                            }
                        }
                        Err(err) => return Err(format!("lock {name}: {err}")),
                    }
                }
            }
        }
    }

    /// Releases `held` behind the purchase: the purchase is done once its
    /// write is, so its task goes on at once while the release goes out.
    /// This library's guard is dropped, which releases on every master in
    /// the background, in the per-node order, and
    /// [`Redlock::shutdown`] waits for it; the hand-written lock's
    /// compare-and-delete is queued on the task's connection before its next
    /// command, and only its reply is waited for in the background (the
    /// task waits for those before it ends, [`Trader::finish`]).
    async fn unlock(&mut self, held: Held) {
        match held {
            Held::None => {}
            Held::Redlock(guard) => drop(guard),
            Held::Single { key, value } => {
                let connection = self.data.clone();
                self.release_behind(connection, key, value);
            }
            Held::Raw { key, value } => {
                for master in self.raw_masters.clone() {
                    self.release_behind(master, key.clone(), value.clone());
                }
            }
        }
        // Reap the releases already done, so they do not pile up.
        while let Some(done) = self.behind.try_join_next() {
            if let Ok(Err(err)) = done {
                self.release_errors.push(err);
            }
        }
    }

    /// The hand-written compare-and-delete of `key` = `value` on
    /// `connection`: the first poll queues the command on the connection,
    /// so it reaches the server before the task's next one (its next
    /// `SET NX`, which must find the market's lock free); only the reply
    /// is waited for in the background.
    fn release_behind(
        &mut self,
        mut connection: MultiplexedConnection,
        key: String,
        value: String,
    ) {
        let release = self.scripts.release.clone();
        let mut reply = Box::pin(async move {
            release
                .key(key)
                .arg(value)
                .invoke_async::<i64>(&mut connection)
                .await
                .map(drop)
                .map_err(|err| format!("release: {err}"))
        });
        let waker = std::task::Waker::noop();
        match reply
            .as_mut()
            .poll(&mut std::task::Context::from_waker(waker))
        {
            Poll::Ready(Err(err)) => self.release_errors.push(err),
            Poll::Ready(Ok(())) => {}
            Poll::Pending => {
                self.behind.spawn(reply);
            }
        }
    }

    /// Waits for the releases still in flight; the first that failed.
    pub(crate) async fn finish(&mut self) -> Result<(), String> {
        while let Some(done) = self.behind.join_next().await {
            done.map_err(|err| format!("a release panicked: {err}"))??;
        }
        match self.release_errors.first() {
            Some(err) => Err(err.clone()),
            None => Ok(()),
        }
    }
}

impl Trader {
    /// Lists `item` of seller `seller` at `price`: from its inventory to the
    /// market. Under a market lock (coarse), the listing takes it as a
    /// purchase does: everything is serialised. Otherwise it is "Redis in
    /// Action"'s `list_item`: `WATCH` the seller's inventory, check the item
    /// is there, `MULTI`/`EXEC`. No item lock is needed there: buyers cannot
    /// see an item before it is listed, and only its seller lists it.
    /// `Ok(false)` when the item was not in the inventory, or the market's
    /// lock was not granted before `deadline`.
    pub(crate) async fn list(
        &mut self,
        seller: &str,
        item: &str,
        price: u64,
        deadline: Instant,
    ) -> Result<bool, String> {
        let inventory = inventory_key(seller);
        if self.strategy.locks_listings() {
            let Some(held) = self.lock(item, deadline).await? else {
                return Ok(false);
            };
            // Under the lock only this seller touches its inventory: the
            // item is there, as the seller's own count says.
            let () = redis::pipe()
                .atomic()
                .zadd(MARKET, item, price)
                .ignore()
                .srem(&inventory, item)
                .ignore()
                .query_async(&mut self.data)
                .await
                .map_err(|err| format!("list: {err}"))?;
            self.unlock(held).await;
            return Ok(true);
        }
        loop {
            let (owned,): (bool,) = redis::pipe()
                .cmd("WATCH")
                .arg(&inventory)
                .ignore()
                .sismember(&inventory, item)
                .query_async(&mut self.data)
                .await
                .map_err(|err| format!("list: {err}"))?;
            if !owned {
                let () = redis::cmd("UNWATCH")
                    .query_async(&mut self.data)
                    .await
                    .map_err(|err| format!("list: {err}"))?;
                return Ok(false);
            }
            let committed: Value = redis::pipe()
                .atomic()
                .zadd(MARKET, item, price)
                .ignore()
                .srem(&inventory, item)
                .ignore()
                .query_async(&mut self.data)
                .await
                .map_err(|err| format!("list: {err}"))?;
            if committed != Value::Nil {
                return Ok(true);
            }
            self.list_retries += 1;
        }
    }

    /// Buys `item`, seen on the market at `price`, for `buyer`. `None` when
    /// its lock was not granted before `deadline`.
    pub(crate) async fn buy(
        &mut self,
        buyer: &str,
        item: &str,
        price: u64,
        deadline: Instant,
    ) -> Result<Option<Bought>, String> {
        let buyer_key = user_key(buyer);
        if self.strategy == Strategy::Watch {
            loop {
                let (listed, funds): (Option<f64>, Option<i64>) = redis::pipe()
                    .cmd("WATCH")
                    .arg(MARKET)
                    .arg(&buyer_key)
                    .ignore()
                    .zscore(MARKET, item)
                    .hget(&buyer_key, "funds")
                    .query_async(&mut self.data)
                    .await
                    .map_err(|err| format!("buy: {err}"))?;
                if !affordable(listed, funds, price) {
                    let () = redis::cmd("UNWATCH")
                        .query_async(&mut self.data)
                        .await
                        .map_err(|err| format!("buy: {err}"))?;
                    return Ok(Some(Bought::Gone));
                }
                let committed: Value = self
                    .write_purchase(buyer, item, price)
                    .query_async(&mut self.data)
                    .await
                    .map_err(|err| format!("buy: {err}"))?;
                if committed != Value::Nil {
                    return Ok(Some(Bought::Yes));
                }
                self.retries += 1;
            }
        }
        let held = if self.planted_race {
            Held::None
        } else {
            match self.lock(item, deadline).await? {
                Some(held) => held,
                None => return Ok(None),
            }
        };
        let (listed, funds): (Option<f64>, Option<i64>) = redis::pipe()
            .zscore(MARKET, item)
            .hget(&buyer_key, "funds")
            .query_async(&mut self.data)
            .await
            .map_err(|err| format!("buy: {err}"))?;
        if self.planted_race {
            // Widen the window between the read and the write, as a
            // scheduler would now and then.
            tokio::task::yield_now().await;
        }
        let bought = if !affordable(listed, funds, price) {
            Bought::Gone
        } else if let Held::Redlock(guard) = &held
            && self.strategy.is_fenced()
        {
            let token = guard.fencing_token().expect("a fenced lock has a token");
            let written: i64 = self
                .scripts
                .fenced_buy
                .key(TOKENS)
                .key(MARKET)
                .key(&buyer_key)
                .key(user_key(seller_of(item)))
                .key(inventory_key(buyer))
                .key(SALES)
                .arg(item)
                .arg(token)
                .arg(price)
                .invoke_async(&mut self.data)
                .await
                .map_err(|err| format!("fenced buy: {err}"))?;
            if written == 1 {
                Bought::Yes
            } else {
                Bought::Stale
            }
        } else {
            let () = self
                .write_purchase(buyer, item, price)
                .query_async(&mut self.data)
                .await
                .map_err(|err| format!("buy: {err}"))?;
            Bought::Yes
        };
        self.unlock(held).await;
        Ok(Some(bought))
    }

    /// The purchase's write: one `MULTI`/`EXEC`.
    fn write_purchase(&self, buyer: &str, item: &str, price: u64) -> redis::Pipeline {
        let price = price as i64;
        let mut pipe = redis::pipe();
        pipe.atomic()
            .hincr(user_key(seller_of(item)), "funds", price)
            .ignore()
            .hincr(user_key(buyer), "funds", -price)
            .ignore()
            .sadd(inventory_key(buyer), item)
            .ignore()
            .zrem(MARKET, item)
            .ignore()
            .hincr(SALES, item, 1)
            .ignore();
        pipe
    }
}

/// The item is on the market at the price the buyer saw, and the buyer can
/// pay it.
fn affordable(listed: Option<f64>, funds: Option<i64>, price: u64) -> bool {
    listed.is_some_and(|listed| listed as u64 == price) && funds.unwrap_or(0) >= price as i64
}
