//! The Borges broker. See docs/ARCHITECTURE.md.
