//! One simulated Redis master: RESP over in-memory streams
//! (`tokio::io::duplex`), answers from the script model (`model.rs`, which
//! `tests/tests/lua_model.rs` checks against the real Lua), keys expiring on
//! the node's clock (virtual time plus any step), and the faults its
//! [`Controls`] say, which a test may change at any moment.

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use redlock_core::native::Native;
use redlock_core::{
    Command, Config, Key, LockKind, LockValue, NodeId, Request, Response, RoundId, Settings,
    scripts,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio::sync::{Notify, mpsc, watch};
use tokio::time::Instant;

use crate::history::{Event, EventKind};
use crate::model::Store;
use crate::resp::{encode, number, parse};

/// What the project's own client sim hears from the nodes: every command
/// with its reply at the node's clock, notes (restarts, dropped
/// connections) and release notices sent. Not for users.
#[doc(hidden)]
pub trait Tap: Send + Sync {
    /// A command node `node` ran at its clock `clock` (microseconds);
    /// `frozen`: on the clock stopped at exit.
    fn command(&self, node: usize, clock: f64, frozen: bool, words: &[Vec<u8>], reply: &[u8]);
    /// Something that happened to a node.
    fn note(&self, text: String);
    /// A release notice reached a subscribed connection.
    fn notice(&self);
}

/// What the nodes of one quorum share: where events go.
pub(crate) struct Shared {
    pub(crate) start: Instant,
    pub(crate) events: Mutex<Vec<Event>>,
    pub(crate) tap: Option<Arc<dyn Tap>>,
}

impl Shared {
    fn note(&self, text: impl FnOnce() -> String) {
        if let Some(tap) = &self.tap {
            tap.note(text());
        }
    }
}

/// The faults of one node, as they are now.
#[derive(Clone, Debug, Default)]
pub(crate) struct Controls {
    /// Each way, every command.
    pub(crate) latency: Duration,
    /// Up to this much more each way, drawn per command.
    pub(crate) jitter: Duration,
    /// Per thousand commands, how many drop their connection: half before
    /// the command runs, half after it ran (its reply lost).
    pub(crate) drops_per_mille: u32,
    /// Windows (from the quorum's start) in which the node reads, runs and
    /// writes nothing.
    pub(crate) windows: Vec<(Duration, Duration)>,
    /// Paused until resumed (`SIGSTOP`).
    pub(crate) paused: bool,
    /// Down: connections refused, none open.
    pub(crate) killed: bool,
    /// Windows (from the quorum's start) in which connections are refused:
    /// the moment a restart takes.
    pub(crate) refusing: Vec<(Duration, Duration)>,
    /// When a scheduled empty restart happens.
    pub(crate) restart_at: Option<Duration>,
    /// Requests read and lost: never run, never answered.
    pub(crate) drop_requests: bool,
    /// Requests run, their replies lost.
    pub(crate) drop_replies: bool,
    /// Lock commands answered with a reply of the wrong shape.
    pub(crate) garbage: bool,
    /// Every command answered `NOAUTH`.
    pub(crate) refuse_auth: bool,
    /// How far the node's clock is ahead of virtual time, in microseconds.
    pub(crate) clock_step: f64,
}

/// A simulated master.
pub(crate) struct Server {
    index: usize,
    seed: u64,
    buffer: usize,
    valkey: bool,
    settings: Settings,
    shared: Arc<Shared>,
    state: Mutex<State>,
    /// Woken at a restart: every connection then closes.
    restarted: Notify,
    /// Sent whenever a control changes (a paused connection waits on it).
    changed: watch::Sender<()>,
}

struct State {
    store: Store,
    controls: Controls,
    /// The node's clock at exit, once the runtime is about to go: the
    /// blocking connections of an exiting process use it.
    frozen: Option<f64>,
    connections: u64,
    /// Requests lost (connections dropped mid-request, restarts, lost
    /// requests or replies): after one, a key left on this node may be one
    /// whose release never reached it.
    unanswered: u64,
    generation: u64,
    /// Bumped by a kill or a restart asked by a test: open connections
    /// close at once, even idle ones.
    closing: u64,
    /// Per channel, the connections subscribed to it (by number, so that a
    /// message reaches them in one order every run), each with its outbox.
    subscribers: BTreeMap<Vec<u8>, BTreeMap<u64, Outbox>>,
}

/// Where a connection's replies and messages wait for their instant.
type Outbox = mpsc::UnboundedSender<(Instant, Vec<u8>)>;

/// The scripts, by SHA1, as `SCRIPT LOAD` answers and `EVALSHA` names them.
static SHAS: LazyLock<HashMap<String, &'static str>> = LazyLock::new(|| {
    scripts::ALL
        .iter()
        .map(|source| (sha_of(source), *source))
        .collect()
});

fn sha_of(source: &str) -> String {
    redis::Script::new(source).get_hash().to_owned()
}

/// How long a restarted node refuses connections.
pub(crate) const RESTART_DOWN: Duration = Duration::from_millis(30);

impl Server {
    pub(crate) fn new(
        index: usize,
        seed: u64,
        buffer: usize,
        valkey: bool,
        shared: Arc<Shared>,
    ) -> Arc<Self> {
        // Only for turning a TTL argument back into the core's `Ttl`.
        let settings = Config::new(["testkit"])
            .node_timeout(Duration::from_millis(1))
            .validate()
            .unwrap_or_else(|error| panic!("fixed settings are valid: {error}"));
        Arc::new(Self {
            index,
            seed,
            buffer,
            valkey,
            settings,
            shared,
            state: Mutex::new(State {
                store: Store::default(),
                controls: Controls::default(),
                frozen: None,
                connections: 0,
                unanswered: 0,
                generation: 0,
                closing: 0,
                subscribers: BTreeMap::new(),
            }),
            restarted: Notify::new(),
            changed: watch::Sender::new(()),
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn start(&self) -> Instant {
        self.shared.start
    }

    /// Changes the controls and wakes whoever waits on them.
    pub(crate) fn control(&self, change: impl FnOnce(&mut Controls)) {
        change(&mut self.state().controls);
        self.changed.send_replace(());
    }

    /// The node's clock: virtual microseconds since the quorum started,
    /// plus any step.
    fn clock(&self) -> f64 {
        let state = self.state();
        if let Some(frozen) = state.frozen {
            return frozen;
        }
        (Instant::now() - self.start()).as_secs_f64() * 1e6 + state.controls.clock_step
    }

    /// Virtual time since the quorum started.
    fn elapsed(&self) -> Duration {
        Instant::now() - self.start()
    }

    /// When the scheduled pause the node is in ends, if it is in one.
    fn paused_until(&self, controls: &Controls) -> Option<Instant> {
        let at = self.elapsed();
        controls
            .windows
            .iter()
            .find(|(from, length)| *from <= at && at < *from + *length)
            .map(|(from, length)| self.start() + *from + *length)
    }

    async fn wait_while_paused(&self) {
        loop {
            let mut changed = self.changed.subscribe();
            let (paused, until) = {
                let state = self.state();
                (state.controls.paused, self.paused_until(&state.controls))
            };
            if paused {
                // The sender lives as long as `self`.
                let _ = changed.changed().await;
                continue;
            }
            match until {
                Some(end) => tokio::time::sleep_until(end).await,
                None => return,
            }
        }
    }

    /// When the last scheduled pause ends.
    pub(crate) fn last_pause_end(&self) -> Duration {
        self.state()
            .controls
            .windows
            .iter()
            .map(|(from, length)| *from + *length)
            .max()
            .unwrap_or_default()
    }

    /// Whether a key left here may be one whose release never reached it.
    pub(crate) fn missed_requests(&self) -> bool {
        self.state().unanswered > 0
    }

    /// The keys alive now that expire.
    pub(crate) fn live_keys(&self) -> Vec<Vec<u8>> {
        let clock = self.clock();
        self.state().store.live_keys(clock)
    }

    /// Puts a hash at `key`, with no expiry.
    pub(crate) fn put_hash(&self, key: &[u8]) {
        self.state().store.put_hash(key);
    }

    /// Every key alive now: value (strings) and time left (`None`: none).
    pub(crate) fn keys(&self) -> Vec<crate::quorum::NodeKey> {
        let clock = self.clock();
        self.state()
            .store
            .snapshot(clock)
            .into_iter()
            .map(|(key, value, expires)| {
                let left = expires.map(|at| Duration::from_secs_f64(((at - clock) / 1e6).max(0.0)));
                crate::quorum::NodeKey {
                    key,
                    value,
                    ttl: left,
                }
            })
            .collect()
    }

    /// Stops the clock here: the runtime is about to be dropped (the
    /// process exits); blocking connections answer at this instant.
    pub(crate) fn freeze(&self) {
        let clock = self.clock();
        self.state().frozen = Some(clock);
    }

    /// Runs the scheduled empty restart, if any (a task of the caller's).
    pub(crate) async fn restart_when_due(self: Arc<Self>) {
        let Some(at) = self.state().controls.restart_at else {
            return;
        };
        tokio::time::sleep_until(self.start() + at).await;
        self.wipe(true, false);
    }

    /// A restart: every connection closes, the data kept or not; a kill
    /// leaves the node down.
    pub(crate) fn restart(&self, empty: bool) {
        let at = self.elapsed();
        self.control(|controls| {
            controls.paused = false;
            controls.killed = false;
            controls.refusing.push((at, RESTART_DOWN));
        });
        self.wipe(empty, true);
    }

    /// Down until restarted.
    pub(crate) fn kill(&self) {
        self.control(|controls| {
            controls.paused = false;
            controls.killed = true;
        });
        self.wipe(false, true);
        self.shared.note(|| format!("m{} killed", self.index));
    }

    fn wipe(&self, empty: bool, close_idle: bool) {
        {
            let mut state = self.state();
            if empty {
                state.store.clear();
            }
            state.generation += 1;
            state.unanswered += 1;
            if close_idle {
                state.closing += 1;
            }
        }
        if empty {
            self.shared
                .note(|| format!("m{} restarted empty", self.index));
        }
        self.restarted.notify_waiters();
        self.changed.send_replace(());
    }

    /// A new connection: the client's end of an in-memory stream whose other
    /// end this node serves.
    pub(crate) fn accept(self: &Arc<Self>) -> io::Result<DuplexStream> {
        let (number, generation, closing, refused) = {
            let mut state = self.state();
            state.connections += 1;
            let at = self.elapsed();
            let controls = &state.controls;
            let refused = controls.killed
                || controls
                    .refusing
                    .iter()
                    .chain(controls.restart_at.map(|at| (at, RESTART_DOWN)).iter())
                    .any(|(from, length)| *from <= at && at < *from + *length);
            (state.connections, state.generation, state.closing, refused)
        };
        if refused {
            return Err(io::Error::new(
                io::ErrorKind::ConnectionRefused,
                "restarting",
            ));
        }
        let (client, server) = tokio::io::duplex(self.buffer.max(64));
        let rng = StdRng::seed_from_u64(self.seed ^ (self.index as u64) << 48 ^ number << 32);
        tokio::spawn(Arc::clone(self).serve(server, rng, (generation, closing), number));
        Ok(client)
    }

    async fn serve(
        self: Arc<Self>,
        stream: DuplexStream,
        mut rng: StdRng,
        (generation, closing): (u64, u64),
        id: u64,
    ) {
        let (mut reader, mut writer) = tokio::io::split(stream);
        let (replies, mut outbox) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
        let server = Arc::clone(&self);
        // Replies leave in order, each after its own latency.
        let writing = tokio::spawn(async move {
            while let Some((at, bytes)) = outbox.recv().await {
                tokio::time::sleep_until(at).await;
                server.wait_while_paused().await;
                if writer.write_all(&bytes).await.is_err() {
                    return;
                }
            }
        });
        let mut buffer = Vec::new();
        let mut chunk = vec![0_u8; 4096];
        let mut last_reply = Instant::now();
        let closed = |this: &Self| this.state().closing != closing;
        'connection: loop {
            self.wait_while_paused().await;
            if closed(&self) {
                break;
            }
            let mut changed = self.changed.subscribe();
            let read = tokio::select! {
                biased;
                () = self.restarted.notified() => break 'connection,
                _ = changed.changed(), if !closed(&self) => continue 'connection,
                read = reader.read(&mut chunk) => read,
            };
            let Ok(read @ 1..) = read else {
                break;
            };
            let arrived = Instant::now();
            buffer.extend_from_slice(&chunk[..read]);
            while let Some((words, used)) = parse(&buffer) {
                buffer.drain(..used);
                tokio::time::sleep_until(arrived + self.delay(&mut rng)).await;
                self.wait_while_paused().await;
                if self.state().generation != generation || closed(&self) {
                    break 'connection;
                }
                let drop = rng.random_range(0..1000) < self.state().controls.drops_per_mille;
                let run_first = rng.random_bool(0.5);
                if drop && !run_first {
                    self.dropped(id, &words, false);
                    break 'connection;
                }
                let (lose_request, lose_reply) = {
                    let controls = &self.state().controls;
                    (controls.drop_requests, controls.drop_replies)
                };
                if lose_request {
                    self.lost(id, &words, false);
                    continue;
                }
                let reply = match self.intercept(&words) {
                    Some(reply) => reply,
                    None => match self.subscription(&words, id, &replies) {
                        Some(confirmations) => confirmations,
                        None => self.execute(&words),
                    },
                };
                if drop {
                    self.dropped(id, &words, true);
                    break 'connection;
                }
                if lose_reply {
                    self.lost(id, &words, true);
                    continue;
                }
                last_reply = last_reply.max(Instant::now() + self.delay(&mut rng));
                if replies.send((last_reply, reply)).is_err() {
                    break 'connection;
                }
            }
        }
        // Both halves dropped: the client reads the end of its stream.
        writing.abort();
        for subscribers in self.state().subscribers.values_mut() {
            subscribers.remove(&id);
        }
    }

    /// The answer of a node that refuses auth or answers garbage, if it
    /// does.
    fn intercept(&self, words: &[Vec<u8>]) -> Option<Vec<u8>> {
        let (refuse_auth, garbage) = {
            let controls = &self.state().controls;
            (controls.refuse_auth, controls.garbage)
        };
        if refuse_auth {
            return Some(b"-NOAUTH Authentication required.\r\n".to_vec());
        }
        let name = words[0].to_ascii_uppercase();
        let lock_command = matches!(name.as_slice(), b"EVALSHA" | b"EVAL" | b"SET" | b"DELIFEQ");
        (garbage && lock_command).then(|| b"+GARBAGE\r\n".to_vec())
    }

    /// `SUBSCRIBE` and `UNSUBSCRIBE` of connection `id`: their
    /// confirmations (RESP2, one per channel), or `None` for other commands.
    fn subscription(&self, words: &[Vec<u8>], id: u64, outbox: &Outbox) -> Option<Vec<u8>> {
        let name = words[0].to_ascii_uppercase();
        let subscribe = match name.as_slice() {
            b"SUBSCRIBE" => true,
            b"UNSUBSCRIBE" => false,
            _ => return None,
        };
        let mut bytes = Vec::new();
        let mut state = self.state();
        for channel in &words[1..] {
            let subscribers = state.subscribers.entry(channel.clone()).or_default();
            if subscribe {
                subscribers.insert(id, outbox.clone());
            } else {
                subscribers.remove(&id);
            }
            let count = state
                .subscribers
                .values()
                .filter(|subscribers| subscribers.contains_key(&id))
                .count();
            let kind: &[u8] = if subscribe {
                b"subscribe"
            } else {
                b"unsubscribe"
            };
            let confirmation = Response::Array(vec![
                Response::Data(kind.to_vec()),
                Response::Data(channel.clone()),
                Response::Int(count as i64),
            ]);
            encode(&Ok(confirmation), &mut bytes);
        }
        drop(state);
        self.tap_command(words, &bytes);
        Some(bytes)
    }

    fn tap_command(&self, words: &[Vec<u8>], reply: &[u8]) {
        if let Some(tap) = &self.shared.tap {
            let frozen = self.state().frozen.is_some();
            tap.command(self.index, self.clock(), frozen, words, reply);
        }
    }

    /// Publishes a release notice on `channel` to its subscribers.
    fn publish(&self, channel: &[u8]) {
        let mut message = Vec::new();
        let push = Response::Array(vec![
            Response::Data(b"message".to_vec()),
            Response::Data(channel.to_vec()),
            Response::Data(Vec::new()),
        ]);
        encode(&Ok(push), &mut message);
        let at = Instant::now() + self.state().controls.latency;
        if let Some(subscribers) = self.state().subscribers.get(channel) {
            for outbox in subscribers.values() {
                if outbox.send((at, message.clone())).is_ok()
                    && let Some(tap) = &self.shared.tap
                {
                    tap.notice();
                }
            }
        }
    }

    fn dropped(&self, connection: u64, words: &[Vec<u8>], ran: bool) {
        self.state().unanswered += 1;
        self.shared.note(|| {
            format!(
                "m{} c{connection} dropped at {} ({}ran)",
                self.index,
                String::from_utf8_lossy(&words[0]),
                if ran { "" } else { "not " }
            )
        });
    }

    fn lost(&self, connection: u64, words: &[Vec<u8>], ran: bool) {
        self.state().unanswered += 1;
        self.shared.note(|| {
            format!(
                "m{} c{connection} lost {} at {}",
                self.index,
                if ran { "the reply" } else { "the request" },
                String::from_utf8_lossy(&words[0]),
            )
        });
    }

    fn delay(&self, rng: &mut StdRng) -> Duration {
        let (latency, jitter) = {
            let controls = &self.state().controls;
            (controls.latency, controls.jitter)
        };
        let jitter = jitter.as_micros() as u64;
        latency + Duration::from_micros(rng.random_range(0..=jitter))
    }

    /// Runs one command; its RESP reply.
    fn execute(&self, words: &[Vec<u8>]) -> Vec<u8> {
        let response = self.answer(words);
        let mut bytes = Vec::new();
        encode(&response, &mut bytes);
        self.tap_command(words, &bytes);
        bytes
    }

    fn answer(&self, words: &[Vec<u8>]) -> Result<Response, String> {
        let name = words[0].to_ascii_uppercase();
        let clock = self.clock();
        match name.as_slice() {
            b"SCRIPT" if words.len() == 3 => {
                let source = std::str::from_utf8(&words[2]).map_err(|e| e.to_string())?;
                Ok(Response::Data(sha_of(source).into_bytes()))
            }
            b"INFO" if self.valkey => Ok(Response::Data(
                format!(
                    "# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\n\
                     valkey_version:9.1.2\r\nrun_id:{:040x}\r\n",
                    self.index + 1
                )
                .into_bytes(),
            )),
            b"INFO" => Ok(Response::Data(
                format!(
                    "# Server\r\nredis_version:7.0.15\r\nrun_id:{:040x}\r\n",
                    self.index + 1
                )
                .into_bytes(),
            )),
            // `EVAL` of a script the client sent in full, after a `NOSCRIPT`.
            b"EVALSHA" | b"EVAL" if words.len() >= 3 => {
                let word = std::str::from_utf8(&words[1]).map_err(|e| e.to_string())?;
                let sha = match name.as_slice() {
                    b"EVAL" => sha_of(word),
                    _ => word.to_owned(),
                };
                let Some(&script) = SHAS.get(sha.as_str()) else {
                    return Err("NOSCRIPT No matching script.".to_owned());
                };
                let count = usize::try_from(number(&words[2])?).unwrap_or(usize::MAX);
                if words.len() < 3 + count {
                    return Err("ERR Number of keys can't be greater than number of args".into());
                }
                let keys = &words[3..3 + count];
                let args = &words[3 + count..];
                let request = self.request(script, keys, args)?;
                let response = self.run(clock, &request, None)?;
                // A release that deleted our value and may have a waiter
                // publishes (`RELEASE_IF_WAITED` answers 3; `RELEASE`, a
                // write lock's, when told to; `FAIR_RELEASE` when told to,
                // answering 1).
                let told = args.get(1).is_some_and(|word| word == b"1");
                let published = match request.kind {
                    LockKind::Fair { .. } => told && response == Response::Int(1),
                    LockKind::Write { .. } => told && response == Response::Int(1),
                    _ => response == Response::Int(3),
                };
                if request.command == Command::Release && published {
                    let mut channel = keys[0].clone();
                    channel.extend_from_slice(b"\0released");
                    self.publish(&channel);
                }
                Ok(response)
            }
            // SET key value NX PX ttl GET: INFO says Redis 7.0.15 or Valkey
            // 9.1.2, which have it, so a client with native commands on
            // sends it.
            b"SET" if words.len() == 7 => {
                let ttl = self.ttl(&words[5])?;
                let request = self.build(&words[1..2], &words[2], Command::Acquire { ttl });
                self.run(clock, &request, Some(Native::SetNxGet))
            }
            // DELIFEQ key value (Valkey >= 9.0): deletes our value only
            // where no waiter marked it, and publishes nothing.
            b"DELIFEQ" if self.valkey && words.len() == 3 => {
                let request = self.build(&words[1..2], &words[2], Command::Release);
                self.run(clock, &request, Some(Native::DelIfEq))
            }
            // SET key value IFEQ value PX ttl GET (Valkey >= 9.0): an
            // exclusive extend.
            b"SET" if self.valkey && words.len() == 8 => {
                let ttl = self.ttl(&words[6])?;
                let request = self.build(&words[1..2], &words[2], Command::Extend { ttl });
                self.run(clock, &request, Some(Native::SetIfEqGet))
            }
            // What the `redis` crate sends when connecting.
            b"CLIENT" | b"PING" | b"SELECT" | b"HELLO" => Ok(Response::Other("OK".to_owned())),
            _ => Err(format!(
                "ERR the simulation does not know '{}'",
                String::from_utf8_lossy(&name)
            )),
        }
    }

    /// Runs `request` on the store, recording what changed for its value:
    /// a key it now holds that it did not (granted), one it holds with
    /// another expiry (extended), one it held and no longer does
    /// (released). A request on a key of another type answers `WRONGTYPE`.
    fn run(
        &self,
        clock: f64,
        request: &Request,
        native: Option<Native>,
    ) -> Result<Response, String> {
        let mut state = self.state();
        #[cfg(feature = "planted-divergence")]
        let planted;
        #[cfg(feature = "planted-divergence")]
        let request = match crate::planted::divergent_release(request, &mut state.store, clock) {
            Some(divergent) => {
                planted = divergent;
                &planted
            }
            None => request,
        };
        let holders = holders(request);
        let before: Vec<Option<f64>> = holders
            .iter()
            .map(|holder| holder.expiry(&state.store, clock))
            .collect();
        let response = state.store.try_run(clock, request, native);
        let at = self.elapsed();
        let mut events = Vec::new();
        for (holder, before) in holders.iter().zip(before) {
            let after = holder.expiry(&state.store, clock);
            let ttl = |expiry: f64| Duration::from_secs_f64(((expiry - clock) / 1e6).max(0.0));
            let kind = match (before, after) {
                (None, Some(expiry)) => EventKind::Granted { ttl: ttl(expiry) },
                (Some(old), Some(new)) if old != new => EventKind::Extended { ttl: ttl(new) },
                (Some(_), None) => EventKind::Released,
                _ => continue,
            };
            events.push(Event {
                at,
                node: self.index,
                key: holder.key.to_vec(),
                value: holder.holder.to_vec(),
                kind,
                shared: holder.shared,
            });
        }
        drop(state);
        if !events.is_empty() {
            self.shared
                .events
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .extend(events);
        }
        response.map_err(str::to_owned)
    }

    fn ttl(&self, word: &[u8]) -> Result<redlock_core::Ttl, String> {
        self.settings
            .ttl(Duration::from_millis(number(word)?))
            .map_err(|e| format!("ERR invalid expire time: {e}"))
    }

    /// The core's request an `EVALSHA` of `script` carries: the inverse of
    /// `Request::script` and `Request::arguments`.
    fn request(
        &self,
        script: &'static str,
        keys: &[Vec<u8>],
        args: &[Vec<u8>],
    ) -> Result<Request, String> {
        let arg = |i: usize| args.get(i).ok_or("ERR missing argument".to_owned());
        let flag = |i: usize| args.get(i).is_some_and(|word| word == b"1");
        let ttl = |i: usize| self.ttl(arg(i)?);
        let extend = |i: usize| -> Result<Command, String> {
            let ttl = ttl(1)?;
            Ok(if flag(i) {
                Command::Restore { ttl }
            } else {
                Command::Extend { ttl }
            })
        };
        let release = if flag(1) {
            Command::Release
        } else {
            Command::Withdraw
        };
        let (kind, command) = if script == scripts::ACQUIRE {
            (LockKind::Exclusive, Command::Acquire { ttl: ttl(1)? })
        } else if script == scripts::ACQUIRE_FENCED {
            (LockKind::Exclusive, Command::AcquireFenced { ttl: ttl(1)? })
        } else if script == scripts::EXTEND {
            // A permit's extend names its semaphore's k last.
            let mut request = self.build(keys, arg(0)?, extend(2)?);
            request.payload = args.get(3).map(|k| Arc::from(k.as_slice()));
            return Ok(request);
        } else if script == scripts::MARK_WAITING {
            (LockKind::Exclusive, Command::MarkWaiting { ttl: ttl(1)? })
        } else if script == scripts::RELEASE_IF_WAITED {
            (LockKind::Exclusive, release)
        } else if script == scripts::SEMAPHORE_RELEASE {
            // A permit's release: its slot, its marks, the semaphore's k
            // slots and its permits key; it names k (`Request::payload`).
            let value: &[u8] = args.first().map_or(b"", Vec::as_slice);
            let mut request = self.build(keys, value, release);
            let k = keys.len().saturating_sub(4).to_string();
            request.payload = Some(Arc::from(k.as_bytes()));
            request.client = args
                .get(2)
                .filter(|_| release == Command::Release)
                .map(|client| LockValue::from_string(String::from_utf8_lossy(client).into_owned()));
            return Ok(request);
        } else if script == scripts::RELEASE {
            // An exclusive lock's withdraw, or a write lock's release or
            // withdraw: the same script, the same model.
            let readers_hold_off = self.settings.default_ttl();
            (LockKind::Write { readers_hold_off }, release)
        } else if script == scripts::STORE_TOKEN {
            let token = number(arg(1)?)?;
            (LockKind::Exclusive, Command::StoreToken { token })
        } else if script == scripts::INSPECT {
            (LockKind::Exclusive, Command::Inspect)
        } else if script == scripts::FAIR_ACQUIRE || script == scripts::FAIR_RELEASE {
            return self.fair(script, keys, args);
        } else if script == scripts::SEMAPHORE_ACQUIRE {
            let start = u32::try_from(number(arg(2)?)?).map_err(|e| e.to_string())?;
            // Fenced: the slots' counters come between them and the
            // permits key.
            let permits = usize::try_from(number(arg(3)?)?).map_err(|e| e.to_string())?;
            let command = if keys.len() > permits + 1 {
                Command::AcquireFenced { ttl: ttl(1)? }
            } else {
                Command::Acquire { ttl: ttl(1)? }
            };
            (LockKind::Semaphore { start }, command)
        } else if script == scripts::SEMAPHORE_WITHDRAW {
            // `ARGV[2]`, if sent, is the slot it keeps (no release flag).
            let value: &[u8] = args.first().map_or(b"", Vec::as_slice);
            let mut request = self.build(keys, value, Command::Withdraw);
            request.kind = LockKind::Semaphore { start: 0 };
            request.payload = args.get(1).map(|slot| Arc::from(slot.as_slice()));
            return Ok(request);
        } else if script == scripts::READ_ACQUIRE {
            (LockKind::Read, Command::Acquire { ttl: ttl(1)? })
        } else if script == scripts::READ_EXTEND {
            (LockKind::Read, extend(2)?)
        } else if script == scripts::READ_RELEASE {
            (LockKind::Read, release)
        } else if script == scripts::WRITE_ACQUIRE {
            let readers_hold_off = ttl(2)?;
            (
                LockKind::Write { readers_hold_off },
                Command::Acquire { ttl: ttl(1)? },
            )
        } else if script == scripts::WRITE_EXTEND {
            let readers_hold_off = self.settings.default_ttl();
            (LockKind::Write { readers_hold_off }, extend(2)?)
        } else if script == scripts::REENTRANT_ACQUIRE
            || script == scripts::REENTRANT_EXTEND
            || script == scripts::REENTRANT_RELEASE
        {
            let owner: Arc<str> = String::from_utf8_lossy(arg(2)?).into();
            let command = if script == scripts::REENTRANT_ACQUIRE {
                Command::Acquire { ttl: ttl(1)? }
            } else if script == scripts::REENTRANT_EXTEND {
                extend(3)?
            } else {
                release
            };
            (LockKind::Reentrant { owner }, command)
        } else if script == scripts::MULTI_ACQUIRE {
            (LockKind::Multi, Command::Acquire { ttl: ttl(1)? })
        } else if script == scripts::MULTI_EXTEND {
            (LockKind::Multi, extend(2)?)
        } else if script == scripts::MULTI_RELEASE {
            (LockKind::Multi, release)
        } else if script == scripts::PROCLAIM {
            let term = number(arg(1)?)?;
            let mut request = self.build(keys, arg(0)?, Command::Proclaim { term });
            request.payload = Some(Arc::from(args.get(2).cloned().unwrap_or_default()));
            return Ok(request);
        } else if script == scripts::READ_LEADER {
            (LockKind::Exclusive, Command::ReadLeader)
        } else {
            return Err("ERR the simulation does not model this script".to_owned());
        };
        let value: &[u8] = args.first().map_or(b"", Vec::as_slice);
        let mut request = self.build(keys, value, command);
        request.kind = kind;
        // The client a mark, a waiter's attempt or an exclusive release
        // names, if any.
        if matches!(request.kind, LockKind::Exclusive | LockKind::Multi)
            && matches!(
                command,
                Command::MarkWaiting { .. }
                    | Command::Release
                    | Command::Acquire { .. }
                    | Command::AcquireFenced { .. }
            )
        {
            request.client = args
                .get(2)
                .map(|client| LockValue::from_string(String::from_utf8_lossy(client).into_owned()));
        }
        Ok(request)
    }

    /// The core's request a fair lock's script carries.
    fn fair(
        &self,
        script: &'static str,
        keys: &[Vec<u8>],
        args: &[Vec<u8>],
    ) -> Result<Request, String> {
        let arg = |i: usize| args.get(i).ok_or("ERR missing argument".to_owned());
        let waiter: Arc<str> = String::from_utf8_lossy(arg(2)?).into();
        let (command, entry, by_queue, ticket) = if script == scripts::FAIR_ACQUIRE {
            let command = Command::Acquire {
                ttl: self.ttl(arg(1)?)?,
            };
            (
                command,
                self.ttl(arg(3)?)?,
                arg(4)? == b"1",
                number(arg(5)?)?,
            )
        } else {
            let command = match arg(3)?.as_slice() {
                b"0" => Command::Withdraw,
                b"1" => Command::Release,
                _ => Command::Leave,
            };
            (command, self.settings.default_ttl(), true, 0)
        };
        let mut request = self.build(keys, arg(0)?, command);
        request.kind = LockKind::Fair {
            waiter,
            entry,
            by_queue,
            ticket,
        };
        Ok(request)
    }

    fn build(&self, keys: &[Vec<u8>], value: &[u8], command: Command) -> Request {
        Request {
            round: RoundId(0),
            node: NodeId(0),
            keys: keys.iter().map(|key| Key::from(key.as_slice())).collect(),
            value: LockValue::from_string(String::from_utf8_lossy(value).into_owned()),
            kind: LockKind::Exclusive,
            command,
            client: None,
            native: false,
            aof: false,
            form: Default::default(),
            deadline: std::time::Instant::now(),
            give_up_at: std::time::Instant::now(),
            payload: None,
        }
    }
}

/// The blocking connection of a process exiting with guards alive: runs
/// each command on the node at the instant its runtime was dropped; a node
/// paused then times out, as a real one would.
pub(crate) struct Blocking(pub(crate) Arc<Server>);

impl Blocking {
    fn run(&self, packed: &[u8]) -> redis::RedisResult<redis::Value> {
        let server = &self.0;
        let clock = server.clock();
        let paused = {
            let state = server.state();
            let at = state.frozen.map_or_else(
                || server.elapsed(),
                |_| Duration::from_secs_f64(clock / 1e6),
            );
            state.controls.paused
                || state.controls.killed
                || state
                    .controls
                    .windows
                    .iter()
                    .any(|(from, length)| *from <= at && at < *from + *length)
        };
        if paused {
            server.state().unanswered += 1;
            return Err(io::Error::new(io::ErrorKind::TimedOut, "paused").into());
        }
        let (words, _) = parse(packed)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "not one command"))?;
        let words = if words[0].eq_ignore_ascii_case(b"EVAL") && words.len() > 1 {
            // The full script, as a new connection sends it.
            let mut evalsha = words.clone();
            evalsha[0] = b"EVALSHA".to_vec();
            evalsha[1] = sha_of(std::str::from_utf8(&words[1]).unwrap_or_default()).into_bytes();
            evalsha
        } else {
            words
        };
        let response = server.answer(&words);
        let mut bytes = Vec::new();
        encode(&response, &mut bytes);
        if let Some(tap) = &server.shared.tap {
            let frozen = server.state().frozen.is_some();
            tap.command(server.index, clock, frozen, &words, &bytes);
        }
        match response {
            Ok(response) => Ok(value(response)),
            Err(error) => Err(redis::RedisError::from((
                redis::ErrorKind::Server(redis::ServerErrorKind::ResponseError),
                "simulated",
                error,
            ))),
        }
    }
}

fn value(response: Response) -> redis::Value {
    match response {
        Response::Int(n) => redis::Value::Int(n),
        Response::Data(bytes) => redis::Value::BulkString(bytes),
        Response::Nil => redis::Value::Nil,
        Response::Array(items) => redis::Value::Array(items.into_iter().map(value).collect()),
        Response::Other(status) => redis::Value::SimpleString(status),
    }
}

impl redis::ConnectionLike for Blocking {
    fn req_packed_command(&mut self, cmd: &[u8]) -> redis::RedisResult<redis::Value> {
        self.run(cmd)
    }

    fn req_packed_commands(
        &mut self,
        cmd: &[u8],
        offset: usize,
        count: usize,
    ) -> redis::RedisResult<Vec<redis::Value>> {
        let mut rest = cmd;
        let mut values = Vec::new();
        while let Some((_, used)) = parse(rest) {
            values.push(self.run(&rest[..used])?);
            rest = &rest[used..];
        }
        Ok(values.into_iter().skip(offset).take(count).collect())
    }

    fn get_db(&self) -> i64 {
        0
    }

    fn check_connection(&mut self) -> bool {
        true
    }

    fn is_open(&self) -> bool {
        true
    }
}

/// Where a request's value may hold a lock, as the history records it.
struct Holder<'a> {
    /// The lock's key (a read lock's name, not its readers set).
    key: &'a [u8],
    /// Who holds it: the lock value, or a reentrant lock's owner.
    holder: &'a [u8],
    /// A reader's hold, shared with other readers.
    shared: bool,
    /// Where the node keeps it.
    place: Place<'a>,
}

enum Place<'a> {
    /// The value at the key (every lock but readers and reentrant ones).
    String,
    /// A member of this readers set.
    Reader(&'a [u8]),
    /// The owner of the reentrant lock's hash at the key.
    Owner,
}

impl Holder<'_> {
    /// When the hold ends on the node (node microseconds), if it holds.
    fn expiry(&self, store: &Store, clock: f64) -> Option<f64> {
        match self.place {
            Place::String => store.expiry_of(self.key, self.holder, clock),
            Place::Reader(set) => store.reader_expiry(set, self.holder, clock),
            Place::Owner => store.owner_expiry(self.key, self.holder, clock),
        }
    }
}

/// The holds a request may change: for a read lock its reader, for a
/// reentrant lock its owner, else its value at each of its keys (a
/// multi-resource lock's several, a semaphore's slots).
fn holders(request: &Request) -> Vec<Holder<'_>> {
    let value = request.value.as_bytes();
    let keys = &request.keys;
    match &request.kind {
        LockKind::Read => vec![Holder {
            key: keys[0].as_bytes(),
            holder: value,
            shared: true,
            place: Place::Reader(keys[1].as_bytes()),
        }],
        LockKind::Reentrant { owner } => vec![Holder {
            key: keys[0].as_bytes(),
            holder: owner.as_bytes(),
            shared: false,
            place: Place::Owner,
        }],
        _ => keys
            .iter()
            .map(|key| Holder {
                key: key.as_bytes(),
                holder: value,
                shared: false,
                place: Place::String,
            })
            .collect(),
    }
}
