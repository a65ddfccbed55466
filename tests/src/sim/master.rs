//! One simulated Redis master: RESP over in-memory streams, answers from the
//! core's simulation model (`redlock-core/tests/sim/redis.rs`, which
//! `tests/tests/lua_model.rs` checks against the real Lua), keys expiring in
//! virtual time, and the faults of its [`MasterFaults`].

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use redis::Value;
use redlock_core::{
    Command, Config, Key, LockKind, LockValue, Native, NodeId, Request, Response, RoundId,
    Settings, scripts,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio::sync::{Notify, mpsc};
use tokio::time::Instant;

use super::History;
use super::model::Store;

/// The faults of one master, chosen by the seed.
#[derive(Clone, Debug, Default)]
pub struct MasterFaults {
    /// Each way, every command.
    pub latency: Duration,
    /// Up to this much more each way, drawn per command.
    pub jitter: Duration,
    /// Windows (from the start of the run) in which the master reads,
    /// runs and writes nothing, as a `SIGSTOP`ped process.
    pub pauses: Vec<(Duration, Duration)>,
    /// Per thousand commands, how many drop their connection: half before
    /// the command runs, half after it ran (its reply lost).
    pub drops_per_mille: u32,
    /// When the master restarts empty (out of Redlock's model: only in the
    /// restart mode), refusing connections for a moment.
    pub restart_at: Option<Duration>,
    /// The in-memory stream's buffer each way, in bytes: small ones make a
    /// paused master push back on the client's connection queue.
    pub buffer: usize,
    /// The master answers as Valkey 9.1.2, not Redis 7.0.15: it has
    /// `DELIFEQ` and `SET ... IFEQ ... GET`, so a client with native
    /// commands on releases with one `DELIFEQ` where nobody waited.
    pub valkey: bool,
}

/// A simulated master.
pub(crate) struct Master {
    index: usize,
    seed: u64,
    faults: MasterFaults,
    start: Instant,
    settings: Settings,
    history: Arc<History>,
    state: Mutex<State>,
    /// Woken at a restart: every connection then closes.
    restarted: Notify,
}

struct State {
    store: Store,
    /// The master's clock at exit, once the runtime is about to go: the
    /// blocking connections of an exiting process use it.
    frozen: Option<f64>,
    connections: u64,
    /// Connections dropped mid-request and restarts: after one, a key left
    /// on this master may be one whose release never reached it.
    pub(crate) unanswered: u64,
    generation: u64,
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

impl Master {
    pub(crate) fn new(
        index: usize,
        seed: u64,
        faults: MasterFaults,
        history: Arc<History>,
    ) -> Arc<Self> {
        // Only for turning a TTL argument back into the core's `Ttl`.
        let settings = Config::new(["sim"])
            .node_timeout(Duration::from_millis(1))
            .validate()
            .expect("valid settings");
        Arc::new(Self {
            index,
            seed,
            faults,
            start: Instant::now(),
            settings,
            history,
            state: Mutex::new(State {
                store: Store::default(),
                frozen: None,
                connections: 0,
                unanswered: 0,
                generation: 0,
                subscribers: BTreeMap::new(),
            }),
            restarted: Notify::new(),
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The master's clock: virtual microseconds since the run started.
    fn clock(&self) -> f64 {
        if let Some(frozen) = self.state().frozen {
            return frozen;
        }
        (Instant::now() - self.start).as_secs_f64() * 1e6
    }

    /// When the pause the master is in ends, if it is in one.
    fn paused_until(&self) -> Option<Instant> {
        let at = Instant::now() - self.start;
        self.faults
            .pauses
            .iter()
            .find(|(from, length)| *from <= at && at < *from + *length)
            .map(|(from, length)| self.start + *from + *length)
    }

    async fn wait_while_paused(&self) {
        while let Some(end) = self.paused_until() {
            tokio::time::sleep_until(end).await;
        }
    }

    /// When the last pause ends (the run's end waits for it).
    pub(crate) fn last_pause_end(&self) -> Duration {
        self.faults
            .pauses
            .iter()
            .map(|(from, length)| *from + *length)
            .max()
            .unwrap_or_default()
    }

    /// Whether a key left here may be one whose release never reached it.
    pub(crate) fn missed_requests(&self) -> bool {
        self.state().unanswered > 0
    }

    /// The keys alive now.
    pub(crate) fn live_keys(&self) -> Vec<Vec<u8>> {
        let clock = self.clock();
        self.state().store.live_keys(clock)
    }

    /// Stops the clock here: the runtime is about to be dropped (the
    /// process exits); blocking connections answer at this instant.
    pub(crate) fn freeze(&self) {
        let clock = self.clock();
        self.state().frozen = Some(clock);
    }

    /// Runs the restart fault, if this master has one (a task of the run).
    pub(crate) async fn restart_when_due(self: Arc<Self>) {
        let Some(at) = self.faults.restart_at else {
            return;
        };
        tokio::time::sleep_until(self.start + at).await;
        {
            let mut state = self.state();
            state.store.clear();
            state.generation += 1;
            state.unanswered += 1;
        }
        self.history
            .note(format!("m{} restarted empty", self.index));
        self.restarted.notify_waiters();
    }

    /// A new connection: the client's end of an in-memory stream whose other
    /// end this master serves.
    pub(crate) fn accept(self: &Arc<Self>) -> io::Result<DuplexStream> {
        let (number, generation) = {
            let mut state = self.state();
            state.connections += 1;
            (state.connections, state.generation)
        };
        if self
            .faults
            .restart_at
            .is_some_and(|at| self.start + at <= Instant::now())
            && Instant::now() < self.start + self.faults.restart_at.unwrap() + RESTART_DOWN
        {
            return Err(io::Error::new(
                io::ErrorKind::ConnectionRefused,
                "restarting",
            ));
        }
        let (client, server) = tokio::io::duplex(self.faults.buffer.max(64));
        let rng = StdRng::seed_from_u64(self.seed ^ (self.index as u64) << 48 ^ number << 32);
        tokio::spawn(Arc::clone(self).serve(server, rng, generation, number));
        Ok(client)
    }

    async fn serve(
        self: Arc<Self>,
        stream: DuplexStream,
        mut rng: StdRng,
        generation: u64,
        id: u64,
    ) {
        let (mut reader, mut writer) = tokio::io::split(stream);
        let (replies, mut outbox) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
        let master = Arc::clone(&self);
        // Replies leave in order, each after its own latency.
        let writing = tokio::spawn(async move {
            while let Some((at, bytes)) = outbox.recv().await {
                tokio::time::sleep_until(at).await;
                master.wait_while_paused().await;
                if writer.write_all(&bytes).await.is_err() {
                    return;
                }
            }
        });
        let mut buffer = Vec::new();
        let mut chunk = vec![0_u8; 4096];
        let mut last_reply = Instant::now();
        'connection: loop {
            self.wait_while_paused().await;
            let read = tokio::select! {
                biased;
                () = self.restarted.notified() => break 'connection,
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
                if self.state().generation != generation {
                    break 'connection;
                }
                let drop = rng.random_range(0..1000) < self.faults.drops_per_mille;
                let run_first = rng.random_bool(0.5);
                if drop && !run_first {
                    self.dropped(id, &words, false);
                    break 'connection;
                }
                let reply = match self.subscription(&words, id, &replies) {
                    Some(confirmations) => confirmations,
                    None => self.execute(&words),
                };
                if drop {
                    self.dropped(id, &words, true);
                    break 'connection;
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
        let frozen = self.state().frozen.is_some();
        self.history
            .command(self.index, self.clock(), frozen, words, &bytes);
        Some(bytes)
    }

    /// `PUBLISH channel ""` from a script: a message to every connection
    /// subscribed to it, one latency later.
    fn publish(&self, channel: &[u8]) {
        let mut message = Vec::new();
        let push = Response::Array(vec![
            Response::Data(b"message".to_vec()),
            Response::Data(channel.to_vec()),
            Response::Data(Vec::new()),
        ]);
        encode(&Ok(push), &mut message);
        let at = Instant::now() + self.faults.latency;
        if let Some(subscribers) = self.state().subscribers.get(channel) {
            for outbox in subscribers.values() {
                if outbox.send((at, message.clone())).is_ok() {
                    self.history
                        .notices
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            }
        }
    }

    fn dropped(&self, connection: u64, words: &[Vec<u8>], ran: bool) {
        self.state().unanswered += 1;
        self.history.note(format!(
            "m{} c{connection} dropped at {} ({}ran)",
            self.index,
            String::from_utf8_lossy(&words[0]),
            if ran { "" } else { "not " }
        ));
    }

    fn delay(&self, rng: &mut StdRng) -> Duration {
        let jitter = self.faults.jitter.as_micros() as u64;
        self.faults.latency + Duration::from_micros(rng.random_range(0..=jitter))
    }

    /// Runs one command; its RESP reply.
    fn execute(&self, words: &[Vec<u8>]) -> Vec<u8> {
        let response = self.answer(words);
        let mut bytes = Vec::new();
        encode(&response, &mut bytes);
        let frozen = self.state().frozen.is_some();
        self.history
            .command(self.index, self.clock(), frozen, words, &bytes);
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
            b"INFO" if self.faults.valkey => Ok(Response::Data(
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
            b"EVALSHA" => {
                let sha = std::str::from_utf8(&words[1]).map_err(|e| e.to_string())?;
                let Some(&script) = SHAS.get(sha) else {
                    return Err("NOSCRIPT No matching script.".to_owned());
                };
                let count: usize = number(&words[2])? as usize;
                let keys = &words[3..3 + count];
                let args = &words[3 + count..];
                let request = self.request(script, keys, args)?;
                let response = self.state().store.run(clock, &request);
                // A release that deleted our value and may have a waiter
                // publishes (`RELEASE_IF_WAITED` answers 3; `RELEASE`, with
                // no marks to read, always does; `FAIR_RELEASE` when told
                // to, answering 1).
                let fair = matches!(request.kind, LockKind::Fair { .. });
                let published = if fair {
                    args.get(1).is_some_and(|word| word == b"1") && response == Response::Int(1)
                } else {
                    response == Response::Int(3)
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
                Ok(self
                    .state()
                    .store
                    .run_native(clock, &request, Native::SetNxGet))
            }
            // DELIFEQ key value (Valkey >= 9.0): deletes our value only
            // where no waiter marked it, and publishes nothing.
            b"DELIFEQ" if self.faults.valkey && words.len() == 3 => {
                let request = self.build(&words[1..2], &words[2], Command::Release);
                Ok(self
                    .state()
                    .store
                    .run_native(clock, &request, Native::DelIfEq))
            }
            // SET key value IFEQ value PX ttl GET (Valkey >= 9.0): an
            // exclusive extend.
            b"SET" if self.faults.valkey && words.len() == 8 => {
                let ttl = self.ttl(&words[6])?;
                let request = self.build(&words[1..2], &words[2], Command::Extend { ttl });
                Ok(self
                    .state()
                    .store
                    .run_native(clock, &request, Native::SetIfEqGet))
            }
            // What the `redis` crate sends when connecting.
            b"CLIENT" | b"PING" | b"SELECT" | b"HELLO" => Ok(Response::Other("OK".to_owned())),
            _ => Err(format!(
                "ERR the simulation does not know '{}'",
                String::from_utf8_lossy(&name)
            )),
        }
    }

    fn ttl(&self, word: &[u8]) -> Result<redlock_core::Ttl, String> {
        self.settings
            .ttl(Duration::from_millis(number(word)?))
            .map_err(|e| e.to_string())
    }

    /// The core's request an `EVALSHA` of `script` carries (exclusive and
    /// fenced locks: what the sim's clients take).
    fn request(
        &self,
        script: &'static str,
        keys: &[Vec<u8>],
        args: &[Vec<u8>],
    ) -> Result<Request, String> {
        let arg = |i: usize| args.get(i).ok_or("ERR missing argument".to_owned());
        let command = if script == scripts::ACQUIRE {
            Command::Acquire {
                ttl: self.ttl(arg(1)?)?,
            }
        } else if script == scripts::ACQUIRE_FENCED {
            Command::AcquireFenced {
                ttl: self.ttl(arg(1)?)?,
            }
        } else if script == scripts::EXTEND {
            let ttl = self.ttl(arg(1)?)?;
            if arg(2)? == b"1" {
                Command::Restore { ttl }
            } else {
                Command::Extend { ttl }
            }
        } else if script == scripts::MARK_WAITING {
            Command::MarkWaiting {
                ttl: self.ttl(arg(1)?)?,
            }
        } else if script == scripts::RELEASE || script == scripts::RELEASE_IF_WAITED {
            if arg(1)? == b"1" {
                Command::Release
            } else {
                Command::Withdraw
            }
        } else if script == scripts::STORE_TOKEN {
            Command::StoreToken {
                token: number(arg(1)?)?,
            }
        } else if script == scripts::INSPECT {
            return Ok(self.build(keys, b"", Command::Inspect));
        } else if script == scripts::FAIR_ACQUIRE || script == scripts::FAIR_RELEASE {
            return self.fair(script, keys, args);
        } else {
            return Err("ERR the simulation models the exclusive scripts only".to_owned());
        };
        let mut request = self.build(keys, arg(0)?, command);
        // The client a mark, a waiter's attempt or an exclusive release
        // names, if any.
        if matches!(
            command,
            Command::MarkWaiting { .. }
                | Command::Release
                | Command::Acquire { .. }
                | Command::AcquireFenced { .. }
        ) {
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
            deadline: std::time::Instant::now(),
            give_up_at: std::time::Instant::now(),
            payload: None,
        }
    }
}

/// How long a restarted master refuses connections.
const RESTART_DOWN: Duration = Duration::from_millis(30);

fn number(word: &[u8]) -> Result<u64, String> {
    std::str::from_utf8(word)
        .ok()
        .and_then(|text| text.parse().ok())
        .ok_or_else(|| "ERR value is not an integer".to_owned())
}

fn encode(response: &Result<Response, String>, out: &mut Vec<u8>) {
    match response {
        Err(error) => out.extend_from_slice(format!("-{error}\r\n").as_bytes()),
        Ok(Response::Int(n)) => out.extend_from_slice(format!(":{n}\r\n").as_bytes()),
        Ok(Response::Data(bytes)) => {
            out.extend_from_slice(format!("${}\r\n", bytes.len()).as_bytes());
            out.extend_from_slice(bytes);
            out.extend_from_slice(b"\r\n");
        }
        Ok(Response::Nil) => out.extend_from_slice(b"$-1\r\n"),
        Ok(Response::Array(items)) => {
            out.extend_from_slice(format!("*{}\r\n", items.len()).as_bytes());
            for item in items {
                encode(&Ok(item.clone()), out);
            }
        }
        Ok(Response::Other(status)) => out.extend_from_slice(format!("+{status}\r\n").as_bytes()),
    }
}

/// One command (a RESP array of bulk strings) from the front of `bytes`, and
/// how many bytes it took; `None` until it is complete.
fn parse(bytes: &[u8]) -> Option<(Vec<Vec<u8>>, usize)> {
    fn line(bytes: &[u8], at: usize) -> Option<(usize, usize)> {
        let end = at + bytes.get(at..)?.windows(2).position(|w| w == b"\r\n")?;
        let number = std::str::from_utf8(bytes.get(at + 1..end)?)
            .ok()?
            .parse()
            .ok()?;
        Some((number, end + 2))
    }
    let (count, mut at) = line(bytes, 0)?;
    let mut words = Vec::with_capacity(count);
    for _ in 0..count {
        let (len, start) = line(bytes, at)?;
        words.push(bytes.get(start..start + len)?.to_vec());
        at = start + len + 2;
        if bytes.len() < at {
            return None;
        }
    }
    Some((words, at))
}

/// The blocking connection of a process exiting with guards alive: runs
/// each command on the master at the instant its runtime was dropped; a
/// master paused then times out, as a real one would.
pub(crate) struct Blocking(pub(crate) Arc<Master>);

impl Blocking {
    fn run(&self, packed: &[u8]) -> redis::RedisResult<Value> {
        let master = &self.0;

        let clock = master.clock();
        let at = Duration::from_secs_f64(clock / 1e6);
        if master
            .faults
            .pauses
            .iter()
            .any(|(from, length)| *from <= at && at < *from + *length)
        {
            master.state().unanswered += 1;
            return Err(io::Error::new(io::ErrorKind::TimedOut, "paused").into());
        }
        let (words, _) = parse(packed)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "not one command"))?;
        let words = if words[0].eq_ignore_ascii_case(b"EVAL") {
            // The full script, as a new connection sends it.
            let mut evalsha = words.clone();
            evalsha[0] = b"EVALSHA".to_vec();
            evalsha[1] = sha_of(std::str::from_utf8(&words[1]).unwrap_or_default()).into_bytes();
            evalsha
        } else {
            words
        };
        let response = master.answer(&words);
        let mut bytes = Vec::new();
        encode(&response, &mut bytes);
        let frozen = master.state().frozen.is_some();
        master
            .history
            .command(master.index, clock, frozen, &words, &bytes);
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

fn value(response: Response) -> Value {
    match response {
        Response::Int(n) => Value::Int(n),
        Response::Data(bytes) => Value::BulkString(bytes),
        Response::Nil => Value::Nil,
        Response::Array(items) => Value::Array(items.into_iter().map(value).collect()),
        Response::Other(status) => Value::SimpleString(status),
    }
}

impl redis::ConnectionLike for Blocking {
    fn req_packed_command(&mut self, cmd: &[u8]) -> redis::RedisResult<Value> {
        self.run(cmd)
    }

    fn req_packed_commands(
        &mut self,
        cmd: &[u8],
        offset: usize,
        count: usize,
    ) -> redis::RedisResult<Vec<Value>> {
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
