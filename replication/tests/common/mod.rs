//! Shared by the replication crate's integration tests: a small key-value state machine.
#![allow(dead_code)]

use std::collections::BTreeMap;

use borges_replication::types::StateMachine;
use serde::{Deserialize, Serialize};

/// A replicated map.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
pub struct Kv {
    /// Keys and values.
    pub map: BTreeMap<String, String>,
    /// Commands applied.
    pub applied: u64,
}

/// Set a key.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Set {
    /// The key.
    pub key: String,
    /// The value.
    pub value: String,
}

impl StateMachine for Kv {
    type Command = Set;
    type Reply = Option<String>;

    fn apply(&mut self, _index: u64, _term: u64, command: &Set) -> Option<String> {
        self.applied += 1;
        self.map.insert(command.key.clone(), command.value.clone())
    }

    fn encode(&self) -> Result<Vec<u8>, String> {
        serde_json::to_vec(self).map_err(|e| e.to_string())
    }

    fn decode(bytes: &[u8]) -> Result<Self, String> {
        serde_json::from_slice(bytes).map_err(|e| e.to_string())
    }
}
