//! Reading a lock's state on every node, for diagnostics and operators.
//!
//! Nothing here takes part in the algorithm: the reads are not votes, and a
//! lock seen on a quorum may expire the next moment. They answer "who holds
//! this key, where, and for how long" when a human or a script needs to know
//! (the `redlock status` command uses them).

use std::fmt;
use std::time::Duration;

use redis::Value;
use redlock_core::{NodeError, NodeErrorKind};

use crate::Redlock;

/// Reads the lock key and its fencing counter on one node, atomically: the
/// value and the PTTL belong to the same moment. Writes nothing. The counter
/// is read with `pcall`, so a counter key of another type reads as absent
/// rather than failing the whole read; a lock key of another type fails it
/// (`WRONGTYPE`), which is worth telling.
const INSPECT: &str = r#"local value = redis.call('GET', KEYS[1])
local pttl = redis.call('PTTL', KEYS[1])
local counter = redis.pcall('GET', KEYS[2])
if type(counter) ~= 'string' then counter = false end
return {value, pttl, counter}"#;

/// What one node holds for a lock key, as read by [`Redlock::inspect`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct NodeInspection {
    /// The node's canonical address, `host:port/db`.
    pub node: String,
    /// The key's value and time to live (`Ok(None)`: no such key), or why the
    /// node could not be read within the per-node timeout.
    pub result: Result<Option<Holding>, NodeError>,
    /// This node's fencing counter for the resource (the highest fencing
    /// token stored there), if the key exists and holds a number. `None`
    /// also when the node could not be read.
    pub fencing_counter: Option<u64>,
}

/// A lock key present on a node.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Holding {
    /// The stored value: the holder's [`LockValue`](redlock_core::LockValue)
    /// for keys set by Redlock. **Whoever knows it can release the lock**
    /// ([`Redlock::release_value`]); `Debug` shows only a prefix.
    pub value: Vec<u8>,
    /// The node's `PTTL`: how long until this node expires the key, as the
    /// node's clock counts. `None` when the key has no expiry, which Redlock
    /// never does: something else wrote it.
    pub pttl: Option<Duration>,
}

impl fmt::Debug for Holding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let prefix = String::from_utf8_lossy(&self.value[..self.value.len().min(8)]).into_owned();
        f.debug_struct("Holding")
            .field("value", &format_args!("{prefix}…"))
            .field("pttl", &self.pttl)
            .finish()
    }
}

impl Redlock {
    /// Reads the lock on `resource` on every node, in node order: the value
    /// held there and its remaining time to live (`PTTL`), and the fencing
    /// counter.
    ///
    /// One read-only script per node, sent to all nodes at once over the
    /// existing connections, each with the per-node timeout
    /// ([`Settings::node_timeout`](redlock_core::Settings::node_timeout)).
    /// It never fails as a whole: each node's entry says what went wrong
    /// there.
    ///
    /// This is a snapshot for diagnostics, not a vote: a value seen on a
    /// quorum may expire or be released right after. To hold a lock,
    /// acquire it. The values returned can release the lock; show them only
    /// to whoever may do that.
    pub async fn inspect(&self, resource: impl AsRef<[u8]>) -> Vec<NodeInspection> {
        let settings = self.settings();
        let key = settings.key(resource.as_ref());
        let counter = settings.fencing_key(&key);
        let timeout = settings.node_timeout();
        let mut command = redis::cmd("EVAL");
        command
            .arg(INSPECT)
            .arg(2)
            .arg(key.as_bytes())
            .arg(counter.as_bytes());
        let command = &command;
        let reads = self.node_handles().iter().map(|node| async move {
            let read = match tokio::time::timeout(timeout, node.query(command)).await {
                Ok(Ok(value)) => parse(value),
                Ok(Err(error)) => Err(error),
                Err(_) => Err(NodeError::timeout(timeout)),
            };
            let (result, fencing_counter) = match read {
                Ok((holding, counter)) => (Ok(holding), counter),
                Err(error) => (Err(error), None),
            };
            NodeInspection {
                node: node.name().to_owned(),
                result,
                fencing_counter,
            }
        });
        futures::future::join_all(reads).await
    }
}

/// The script's `{value, pttl, counter}`.
fn parse(value: Value) -> Result<(Option<Holding>, Option<u64>), NodeError> {
    let unexpected = |value: &dyn fmt::Debug| {
        NodeError::new(
            NodeErrorKind::Protocol,
            format!("unexpected answer to the inspect script: {value:?}"),
        )
    };
    let Value::Array(items) = value else {
        return Err(unexpected(&value));
    };
    let [stored, pttl, counter] =
        <[Value; 3]>::try_from(items).map_err(|items| unexpected(&items))?;
    let holding = match (stored, pttl) {
        (Value::Nil, _) | (_, Value::Int(-2)) => None,
        (Value::BulkString(value), Value::Int(pttl)) => Some(Holding {
            value,
            // -1: no expiry. Other negatives do not exist.
            pttl: u64::try_from(pttl).ok().map(Duration::from_millis),
        }),
        (stored, pttl) => return Err(unexpected(&(stored, pttl))),
    };
    let counter = match counter {
        Value::BulkString(bytes) => std::str::from_utf8(&bytes)
            .ok()
            .and_then(|text| text.parse().ok()),
        _ => None,
    };
    Ok((holding, counter))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_script_answer() {
        let held = Value::Array(vec![
            Value::BulkString(b"abc".to_vec()),
            Value::Int(1500),
            Value::BulkString(b"7".to_vec()),
        ]);
        let (holding, counter) = parse(held).unwrap();
        let holding = holding.unwrap();
        assert_eq!(holding.value, b"abc");
        assert_eq!(holding.pttl, Some(Duration::from_millis(1500)));
        assert_eq!(counter, Some(7));

        let free = Value::Array(vec![Value::Nil, Value::Int(-2), Value::Nil]);
        assert_eq!(parse(free).unwrap(), (None, None));

        let forever = Value::Array(vec![
            Value::BulkString(b"x".to_vec()),
            Value::Int(-1),
            Value::BulkString(b"not a number".to_vec()),
        ]);
        let (holding, counter) = parse(forever).unwrap();
        assert_eq!(holding.unwrap().pttl, None);
        assert_eq!(counter, None);

        let short = Value::Array(vec![Value::Nil]);
        assert_eq!(parse(short).unwrap_err().kind, NodeErrorKind::Protocol);
        assert_eq!(
            parse(Value::Int(1)).unwrap_err().kind,
            NodeErrorKind::Protocol
        );
    }

    #[test]
    fn debug_hides_most_of_the_value() {
        let holding = Holding {
            value: b"0123456789abcdef".to_vec(),
            pttl: None,
        };
        let text = format!("{holding:?}");
        assert!(text.contains("01234567"));
        assert!(!text.contains("89abcdef"));
    }
}
