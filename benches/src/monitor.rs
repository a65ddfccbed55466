//! Which commands a node receives from clients, by name, with `MONITOR`.
//!
//! `INFO commandstats` also counts the commands a script runs (an `EVALSHA`
//! whose script does `GET` and `SET` counts three calls), so it cannot tell
//! "one command per node" from "one script per node". `MONITOR` can: it shows
//! a script's own commands with the source `lua` instead of a client address.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, ErrorKind, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long a read waits before checking whether to stop.
const POLL: Duration = Duration::from_millis(50);
/// After `stop`, how long at most to keep draining.
const DRAIN: Duration = Duration::from_secs(5);
/// A bound on the lines read, besides time.
const MAX_LINES: u64 = 50_000_000;

/// Commands seen by one node.
#[derive(Clone, Debug, Default)]
pub(crate) struct Seen {
    /// Sent by clients, by lower-case name (`script|load` for subcommands).
    pub(crate) from_clients: BTreeMap<String, u64>,
    /// Run inside scripts.
    pub(crate) inside_scripts: BTreeMap<String, u64>,
}

/// A `MONITOR` connection to one node, read on its own thread.
pub(crate) struct Monitor {
    stop: Arc<AtomicBool>,
    reader: JoinHandle<Result<Seen, String>>,
}

impl Monitor {
    /// Connects to `127.0.0.1:port` and starts monitoring; returns once the
    /// node confirmed, so every command sent after this is seen.
    pub(crate) fn start(port: u16) -> Result<Self, String> {
        let mut stream = TcpStream::connect(("127.0.0.1", port))
            .map_err(|err| format!("MONITOR on port {port}: {err}"))?;
        let io = |err: std::io::Error| format!("MONITOR on port {port}: {err}");
        stream
            .set_read_timeout(Some(Duration::from_secs(2)))
            .map_err(io)?;
        stream.write_all(b"MONITOR\r\n").map_err(io)?;
        let mut reader = BufReader::new(stream);
        let mut first = Vec::new();
        reader.read_until(b'\n', &mut first).map_err(io)?;
        if !first.starts_with(b"+OK") {
            return Err(format!(
                "MONITOR on port {port}: answered {:?}",
                String::from_utf8_lossy(&first)
            ));
        }
        reader.get_ref().set_read_timeout(Some(POLL)).map_err(io)?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let reader = std::thread::spawn(move || read(reader, &flag));
        Ok(Self { stop, reader })
    }

    /// Stops after the lines already sent have been read (none for one poll).
    pub(crate) fn finish(self) -> Result<Seen, String> {
        self.stop.store(true, Ordering::Release);
        self.reader
            .join()
            .map_err(|_| "the MONITOR reader panicked".to_owned())?
    }
}

fn read(mut reader: BufReader<TcpStream>, stop: &AtomicBool) -> Result<Seen, String> {
    let mut seen = Seen::default();
    let mut line = Vec::new();
    let mut stopping_since = None;
    for _ in 0..MAX_LINES {
        match reader.read_until(b'\n', &mut line) {
            Ok(0) => break,
            Ok(_) => {
                if line.ends_with(b"\n") {
                    record(&line, &mut seen);
                    line.clear();
                }
            }
            Err(err) if matches!(err.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                // Nothing for a whole poll: done if asked to stop.
                if stop.load(Ordering::Acquire) {
                    break;
                }
            }
            Err(err) => return Err(format!("MONITOR: {err}")),
        }
        if stop.load(Ordering::Acquire) {
            let since = *stopping_since.get_or_insert_with(Instant::now);
            if since.elapsed() > DRAIN {
                break;
            }
        }
    }
    Ok(seen)
}

/// `+1700000000.123456 [0 127.0.0.1:5555] "EVALSHA" "..."`, or `[0 lua]` for
/// a command a script ran.
fn record(line: &[u8], seen: &mut Seen) {
    let line = String::from_utf8_lossy(line);
    let Some((source, rest)) = line.split_once('[').and_then(|(_, r)| r.split_once(']')) else {
        return;
    };
    let mut words = rest.split('"').skip(1).step_by(2);
    let Some(name) = words.next() else {
        return;
    };
    let mut name = name.to_ascii_lowercase();
    if matches!(name.as_str(), "script" | "client" | "config" | "command")
        && let Some(sub) = words.next()
    {
        name = format!("{name}|{}", sub.to_ascii_lowercase());
    }
    let from_script = source.split_whitespace().nth(1) == Some("lua");
    let map = if from_script {
        &mut seen.inside_scripts
    } else {
        &mut seen.from_clients
    };
    *map.entry(name).or_insert(0) += 1;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_told_apart_by_source() {
        let mut seen = Seen::default();
        record(
            b"+1700000000.1 [0 127.0.0.1:5555] \"EVALSHA\" \"ab\" \"1\" \"k\"\r\n",
            &mut seen,
        );
        record(b"+1700000000.2 [0 lua] \"GET\" \"k\"\r\n", &mut seen);
        record(
            b"+1700000000.3 [0 127.0.0.1:5555] \"SCRIPT\" \"LOAD\" \"return 1\"\r\n",
            &mut seen,
        );
        assert_eq!(seen.from_clients.get("evalsha"), Some(&1));
        assert_eq!(seen.from_clients.get("script|load"), Some(&1));
        assert_eq!(seen.inside_scripts.get("get"), Some(&1));
    }
}
