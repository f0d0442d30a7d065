//! The Borges client SDK.
