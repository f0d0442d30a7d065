//! Partition log storage. See docs/ARCHITECTURE.md and docs/storage-format.md.
