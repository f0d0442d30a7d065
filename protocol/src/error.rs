//! Wire error codes and the crate's decode error type.
//!
//! [`ErrorCode`] is the one enum of error codes that travels on the wire. Its numeric values are
//! stable: a code is never renumbered or reused, only added. Each code says whether a client may
//! retry the same request ([`ErrorCode::is_retriable`]).

use thiserror::Error;

macro_rules! error_codes {
    ($( $(#[$doc:meta])* $name:ident = $code:literal, retriable = $retriable:literal, $text:literal; )*) => {
        /// A typed error code carried in responses at the level where it applies (request, topic,
        /// partition, group or member). `None` (0) means success.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr(u16)]
        #[non_exhaustive]
        pub enum ErrorCode {
            $( $(#[$doc])* $name = $code, )*
        }

        impl ErrorCode {
            /// Every known code, in numeric order.
            pub const ALL: &'static [ErrorCode] = &[ $( ErrorCode::$name, )* ];

            /// Decodes a wire value; unknown values (from a newer peer) map to `UnknownServerError`
            /// so that callers always get a typed, non-retriable error.
            pub fn from_u16(code: u16) -> ErrorCode {
                match code {
                    $( $code => ErrorCode::$name, )*
                    _ => ErrorCode::UnknownServerError,
                }
            }

            /// Whether repeating the same request later may succeed.
            pub fn is_retriable(self) -> bool {
                match self { $( ErrorCode::$name => $retriable, )* }
            }

            /// The stable upper-snake-case name, as Kafka prints its errors.
            pub fn name(self) -> &'static str {
                match self { $( ErrorCode::$name => stringify!($name), )* }
            }

            /// A one-line description for humans.
            pub fn description(self) -> &'static str {
                match self { $( ErrorCode::$name => $text, )* }
            }
        }
    };
}

error_codes! {
    /// Success.
    None = 0, retriable = false, "no error";
    /// The server hit an unexpected condition; the message says which.
    UnknownServerError = 1, retriable = false, "unexpected server error";
    /// The frame could not be decoded (bad header, bad flatbuffer, bad payload ranges).
    MalformedFrame = 2, retriable = false, "malformed frame";
    /// The frame is larger than the server's `frame_size_bytes_max`.
    FrameTooLarge = 3, retriable = false, "frame larger than the server accepts";
    /// The API key is not known to this server.
    UnsupportedApi = 4, retriable = false, "unknown API key";
    /// The API version is outside the range this server supports (see ApiVersions).
    UnsupportedVersion = 5, retriable = false, "unsupported API version";
    /// The request decoded but its contents are invalid; the message says which field.
    InvalidRequest = 6, retriable = false, "invalid request";
    /// The topic or partition does not exist on this broker.
    UnknownTopicOrPartition = 7, retriable = true, "unknown topic or partition";
    /// The topic name breaks the naming rules (`[a-zA-Z0-9._-]`, 1..=249 characters, not `.` or `..`).
    InvalidTopicName = 8, retriable = false, "invalid topic name";
    /// A topic with this name already exists.
    TopicAlreadyExists = 9, retriable = false, "topic already exists";
    /// The partition count is invalid (must be 1..=partitions_per_topic_max).
    InvalidPartitions = 10, retriable = false, "invalid partition count";
    /// The replication factor is invalid for this cluster.
    InvalidReplicationFactor = 11, retriable = false, "invalid replication factor";
    /// A config name or value is invalid.
    InvalidConfig = 12, retriable = false, "invalid config";
    /// The requested offset is outside `[log_start_offset, log_end_offset]` (offsets from the high
    /// watermark to the log end are in range and wait).
    OffsetOutOfRange = 13, retriable = false, "offset out of range";
    /// A record batch failed CRC-32C verification.
    CorruptRecordBatch = 14, retriable = false, "record batch CRC mismatch";
    /// A record batch or one of its records is invalid (magic, lengths, counts, attributes, offset
    /// deltas, record fields, zstd stream, decompressed size); the message names the record and
    /// the rule.
    InvalidRecordBatch = 15, retriable = false, "invalid record batch";
    /// A record batch is larger than the topic's `max.message.bytes`.
    RecordBatchTooLarge = 16, retriable = false, "record batch too large";
    /// The compression codec is not supported (Borges supports none and zstd).
    UnsupportedCompression = 17, retriable = false, "unsupported compression codec";
    /// A record timestamp is out of the accepted range (negative).
    InvalidTimestamp = 18, retriable = false, "invalid timestamp";
    /// This broker is not the leader for the partition; refresh metadata.
    NotLeaderOrFollower = 19, retriable = true, "not the leader for the partition";
    /// The leader epoch in the request is older than the broker's.
    FencedLeaderEpoch = 20, retriable = true, "fenced leader epoch";
    /// The leader epoch in the request is newer than the broker's.
    UnknownLeaderEpoch = 21, retriable = true, "unknown leader epoch";
    /// Fewer in-sync replicas than `min.insync.replicas`; nothing was written.
    NotEnoughReplicas = 22, retriable = true, "not enough in-sync replicas";
    /// Written to the leader, but the ISR shrank below `min.insync.replicas` before acknowledgement.
    NotEnoughReplicasAfterAppend = 23, retriable = true, "not enough replicas after append";
    /// The request did not complete within its timeout.
    RequestTimedOut = 24, retriable = true, "request timed out";
    /// The log directory failed (write or fsync error) or the partition is fenced for corruption.
    StorageError = 25, retriable = false, "storage error";
    /// The broker is overloaded (a queue or memory limit is reached); retry with backoff.
    Busy = 26, retriable = true, "broker busy";
    /// Too many requests in flight on this connection.
    TooManyInFlightRequests = 27, retriable = true, "too many in-flight requests";
    /// The broker is shutting down.
    ShuttingDown = 28, retriable = true, "broker shutting down";
    /// The operation is not allowed on this topic (for example producing to an internal topic).
    InvalidTopicOperation = 29, retriable = false, "operation not allowed on this topic";
    /// The group coordinator is not available yet (loading or moving).
    CoordinatorNotAvailable = 30, retriable = true, "group coordinator not available";
    /// This broker (or core) is not the coordinator of the group.
    NotCoordinator = 31, retriable = true, "not the group coordinator";
    /// The coordinator is still replaying `__consumer_offsets`.
    CoordinatorLoadInProgress = 32, retriable = true, "coordinator load in progress";
    /// The group id is empty or invalid.
    InvalidGroupId = 33, retriable = false, "invalid group id";
    /// The group does not exist.
    GroupIdNotFound = 34, retriable = false, "group not found";
    /// The member id is not a member of the group.
    UnknownMemberId = 35, retriable = false, "unknown member id";
    /// The member epoch is older than the group's; the member was fenced and must rejoin.
    FencedMemberEpoch = 36, retriable = false, "fenced member epoch";
    /// The member epoch is stale for this commit; refresh the assignment and retry.
    StaleMemberEpoch = 37, retriable = true, "stale member epoch";
    /// The group still has active members.
    NonEmptyGroup = 38, retriable = false, "group has active members";
    /// The group reached `group_members_max`.
    GroupMaxSizeReached = 39, retriable = false, "group is full";
    /// The committed offset metadata string is longer than allowed.
    OffsetMetadataTooLarge = 40, retriable = false, "offset metadata too large";
    /// A producer sequence number is out of order (idempotent producer).
    OutOfOrderSequenceNumber = 41, retriable = false, "out of order sequence number";
    /// The batch was already written (idempotent producer); treated as success by clients.
    DuplicateSequenceNumber = 42, retriable = false, "duplicate sequence number";
    /// The producer epoch is older than the broker's for this producer id.
    InvalidProducerEpoch = 43, retriable = false, "invalid producer epoch";
    /// The topic or group is being deleted or created; retry shortly.
    OperationInProgress = 44, retriable = true, "operation in progress";
    /// Too many connections to this broker; the connection is closed.
    TooManyConnections = 45, retriable = true, "too many connections";
    /// The request would exceed a configured limit (`*_max`) that is not about frame size.
    LimitExceeded = 46, retriable = false, "request exceeds a configured limit";
    /// A record the topic refuses (Kafka's INVALID_RECORD): a record without a key produced
    /// to a compacted topic.
    InvalidRecord = 47, retriable = false, "record refused by the topic";
    /// The partition's log directory is read-only: its disk is full or has less than the
    /// broker's `disk_free_bytes_min` free. Nothing was written; reads still work, and writes
    /// resume by themselves once space is freed.
    DiskFull = 48, retriable = true, "log directory read-only: disk full";
    /// The listener speaks only TLS and the client sent plaintext: the broker answers this one
    /// frame in plaintext, then closes the connection.
    TlsRequired = 49, retriable = false, "this listener requires TLS";
    /// SaslHandshake named a mechanism the broker does not enable; the response lists those
    /// it does.
    UnsupportedSaslMechanism = 50, retriable = false, "unsupported SASL mechanism";
    /// A request out of the SASL sequence: anything but ApiVersions and the SASL requests before
    /// authentication (the connection closes), SaslAuthenticate before SaslHandshake, SASL
    /// requests after authentication or on a broker without SASL.
    IllegalSaslState = 51, retriable = false, "request out of the SASL sequence";
    /// SASL authentication failed: unknown user or wrong password (the broker does not say
    /// which), a malformed or replayed exchange; the message says what it may.
    SaslAuthenticationFailed = 52, retriable = false, "SASL authentication failed";
    /// The principal may not do this to a topic (no ACL allows it, or one denies it); nothing
    /// was changed. The message names the topic and the operation.
    TopicAuthorizationFailed = 53, retriable = false, "topic authorization failed";
    /// The principal may not do this to a consumer group; nothing was changed.
    GroupAuthorizationFailed = 54, retriable = false, "group authorization failed";
    /// The principal may not do this to the cluster (ACL management, broker configs, replica
    /// fetches, idempotent producers); nothing was changed.
    ClusterAuthorizationFailed = 55, retriable = false, "cluster authorization failed";
    /// A resource the request names does not exist (Kafka's RESOURCE_NOT_FOUND): deleting or
    /// describing a SCRAM credential no user has.
    ResourceNotFound = 56, retriable = false, "resource not found";
    /// A SCRAM credential the broker refuses (Kafka's UNACCEPTABLE_CREDENTIAL): iterations
    /// outside 4096..=16384, an empty or invalid username, an unknown mechanism, a salt or
    /// salted password of the wrong size.
    UnacceptableCredential = 57, retriable = false, "unacceptable SCRAM credential";
    /// A request names the same resource twice where it may name it once (Kafka's
    /// DUPLICATE_RESOURCE): one user and mechanism twice in AlterUserScramCredentials.
    DuplicateResource = 58, retriable = false, "resource named twice in one request";
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} ({}): {}",
            self.name(),
            *self as u16,
            self.description()
        )
    }
}

/// Errors from decoding bytes that came from the network or the disk. Every variant says exactly
/// what was wrong; none of the decoders panics on any input.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The frame header's CRC-32C does not match its contents.
    #[error("frame header checksum mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    FrameHeaderChecksum {
        /// Checksum stored in the header.
        stored: u32,
        /// Checksum computed over header bytes 0..20.
        computed: u32,
    },
    /// The frame declares more bytes than `frame_size_bytes_max`.
    #[error("frame of {size_bytes} bytes exceeds frame_size_bytes_max {size_bytes_max}")]
    FrameTooLarge {
        /// Declared frame size.
        size_bytes: u64,
        /// Configured limit.
        size_bytes_max: u64,
    },
    /// A frame header field has an impossible value.
    #[error("invalid frame header: {0}")]
    InvalidFrameHeader(&'static str),
    /// The flatbuffers message failed verification.
    #[error("invalid flatbuffers message: {0}")]
    InvalidMessage(String),
    /// A payload range points outside the frame's payload region or overlaps another one.
    #[error("payload range {offset}+{length} is outside the payload region of {payload_size_bytes} bytes")]
    PayloadRange {
        /// Start of the range inside the payload region.
        offset: u64,
        /// Length of the range.
        length: u64,
        /// Size of the payload region.
        payload_size_bytes: u64,
    },
    /// Two payload ranges of one request overlap (Produce: every partition owns its bytes).
    #[error(
        "payload ranges {first_offset}+{first_length} and {second_offset}+{second_length} overlap"
    )]
    PayloadRangeOverlap {
        /// Start of the earlier range.
        first_offset: u64,
        /// Length of the earlier range.
        first_length: u64,
        /// Start of the later range.
        second_offset: u64,
        /// Length of the later range.
        second_length: u64,
    },
    /// The input ended before a complete structure.
    #[error("truncated {what}: need {needed} bytes, have {available}")]
    Truncated {
        /// What was being decoded.
        what: &'static str,
        /// Bytes needed.
        needed: u64,
        /// Bytes available.
        available: u64,
    },
    /// A record batch is invalid; see [`crate::batch::BatchError`].
    #[error(transparent)]
    Batch(#[from] crate::batch::BatchError),
}

/// Errors from encoding a frame: a size that does not fit the wire's `u32` fields. Encoding is
/// otherwise infallible.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum EncodeError {
    /// Header + message + payload exceed `u32::MAX` bytes.
    #[error("frame of {size_bytes} bytes does not fit the u32 frame_size_bytes field")]
    FrameTooLarge {
        /// Size the frame would have.
        size_bytes: u64,
    },
    /// A payload range's offset or length does not fit in `u32`.
    #[error("payload range {offset}+{length} does not fit in u32")]
    PayloadRangeTooLarge {
        /// Start of the range inside the payload region.
        offset: u64,
        /// Length of the range.
        length: u64,
    },
}

impl DecodeError {
    /// The wire error code a server answers this decode failure with.
    pub fn error_code(&self) -> ErrorCode {
        match self {
            DecodeError::FrameTooLarge { .. } => ErrorCode::FrameTooLarge,
            DecodeError::Batch(b) => b.error_code(),
            _ => ErrorCode::MalformedFrame,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_are_unique() {
        let mut seen = std::collections::HashSet::new();
        for &code in ErrorCode::ALL {
            assert!(seen.insert(code as u16), "duplicate code {}", code as u16);
            assert_eq!(ErrorCode::from_u16(code as u16), code);
        }
        assert_eq!(ErrorCode::from_u16(60000), ErrorCode::UnknownServerError);
    }

    #[test]
    fn retriable_flags_match_intent() {
        assert!(ErrorCode::NotLeaderOrFollower.is_retriable());
        assert!(ErrorCode::Busy.is_retriable());
        assert!(!ErrorCode::InvalidTopicName.is_retriable());
        assert!(!ErrorCode::CorruptRecordBatch.is_retriable());
        assert_eq!(ErrorCode::OffsetOutOfRange.name(), "OffsetOutOfRange");
    }
}
