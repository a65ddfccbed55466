//! The choices made before an acquisition sends anything: the refusal of
//! a lock whose keys a Redis Cluster node cannot hold together.

use std::sync::Arc;
use std::time::Instant;

use rand::{SeedableRng, rngs::StdRng};
use redlock_core::{Acquisition, Attempts, Config, ConfigError, LockSpec, NodeId, Settings};

fn settings() -> Settings {
    Config::new(["a", "b", "c"]).validate().unwrap()
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
    acquire(settings(), LockSpec::Multi(&names)).unwrap();
    // With a cluster node (the second), two slots are refused, naming it.
    let clustered = || settings().with_cluster_nodes([NodeId(1)]);
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
    // A node id out of range marks nothing, the first past the end too.
    for past in [3, 9] {
        acquire(
            settings().with_cluster_nodes([NodeId(past)]),
            LockSpec::Multi(&names),
        )
        .unwrap();
    }
    // The first of several cluster nodes is named, whatever their order.
    match acquire(
        settings().with_cluster_nodes([NodeId(2), NodeId(1), NodeId(2)]),
        LockSpec::Multi(&names),
    ) {
        Err(ConfigError::CrossSlot { node, .. }) => assert_eq!(node, "b"),
        other => panic!("expected CrossSlot, got {other:?}"),
    }
}
