//! What a user holds: the client (`Redlock`), a lock request and its guard,
//! an election and its leadership, inspections and reports. Each is a
//! handle on the client's driver task, which runs what they ask.

pub(crate) mod client;
pub(crate) mod election;
pub(crate) mod guard;
pub(crate) mod held;
pub(crate) mod inspect;
pub(crate) mod report;
pub(crate) mod request;
