//! Faults on the masters of `docker-compose.yml`: the containers of one
//! compose project, found by their compose labels (so `docker compose` and
//! the older `docker-compose` both work; `scripts/chaos.sh` starts and
//! removes the project).
//!
//! - kill / start: `docker kill -s KILL`, `docker start` (the container comes
//!   back empty: the compose file runs Redis without persistence);
//! - pause / resume: `docker pause` / `docker unpause` (cgroup freezer);
//! - partition / heal: `iptables` DROP rules for the Redis port inside the
//!   container's network namespace, entered from the host with
//!   `nsenter -t <pid> -n`: the image needs no tools, and the rules vanish
//!   with the container;
//! - packet loss: the same, with `-m statistic --mode random`;
//! - latency: `tc qdisc ... netem` in the namespace when the kernel has
//!   `sch_netem` ([`Container::netem_available`]), else the suite's proxy.

use std::fmt;
use std::io;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// How long any one `docker`/`nsenter` command may take.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(30);

/// Runs a command to completion within 30 s and returns its
/// stdout; a non-zero exit is an error carrying stderr.
pub fn run(program: &str, args: &[&str]) -> io::Result<String> {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|err| io::Error::new(err.kind(), format!("{program}: {err}")))?;
    let deadline = Instant::now() + COMMAND_TIMEOUT;
    loop {
        if child.try_wait()?.is_some() {
            break;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "`{program} {}` took over {COMMAND_TIMEOUT:?}",
                    args.join(" ")
                ),
            ));
        }
        thread::sleep(Duration::from_millis(5));
    }
    let output = child.wait_with_output()?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
    } else {
        Err(io::Error::other(format!(
            "`{program} {}` failed ({}): {}",
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        )))
    }
}

/// Whether a Docker engine answers.
pub fn docker_available() -> bool {
    run("docker", &["info", "--format", "{{.ServerVersion}}"]).is_ok()
}

/// One master's container in a compose project.
#[derive(Clone)]
pub struct Container {
    /// The compose service (`redis1`..`redis5`).
    pub service: String,
    /// The container id.
    pub id: String,
    /// The port it is published on at `127.0.0.1`.
    pub port: u16,
}

impl fmt::Debug for Container {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ({}, 127.0.0.1:{})",
            self.service,
            &self.id[..self.id.len().min(12)],
            self.port
        )
    }
}

/// The iptables rule specs (after the chain name) of a partition.
const PARTITION_RULES: [[&str; 7]; 2] = [
    ["INPUT", "-p", "tcp", "--dport", "6379", "-j", "DROP"],
    ["OUTPUT", "-p", "tcp", "--sport", "6379", "-j", "DROP"],
];

impl Container {
    /// The container of `service` in compose `project`, published on `port`.
    pub fn find(project: &str, service: &str, port: u16) -> io::Result<Self> {
        let id = run(
            "docker",
            &[
                "ps",
                "--all",
                "--quiet",
                "--no-trunc",
                "--filter",
                &format!("label=com.docker.compose.project={project}"),
                "--filter",
                &format!("label=com.docker.compose.service={service}"),
            ],
        )?;
        let id = id.lines().next().unwrap_or_default().trim().to_owned();
        if id.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("no container for service {service} in compose project {project}"),
            ));
        }
        Ok(Self {
            service: service.to_owned(),
            id,
            port,
        })
    }

    /// The pid of the container's main process (0 when not running).
    pub fn pid(&self) -> io::Result<u32> {
        run(
            "docker",
            &["inspect", "--format", "{{.State.Pid}}", &self.id],
        )?
        .parse()
        .map_err(|err| io::Error::other(format!("{self:?}: pid: {err}")))
    }

    /// `docker kill -s KILL`.
    pub fn kill(&self) -> io::Result<()> {
        run("docker", &["kill", "--signal", "KILL", &self.id]).map(drop)
    }

    /// `docker start` (empty data set: no persistence).
    pub fn start(&self) -> io::Result<()> {
        run("docker", &["start", &self.id]).map(drop)
    }

    /// `docker pause` (cgroup freezer: the process stops, TCP still answers).
    ///
    /// The freezer can give up while the container's process is in the
    /// kernel ("OCI runtime pause failed: unable to freeze"; the container
    /// keeps running); that is the machine, not the lock under test, so the
    /// pause is tried again, up to five times, 200 ms apart.
    pub fn pause(&self) -> io::Result<()> {
        let mut tries = 0;
        loop {
            match run("docker", &["pause", &self.id]) {
                Err(err) if tries < 4 && err.to_string().contains("unable to freeze") => {
                    tries += 1;
                    thread::sleep(Duration::from_millis(200));
                }
                result => return result.map(drop),
            }
        }
    }

    /// `docker unpause`.
    pub fn unpause(&self) -> io::Result<()> {
        run("docker", &["unpause", &self.id]).map(drop)
    }

    /// Runs `program args` inside the container's network namespace.
    pub fn in_netns(&self, program: &str, args: &[&str]) -> io::Result<String> {
        let pid = self.pid()?;
        if pid == 0 {
            return Err(io::Error::other(format!("{self:?} is not running")));
        }
        let pid = pid.to_string();
        let mut full = vec!["-t", pid.as_str(), "-n", program];
        full.extend_from_slice(args);
        run("nsenter", &full)
    }

    /// Drops every packet to and from the Redis port: clients' connections
    /// stall, new ones cannot be made.
    pub fn partition(&self) -> io::Result<()> {
        for rule in PARTITION_RULES {
            let mut args = vec!["-I"];
            args.extend_from_slice(&rule);
            self.in_netns("iptables", &args)?;
        }
        Ok(())
    }

    /// Removes the partition's rules.
    pub fn heal(&self) -> io::Result<()> {
        for rule in PARTITION_RULES {
            let mut args = vec!["-D"];
            args.extend_from_slice(&rule);
            self.in_netns("iptables", &args)?;
        }
        Ok(())
    }

    /// Removes every filter rule the suite may have left in the container's
    /// namespace (Docker keeps none there: its embedded DNS rules live in
    /// the nat table).
    pub fn flush_rules(&self) -> io::Result<()> {
        self.in_netns("iptables", &["-F", "INPUT"])?;
        self.in_netns("iptables", &["-F", "OUTPUT"]).map(drop)
    }

    /// Drops each packet to or from the Redis port with probability `rate`.
    pub fn lose_packets(&self, rate: f64) -> io::Result<()> {
        for args in loss_rules("-I", rate) {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            self.in_netns("iptables", &args)?;
        }
        Ok(())
    }

    /// Removes the loss rules added with this `rate`.
    pub fn stop_losing_packets(&self, rate: f64) -> io::Result<()> {
        for args in loss_rules("-D", rate) {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            self.in_netns("iptables", &args)?;
        }
        Ok(())
    }

    /// Whether `tc qdisc ... netem` works in the container's namespace (the
    /// kernel may lack `sch_netem`; this machine's does).
    pub fn netem_available(&self) -> bool {
        let added = self.in_netns(
            "tc",
            &[
                "qdisc", "add", "dev", "eth0", "root", "netem", "delay", "0ms",
            ],
        );
        if added.is_ok() {
            let _ = self.in_netns("tc", &["qdisc", "del", "dev", "eth0", "root"]);
        }
        added.is_ok()
    }

    /// Adds `latency` ± `jitter` to every packet leaving the container.
    pub fn netem_delay(&self, latency: Duration, jitter: Duration) -> io::Result<()> {
        let latency = format!("{}us", latency.as_micros());
        let jitter = format!("{}us", jitter.as_micros());
        self.in_netns(
            "tc",
            &[
                "qdisc", "add", "dev", "eth0", "root", "netem", "delay", &latency, &jitter,
            ],
        )
        .map(drop)
    }

    /// Removes the netem qdisc.
    pub fn netem_clear(&self) -> io::Result<()> {
        self.in_netns("tc", &["qdisc", "del", "dev", "eth0", "root"])
            .map(drop)
    }
}

fn loss_rules(op: &str, rate: f64) -> [Vec<String>; 2] {
    let rate = format!("{rate:.4}");
    let rule = |chain: &str, port_flag: &str| {
        [
            op,
            chain,
            "-p",
            "tcp",
            port_flag,
            "6379",
            "-m",
            "statistic",
            "--mode",
            "random",
            "--probability",
            &rate,
            "-j",
            "DROP",
        ]
        .map(str::to_owned)
        .to_vec()
    };
    [rule("INPUT", "--dport"), rule("OUTPUT", "--sport")]
}
