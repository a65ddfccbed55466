//! Fuzzed `INFO server` texts: [`NodeFacts::from_info`] and
//! [`Version::parse`] never panic, read back what they print, and the
//! plain-command choice they feed ([`Request::call`], [`Native::words`]) is
//! one of the documented ones.
//!
//! The text is raw bytes (as UTF-8, lossily) or lines built from the fields
//! the parser looks for with any values. Shared by the `info` fuzz target
//! (`fuzz/`, nightly) and the stable test `tests/fuzzed_inputs.rs`.

use std::sync::Arc;
use std::time::Instant;

use arbitrary::{Result, Unstructured};
use rand::SeedableRng;
use rand::rngs::StdRng;
use redlock_core::native::{Call, Native, NodeFacts, Server, Version};
use redlock_core::{Acquisition, Attempts, Command, Config, LockKind, Machine};

/// Runs one input; panics when a property fails.
pub(crate) fn check(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let _ = run(&mut u);
}

const FIELDS: [&str; 6] = [
    "redis_version",
    "server_name",
    "valkey_version",
    "# Server",
    "redis_mode",
    "",
];

fn run(u: &mut Unstructured<'_>) -> Result<()> {
    let text = if u.arbitrary()? {
        String::from_utf8_lossy(u.bytes(u.len().min(512))?).into_owned()
    } else {
        let mut text = String::new();
        for _ in 0..u.int_in_range(0..=6)? {
            let field = *u.choose(&FIELDS)?;
            let value: String = match u.int_in_range(0..=3)? {
                0 => "valkey".to_owned(),
                1 => format!(
                    "{}.{}.{}",
                    u.arbitrary::<u32>()?,
                    u.arbitrary::<u16>()?,
                    u.arbitrary::<u8>()?
                ),
                2 => u.arbitrary::<u16>()?.to_string(),
                _ => u.arbitrary()?,
            };
            let space = if u.arbitrary()? { " " } else { "" };
            let end = *u.choose(&["\r\n", "\n", "\r", ""])?;
            text.push_str(&format!("{space}{field}:{value}{end}"));
        }
        text
    };
    let facts = NodeFacts::from_info(&text);
    check_facts(facts);
    for line in text.lines() {
        if let Some(version) = Version::parse(line) {
            assert_eq!(Version::parse(&version.to_string()), Some(version));
        }
    }

    // What is printed is read back.
    let version = Version(u.arbitrary()?, u.arbitrary()?, u.arbitrary()?);
    assert_eq!(Version::parse(&version.to_string()), Some(version));
    let redis = NodeFacts::from_info(&format!("# Server\r\nredis_version:{version}\r\n"));
    assert_eq!(redis, NodeFacts::new(Server::Redis, version));
    let valkey = NodeFacts::from_info(&format!(
        "redis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:{version}\r\n"
    ));
    assert_eq!(valkey, NodeFacts::new(Server::Valkey, version));
    // A node of many servers can do what its oldest can, whatever the order.
    let lowest = NodeFacts::lowest([facts, redis, valkey]);
    assert_eq!(lowest, NodeFacts::lowest([valkey, facts, redis]));
    check_facts(lowest);
    check_calls(facts, u)
}

fn check_facts(facts: NodeFacts) {
    match facts.server() {
        Server::Unknown => assert_eq!(facts, NodeFacts::default()),
        _ => assert!(facts.version().is_some(), "{facts:?}"),
    }
    // Each plain command needs a server and version that has it.
    if facts.has_delifeq() || facts.has_set_ifeq_get() {
        assert_eq!(facts.server(), Server::Valkey);
    }
    if facts.has_set_nx_get() {
        assert_ne!(facts.server(), Server::Unknown);
    }
    let _ = facts.to_string();
}

/// The requests of a few machines, sent to a node with these facts: plain
/// commands only where the table in `native` puts them.
fn check_calls(facts: NodeFacts, u: &mut Unstructured<'_>) -> Result<()> {
    let config = Config::new(["n"])
        .native_commands(u.arbitrary()?)
        .release_notices(u.arbitrary()?);
    let settings = Arc::new(config.validate().expect("a valid configuration"));
    let now = Instant::now();
    let rng = StdRng::seed_from_u64(u.arbitrary()?);
    let mut acquire = Acquisition::new(
        settings.clone(),
        b"r",
        settings.default_ttl(),
        Attempts::Once,
        now,
        rng,
    );
    let mut requests: Vec<_> = std::iter::from_fn(|| acquire.poll_request()).collect();
    acquire.abandon(now);
    requests.extend(std::iter::from_fn(|| acquire.poll_request()));
    for request in requests {
        let call = request.call(&facts);
        let Call::Native(native) = call else {
            continue;
        };
        assert!(request.native && settings.native_commands());
        let allowed = match (native, request.command, &request.kind) {
            (Native::SetNxGet, Command::Acquire { .. }, LockKind::Exclusive) => {
                facts.has_set_nx_get()
            }
            (Native::SetIfEqGet, Command::Extend { .. }, LockKind::Exclusive) => {
                facts.has_set_ifeq_get()
            }
            (Native::DelIfEq, Command::Withdraw, LockKind::Exclusive | LockKind::Write { .. })
            | (Native::DelIfEq, Command::Release, LockKind::Exclusive) => facts.has_delifeq(),
            _ => false,
        };
        assert!(allowed, "{native:?} for {request:?} on {facts}");
        assert!(!native.words(&request).is_empty());
    }
    Ok(())
}
