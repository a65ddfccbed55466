//! The blocking client mirrors the async one method for method: read from
//! the public API snapshot (`api/redlock-tokio.txt`, which `make
//! public-api` keeps current), each type's inherent methods and its
//! blocking twin's are the same names, but for the differences listed
//! here, each with its reason, each named in docs/blocking.md's table.

use std::collections::{BTreeMap, BTreeSet};

/// The types with a blocking twin.
const TYPES: [&str; 6] = [
    "Redlock",
    "Builder",
    "LockRequest",
    "LockGuard",
    "Election",
    "Leadership",
];

/// Each intended difference: the type, the side that has the method, the
/// method, why.
const DIFFERENCES: [(&str, Side, &str, &str); 9] = [
    (
        "Redlock",
        Side::Blocking,
        "client",
        "the async client it drives",
    ),
    (
        "Builder",
        Side::Async,
        "build_blocking",
        "the older way to build a blocking client",
    ),
    (
        "LockRequest",
        Side::Blocking,
        "acquire",
        "a blocking request's end, where the async one is awaited",
    ),
    (
        "LockGuard",
        Side::Async,
        "lost",
        "a future; the blocking guard's wait_lost blocks",
    ),
    (
        "LockGuard",
        Side::Blocking,
        "wait_lost",
        "blocks where the async lost is awaited",
    ),
    (
        "LockGuard",
        Side::Blocking,
        "release_every_node",
        "the async release is a future with every_node on it",
    ),
    (
        "Leadership",
        Side::Async,
        "lost",
        "a future; the blocking leadership's wait_lost blocks",
    ),
    (
        "Leadership",
        Side::Blocking,
        "wait_lost",
        "blocks where the async lost is awaited",
    ),
    (
        "Leadership",
        Side::Blocking,
        "is_lost",
        "synchronous work checks it between its steps",
    ),
];

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Side {
    Async,
    Blocking,
}

/// Each type's inherent methods (trait impls left out), by its path.
fn inherent_methods(api: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut methods: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut in_trait_impl = false;
    for line in api.lines() {
        if line.starts_with("impl") {
            in_trait_impl = line.contains(" for ");
            continue;
        }
        let Some(rest) = line
            .strip_prefix("pub fn ")
            .or_else(|| line.strip_prefix("pub async fn "))
        else {
            continue;
        };
        if in_trait_impl {
            continue;
        }
        let path = rest.split('(').next().unwrap_or_default();
        // `redlock_tokio::blocking::LockRequest<K>::run<T, E>`: the type
        // without its parameters, then the method without its own.
        let mut depth = 0;
        let plain: String = path
            .chars()
            .filter(|&c| {
                match c {
                    '<' => depth += 1,
                    '>' => depth -= 1,
                    _ => return depth == 0,
                }
                false
            })
            .collect();
        if let Some((owner, method)) = plain.rsplit_once("::") {
            methods
                .entry(owner.to_owned())
                .or_default()
                .insert(method.to_owned());
        }
    }
    methods
}

#[test]
fn the_blocking_client_has_every_method_of_the_async_one() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let api = std::fs::read_to_string(format!("{root}/api/redlock-tokio.txt"))
        .expect("the public API snapshot");
    let docs = std::fs::read_to_string(format!("{root}/docs/blocking.md")).expect("the guide page");
    let methods = inherent_methods(&api);
    let mut found = BTreeSet::new();
    for name in TYPES {
        let empty = BTreeSet::new();
        let of = |path: String| methods.get(&path).unwrap_or(&empty).clone();
        let async_side = of(format!("redlock_tokio::{name}"));
        let blocking_side = of(format!("redlock_tokio::blocking::{name}"));
        assert!(
            !async_side.is_empty() && !blocking_side.is_empty(),
            "{name}: no methods read"
        );
        for method in async_side.difference(&blocking_side) {
            found.insert((name, Side::Async, method.clone()));
        }
        for method in blocking_side.difference(&async_side) {
            found.insert((name, Side::Blocking, method.clone()));
        }
    }
    let expected: BTreeSet<_> = DIFFERENCES
        .iter()
        .map(|(name, side, method, _)| (*name, *side, method.to_string()))
        .collect();
    for (name, side, method) in &found {
        println!("{name}: {side:?} only: {method}");
    }
    let missing: Vec<_> = found.difference(&expected).collect();
    assert!(
        missing.is_empty(),
        "methods on one side only, not listed: {missing:?}; give the other client the same \
         method, or list the difference here and in docs/blocking.md with its reason"
    );
    let gone: Vec<_> = expected.difference(&found).collect();
    assert!(
        gone.is_empty(),
        "listed differences that are gone: {gone:?}"
    );
    for (_, _, method, _) in DIFFERENCES {
        assert!(
            docs.contains(&format!("`{method}`")),
            "docs/blocking.md's table does not name `{method}`"
        );
    }
}
