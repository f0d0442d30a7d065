//! The ACLs file of a single broker (`security.acls_file`, default `DATA_DIR/acls.toml`,
//! beside the SASL credentials file): one `[[acl]]` table per ACL. Core 0 reads it at
//! start-up and rewrites it atomically (a temporary file, fsync, rename, fsync of the
//! directory) on every CreateAcls or DeleteAcls that changes something, before answering.
//!
//! ```toml
//! [[acl]]
//! principal = "User:alice"
//! resource_type = "Topic"
//! resource_name = "orders."
//! pattern = "Prefixed"
//! operation = "Read"
//! permission = "Allow"
//! ```

use std::path::{Path, PathBuf};

use borges_protocol::acl::{Acl, Operation, PatternType, Permission, ResourceType};
use serde::{Deserialize, Serialize};
use thiserror::Error;

/// Why an ACLs file could not be read or written.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum AclFileError {
    /// Reading or writing the file failed.
    #[error("{what} {}: {source}", path.display())]
    Io {
        /// What was being done.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not an ACLs file.
    #[error("{}: {message}", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong, and where.
        message: String,
    },
}

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileFormat {
    #[serde(default)]
    acl: Vec<Entry>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    principal: String,
    resource_type: String,
    resource_name: String,
    pattern: String,
    operation: String,
    permission: String,
}

const HEADER: &str = "# Borges ACLs (docs/operations.md, \"ACLs\"). Written by the broker on \
                      CreateAcls and DeleteAcls (`borges acl add|remove`); read at start-up.\n\n";

fn entry_to_acl(e: Entry) -> Result<Acl, String> {
    fn parse<T>(what: &str, text: &str, from: fn(&str) -> Option<T>) -> Result<T, String> {
        from(text).ok_or_else(|| format!("unknown {what} {text:?}"))
    }
    let acl = Acl {
        resource_type: parse("resource_type", &e.resource_type, ResourceType::from_name)?,
        pattern: parse("pattern", &e.pattern, PatternType::from_name)?,
        operation: parse("operation", &e.operation, Operation::from_name)?,
        permission: parse("permission", &e.permission, Permission::from_name)?,
        principal: e.principal,
        resource_name: e.resource_name,
    };
    acl.validate().map_err(|e| e.to_string())?;
    Ok(acl)
}

/// An ACL as the cluster metadata holds it (the same names as the file).
pub fn to_record(a: &Acl) -> borges_replication::metadata::AclRecord {
    borges_replication::metadata::AclRecord {
        principal: a.principal.clone(),
        resource_type: a.resource_type.name().into(),
        resource_name: a.resource_name.clone(),
        pattern: a.pattern.name().into(),
        operation: a.operation.name().into(),
        permission: a.permission.name().into(),
    }
}

/// The ACLs of the cluster metadata; an invalid record names its position.
pub fn from_records(
    records: &[borges_replication::metadata::AclRecord],
) -> Result<Vec<Acl>, String> {
    records
        .iter()
        .enumerate()
        .map(|(i, r)| {
            entry_to_acl(Entry {
                principal: r.principal.clone(),
                resource_type: r.resource_type.clone(),
                resource_name: r.resource_name.clone(),
                pattern: r.pattern.clone(),
                operation: r.operation.clone(),
                permission: r.permission.clone(),
            })
            .map_err(|m| format!("metadata ACL {}: {m}", i + 1))
        })
        .collect()
}

/// Reads an ACLs file of at most `acls_max` ACLs; a missing file holds none.
pub fn read(path: &Path, acls_max: usize) -> Result<Vec<Acl>, AclFileError> {
    let text = match crate::durable_file::read_optional(path) {
        Ok(Some(t)) => t,
        Ok(None) => return Ok(Vec::new()),
        Err(source) => {
            return Err(AclFileError::Io {
                what: "reading",
                path: path.to_path_buf(),
                source,
            })
        }
    };
    let invalid = |message: String| AclFileError::Invalid {
        path: path.to_path_buf(),
        message,
    };
    let file: FileFormat = toml::from_str(&text).map_err(|e| invalid(e.to_string()))?;
    if file.acl.len() > acls_max {
        return Err(invalid(format!(
            "{} ACLs, more than security.acls_max ({acls_max})",
            file.acl.len()
        )));
    }
    let mut acls: Vec<Acl> = Vec::with_capacity(file.acl.len());
    for (i, e) in file.acl.into_iter().enumerate() {
        let acl = entry_to_acl(e).map_err(|m| invalid(format!("acl {}: {m}", i + 1)))?;
        if acls.contains(&acl) {
            return Err(invalid(format!("acl {}: listed twice", i + 1)));
        }
        acls.push(acl);
    }
    Ok(acls)
}

/// Writes `acls` to `path` atomically (a temporary file, fsync, rename, fsync of the
/// directory). Blocking: run it off the cores' executors.
pub fn write(path: &Path, acls: &[Acl]) -> Result<(), AclFileError> {
    let file = FileFormat {
        acl: acls
            .iter()
            .map(|a| Entry {
                principal: a.principal.clone(),
                resource_type: a.resource_type.name().into(),
                resource_name: a.resource_name.clone(),
                pattern: a.pattern.name().into(),
                operation: a.operation.name().into(),
                permission: a.permission.name().into(),
            })
            .collect(),
    };
    let text = toml::to_string(&file).map_err(|e| AclFileError::Invalid {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    crate::durable_file::replace(path, &[HEADER.as_bytes(), text.as_bytes()], 0o666).map_err(
        |(what, source)| AclFileError::Io {
            what,
            path: path.to_path_buf(),
            source,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<Acl> {
        vec![
            Acl {
                principal: "User:alice".into(),
                resource_type: ResourceType::Topic,
                resource_name: "orders.".into(),
                pattern: PatternType::Prefixed,
                operation: Operation::Read,
                permission: Permission::Allow,
            },
            Acl {
                principal: "User:*".into(),
                resource_type: ResourceType::Cluster,
                resource_name: borges_protocol::acl::CLUSTER_NAME.into(),
                pattern: PatternType::Literal,
                operation: Operation::DescribeConfigs,
                permission: Permission::Deny,
            },
        ]
    }

    #[test]
    fn a_file_round_trips_and_a_missing_one_is_empty() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("acls.toml");
        assert!(read(&path, 10).unwrap().is_empty());
        write(&path, &sample()).unwrap();
        assert_eq!(read(&path, 10).unwrap(), sample());
        write(&path, &[]).unwrap();
        assert!(read(&path, 10).unwrap().is_empty());
    }

    #[test]
    fn bad_files_are_refused_with_where() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("acls.toml");
        write(&path, &sample()).unwrap();
        let e = read(&path, 1).unwrap_err().to_string();
        assert!(e.contains("acls_max"), "{e}");
        let good = std::fs::read_to_string(&path).unwrap();
        let cases = [
            (good.replace("\"Read\"", "\"Sing\""), "unknown operation"),
            (good.replace("User:alice", "alice"), "User:NAME"),
            (good.replace("kafka-cluster", "other"), "cluster resource"),
            (
                format!("{good}\n{}", good.split("\n\n").nth(1).unwrap_or("")),
                "twice",
            ),
            ("[[acl]]\nprincipal = 1\n".into(), "invalid type"),
        ];
        for (text, expected) in cases {
            std::fs::write(&path, &text).unwrap();
            let e = read(&path, 10).unwrap_err().to_string();
            assert!(e.contains(expected), "{expected}: {e}\n{text}");
        }
    }
}
