//! A simulated Redis master: keys with expiry in the node's own (drifting)
//! time, and the scripts of `redlock_core::scripts` re-implemented from their
//! documented contracts.

use std::collections::{BTreeMap, HashMap};

use redlock_core::native::Native;
use redlock_core::waited::is_ours;
use redlock_core::{Command, LockKind, Request, Response};

#[derive(Clone, Debug)]
enum Val {
    Str(Vec<u8>),
    /// member -> expiry score in node milliseconds.
    ZSet(BTreeMap<Vec<u8>, f64>),
    Hash(BTreeMap<Vec<u8>, Vec<u8>>),
}

#[derive(Clone, Debug)]
struct Entry {
    val: Val,
    /// Expiry in node microseconds (`f64::INFINITY`: none).
    expires: f64,
}

/// One key alive: its name, its string value (if a string) and its expiry
/// (node microseconds; `None`: never).
pub type Snapshot = (Vec<u8>, Option<Vec<u8>>, Option<f64>);

/// The keys of one node.
#[derive(Default, Debug)]
pub struct Store {
    data: HashMap<Vec<u8>, Entry>,
    /// The node's wall clock at node time 0, in microseconds: what `TIME`
    /// adds to the node time (0 by default: a clock that starts at 0).
    epoch: f64,
    /// A key of another type was read by the request running now: it
    /// answers `WRONGTYPE`, and what it wrote is undone
    /// ([`try_run`](Self::try_run)).
    wrong_type: bool,
}

/// The error a command on a key of another type gets, as Redis and Valkey
/// word it.
pub const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

const MS: f64 = 1000.0;

impl Store {
    /// When `value` at `key` expires (node microseconds), if it is there
    /// (marked as waited for or not).
    pub fn expiry_of(&self, key: &[u8], value: &[u8], clock: f64) -> Option<f64> {
        match self.data.get(key) {
            Some(Entry {
                val: Val::Str(v),
                expires,
            }) if is_ours(v, value) && *expires > clock => Some(*expires),
            _ => None,
        }
    }

    /// When reader `member` of the readers set at `key` expires (node
    /// microseconds), if it is there.
    pub fn reader_expiry(&self, key: &[u8], member: &[u8], clock: f64) -> Option<f64> {
        match self.data.get(key) {
            Some(Entry {
                val: Val::ZSet(set),
                expires,
            }) if *expires > clock => set
                .get(member)
                .map(|score| score * MS)
                .filter(|expiry| *expiry > clock),
            _ => None,
        }
    }

    /// When the reentrant lock at `key` expires (node microseconds), if
    /// `owner` holds it.
    pub fn owner_expiry(&self, key: &[u8], owner: &[u8], clock: f64) -> Option<f64> {
        match self.data.get(key) {
            Some(Entry {
                val: Val::Hash(fields),
                expires,
            }) if *expires > clock
                && fields.get(b"owner".as_slice()).map(Vec::as_slice) == Some(owner) =>
            {
                Some(*expires)
            }
            _ => None,
        }
    }

    /// The keys alive at `clock` that expire (locks, readers, marks; not
    /// fencing counters, which never do), sorted: what a run left behind.
    /// (Used by the client sim, `tests/src/sim/`.)
    #[allow(dead_code)]
    pub fn live_keys(&self, clock: f64) -> Vec<Vec<u8>> {
        let mut keys: Vec<Vec<u8>> = self
            .data
            .iter()
            .filter(|(_, entry)| entry.expires > clock && entry.expires.is_finite())
            .map(|(key, _)| key.clone())
            .collect();
        keys.sort();
        keys
    }

    /// Whether a waiter's mark lives at `key` (the `EXISTS` of
    /// `RELEASE_IF_WAITED`): a release of an exclusive lock publishes only
    /// then.
    #[allow(dead_code)]
    pub fn marked(&mut self, key: &[u8], clock: f64) -> bool {
        self.live(key, clock).is_some()
    }

    /// `PTTL key` in whole milliseconds (`-2`: no such key, `-1`: no
    /// expiry). (Used by `tests/tests/lua_model.rs`.)
    #[allow(dead_code)]
    pub fn pttl(&mut self, key: &[u8], clock: f64) -> i64 {
        match self.live(key, clock) {
            None => -2,
            Some(entry) if !entry.expires.is_finite() => -1,
            Some(entry) => ((entry.expires - clock) / MS).floor() as i64,
        }
    }

    /// `GET key` of a string key (`None` for another type). (Used by
    /// `tests/tests/lua_model.rs`.)
    #[allow(dead_code)]
    pub fn string(&mut self, key: &[u8], clock: f64) -> Option<Vec<u8>> {
        let value = self.get_str(key, clock);
        // A read between requests, not part of one.
        self.wrong_type = false;
        value
    }

    /// `DEL key`. (Used by `tests/tests/lua_model.rs`.)
    #[allow(dead_code)]
    pub fn forget(&mut self, key: &[u8]) {
        self.del(key);
    }

    /// Every key alive at `clock`, sorted: its string value (`None` for a
    /// sorted set or a hash) and its expiry (node microseconds; `None`: it
    /// never expires). (Used by the test kit's `Node::keys`.)
    pub fn snapshot(&self, clock: f64) -> Vec<Snapshot> {
        let mut keys: Vec<_> = self
            .data
            .iter()
            .filter(|(_, entry)| entry.expires > clock)
            .map(|(key, entry)| {
                let value = match &entry.val {
                    Val::Str(bytes) => Some(bytes.clone()),
                    Val::ZSet(_) | Val::Hash(_) => None,
                };
                (
                    key.clone(),
                    value,
                    entry.expires.is_finite().then_some(entry.expires),
                )
            })
            .collect();
        keys.sort_by(|a, b| a.0.cmp(&b.0));
        keys
    }

    pub fn clear(&mut self) {
        self.data.clear();
    }

    fn live(&mut self, key: &[u8], clock: f64) -> Option<&mut Entry> {
        if self.data.get(key).is_some_and(|e| e.expires <= clock) {
            self.data.remove(key);
        }
        self.data.get_mut(key)
    }

    fn get_str(&mut self, key: &[u8], clock: f64) -> Option<Vec<u8>> {
        match self.live(key, clock) {
            Some(Entry {
                val: Val::Str(v), ..
            }) => Some(v.clone()),
            Some(_) => {
                self.wrong_type = true;
                None
            }
            None => None,
        }
    }

    /// `redis.pcall('GET', key)`: the string or nothing, or `Err` (the
    /// error table a script gets back) for a key of another type, which
    /// does not fail the script.
    fn pget(&mut self, key: &[u8], clock: f64) -> Result<Option<Vec<u8>>, ()> {
        match self.live(key, clock) {
            Some(Entry {
                val: Val::Str(v), ..
            }) => Ok(Some(v.clone())),
            Some(_) => Err(()),
            None => Ok(None),
        }
    }

    /// Every write goes through here and [`remove`](Self::remove): none
    /// once the request read a key of another type (its script stopped
    /// there).
    fn insert(&mut self, key: &[u8], entry: Entry) {
        if !self.wrong_type {
            self.data.insert(key.to_vec(), entry);
        }
    }

    fn remove(&mut self, key: &[u8]) {
        if !self.wrong_type {
            self.data.remove(key);
        }
    }

    fn set_str(&mut self, key: &[u8], value: &[u8], clock: f64, ttl_ms: u64) {
        self.insert(
            key,
            Entry {
                val: Val::Str(value.to_vec()),
                expires: clock + ttl_ms as f64 * MS,
            },
        );
    }

    /// Marks `held`, the value at `key`, as waited for by `client`
    /// (`redlock_core::waited`): `v` becomes `v\0client`, a value marked by
    /// another client `v\0d\0`; its TTL stays.
    fn mark_held(&mut self, key: &[u8], held: &[u8], client: &[u8], clock: f64) {
        let marked = match held.iter().rposition(|&byte| byte == 0) {
            None => [held, b"\0", client].concat(),
            Some(at) if at + 1 == held.len() || &held[at + 1..] == client => return,
            Some(_) => [held, b"\0"].concat(),
        };
        if self.wrong_type {
            return;
        }
        if let Some(entry) = self.live(key, clock) {
            entry.val = Val::Str(marked);
        }
    }

    /// What an acquire answers for a key held by `held`: its first 64
    /// bytes, after a waiter's attempt (it names its client) marked it.
    fn held_by(&mut self, key: &[u8], held: Vec<u8>, request: &Request, clock: f64) -> Response {
        if let Some(client) = &request.client {
            self.mark_held(key, &held, client.as_bytes(), clock);
        }
        Response::Data(held[..held.len().min(64)].to_vec())
    }

    fn pexpire(&mut self, key: &[u8], clock: f64, ttl_ms: u64) {
        if self.wrong_type {
            return;
        }
        if let Some(entry) = self.live(key, clock) {
            entry.expires = clock + ttl_ms as f64 * MS;
        }
    }

    /// A semaphore's permits key at `key` holds `k` (set if missing) with
    /// a TTL no shorter than `ttl_ms` nor than it had; holding another k,
    /// it is left as it is (`SEMAPHORE_ACQUIRE` and a permit's `EXTEND`).
    fn keep_permits(&mut self, key: &[u8], k: &[u8], clock: f64, ttl_ms: u64) {
        let kept = self.get_str(key, clock);
        if kept.as_deref().is_some_and(|kept| kept != k) {
            return;
        }
        let left = self
            .live(key, clock)
            .map_or(0.0, |entry| entry.expires - clock);
        let expires = (clock + ttl_ms as f64 * MS).max(clock + left);
        self.insert(
            key,
            Entry {
                val: Val::Str(k.to_vec()),
                expires,
            },
        );
    }

    fn del(&mut self, key: &[u8]) {
        self.remove(key);
    }

    /// The readers set after removing expired members (as ZREMRANGEBYSCORE).
    fn readers(&mut self, key: &[u8], clock: f64) -> BTreeMap<Vec<u8>, f64> {
        let now_ms = (clock / MS).floor();
        let mut set = match self.live(key, clock) {
            Some(Entry {
                val: Val::ZSet(set),
                ..
            }) => set.clone(),
            Some(_) => {
                self.wrong_type = true;
                BTreeMap::new()
            }
            None => BTreeMap::new(),
        };
        set.retain(|_, score| *score > now_ms);
        set
    }

    fn put_readers(&mut self, key: &[u8], set: BTreeMap<Vec<u8>, f64>) {
        if set.is_empty() {
            self.remove(key);
            return;
        }
        let last = set.values().cloned().fold(f64::MIN, f64::max);
        self.insert(
            key,
            Entry {
                val: Val::ZSet(set),
                expires: last * MS,
            },
        );
    }

    /// A sorted set as it is (no member removed) and when its key expires
    /// (node microseconds): the fair lock's queue keys.
    fn zset(&mut self, key: &[u8], clock: f64) -> (BTreeMap<Vec<u8>, f64>, f64) {
        match self.live(key, clock) {
            Some(Entry {
                val: Val::ZSet(set),
                expires,
            }) => (set.clone(), *expires),
            Some(_) => {
                self.wrong_type = true;
                (BTreeMap::new(), f64::INFINITY)
            }
            None => (BTreeMap::new(), f64::INFINITY),
        }
    }

    /// Stores a sorted set with its key's expiry; an empty one is gone, as
    /// in Redis.
    fn put_zset(&mut self, key: &[u8], set: BTreeMap<Vec<u8>, f64>, expires: f64) {
        if set.is_empty() {
            self.remove(key);
            return;
        }
        self.insert(
            key,
            Entry {
                val: Val::ZSet(set),
                expires,
            },
        );
    }

    fn counter(&mut self, key: &[u8], clock: f64) -> u64 {
        self.get_str(key, clock).map_or(0, |v| {
            std::str::from_utf8(&v)
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        })
    }

    /// Runs one request at node time `clock` (microseconds): its script, or
    /// the plain command `native`. A request that reads a key of another
    /// type (another program's hash at a lock's name, say) answers
    /// [`WRONGTYPE`] and writes nothing after that read, as a script stops
    /// at its error (what it wrote before stays, as in Redis).
    pub fn try_run(
        &mut self,
        clock: f64,
        request: &Request,
        native: Option<Native>,
    ) -> Result<Response, &'static str> {
        let response = match native {
            Some(native) => self.native(clock, request, native),
            None => self.script(clock, request),
        };
        if std::mem::take(&mut self.wrong_type) {
            return Err(WRONGTYPE);
        }
        Ok(response)
    }

    /// Runs one request's script at node time `clock` (microseconds), in a
    /// simulation that never puts a key of another type.
    pub fn run(&mut self, clock: f64, request: &Request) -> Response {
        self.try_run(clock, request, None)
            .unwrap_or_else(|error| panic!("{error}: {request:?}"))
    }

    /// Runs one request as the plain command `native`, as [`run`](Self::run).
    pub fn run_native(&mut self, clock: f64, request: &Request, native: Native) -> Response {
        self.try_run(clock, request, Some(native))
            .unwrap_or_else(|error| panic!("{error}: {request:?}"))
    }

    /// Puts a hash at `key` (no expiry): another program's data at a name a
    /// lock then asks for.
    pub fn put_hash(&mut self, key: &[u8]) {
        self.data.insert(
            key.to_vec(),
            Entry {
                val: Val::Hash(BTreeMap::from([(b"field".to_vec(), b"value".to_vec())])),
                expires: f64::INFINITY,
            },
        );
    }

    /// Runs one request as the plain command `native` at node time `clock`
    /// (microseconds), answering as Redis 7.0.15 and Valkey 9.1.2 do (checked
    /// by hand with redis-cli).
    fn native(&mut self, clock: f64, request: &Request, native: Native) -> Response {
        let key = request.key().as_bytes();
        let ours = request.value.as_bytes();
        match native {
            // `SET key value NX PX ttl GET`: the holder's whole value, or
            // nil and the key set.
            Native::SetNxGet => match self.get_str(key, clock) {
                Some(held) => Response::Data(held),
                None => {
                    let ttl = request.command.ttl().expect("an acquire has a TTL");
                    self.set_str(key, ours, clock, ttl.as_millis());
                    Response::Nil
                }
            },
            // `DELIFEQ key value`: 1 deleted, 0 absent or another value.
            Native::DelIfEq => match self.get_str(key, clock) {
                Some(held) if held == ours => {
                    self.del(key);
                    Response::Int(1)
                }
                _ => Response::Int(0),
            },
            // `SET key value IFEQ value PX ttl GET`: the value found (the TTL
            // set when it is ours), or nil and nothing set.
            Native::SetIfEqGet => match self.get_str(key, clock) {
                Some(held) => {
                    if held == ours {
                        let ttl = request.command.ttl().expect("an extend has a TTL");
                        self.pexpire(key, clock, ttl.as_millis());
                    }
                    Response::Data(held)
                }
                None => Response::Nil,
            },
            other => panic!("the simulation does not know {other:?}"),
        }
    }

    /// An empty node whose wall clock reads `epoch` microseconds at node
    /// time 0.
    pub fn with_epoch(epoch: f64) -> Self {
        Self {
            epoch,
            ..Self::default()
        }
    }

    /// `TIME` in microseconds at node time `clock`.
    fn time(&self, clock: f64) -> i64 {
        (self.epoch + clock).floor() as i64
    }

    /// Runs one request's script at node time `clock` (microseconds).
    fn script(&mut self, clock: f64, request: &Request) -> Response {
        let keys: Vec<&[u8]> = request.keys.iter().map(|k| k.as_bytes()).collect();
        let ours = request.value.as_bytes();
        let now_ms = (clock / MS).floor();
        // An extend sets a missing lock again only as a restore.
        let restore = matches!(request.command, Command::Restore { .. });
        match (&request.kind, request.command) {
            (kind, Command::AcquireFenced { ttl })
                if !matches!(kind, LockKind::Semaphore { .. }) =>
            {
                match self.get_str(keys[0], clock) {
                    Some(held) => self.held_by(keys[0], held, request, clock),
                    None => {
                        self.set_str(keys[0], ours, clock, ttl.as_millis());
                        let counter = self.counter(keys[1], clock) as i64;
                        Response::Array(vec![
                            Response::Int(1),
                            Response::Int(counter),
                            Response::Int(self.time(clock)),
                        ])
                    }
                }
            }
            (_, Command::StoreToken { token }) => match self.get_str(keys[0], clock) {
                Some(held) if is_ours(&held, ours) => {
                    let counter = self.counter(keys[1], clock).max(token);
                    self.insert(
                        keys[1],
                        Entry {
                            val: Val::Str(counter.to_string().into_bytes()),
                            expires: f64::INFINITY,
                        },
                    );
                    Response::Int(1)
                }
                Some(_) => Response::Int(0),
                None => Response::Int(-1),
            },
            (LockKind::Exclusive, Command::Acquire { ttl }) => match self.get_str(keys[0], clock) {
                Some(held) => self.held_by(keys[0], held, request, clock),
                None => {
                    self.set_str(keys[0], ours, clock, ttl.as_millis());
                    Response::Int(1)
                }
            },
            (
                LockKind::Exclusive | LockKind::Fair { .. },
                Command::Extend { ttl } | Command::Restore { ttl },
            ) => {
                // A permit's extend keeps its semaphore's permits key.
                let keep = |this: &mut Self| {
                    if let (Some(permits), Some(k)) = (keys.last(), &request.payload) {
                        this.keep_permits(permits, k, clock, ttl.as_millis());
                    }
                };
                match self.get_str(keys[0], clock) {
                    Some(held) if is_ours(&held, ours) => {
                        self.pexpire(keys[0], clock, ttl.as_millis());
                        keep(self);
                        Response::Int(1)
                    }
                    Some(_) => Response::Int(0),
                    None if !restore => Response::Int(-1),
                    None => {
                        self.set_str(keys[0], ours, clock, ttl.as_millis());
                        keep(self);
                        Response::Int(2)
                    }
                }
            }
            // `MARK_WAITING`: the mark holds the client that marked last,
            // its TTL only ever grows, and overwriting another client's
            // mark keeps the others mark alive as long as that mark had.
            (_, Command::MarkWaiting { ttl }) => {
                let ms = ttl.as_millis() as f64;
                let client = request.client.as_ref().unwrap_or(&request.value).as_bytes();
                let left = self.pttl(keys[1], clock) as f64;
                let mark = self.pget(keys[1], clock).unwrap_or(None);
                if mark.as_deref().is_some_and(|mark| mark != client)
                    && left > 0.0
                    && (self.pttl(keys[2], clock) as f64) < left
                {
                    self.set_str(keys[2], b"1", clock, left as u64);
                }
                if mark.as_deref() != Some(client) || left < ms {
                    self.set_str(keys[1], client, clock, left.max(ms) as u64);
                }
                let held = self.pget(keys[0], clock).unwrap_or(None);
                if let Some(held) = held.filter(|held| held != ours) {
                    let client = client.to_vec();
                    self.mark_held(keys[0], &held, &client, clock);
                }
                Response::Int(1)
            }
            // `SEMAPHORE_RELEASE`: a permit's release (it names its
            // semaphore's k): our slot as `RELEASE_IF_WAITED`, and the
            // permits key once no slot is held, where it keeps our k. Every
            // slot and the permits key are read before the first write.
            (LockKind::Exclusive, Command::Release | Command::Withdraw)
                if request.payload.is_some() =>
            {
                let (permits, rest) = keys.split_last().expect("a permit's permits key");
                let slots = rest.get(3..).unwrap_or_default();
                let held = self.get_str(keys[0], clock);
                let mine = held.as_deref().is_some_and(|held| is_ours(held, ours));
                let taken = held.is_some() && !mine;
                let mut others = taken;
                for slot in slots {
                    if *slot != keys[0] && self.get_str(slot, clock).is_some() {
                        others = true;
                    }
                }
                let k = slots.len().to_string().into_bytes();
                let gone = self.get_str(permits, clock) == Some(k) && !others;
                let Some(held) = held.filter(|_| mine) else {
                    if gone {
                        self.del(permits);
                    }
                    // Our slot held by another value (a slot held, so the
                    // permits key stays), or absent.
                    return Response::Int(if taken { 0 } else { -1 });
                };
                let notice = request.command == Command::Release;
                let answer = if notice {
                    let client = request.client.as_ref().map(|client| client.as_bytes());
                    let alone = held == ours || held.get(ours.len() + 1..) == client;
                    match self.pget(keys[1], clock) {
                        Ok(None) if alone => 1,
                        Ok(Some(mark))
                            if alone
                                && Some(mark.as_slice()) == client
                                && self.live(keys[2], clock).is_none() =>
                        {
                            1
                        }
                        _ => 3,
                    }
                } else {
                    1
                };
                self.del(keys[0]);
                if gone {
                    self.del(permits);
                }
                Response::Int(answer)
            }
            // `RELEASE_IF_WAITED`: 3 when another client's waiter may be
            // marked (the publish itself is the simulation's, `sim/mod.rs`).
            // Our value marked by our client alone counts as unmarked.
            (LockKind::Exclusive, Command::Release) => match self.get_str(keys[0], clock) {
                Some(held) if is_ours(&held, ours) => {
                    self.del(keys[0]);
                    let (Some(mark), Some(others)) = (keys.get(1), keys.get(2)) else {
                        return Response::Int(3);
                    };
                    let client = request.client.as_ref().map(|client| client.as_bytes());
                    let alone = held == ours || held.get(ours.len() + 1..) == client;
                    // (A mark of another type reads as another client's.)
                    match self.pget(mark, clock) {
                        Ok(None) if alone => Response::Int(1),
                        Ok(Some(mark))
                            if alone
                                && Some(mark.as_slice()) == client
                                && self.live(others, clock).is_none() =>
                        {
                            Response::Int(1)
                        }
                        _ => Response::Int(3),
                    }
                }
                Some(_) => Response::Int(0),
                None => Response::Int(-1),
            },
            // `SEMAPHORE_ACQUIRE`: the first free slot from `start` on;
            // fenced, with that slot's counter (the keys after the slots).
            (
                LockKind::Semaphore { start },
                Command::Acquire { ttl } | Command::AcquireFenced { ttl },
            ) => {
                let fenced = matches!(request.command, Command::AcquireFenced { .. });
                let slots = keys.len() - 1;
                let n = if fenced { slots / 2 } else { slots };
                let (permits, k) = (keys[slots], n.to_string().into_bytes());
                // Another k kept: refused, nothing written.
                if let Some(kept) = self.get_str(permits, clock).filter(|kept| *kept != k) {
                    let theirs = std::str::from_utf8(&kept).ok().and_then(|t| t.parse().ok());
                    return Response::Array(vec![
                        Response::Int(0),
                        Response::Int(theirs.unwrap_or(0)),
                    ]);
                }
                let grant = |this: &mut Self, slot: usize| {
                    let mut items = vec![Response::Int(1), Response::Int(slot as i64)];
                    if fenced {
                        items.push(Response::Int(this.counter(keys[n + slot], clock) as i64));
                        items.push(Response::Int(this.time(clock)));
                    }
                    this.keep_permits(permits, &k, clock, ttl.as_millis());
                    Response::Array(items)
                };
                let (mut free, mut first) = (None, None);
                for i in 0..n {
                    let slot = (*start as usize + i) % n;
                    match self.get_str(keys[slot], clock) {
                        Some(held) if is_ours(&held, ours) => return grant(self, slot),
                        None => {
                            free.get_or_insert(slot);
                        }
                        Some(held) => {
                            first.get_or_insert(held);
                        }
                    }
                }
                match free {
                    Some(slot) => {
                        self.set_str(keys[slot], ours, clock, ttl.as_millis());
                        grant(self, slot)
                    }
                    None => Response::Data(first.unwrap_or_default()),
                }
            }
            // `SEMAPHORE_WITHDRAW`: our value out of every slot but the one
            // it keeps (its `ARGV[2]`, the request's payload), and the
            // permits key with the last slot held, where it keeps our k.
            (LockKind::Semaphore { .. }, Command::Release | Command::Withdraw) => {
                let (permits, slots) = keys.split_last().expect("a semaphore's permits key");
                let keep = request
                    .payload
                    .as_deref()
                    .and_then(|slot| std::str::from_utf8(slot).ok()?.parse::<usize>().ok());
                // Every slot is read before the first delete: a slot of
                // another type stops it with nothing deleted.
                let (mut mine, mut others) = (Vec::new(), false);
                for (slot, key) in slots.iter().enumerate() {
                    match self.get_str(key, clock) {
                        // Kept: a slot held, so the permits key stays too.
                        Some(held) if is_ours(&held, ours) && keep == Some(slot) => others = true,
                        Some(held) if is_ours(&held, ours) => mine.push(*key),
                        Some(_) => others = true,
                        None => {}
                    }
                }
                let k = slots.len().to_string().into_bytes();
                let gone = !others && self.get_str(permits, clock) == Some(k);
                for key in &mine {
                    self.del(key);
                }
                if gone {
                    self.del(permits);
                }
                Response::Int(if mine.is_empty() { -1 } else { 1 })
            }
            (
                LockKind::Exclusive | LockKind::Write { .. },
                Command::Release | Command::Withdraw,
            ) => match self.get_str(keys[0], clock) {
                Some(held) if is_ours(&held, ours) => {
                    self.del(keys[0]);
                    Response::Int(1)
                }
                Some(_) => Response::Int(0),
                None => Response::Int(-1),
            },
            (LockKind::Read, Command::Acquire { ttl }) => {
                if let Some(writer) = self.get_str(keys[0], clock) {
                    return Response::Data(writer[..writer.len().min(64)].to_vec());
                }
                if self.get_str(keys[2], clock).is_some() {
                    return Response::Data(b"writer-waiting".to_vec());
                }
                let mut set = self.readers(keys[1], clock);
                set.insert(ours.to_vec(), now_ms + ttl.as_millis() as f64);
                self.put_readers(keys[1], set);
                Response::Int(1)
            }
            (LockKind::Read, Command::Extend { ttl } | Command::Restore { ttl }) => {
                let mut set = self.readers(keys[1], clock);
                let mut code = 1;
                if !set.contains_key(ours) {
                    if self.get_str(keys[0], clock).is_some() {
                        self.put_readers(keys[1], set);
                        return Response::Int(0);
                    }
                    if !restore {
                        self.put_readers(keys[1], set);
                        return Response::Int(-1);
                    }
                    code = 2;
                }
                set.insert(ours.to_vec(), now_ms + ttl.as_millis() as f64);
                self.put_readers(keys[1], set);
                Response::Int(code)
            }
            (LockKind::Read, Command::Release | Command::Withdraw) => {
                let mut set = self.readers(keys[1], clock);
                let removed = set.remove(ours).is_some();
                self.put_readers(keys[1], set);
                Response::Int(if removed { 1 } else { -1 })
            }
            (LockKind::Write { readers_hold_off }, Command::Acquire { ttl }) => {
                if let Some(writer) = self.get_str(keys[0], clock) {
                    return Response::Data(writer[..writer.len().min(64)].to_vec());
                }
                let set = self.readers(keys[1], clock);
                let busy = !set.is_empty();
                self.put_readers(keys[1], set);
                if busy {
                    if readers_hold_off.as_millis() > 0 {
                        self.set_str(keys[2], ours, clock, readers_hold_off.as_millis());
                    }
                    return Response::Data(b"readers".to_vec());
                }
                self.set_str(keys[0], ours, clock, ttl.as_millis());
                self.del(keys[2]);
                Response::Int(1)
            }
            (LockKind::Write { .. }, Command::Extend { ttl } | Command::Restore { ttl }) => {
                match self.get_str(keys[0], clock) {
                    Some(held) if held == ours => {
                        self.pexpire(keys[0], clock, ttl.as_millis());
                        return Response::Int(1);
                    }
                    Some(_) => return Response::Int(0),
                    None => {}
                }
                let set = self.readers(keys[1], clock);
                let busy = !set.is_empty();
                self.put_readers(keys[1], set);
                if busy {
                    return Response::Int(0);
                }
                if !restore {
                    return Response::Int(-1);
                }
                self.set_str(keys[0], ours, clock, ttl.as_millis());
                Response::Int(2)
            }
            (LockKind::Reentrant { owner }, command) => {
                self.reentrant(keys[0], ours, owner.as_bytes(), clock, command)
            }
            (LockKind::Multi, Command::Acquire { ttl }) => {
                for key in &keys {
                    if let Some(held) = self.get_str(key, clock) {
                        return self.held_by(key, held, request, clock);
                    }
                }
                for key in &keys {
                    self.set_str(key, ours, clock, ttl.as_millis());
                }
                Response::Int(1)
            }
            (LockKind::Multi, Command::Extend { ttl } | Command::Restore { ttl }) => {
                let mut missing = false;
                for key in &keys {
                    match self.get_str(key, clock) {
                        Some(held) if !is_ours(&held, ours) => return Response::Int(0),
                        Some(_) => {}
                        None => missing = true,
                    }
                }
                if missing && !restore {
                    return Response::Int(-1);
                }
                let mut code = 1;
                for key in &keys {
                    if self.get_str(key, clock).is_some() {
                        self.pexpire(key, clock, ttl.as_millis());
                    } else {
                        self.set_str(key, ours, clock, ttl.as_millis());
                        code = 2;
                    }
                }
                Response::Int(code)
            }
            (LockKind::Multi, Command::Release | Command::Withdraw) => {
                let (mut released, mut others) = (0, 0);
                for key in &keys {
                    match self.get_str(key, clock) {
                        Some(held) if is_ours(&held, ours) => {
                            self.del(key);
                            released += 1;
                        }
                        Some(_) => others += 1,
                        None => {}
                    }
                }
                Response::Int(if released > 0 {
                    1
                } else if others > 0 {
                    0
                } else {
                    -1
                })
            }
            // `{value, pttl, counter}` (scripts::INSPECT): PTTL in whole
            // node milliseconds, -2 for no key, -1 for no expiry.
            (_, Command::Inspect) => {
                let value = self.get_str(keys[0], clock);
                let pttl = match self.data.get(keys[0]) {
                    None => -2,
                    Some(entry) if entry.expires.is_infinite() => -1,
                    Some(entry) => ((entry.expires / MS).floor() - now_ms) as i64,
                };
                let counter = match self.live(keys[1], clock) {
                    Some(Entry {
                        val: Val::Str(counter),
                        ..
                    }) => Response::Data(counter.clone()),
                    _ => Response::Nil,
                };
                Response::Array(vec![
                    value.map_or(Response::Nil, Response::Data),
                    Response::Int(pttl),
                    counter,
                ])
            }
            (
                LockKind::Fair {
                    waiter,
                    entry,
                    by_queue,
                    ticket,
                },
                Command::Acquire { ttl },
            ) => {
                let waiter = waiter.as_bytes();
                let held = self.get_str(keys[0], clock);
                let (mut order, _) = self.zset(keys[1], clock);
                let (mut expiry, _) = self.zset(keys[2], clock);
                let dead: Vec<Vec<u8>> = expiry
                    .iter()
                    .filter(|(_, score)| **score <= now_ms)
                    .map(|(member, _)| member.clone())
                    .collect();
                for member in &dead {
                    order.remove(member);
                    expiry.remove(member);
                }
                let ticket = *ticket as f64;
                let tail = order.values().cloned().fold(0.0, f64::max);
                let score = order
                    .entry(waiter.to_vec())
                    .or_insert((tail + 1.0).max(ticket));
                *score = score.max(ticket);
                let score = *score;
                expiry.insert(waiter.to_vec(), now_ms + entry.as_millis() as f64);
                let last = expiry.values().cloned().fold(f64::MIN, f64::max) * MS;
                let mut ranked: Vec<(&Vec<u8>, &f64)> = order.iter().collect();
                ranked.sort_by(|a, b| a.1.total_cmp(b.1).then_with(|| a.0.cmp(b.0)));
                let position = ranked.iter().position(|(m, _)| m.as_slice() == waiter);
                let position = position.expect("just added") as i64 + 1;
                self.put_zset(keys[1], order, last);
                self.put_zset(keys[2], expiry, last);
                match held {
                    Some(held) => Response::Data(held[..held.len().min(64)].to_vec()),
                    None if !*by_queue || position == 1 => {
                        self.set_str(keys[0], ours, clock, ttl.as_millis());
                        Response::Int(1)
                    }
                    None => Response::Array(vec![
                        Response::Int(0),
                        Response::Int(position),
                        Response::Int(score as i64),
                    ]),
                }
            }
            (
                LockKind::Fair { waiter, .. },
                command @ (Command::Release | Command::Withdraw | Command::Leave),
            ) => {
                let mut left = false;
                if command != Command::Withdraw {
                    for key in &keys[1..3] {
                        let (mut set, expires) = self.zset(key, clock);
                        // The script answers by the order key's ZREM.
                        let removed = set.remove(waiter.as_bytes()).is_some();
                        left = left || (removed && *key == keys[1]);
                        self.put_zset(key, set, expires);
                    }
                }
                if command == Command::Leave {
                    return Response::Int(if left { 1 } else { -1 });
                }
                match self.get_str(keys[0], clock) {
                    Some(held) if held == ours => {
                        self.del(keys[0]);
                        Response::Int(1)
                    }
                    Some(_) => Response::Int(0),
                    None => Response::Int(-1),
                }
            }
            // `PROCLAIM`: the leader's record, only by the holder of the
            // lock and only for a term no older than the counter's and the
            // record's.
            (_, Command::Proclaim { term }) => match self.get_str(keys[0], clock) {
                Some(held) if is_ours(&held, ours) => {
                    let counter = self
                        .pget(keys[1], clock)
                        .ok()
                        .flatten()
                        .and_then(|v| std::str::from_utf8(&v).ok()?.parse().ok())
                        .unwrap_or(0);
                    let stored = self
                        .pget(keys[2], clock)
                        .ok()
                        .flatten()
                        .map(|record| {
                            let digits: Vec<u8> = record
                                .iter()
                                .copied()
                                .take_while(u8::is_ascii_digit)
                                .collect();
                            String::from_utf8_lossy(&digits).parse::<u64>().unwrap_or(0)
                        })
                        .unwrap_or(0);
                    if counter > term || stored > term {
                        return Response::Int(-1);
                    }
                    let mut record = term.to_string().into_bytes();
                    record.push(0);
                    record.extend_from_slice(ours);
                    record.push(0);
                    record.extend_from_slice(request.payload.as_deref().unwrap_or_default());
                    self.insert(
                        keys[2],
                        Entry {
                            val: Val::Str(record),
                            expires: f64::INFINITY,
                        },
                    );
                    Response::Int(1)
                }
                _ => Response::Int(0),
            },
            // `READ_LEADER`: `{value, counter, record}`, each nil if absent.
            (_, Command::ReadLeader) => {
                let read = |this: &mut Self, key: &[u8]| match this.live(key, clock) {
                    Some(Entry {
                        val: Val::Str(bytes),
                        ..
                    }) => Response::Data(bytes.clone()),
                    _ => Response::Nil,
                };
                Response::Array(vec![
                    read(self, keys[0]),
                    read(self, keys[1]),
                    read(self, keys[2]),
                ])
            }
            (kind, command) => panic!("the simulation does not know {command:?} on {kind:?}"),
        }
    }

    fn reentrant(
        &mut self,
        key: &[u8],
        ours: &[u8],
        owner: &[u8],
        clock: f64,
        command: Command,
    ) -> Response {
        let entry = self.live(key, clock).cloned();
        let fresh = |ttl_ms: u64| Entry {
            val: Val::Hash(BTreeMap::from([
                (b"owner".to_vec(), owner.to_vec()),
                (ours.to_vec(), b"1".to_vec()),
            ])),
            expires: clock + ttl_ms as f64 * MS,
        };
        let Some(mut entry) = entry else {
            return match command {
                Command::Acquire { ttl } => {
                    self.insert(key, fresh(ttl.as_millis()));
                    Response::Int(1)
                }
                Command::Extend { .. } => Response::Int(-1),
                Command::Restore { ttl } => {
                    self.insert(key, fresh(ttl.as_millis()));
                    Response::Int(2)
                }
                _ => Response::Int(-1),
            };
        };
        let Val::Hash(fields) = &mut entry.val else {
            self.wrong_type = true;
            return Response::Nil;
        };
        let holder = fields.get(b"owner".as_slice()).cloned();
        if holder.as_deref() != Some(owner) {
            return match command {
                // A hash without an owner (another program's): `?`.
                Command::Acquire { .. } => {
                    let holder = holder.unwrap_or_else(|| b"?".to_vec());
                    Response::Data(holder[..holder.len().min(64)].to_vec())
                }
                _ => Response::Int(0),
            };
        }
        let raise = |entry: &mut Entry, ttl_ms: u64| {
            let until = clock + ttl_ms as f64 * MS;
            if entry.expires < until {
                entry.expires = until;
            }
        };
        let response = match command {
            Command::Acquire { ttl } => {
                fields.insert(ours.to_vec(), b"1".to_vec());
                raise(&mut entry, ttl.as_millis());
                Response::Int(1)
            }
            Command::Extend { .. } if !fields.contains_key(ours) => return Response::Int(-1),
            Command::Extend { ttl } | Command::Restore { ttl } => {
                let code = if fields.insert(ours.to_vec(), b"1".to_vec()).is_some() {
                    1
                } else {
                    2
                };
                raise(&mut entry, ttl.as_millis());
                Response::Int(code)
            }
            Command::Release | Command::Withdraw => {
                if fields.remove(ours).is_none() {
                    return Response::Int(-1);
                }
                if fields.len() <= 1 {
                    self.remove(key);
                    return Response::Int(1);
                }
                Response::Int(1)
            }
            other => panic!("reentrant {other:?}"),
        };
        self.insert(key, entry);
        response
    }
}
