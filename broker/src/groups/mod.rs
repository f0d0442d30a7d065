//! Consumer groups: server-side, incremental assignment (in the spirit of KIP-848), committed
//! offsets stored in the internal `__consumer_offsets` topic, one coordinator per core.
//!
//! - [`assignor`]: sticky, balanced assignment of partitions to members.
//! - [`state`]: one group's membership state machine (pure logic).
//! - [`records`]: the record format of `__consumer_offsets`.
//! - [`coordinator`]: a core's groups, replay, commits, session expiry.

pub mod assignor;
pub mod coordinator;
pub mod records;
pub mod state;
