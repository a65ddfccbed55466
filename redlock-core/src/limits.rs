//! The fixed limits every part of the core shares, and how durations are
//! written in messages.

use std::fmt;
use std::time::Duration;

/// Redis expires keys with millisecond precision, and the spec adds one more
/// millisecond as a floor: this is the fixed part of the clock drift allowance.
pub const FIXED_DRIFT: Duration = Duration::from_millis(2);

/// The largest TTL accepted, in milliseconds: 30 days.
///
/// A TTL is how long a lock outlives a holder that crashed, so a lock meant
/// to last longer than a month is almost surely a typo (`--ttl 100000000y`)
/// or a lease that wants another tool. The bound also keeps far inside what
/// Redis' `PX` accepts (an absolute expiry that fits a signed 64-bit integer)
/// and what an `Instant` can hold as `start + ttl`, so nothing past
/// validation needs to check for overflow.
pub const MAX_TTL_MS: u64 = 30 * 24 * 60 * 60 * 1000;

/// The least validity a TTL must leave after the drift allowance and one
/// per-node timeout: a TTL below that would be granted with no time to use
/// the lock (`--ttl 3ms`), so it is a configuration error.
pub const MIN_VALIDITY: Duration = Duration::from_millis(1);

/// Unguessable values need enough entropy; 16 bytes is the floor we accept.
pub const MIN_VALUE_LEN: usize = 16;
/// Values are sent on every request; beyond this they only cost bandwidth.
pub const MAX_VALUE_LEN: usize = 256;

/// Formats a duration as milliseconds with up to three decimals.
pub(crate) struct Millis(pub(crate) Duration);

impl fmt::Display for Millis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let micros = self.0.as_micros();
        if micros.is_multiple_of(1000) {
            write!(f, "{} ms", micros / 1000)
        } else {
            write!(f, "{:.3} ms", micros as f64 / 1000.0)
        }
    }
}
