//! The fixed limits every part of the core shares, and how durations are
//! written in messages.

use std::fmt;
use std::time::Duration;

/// Redis expires keys with millisecond precision, and the spec adds one more
/// millisecond as a floor: this is the fixed part of the clock drift allowance.
pub const FIXED_DRIFT: Duration = Duration::from_millis(2);

/// The largest TTL accepted, in milliseconds.
///
/// Redis rejects a `PX` whose absolute expiry (now in Unix milliseconds plus the
/// TTL) does not fit in a signed 64-bit integer, and an `Instant` must be able to
/// hold `start + ttl`. Half of `i64::MAX` leaves room for both for millions of
/// years, so nothing past validation needs to check for overflow.
pub const MAX_TTL_MS: u64 = (i64::MAX / 2) as u64;

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
