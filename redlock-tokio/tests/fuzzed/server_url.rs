//! Fuzzed server URLs: [`Redlock::node_name`] of any text is a name or
//! [`ConfigError::InvalidNode`], never a panic, and the password of a URL
//! shows neither in the name nor in the error.
//!
//! The URL is raw bytes (as UTF-8, lossily) or built from parts: a scheme
//! (the supported ones, others, none), user info with a marked password, one
//! or several hosts and ports, a path, a query and a fragment, each a usual
//! value or any text. Shared by the `server_url` fuzz target (`fuzz/`,
//! nightly) and the stable test `tests/fuzzed_urls.rs`.

use arbitrary::{Result, Unstructured};
use redlock_tokio::{ConfigError, Redlock};

/// Runs one input; panics when a property fails.
pub(crate) fn check(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let _ = run(&mut u);
}

/// The password of built URLs: it must never be shown.
const PASSWORD: &str = "Hunter2Secret";

const SCHEMES: [&str; 10] = [
    "redis://",
    "rediss://",
    "valkey://",
    "valkeys://",
    "redis+unix://",
    "unix://",
    "redis+cluster://",
    "valkey+cluster://",
    "http://",
    "",
];
const HOSTS: [&str; 7] = [
    "localhost",
    "127.0.0.1",
    "[::1]",
    "Example.COM",
    "",
    "/tmp/redis.sock",
    "[fe80::1%25eth0]",
];

fn run(u: &mut Unstructured<'_>) -> Result<()> {
    if u.ratio(1, 4)? {
        let url = String::from_utf8_lossy(u.bytes(u.len().min(256))?).into_owned();
        check_url(&url, None, false);
        return Ok(());
    }
    let mut url = String::new();
    let scheme = pick(u, &SCHEMES)?;
    // Text is user info only after a scheme's `://`.
    let after_scheme = scheme.ends_with("://") && SCHEMES.contains(&scheme.as_str());
    url.push_str(&scheme);
    let secret = match u.int_in_range(0..=3)? {
        0 => None,
        1 => {
            url.push_str(&pick(u, &["user", "", "default"])?);
            url.push('@');
            None
        }
        _ => {
            let user = pick(u, &["user", "", "default"])?;
            url.push_str(&format!("{user}:{PASSWORD}@"));
            // Only a plain user name keeps the password in the user info
            // (`unix:///a/b:pw@` is all path: no password there).
            let plain = user
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-._~".contains(c));
            plain.then_some(PASSWORD)
        }
    };
    for seed in 0..u.int_in_range(1..=3)? {
        if seed > 0 {
            url.push(',');
        }
        url.push_str(&pick(u, &HOSTS)?);
        match u.int_in_range(0..=3)? {
            0 => {}
            1 => url.push_str(&format!(":{}", u.arbitrary::<u16>()?)),
            2 => url.push_str(&format!(":{}", u.arbitrary::<u32>()?)),
            _ => url.push_str(&format!(":{}", u.arbitrary::<String>()?)),
        }
    }
    match u.int_in_range(0..=3)? {
        0 => {}
        1 => url.push('/'),
        2 => url.push_str(&format!("/{}", u.arbitrary::<u8>()?)),
        _ => url.push_str(&format!("/{}", u.arbitrary::<String>()?)),
    }
    if u.ratio(1, 4)? {
        url.push_str(&format!("?{}", pick(u, &["protocol=resp3", "db=2"])?));
    }
    if u.ratio(1, 4)? {
        url.push_str(&format!("#{}", pick(u, &["insecure"])?));
    }
    // The password is judged only where the URL holds it once, as user info.
    let secret = secret.filter(|secret| url.matches(secret).count() == 1);
    check_url(&url, secret, after_scheme);
    Ok(())
}

/// One of `values`, or any text.
fn pick(u: &mut Unstructured<'_>, values: &[&str]) -> Result<String> {
    if u.ratio(1, 8)? {
        u.arbitrary()
    } else {
        Ok((*u.choose(values)?).to_owned())
    }
}

/// `secret` is the URL's password, if it has one; `in_user_info`: whether
/// it is where a URL parser finds a password (after a scheme's `://`).
/// Errors never show it, wherever it is (text that fails to parse may be
/// anything); names only hold an address, so never show user info.
fn check_url(url: &str, secret: Option<&str>, in_user_info: bool) {
    let shows = |text: &str| secret.is_some_and(|secret| text.contains(secret));
    match Redlock::node_name(url) {
        Ok(name) => {
            assert!(!name.is_empty(), "{url:?}: an empty name");
            assert!(
                !(in_user_info && shows(&name)),
                "{url:?}: the name {name:?} shows the password"
            );
            // A name stands for one node: the same URL, the same name.
            assert_eq!(Redlock::node_name(url).ok(), Some(name));
        }
        Err(error) => {
            let ConfigError::InvalidNode {
                node: server,
                reason,
            } = &error
            else {
                panic!("{url:?}: not an InvalidNode error: {error:?}");
            };
            assert!(!shows(server), "{url:?}: {server:?} shows the password");
            assert!(!shows(reason), "{url:?}: {reason:?} shows the password");
            assert!(!shows(&format!("{error} {error:?}")), "{url:?}: {error}");
        }
    }
}
