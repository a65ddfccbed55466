//! One cell of the table: one shape of sellers and buyers trading under one
//! strategy for a few seconds, on a fresh market, then audited.

use std::time::{Duration, Instant};

use rand::RngExt;
use redis::AsyncCommands;
use redis::aio::MultiplexedConnection;
use redlock_tests::market::{self, Audit, MARKET, Shape};
use redlock_tokio::Redlock;

use super::strategies::{Bought, Scripts, Strategy, Trader};
use crate::cpu;
use crate::stats::Latencies;

/// Items a seller is given at a time; more when it has listed them all.
const STOCK_BATCH: u64 = 2_000;
/// Bounds every task's operations besides the clock.
const MAX_OPS_PER_TASK: u64 = 5_000_000;
/// A buyer that finds the market empty looks again after this.
const EMPTY_MARKET_PAUSE: Duration = Duration::from_millis(1);

/// What the cell's servers and clients are.
pub(crate) struct Env {
    /// The data server's URL.
    pub(crate) data_url: String,
    /// Connections for the audit and the cleaning: the data server, then
    /// every lock master.
    pub(crate) admin: Vec<MultiplexedConnection>,
    /// This library's clients over the first 1, 3 and 5 lock masters.
    pub(crate) redlocks: Vec<(usize, Redlock)>,
    /// Every server process, for CPU time.
    pub(crate) server_pids: Vec<u32>,
}

impl Env {
    fn redlock(&self, masters: usize) -> Option<Redlock> {
        self.redlocks
            .iter()
            .find(|(n, _)| *n == masters)
            .map(|(_, redlock)| redlock.clone())
    }
}

/// One cell's figures and checks.
#[derive(Clone)]
pub(crate) struct Cell {
    pub(crate) shape: (usize, usize),
    pub(crate) strategy: Strategy,
    pub(crate) elapsed: Duration,
    /// Listings and purchases the tasks saw succeed.
    pub(crate) listed: u64,
    pub(crate) bought: u64,
    /// Purchases that found the item gone under their guard.
    pub(crate) gone: u64,
    /// Writes refused for a stale fencing token.
    pub(crate) stale: u64,
    pub(crate) retries: u64,
    /// Listings whose `EXEC` was aborted: 0, only a seller writes its
    /// inventory.
    pub(crate) list_retries: u64,
    pub(crate) list_latency: Latencies,
    /// From the buyer's pick to the purchase done, retries included.
    pub(crate) buy_latency: Latencies,
    pub(crate) client_cpu: Duration,
    pub(crate) server_cpu: Duration,
    /// The audits of its rounds, added up ([`Cell::merge`]).
    pub(crate) audit: Audit,
    /// Money was conserved in every round.
    pub(crate) conserved: bool,
    pub(crate) keys_left: u64,
    /// Each round's own figures, in the order the rounds ran: ratios
    /// between strategies are taken round by round ([`Cell::versus`]).
    pub(crate) rounds: Vec<Figures>,
}

/// One round's operations and purchases per 60 s, and CPU µs per operation
/// (client and servers).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Figures {
    pub(crate) ops: f64,
    pub(crate) bought: f64,
    pub(crate) cpu: f64,
}

impl Cell {
    /// Listings and purchases that took effect (the audit's count), per 60 s.
    pub(crate) fn ops_per_60s(&self) -> f64 {
        (self.audit.listed + self.audit.bought) as f64 * 60.0 / self.elapsed.as_secs_f64()
    }

    pub(crate) fn retries_per_buy(&self) -> f64 {
        if self.bought == 0 {
            return f64::NAN;
        }
        self.retries as f64 / self.bought as f64
    }

    /// CPU µs per listing or purchase: the client, then all servers.
    pub(crate) fn cpu_per_op_us(&self) -> (f64, f64) {
        let ops = (self.listed + self.bought).max(1) as f64;
        (
            self.client_cpu.as_secs_f64() * 1e6 / ops,
            self.server_cpu.as_secs_f64() * 1e6 / ops,
        )
    }

    /// This cell's figures over all its rounds.
    fn figures(&self) -> Figures {
        let (client, servers) = self.cpu_per_op_us();
        Figures {
            ops: self.ops_per_60s(),
            bought: self.audit.bought as f64 * 60.0 / self.elapsed.as_secs_f64(),
            cpu: client + servers,
        }
    }

    /// The median, over the rounds both ran, of this cell's `figure` over
    /// `other`'s in the same round: the strategies of one round ran seconds
    /// apart, so their ratio moves much less than totals minutes apart do
    /// on a shared machine, and the median drops a round that a burst of
    /// other work fell into ([`crate::stats::paired_median`]).
    pub(crate) fn versus(&self, other: &Cell, figure: fn(&Figures) -> f64) -> Option<f64> {
        crate::stats::paired_median(
            self.rounds
                .iter()
                .zip(&other.rounds)
                .map(|(ours, theirs)| (figure(ours), figure(theirs))),
        )
    }

    /// Every check of a safe strategy passed.
    pub(crate) fn passed(&self) -> bool {
        self.conserved && self.audit.passed() && self.keys_left == 0
    }

    /// Adds another round of the same shape and strategy.
    pub(crate) fn merge(&mut self, round: &Cell) {
        self.elapsed += round.elapsed;
        self.listed += round.listed;
        self.bought += round.bought;
        self.gone += round.gone;
        self.stale += round.stale;
        self.retries += round.retries;
        self.list_retries += round.list_retries;
        self.list_latency.merge(&round.list_latency);
        self.buy_latency.merge(&round.buy_latency);
        self.client_cpu += round.client_cpu;
        self.server_cpu += round.server_cpu;
        self.conserved &= round.conserved;
        self.keys_left += round.keys_left;
        self.rounds.extend_from_slice(&round.rounds);
        let (total, add) = (&mut self.audit, &round.audit);
        total.listed += add.listed;
        total.bought += add.bought;
        total.money += add.money;
        total.money_expected += add.money_expected;
        total.double_sales += add.double_sales;
        total.misplaced += add.misplaced;
        total.bought_misplaced += add.bought_misplaced;
    }
}

/// What one task did.
#[derive(Default)]
struct Tally {
    listed: u64,
    bought: u64,
    gone: u64,
    stale: u64,
    retries: u64,
    list_retries: u64,
    stocked: u64,
    list_latency: Latencies,
    buy_latency: Latencies,
}

fn err(context: &str) -> impl Fn(redis::RedisError) -> String + '_ {
    move |error| format!("{context}: {error}")
}

/// Empties every server: the data, the locks, the fencing counters.
async fn flush(env: &mut Env) -> Result<(), String> {
    for conn in &mut env.admin {
        let () = redis::cmd("FLUSHALL")
            .query_async(conn)
            .await
            .map_err(err("FLUSHALL"))?;
    }
    Ok(())
}

/// Runs one cell.
pub(crate) async fn run(
    env: &mut Env,
    shape: (usize, usize),
    strategy: Strategy,
    length: Duration,
    planted_race: bool,
) -> Result<Cell, String> {
    flush(env).await?;
    let market_shape = Shape {
        sellers: shape.0,
        buyers: shape.1,
    };
    let data_client = redis::Client::open(env.data_url.as_str()).map_err(err("data URL"))?;
    let mut setup = data_client
        .get_multiplexed_async_connection()
        .await
        .map_err(err("data server"))?;
    market::seed(&mut setup, &market_shape)
        .await
        .map_err(err("seed"))?;
    for i in 0..shape.0 {
        market::stock(&mut setup, i, 0, STOCK_BATCH)
            .await
            .map_err(err("stock"))?;
    }
    let scripts = Scripts::new();
    scripts.load(&mut setup).await.map_err(err("SCRIPT LOAD"))?;
    let redlock = strategy.masters().and_then(|n| env.redlock(n));
    // The hand-written Redlock shares one connection per master, as this
    // library's client does.
    let raw_masters: Vec<MultiplexedConnection> = env
        .admin
        .iter()
        .skip(1)
        .take(strategy.raw_masters().unwrap_or(0))
        .cloned()
        .collect();
    for master in &raw_masters {
        scripts
            .load(&mut master.clone())
            .await
            .map_err(err("SCRIPT LOAD"))?;
    }
    let mut traders = Vec::with_capacity(shape.0 + shape.1);
    for _ in 0..shape.0 + shape.1 {
        traders.push(Trader {
            data: data_client
                .get_multiplexed_async_connection()
                .await
                .map_err(err("data server"))?,
            strategy,
            redlock: redlock.clone(),
            raw_masters: raw_masters.clone(),
            scripts: scripts.clone(),
            planted_race,
            retries: 0,
            list_retries: 0,
            behind: tokio::task::JoinSet::new(),
            release_errors: Vec::new(),
        });
    }

    let (client_before, servers_before) = cpu::snapshot(&env.server_pids);
    let started = Instant::now();
    let deadline = started + length;
    let mut tasks = tokio::task::JoinSet::new();
    for (index, trader) in traders.into_iter().enumerate() {
        if index < shape.0 {
            tasks.spawn(async move { (index, sell(trader, index, deadline).await) });
        } else {
            tasks.spawn(async move { (index, shop(trader, index - shape.0, deadline).await) });
        }
    }
    // By task index: sellers first, then buyers.
    let mut tallies: Vec<Tally> = (0..shape.0 + shape.1).map(|_| Tally::default()).collect();
    while let Some(joined) = tasks.join_next().await {
        let (index, tally) = joined.map_err(|error| format!("a trader panicked: {error}"))?;
        tallies[index] = tally?;
    }
    let elapsed = started.elapsed();
    let (client_after, servers_after) = cpu::snapshot(&env.server_pids);
    if let Some(redlock) = &redlock {
        // Releases still in flight finish before the servers are read.
        redlock.settled().await;
    }

    let mut cell = Cell {
        shape,
        strategy,
        elapsed,
        listed: 0,
        bought: 0,
        gone: 0,
        stale: 0,
        retries: 0,
        list_retries: 0,
        list_latency: Latencies::new(),
        buy_latency: Latencies::new(),
        client_cpu: client_after.saturating_sub(client_before),
        server_cpu: servers_after.saturating_sub(servers_before),
        audit: Audit::default(),
        conserved: true,
        keys_left: 0,
        rounds: Vec::new(),
    };
    let mut stocked = vec![0; shape.0];
    for (index, tally) in tallies.iter().enumerate() {
        if index < shape.0 {
            stocked[index] = tally.stocked;
        }
        cell.listed += tally.listed;
        cell.bought += tally.bought;
        cell.gone += tally.gone;
        cell.stale += tally.stale;
        cell.retries += tally.retries;
        cell.list_retries += tally.list_retries;
        cell.list_latency.merge(&tally.list_latency);
        cell.buy_latency.merge(&tally.buy_latency);
    }
    cell.audit = market::audit(&mut setup, &market_shape, &stocked)
        .await
        .map_err(err("audit"))?;
    cell.conserved = cell.audit.conserved();
    let (data, masters) = env.admin.split_at_mut(1);
    cell.keys_left = market::lock_keys_left(&mut data[0], "lock:*")
        .await
        .map_err(err("keys left"))?;
    for master in masters {
        cell.keys_left += market::lock_keys_left(master, "*")
            .await
            .map_err(err("keys left"))?;
    }
    cell.rounds = vec![cell.figures()];
    Ok(cell)
}

/// A seller: lists its items one after the other, each at a random price.
async fn sell(mut trader: Trader, index: usize, deadline: Instant) -> Result<Tally, String> {
    let mut tally = Tally {
        stocked: STOCK_BATCH,
        ..Tally::default()
    };
    let seller = market::seller(index);
    for n in 0..MAX_OPS_PER_TASK {
        if Instant::now() >= deadline {
            break;
        }
        if n == tally.stocked {
            market::stock(&mut trader.data, index, n, n + STOCK_BATCH)
                .await
                .map_err(err("stock"))?;
            tally.stocked += STOCK_BATCH;
        }
        let item = market::item(index, n);
        let price = rand::rng().random_range(1..=1_000u64);
        let start = Instant::now();
        if trader.list(&seller, &item, price, deadline).await? {
            tally.list_latency.record(start.elapsed());
            tally.listed += 1;
        }
    }
    tally.list_retries = trader.list_retries;
    trader.finish().await?;
    Ok(tally)
}

/// A buyer: picks a random item on the market and buys it.
async fn shop(mut trader: Trader, index: usize, deadline: Instant) -> Result<Tally, String> {
    let mut tally = Tally::default();
    let buyer = market::buyer(index);
    for _ in 0..MAX_OPS_PER_TASK {
        if Instant::now() >= deadline {
            break;
        }
        let picked: Vec<(String, f64)> = trader
            .data
            .zrandmember_withscores(MARKET, 1)
            .await
            .map_err(err("ZRANDMEMBER"))?;
        let Some((item, price)) = picked.into_iter().next() else {
            tokio::time::sleep(EMPTY_MARKET_PAUSE).await;
            continue;
        };
        let start = Instant::now();
        match trader.buy(&buyer, &item, price as u64, deadline).await? {
            Some(Bought::Yes) => {
                tally.buy_latency.record(start.elapsed());
                tally.bought += 1;
            }
            Some(Bought::Gone) => tally.gone += 1,
            Some(Bought::Stale) => tally.stale += 1,
            None => {}
        }
    }
    tally.retries = trader.retries;
    trader.finish().await?;
    Ok(tally)
}
