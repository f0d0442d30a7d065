//! The Borges wire protocol, shared by the broker, the client SDK and the benchmark suite.
//!
//! No IO and no async runtime: every function here works on byte buffers.
//!
//! - [`frame`]: the 24-byte frame header and the sans-IO [`frame::FrameDecoder`].
//! - [`api`]: API keys and versions; [`api::wire`] holds the generated flatbuffers messages.
//! - [`batch`]: Kafka RecordBatch v2: validation, record decoding, [`batch::BatchBuilder`].
//! - [`records`]: the record format's rules, checked field by field (over memory or a zstd
//!   stream); the rule a bad record breaks ([`records::RecordRule`]).
//! - [`message`]: verified decoding of flatbuffers messages, payload ranges, frame encoding.
//! - [`controller_link`]: API keys of the controller link (Raft and cluster requests).
//! - [`error`]: the wire [`ErrorCode`] enum and the crate's [`DecodeError`].
//! - [`partitioner`]: Kafka's murmur2 keyed partitioner.
//! - [`rewrite`]: a batch rebuilt with a subset of its records (log compaction).
//! - [`scram`]: SASL SCRAM-SHA-256/512 messages, key derivation and state machines.

#![warn(missing_docs)]

pub mod acl;
pub mod api;
pub mod batch;
pub mod controller_link;
pub mod error;
pub mod frame;
pub mod message;
pub mod partitioner;
pub mod records;
pub mod rewrite;
pub mod scram;
pub mod varint;

#[allow(
    missing_docs,
    unused_imports,
    dead_code,
    non_camel_case_types,
    non_snake_case,
    clippy::all,
    clippy::pedantic,
    unsafe_op_in_unsafe_fn,
    mismatched_lifetime_syntaxes
)]
#[rustfmt::skip]
#[path = "generated/mod.rs"]
mod generated;

pub use api::{wire, ApiKey};
pub use error::{DecodeError, EncodeError, ErrorCode};
