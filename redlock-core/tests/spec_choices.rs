//! The choices made before an acquisition sends anything: fencing (the
//! call's option over the client's default) and the refusal of a lock
//! whose keys a Redis Cluster node cannot hold together.

use std::sync::Arc;
use std::time::Instant;

use rand::{SeedableRng, rngs::StdRng};
use redlock_core::{Acquisition, Attempts, Config, ConfigError, LockSpec, NodeId, Settings};

fn settings(fencing: bool) -> Settings {
    Config {
        fencing,
        ..Config::new(["a", "b", "c"])
    }
    .validate()
    .unwrap()
}

#[test]
fn fencing_follows_the_call_then_the_default_for_exclusive_locks() {
    let r: &[u8] = b"r";
    for (default, asked, expected) in [
        (false, None, LockSpec::Exclusive(r)),
        (true, None, LockSpec::Fenced(r)),
        (false, Some(true), LockSpec::Fenced(r)),
        (true, Some(false), LockSpec::Exclusive(r)),
    ] {
        let settings = settings(default);
        assert_eq!(
            settings
                .fencing_choice(LockSpec::Exclusive(r), asked)
                .unwrap(),
            expected,
            "default {default}, asked {asked:?}"
        );
    }
    // A fenced spec asked without fencing is exclusive; with, fenced.
    let settings = settings(false);
    assert_eq!(
        settings
            .fencing_choice(LockSpec::Fenced(r), Some(false))
            .unwrap(),
        LockSpec::Exclusive(r)
    );
    assert_eq!(
        settings.fencing_choice(LockSpec::Fenced(r), None).unwrap(),
        LockSpec::Fenced(r)
    );
}

#[test]
fn other_kinds_take_no_fencing_default_and_refuse_it_when_asked() {
    let r: &[u8] = b"r";
    let names: [&[u8]; 2] = [b"a", b"b"];
    for spec in [
        LockSpec::Read(r),
        LockSpec::Write(r),
        LockSpec::Reentrant {
            resource: r,
            owner: "me",
        },
        LockSpec::Multi(&names),
    ] {
        let with_default = settings(true);
        assert_eq!(with_default.fencing_choice(spec, None).unwrap(), spec);
        assert_eq!(
            with_default.fencing_choice(spec, Some(false)).unwrap(),
            spec
        );
        assert!(matches!(
            with_default.fencing_choice(spec, Some(true)),
            Err(ConfigError::FencingUnsupported)
        ));
    }
}

fn acquire(settings: Settings, spec: LockSpec<'_>) -> Result<(), ConfigError> {
    let ttl = settings.default_ttl();
    Acquisition::with_spec(
        Arc::new(settings),
        spec,
        ttl,
        Attempts::Once,
        Instant::now(),
        StdRng::seed_from_u64(1),
    )
    .map(drop)
}

#[test]
fn a_cluster_node_refuses_keys_in_two_slots_before_anything_is_sent() {
    let names: [&[u8]; 2] = [b"a", b"b"];
    let tagged: [&[u8]; 2] = [b"{order:42}:a", b"{order:42}:b"];
    // Plain masters take any keys.
    acquire(settings(false), LockSpec::Multi(&names)).unwrap();
    // With a cluster node (the second), two slots are refused, naming it.
    let clustered = || settings(false).with_cluster_nodes([NodeId(1)]);
    match acquire(clustered(), LockSpec::Multi(&names)) {
        Err(ConfigError::CrossSlot {
            node,
            first_slot,
            second_slot,
            ..
        }) => {
            assert_eq!(node, "b");
            assert_ne!(first_slot, second_slot);
        }
        other => panic!("expected CrossSlot, got {other:?}"),
    }
    // One hash tag: one slot. A single resource and its helper keys too.
    acquire(clustered(), LockSpec::Multi(&tagged)).unwrap();
    acquire(clustered(), LockSpec::Fenced(b"r")).unwrap();
    acquire(clustered(), LockSpec::Read(b"r")).unwrap();
    // A node id out of range marks nothing.
    acquire(
        settings(false).with_cluster_nodes([NodeId(9)]),
        LockSpec::Multi(&names),
    )
    .unwrap();
}
