//! `Failure`: a wire error code with a message for humans, from the replication crate (where
//! the controller returns it too): re-exported so that broker modules keep naming
//! `crate::failure`.

pub use borges_replication::failure::*;
