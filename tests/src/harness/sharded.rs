//! One Redlock node that is a whole Redis Cluster: several masters that
//! share the 16384 hash slots, no replicas.
//!
//! The cluster is built with plain commands (`CLUSTER ADDSLOTSRANGE`,
//! `CLUSTER MEET`), not with `redis-cli --cluster create`, so that Redis and
//! Valkey (whose PyPI build has no `valkey-cli`) are set up the same way.

use std::collections::{BTreeMap, HashMap};
use std::panic;
use std::sync::{Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use redis::Value;

use super::node::{NodeOptions, RedisNode};

/// How long the shards may take to agree on the slot map. Generous: on a
/// loaded machine the cluster bus gossips slowly; a healthy start takes well
/// under a second.
pub const CLUSTER_READY_TIMEOUT: Duration = Duration::from_secs(60);

/// How long one step of forming a cluster or moving a slot may take: each
/// saves the cluster configuration with an fsync, which a loaded machine
/// has been seen to take over a second for.
const ADMIN_TIMEOUT: Duration = Duration::from_secs(15);

/// The number of hash slots of a Redis Cluster.
const SLOTS: u16 = 16384;

/// A Redis Cluster of `n` masters on loopback, started in parallel, each a
/// [`RedisNode`] run with `--cluster-enabled yes` and its own cluster bus
/// port. Shard `i` owns the `i`-th of `n` equal slot ranges. Dropping it
/// kills every shard.
///
/// ```no_run
/// use redlock_tests::ShardedNode;
///
/// let node = ShardedNode::start(3);
/// // For Builder: redis+cluster://127.0.0.1:p1,127.0.0.1:p2,127.0.0.1:p3
/// let url = node.url();
/// node.shard_of(b"resource").set("resource", "value");
/// assert_eq!(node.get(b"resource").as_deref(), Some(&b"value"[..]));
/// ```
#[derive(Debug)]
pub struct ShardedNode {
    shards: Vec<RedisNode>,
    /// `ranges[i]` is the first and last slot of shard `i`.
    ranges: Vec<(u16, u16)>,
    /// Slots moved by [`move_slot`](Self::move_slot), to their new shard.
    moved: Mutex<HashMap<u16, usize>>,
}

impl ShardedNode {
    /// Starts `count` clusters of `shards` masters each, in parallel (see
    /// [`start`](Self::start)).
    ///
    /// # Panics
    /// As [`start`](Self::start), with the first failure's panic.
    pub fn start_many(count: usize, shards: usize) -> Vec<Self> {
        thread::scope(|scope| {
            let starts: Vec<_> = (0..count)
                .map(|_| scope.spawn(move || Self::start(shards)))
                .collect();
            starts
                .into_iter()
                .map(|start| {
                    start
                        .join()
                        .unwrap_or_else(|p| std::panic::resume_unwind(p))
                })
                .collect()
        })
    }

    /// Starts a cluster of `n` masters and waits until every shard reports
    /// `cluster_state:ok` and knows every other (at most
    /// [`CLUSTER_READY_TIMEOUT`]).
    ///
    /// # Panics
    /// If a server fails to start or the cluster does not form in time (the
    /// servers started are killed).
    pub fn start(n: usize) -> Self {
        assert!(
            (1..=usize::from(SLOTS)).contains(&n),
            "a cluster of {n} shards"
        );
        let results: Vec<thread::Result<RedisNode>> = thread::scope(|scope| {
            let starts: Vec<_> = (0..n)
                .map(|_| scope.spawn(|| RedisNode::start_with(cluster_options())))
                .collect();
            starts.into_iter().map(|start| start.join()).collect()
        });
        let mut shards = Vec::with_capacity(n);
        let mut failure = None;
        for result in results {
            match result {
                Ok(node) => shards.push(node),
                Err(payload) => failure = failure.or(Some(payload)),
            }
        }
        if let Some(payload) = failure {
            drop(shards);
            panic::resume_unwind(payload);
        }
        let per_shard = usize::from(SLOTS).div_ceil(n);
        let ranges = (0..n)
            .map(|i| {
                let first = i * per_shard;
                let last = ((i + 1) * per_shard).min(usize::from(SLOTS)) - 1;
                (first as u16, last as u16)
            })
            .collect();
        let node = Self {
            shards,
            ranges,
            moved: Mutex::new(HashMap::new()),
        };
        node.form();
        node
    }

    /// Assigns the slots, introduces the shards to each other and waits for
    /// the cluster to agree.
    fn form(&self) {
        for (shard, &(first, last)) in self.shards.iter().zip(&self.ranges) {
            shard.command_within(
                ADMIN_TIMEOUT,
                [
                    "CLUSTER".to_owned(),
                    "ADDSLOTSRANGE".to_owned(),
                    first.to_string(),
                    last.to_string(),
                ],
            );
        }
        let first = &self.shards[0];
        for other in &self.shards[1..] {
            first.command_within(
                ADMIN_TIMEOUT,
                [
                    "CLUSTER".to_owned(),
                    "MEET".to_owned(),
                    "127.0.0.1".to_owned(),
                    other.port().to_string(),
                    other
                        .cluster_port()
                        .expect("started in cluster mode")
                        .to_string(),
                ],
            );
        }
        self.wait_until_ok();
    }

    /// Polls every live shard until each says `cluster_state:ok`, knows all
    /// the others and sees every slot assigned.
    ///
    /// # Panics
    /// After [`CLUSTER_READY_TIMEOUT`], with the last `CLUSTER INFO` seen.
    pub fn wait_until_ok(&self) {
        let deadline = Instant::now() + CLUSTER_READY_TIMEOUT;
        let n = self.shards.len();
        loop {
            let mut last = String::new();
            let ready = self.shards.iter().all(|shard| {
                let info = match shard.try_command(["CLUSTER", "INFO"]) {
                    Ok(value) => redis::from_redis_value::<String>(value).unwrap_or_default(),
                    Err(err) => err.to_string(),
                };
                let ok = info.contains("cluster_state:ok")
                    && info.contains(&format!("cluster_known_nodes:{n}\r"))
                    && info.contains("cluster_slots_assigned:16384\r")
                    && info.contains("cluster_slots_ok:16384\r");
                if !ok {
                    last = format!("{shard}: {info}");
                }
                ok
            });
            if ready {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the cluster did not form within {CLUSTER_READY_TIMEOUT:?}; last seen: {last}"
            );
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// The URL of this node for the client:
    /// `redis+cluster://127.0.0.1:p1,127.0.0.1:p2,...`, every shard a seed.
    pub fn url(&self) -> String {
        let seeds: Vec<String> = self
            .shards
            .iter()
            .map(|shard| format!("127.0.0.1:{}", shard.port()))
            .collect();
        format!("redis+cluster://{}", seeds.join(","))
    }

    /// The URL with only the first shard as seed (the client learns the
    /// others from it).
    pub fn url_one_seed(&self) -> String {
        format!("redis+cluster://127.0.0.1:{}", self.shards[0].port())
    }

    /// Every shard, in start order.
    pub fn shards(&self) -> &[RedisNode] {
        &self.shards
    }

    /// Shard `i`.
    ///
    /// # Panics
    /// If `i` is out of range.
    pub fn shard(&self, i: usize) -> &RedisNode {
        &self.shards[i]
    }

    /// The index of the shard that owns `key`'s slot.
    pub fn shard_index(&self, key: impl AsRef<[u8]>) -> usize {
        let slot = slot(key.as_ref());
        let moved = self.moved.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(&shard) = moved.get(&slot) {
            return shard;
        }
        self.ranges
            .iter()
            .position(|&(first, last)| (first..=last).contains(&slot))
            .expect("every slot is assigned")
    }

    /// The shard that owns `key`'s slot.
    pub fn shard_of(&self, key: impl AsRef<[u8]>) -> &RedisNode {
        &self.shards[self.shard_index(key)]
    }

    /// `GET key` on the shard that owns it.
    pub fn get(&self, key: impl AsRef<[u8]>) -> Option<Vec<u8>> {
        self.shard_of(key.as_ref()).get(key)
    }

    /// `EXISTS key` on the shard that owns it.
    pub fn exists(&self, key: impl AsRef<[u8]>) -> bool {
        self.shard_of(key.as_ref()).exists(key)
    }

    /// Moves the slot of `key` to shard `to` while clients use it, as
    /// `redis-cli --cluster reshard` does: the target imports, the owner
    /// migrates, the slot's keys go over with `MIGRATE` (TTLs kept), then
    /// every shard is told the new owner. Clients that still send to the old
    /// owner get `MOVED` (or `ASK` during the move).
    ///
    /// # Panics
    /// If a step is refused.
    pub fn move_slot(&self, key: impl AsRef<[u8]>, to: usize) {
        self.move_slot_paced(key, to, Duration::ZERO);
    }

    /// [`move_slot`](Self::move_slot) with a pause of `pause` after each
    /// step, so that clients meet every intermediate state of the move:
    ///
    /// 1. the slot `IMPORTING` on the target, `MIGRATING` on the owner: a
    ///    key the owner lacks is answered `ASK` (created on the target), a
    ///    script over several keys of which the owner has some but not all
    ///    is answered `TRYAGAIN`;
    /// 2. every key migrated: the owner answers `ASK` for all of them;
    /// 3. the target owns the slot, the old owner still migrating;
    /// 4. the old owner answers `MOVED`; the other shards still name it as
    ///    the owner, so a client that reads the slot map from them goes
    ///    there first;
    /// 5. every shard names the target.
    ///
    /// The new owner is told first, then the old one, then the others (the
    /// order of the `CLUSTER SETSLOT` documentation): a client sent on by
    /// `MOVED` never finds the target still refusing the slot.
    ///
    /// # Panics
    /// If a step is refused.
    pub fn move_slot_paced(&self, key: impl AsRef<[u8]>, to: usize, pause: Duration) {
        let slot = slot(key.as_ref());
        let from = self.shard_index(key.as_ref());
        assert_ne!(from, to, "slot {slot} is on shard {to} already");
        let id = |shard: &RedisNode| -> String {
            redis::from_redis_value(shard.command_within(ADMIN_TIMEOUT, ["CLUSTER", "MYID"]))
                .expect("a node id")
        };
        let rest = || {
            if !pause.is_zero() {
                thread::sleep(pause);
            }
        };
        let (source, target) = (&self.shards[from], &self.shards[to]);
        let (source_id, target_id) = (id(source), id(target));
        let slot_arg = slot.to_string();
        target.command_within(
            ADMIN_TIMEOUT,
            ["CLUSTER", "SETSLOT", &slot_arg, "IMPORTING", &source_id],
        );
        source.command_within(
            ADMIN_TIMEOUT,
            ["CLUSTER", "SETSLOT", &slot_arg, "MIGRATING", &target_id],
        );
        rest();
        loop {
            let keys: Vec<Vec<u8>> = redis::from_redis_value(source.command_within(
                ADMIN_TIMEOUT,
                ["CLUSTER", "GETKEYSINSLOT", &slot_arg, "100"],
            ))
            .expect("a list of keys");
            if keys.is_empty() {
                break;
            }
            let port = target.port().to_string();
            let mut migrate: Vec<Vec<u8>> = [
                "MIGRATE",
                "127.0.0.1",
                port.as_str(),
                "",
                "0",
                "5000",
                "KEYS",
            ]
            .iter()
            .map(|word| word.as_bytes().to_vec())
            .collect();
            migrate.extend(keys);
            source.command_within(ADMIN_TIMEOUT, migrate);
        }
        rest();
        let setslot = |shard: &RedisNode| {
            shard.command_within(
                ADMIN_TIMEOUT,
                ["CLUSTER", "SETSLOT", &slot_arg, "NODE", &target_id],
            );
        };
        setslot(target);
        rest();
        setslot(source);
        // From here on the old owner answers MOVED: the harness's own reads
        // go to the new one.
        self.moved
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(slot, to);
        rest();
        for (i, shard) in self.shards.iter().enumerate() {
            if i != from && i != to {
                setslot(shard);
            }
        }
        self.settle(key.as_ref(), to, &target_id);
    }

    /// Waits until every shard sends `key` to shard `to` (the owner answers
    /// it, the others `MOVED` there). Gossip that crossed a move can give
    /// the slot back to the old owner (seen once in 15 runs under load: the
    /// new owner answered `MOVED` to the old one); a shard that names
    /// another owner is told again, once the target has taken a new epoch
    /// so that its claim wins.
    fn settle(&self, key: &[u8], to: usize, target_id: &str) {
        let slot_arg = slot(key).to_string();
        let target = &self.shards[to];
        let deadline = Instant::now() + ADMIN_TIMEOUT;
        loop {
            let astray: Vec<&RedisNode> = self
                .shards
                .iter()
                .filter(|shard| {
                    let owner = match shard.try_command([&b"EXISTS"[..], key]) {
                        Ok(_) => Some(shard.port()),
                        Err(err) => err
                            .redirect_node()
                            .and_then(|(addr, _)| addr.rsplit_once(':')?.1.parse().ok()),
                    };
                    owner != Some(target.port())
                })
                .collect();
            if astray.is_empty() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "slot {slot_arg}: shards still name another owner"
            );
            target.command_within(ADMIN_TIMEOUT, ["CLUSTER", "BUMPEPOCH"]);
            for shard in astray {
                shard.command_within(
                    ADMIN_TIMEOUT,
                    ["CLUSTER", "SETSLOT", &slot_arg, "NODE", target_id],
                );
            }
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// Errors answered so far by each shard, summed over the shards, by
    /// code (`INFO errorstats`: `MOVED`, `ASK`, `TRYAGAIN`, ...): how many
    /// redirections the clients met. The counts start at the shard's start
    /// (or its last `CONFIG RESETSTAT`).
    pub fn error_counts(&self) -> BTreeMap<String, u64> {
        let mut counts = BTreeMap::new();
        for shard in &self.shards {
            let info: String = redis::from_redis_value(shard.command(["INFO", "errorstats"]))
                .expect("INFO is text");
            for (code, count) in parse_errorstats(&info) {
                *counts.entry(code).or_default() += count;
            }
        }
        counts
    }

    /// The number of keys on each shard (`DBSIZE`), in shard order.
    pub fn key_counts(&self) -> Vec<i64> {
        self.shards
            .iter()
            .map(|shard| match shard.command(["DBSIZE"]) {
                Value::Int(n) => n,
                other => panic!("{shard}: DBSIZE answered {other:?}"),
            })
            .collect()
    }
}

/// A shard's options: cluster mode (its own bus port, rather than port +
/// 10000, which may be taken or out of range), a failure detected after 5 s.
fn cluster_options() -> NodeOptions {
    NodeOptions {
        cluster: true,
        extra_args: ["--cluster-node-timeout", "5000"]
            .map(str::to_owned)
            .to_vec(),
        ..NodeOptions::default()
    }
}

/// The lines `errorstat_<CODE>:count=<n>` of an `INFO errorstats` reply.
fn parse_errorstats(info: &str) -> impl Iterator<Item = (String, u64)> + '_ {
    info.lines().filter_map(|line| {
        let (code, rest) = line.trim().strip_prefix("errorstat_")?.split_once(':')?;
        let count = rest
            .split(',')
            .find_map(|field| field.strip_prefix("count="))?
            .parse()
            .ok()?;
        Some((code.to_owned(), count))
    })
}

/// The hash slot of a key, as the cluster computes it (the client's own
/// computation: a disagreement with the servers fails the cluster tests).
fn slot(key: &[u8]) -> u16 {
    redlock_tokio::core::Key::from(key).slot()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_match_the_specification() {
        assert_eq!(slot(b"123456789"), 0x31C3);
        assert_eq!(slot(b"{user1000}.following"), slot(b"user1000"));
        assert_ne!(slot(b"foo{}{bar}"), slot(b"bar"));
    }

    #[test]
    fn errorstats_are_read_by_code() {
        let info = "# Errorstats\r\nerrorstat_ASK:count=3\r\nerrorstat_MOVED:count=12\r\n\
                    errorstat_TRYAGAIN:count=1\r\n";
        let counts: Vec<(String, u64)> = parse_errorstats(info).collect();
        assert_eq!(
            counts,
            [
                ("ASK".into(), 3),
                ("MOVED".into(), 12),
                ("TRYAGAIN".into(), 1)
            ]
        );
    }
}
