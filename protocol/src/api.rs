//! API keys, supported versions, and the generated flatbuffers messages.
//!
//! One table maps each API key to its name, its request and response root tables, and the range
//! of versions this build speaks. A request's root table is named `<Name>Request`, its response
//! `<Name>Response`, both in [`wire`].

/// The generated flatbuffers types (namespace `borges.wire`), produced from `protocol/schema/`
/// by `cargo xtask codegen`. Do not edit by hand.
pub use crate::generated::borges::wire;

macro_rules! api_keys {
    ($( $(#[$doc:meta])* $name:ident = $key:literal, versions = $min:literal ..= $max:literal, served = $served:literal; )*) => {
        /// Every API of the protocol.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr(u16)]
        pub enum ApiKey {
            $( $(#[$doc])* $name = $key, )*
        }

        impl ApiKey {
            /// Every API, in key order.
            pub const ALL: &'static [ApiKey] = &[ $( ApiKey::$name, )* ];

            /// Decodes a wire key; `None` for keys this build does not know.
            pub fn from_u16(key: u16) -> Option<ApiKey> {
                match key {
                    $( $key => Some(ApiKey::$name), )*
                    _ => None,
                }
            }

            /// The API's name.
            pub fn name(self) -> &'static str {
                match self { $( ApiKey::$name => stringify!($name), )* }
            }

            /// Oldest version this build speaks.
            pub fn min_version(self) -> u16 {
                match self { $( ApiKey::$name => $min, )* }
            }

            /// Newest version this build speaks.
            pub fn max_version(self) -> u16 {
                match self { $( ApiKey::$name => $max, )* }
            }

            /// Whether a broker of this build serves the API: listed in ApiVersions and answered.
            /// An API that is not served has its messages in the schema (reserved) and is
            /// answered with `UnsupportedApi`.
            pub fn is_served(self) -> bool {
                match self { $( ApiKey::$name => $served, )* }
            }
        }
    };
}

api_keys! {
    /// Versions of every API the broker speaks.
    ApiVersions = 0, versions = 0..=0, served = true;
    /// Brokers, topics, partitions, leaders and owning cores.
    Metadata = 1, versions = 0..=0, served = true;
    /// Create topics.
    CreateTopics = 2, versions = 0..=0, served = true;
    /// Delete topics.
    DeleteTopics = 3, versions = 0..=0, served = true;
    /// Read topic or broker configs.
    DescribeConfigs = 4, versions = 0..=0, served = true;
    /// Change topic configs incrementally.
    AlterConfigs = 5, versions = 0..=0, served = true;
    /// Append record batches.
    Produce = 6, versions = 0..=0, served = true;
    /// Read record batches (consumers and followers).
    Fetch = 7, versions = 0..=0, served = true;
    /// Offsets by time: earliest, latest, max timestamp, or by timestamp.
    ListOffsets = 8, versions = 0..=0, served = true;
    /// Find the broker and core that coordinate a group.
    FindCoordinator = 9, versions = 0..=0, served = true;
    /// Join, heartbeat and leave a consumer group (server-side assignment).
    ConsumerGroupHeartbeat = 10, versions = 0..=0, served = true;
    /// Commit offsets for a group.
    OffsetCommit = 11, versions = 0..=0, served = true;
    /// Read a group's committed offsets.
    OffsetFetch = 12, versions = 0..=0, served = true;
    /// List groups.
    ListGroups = 13, versions = 0..=0, served = true;
    /// Describe groups and their members.
    DescribeGroups = 14, versions = 0..=0, served = true;
    /// Delete groups without active members.
    DeleteGroups = 15, versions = 0..=0, served = true;
    /// Replication: where a leader epoch ends (a follower's truncation point).
    OffsetForLeaderEpoch = 16, versions = 0..=0, served = true;
    /// Grow a topic's partition count.
    CreatePartitions = 17, versions = 0..=0, served = true;
    /// A producer id and epoch for an idempotent producer.
    InitProducerId = 18, versions = 0..=0, served = true;
    /// SASL: choose a mechanism at the start of a connection.
    SaslHandshake = 19, versions = 0..=0, served = true;
    /// SASL: one round of the mechanism's exchange (SCRAM: two rounds).
    SaslAuthenticate = 20, versions = 0..=0, served = true;
    /// Add ACLs (Alter on the cluster).
    CreateAcls = 21, versions = 0..=0, served = true;
    /// List ACLs matching a filter (Describe on the cluster).
    DescribeAcls = 22, versions = 0..=0, served = true;
    /// Remove ACLs matching filters (Alter on the cluster).
    DeleteAcls = 23, versions = 0..=0, served = true;
    /// Create, replace or delete users' SCRAM credentials (Alter on the cluster).
    AlterUserScramCredentials = 24, versions = 0..=0, served = true;
    /// List users' SCRAM mechanisms and iterations, never secrets (Describe on the cluster).
    DescribeUserScramCredentials = 25, versions = 0..=0, served = true;
}

impl std::fmt::Display for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}({})", self.name(), *self as u16)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip() {
        for &k in ApiKey::ALL {
            assert_eq!(ApiKey::from_u16(k as u16), Some(k));
            assert!(k.min_version() <= k.max_version());
        }
        assert_eq!(ApiKey::from_u16(999), None);
    }
}
