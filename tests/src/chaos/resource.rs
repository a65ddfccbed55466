//! The protected resource: what a lock holder writes to, kept in a Redis
//! server that no fault ever touches.
//!
//! Each write carries a token. The resource keeps the highest token it has
//! seen per key and rejects a write whose token is lower (fencing, as in
//! Kleppmann's "How to do distributed locking"), and it numbers every write
//! in the order it applied them, so the checker can replay that order.

use redis::aio::MultiplexedConnection;

/// The write, as one atomic script.
///
/// `KEYS[1]`: the key's highest token; `KEYS[2]`: the write counter.
/// `ARGV[1]`: the token, zero-padded to 20 digits so that tokens of any size
/// (nanosecond instants exceed a Lua number's 53 exact bits after 104 days
/// of uptime) compare exactly as strings.
///
/// Returns `{accepted (1 or 0), sequence number}`.
pub const WRITE_SCRIPT: &str = r#"local seq = redis.call('INCR', KEYS[2])
local highest = redis.call('GET', KEYS[1])
if highest and ARGV[1] < highest then
  return {0, seq}
end
redis.call('SET', KEYS[1], ARGV[1])
return {1, seq}
"#;

/// A connection to the protected resource.
#[derive(Clone)]
pub struct Resource {
    connection: MultiplexedConnection,
    script: redis::Script,
    /// Prepended to keys, so that scenarios never share a token history.
    namespace: String,
}

impl Resource {
    /// Connects to the resource's server.
    pub async fn connect(url: &str, namespace: &str) -> redis::RedisResult<Self> {
        let client = redis::Client::open(url)?;
        let connection = client.get_multiplexed_async_connection().await?;
        Ok(Self {
            connection,
            script: redis::Script::new(WRITE_SCRIPT),
            namespace: namespace.to_owned(),
        })
    }

    /// Writes under `token` to `key`: whether it was accepted, and the
    /// resource's sequence number of the write.
    pub async fn write(&mut self, key: &str, token: u64) -> redis::RedisResult<(bool, u64)> {
        let (accepted, seq): (i64, u64) = self
            .script
            .key(format!("fence:{}:{key}", self.namespace))
            .key(format!("fence:{}:seq", self.namespace))
            .arg(format!("{token:020}"))
            .invoke_async(&mut self.connection)
            .await?;
        Ok((accepted == 1, seq))
    }
}
