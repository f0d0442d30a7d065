//! Cluster metadata, from the replication crate (where the image, its changes and the single
//! node's store live): re-exported so that broker modules keep naming `crate::metadata`.

pub use borges_replication::metadata::*;
