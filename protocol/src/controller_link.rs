//! API keys of the controller link: the connections between controller listeners
//! (`controller_listen`) that carry Raft's RPCs and the cluster's requests to the quorum.
//!
//! Frames use the same 24-byte [`crate::frame::FrameHeader`] as the client protocol, with keys
//! from [`CONTROLLER_API_KEY_MIN`] on (never a client API key: a client listener answers them
//! with `UnsupportedApi`). The flatbuffers message region is empty and the payload region holds
//! the request or response encoded with serde (JSON): the link is spoken only by Borges
//! processes of the same build, and Raft's own types travel as they are. A response sets
//! `FLAG_RESPONSE`, and `FLAG_ERROR` when its payload is a link error instead of the answer.

macro_rules! controller_api_keys {
    ($( $(#[$doc:meta])* $name:ident = $key:literal; )*) => {
        /// Every API of the controller link.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr(u16)]
        pub enum ControllerApiKey {
            $( $(#[$doc])* $name = $key, )*
        }

        impl ControllerApiKey {
            /// Every key, in key order.
            pub const ALL: &'static [ControllerApiKey] = &[ $( ControllerApiKey::$name, )* ];

            /// Decodes a wire key; `None` for keys this build does not know.
            pub fn from_u16(key: u16) -> Option<ControllerApiKey> {
                match key {
                    $( $key => Some(ControllerApiKey::$name), )*
                    _ => None,
                }
            }

            /// The API's name.
            pub fn name(self) -> &'static str {
                match self { $( ControllerApiKey::$name => stringify!($name), )* }
            }
        }
    };
}

/// The first controller-link key; client API keys stay below it.
pub const CONTROLLER_API_KEY_MIN: u16 = 1000;

controller_api_keys! {
    /// First frame of every connection: cluster id and node ids, checked before anything else.
    Hello = 1000;
    /// Raft RequestVote.
    RaftVote = 1001;
    /// Raft AppendEntries (also the leader's heartbeat).
    RaftAppendEntries = 1002;
    /// Raft InstallSnapshot (one chunk of a snapshot).
    RaftInstallSnapshot = 1003;
    /// A command for the replicated state machine, answered by the leader once applied.
    ClientWrite = 1004;
    /// The quorum as one node sees it (leader, term, log ends, voters, observers, lag).
    DescribeQuorum = 1005;
    /// One node's applied state machine, encoded, with its last applied log position.
    ReadState = 1006;
    /// A broker's heartbeat to the active controller (broker id and epoch, how far its cores
    /// applied the metadata log, whether it wants to shut down), answered with its state.
    BrokerHeartbeat = 1007;
    /// A broker-only member asks the active controller to add it as a learner (it then
    /// receives the metadata log without voting).
    AddLearner = 1008;
}

impl std::fmt::Display for ControllerApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}({})", self.name(), *self as u16)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::ApiKey;

    #[test]
    fn keys_round_trip_and_never_collide_with_client_apis() {
        for &k in ControllerApiKey::ALL {
            assert_eq!(ControllerApiKey::from_u16(k as u16), Some(k));
            assert!(k as u16 >= CONTROLLER_API_KEY_MIN);
            assert_eq!(ApiKey::from_u16(k as u16), None, "{k}");
        }
        for &k in ApiKey::ALL {
            assert!((k as u16) < CONTROLLER_API_KEY_MIN, "{k}");
            assert_eq!(ControllerApiKey::from_u16(k as u16), None);
        }
    }
}
