//! The SCRAM credentials file of a single broker: salted and hashed credentials, never
//! passwords, one `[[user]]` table per user and mechanism. `borges user create|delete|list`
//! edits it (atomically: a temporary file, fsync, rename); the broker reads it at start-up and
//! again when it changes (docs/operations.md, "SASL").
//!
//! ```toml
//! [[user]]
//! name = "alice"
//! mechanism = "SCRAM-SHA-256"
//! iterations = 4096
//! salt = "base64"
//! stored_key = "base64"
//! server_key = "base64"
//! ```

use std::path::{Path, PathBuf};

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use borges_protocol::scram::{Credential, Mechanism};
use borges_replication::metadata::ScramCredentialRecord;
use serde::{Deserialize, Serialize};
use thiserror::Error;

/// Most users (user and mechanism pairs) a credentials file may hold.
pub const CREDENTIALS_MAX: usize = 100_000;

/// Why a credentials file could not be read or written.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum CredentialsError {
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
    /// The file is not a credentials file.
    #[error("{}: {message}", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong, and where.
        message: String,
    },
}

/// One user's credential for one mechanism.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserCredential {
    /// The username (the SCRAM `n=`, the principal `User:NAME`).
    pub name: String,
    /// The credential.
    pub credential: Credential,
}

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileFormat {
    #[serde(default)]
    user: Vec<Entry>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    name: String,
    mechanism: String,
    iterations: u32,
    salt: String,
    stored_key: String,
    server_key: String,
}

const HEADER: &str = "# Borges SCRAM credentials: salted and hashed, no passwords. Edit with \
                      `borges user create|delete|list`.\n\n";

/// Reads a credentials file; a missing file holds no users.
pub fn read(path: &Path) -> Result<Vec<UserCredential>, CredentialsError> {
    let text = match crate::durable_file::read_optional(path) {
        Ok(Some(t)) => t,
        Ok(None) => return Ok(Vec::new()),
        Err(source) => {
            return Err(CredentialsError::Io {
                what: "reading",
                path: path.to_path_buf(),
                source,
            })
        }
    };
    let invalid = |message: String| CredentialsError::Invalid {
        path: path.to_path_buf(),
        message,
    };
    let file: FileFormat = toml::from_str(&text).map_err(|e| invalid(e.to_string()))?;
    if file.user.len() > CREDENTIALS_MAX {
        return Err(invalid(format!(
            "{} credentials, more than {CREDENTIALS_MAX}",
            file.user.len()
        )));
    }
    let mut users: Vec<UserCredential> = Vec::with_capacity(file.user.len());
    for (i, e) in file.user.into_iter().enumerate() {
        let at = |m: &str| invalid(format!("user {} ({:?}): {m}", i + 1, e.name));
        let credential = decode_credential(
            &e.name,
            &e.mechanism,
            e.iterations,
            [&e.salt, &e.stored_key, &e.server_key],
        )
        .map_err(|m| at(&m))?;
        let mechanism = credential.mechanism;
        if users
            .iter()
            .any(|u| u.name == e.name && u.credential.mechanism == mechanism)
        {
            return Err(at("listed twice for this mechanism"));
        }
        users.push(UserCredential {
            name: e.name,
            credential,
        });
    }
    Ok(users)
}

/// Writes `users` to `path` atomically (mode 0600: the keys let anyone who reads them
/// impersonate the broker to the user, and try passwords offline).
pub fn write(path: &Path, users: &[UserCredential]) -> Result<(), CredentialsError> {
    let file = FileFormat {
        user: users
            .iter()
            .map(|u| Entry {
                name: u.name.clone(),
                mechanism: u.credential.mechanism.name().to_string(),
                iterations: u.credential.iterations,
                salt: BASE64.encode(&u.credential.salt),
                stored_key: BASE64.encode(&u.credential.stored_key),
                server_key: BASE64.encode(&u.credential.server_key),
            })
            .collect(),
    };
    let text = toml::to_string(&file).map_err(|e| CredentialsError::Invalid {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    crate::durable_file::replace(path, &[HEADER.as_bytes(), text.as_bytes()], 0o600).map_err(
        |(what, source)| CredentialsError::Io {
            what,
            path: path.to_path_buf(),
            source,
        },
    )
}

/// `user` as the cluster metadata holds it (base64, as in the file).
pub fn to_record(user: &UserCredential) -> ScramCredentialRecord {
    let c = &user.credential;
    ScramCredentialRecord {
        name: user.name.clone(),
        mechanism: c.mechanism.name().to_string(),
        iterations: c.iterations,
        salt: BASE64.encode(&c.salt),
        stored_key: BASE64.encode(&c.stored_key),
        server_key: BASE64.encode(&c.server_key),
    }
}

/// The credentials of the cluster metadata, each checked as a file's are.
pub fn from_records(records: &[ScramCredentialRecord]) -> Result<Vec<UserCredential>, String> {
    records
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let at = |m: &str| format!("credential {} ({:?}): {m}", i + 1, r.name);
            let credential = decode_credential(
                &r.name,
                &r.mechanism,
                r.iterations,
                [&r.salt, &r.stored_key, &r.server_key],
            )
            .map_err(|m| at(&m))?;
            Ok(UserCredential {
                name: r.name.clone(),
                credential,
            })
        })
        .collect()
}

/// Decodes and checks one credential, of a file's entry or a metadata record: the mechanism by
/// name, the base64 `[salt, stored_key, server_key]`, the credential's limits and the username.
/// The error says what is wrong; the caller says where.
fn decode_credential(
    name: &str,
    mechanism: &str,
    iterations: u32,
    [salt, stored_key, server_key]: [&str; 3],
) -> Result<Credential, String> {
    let decode = |field: &str, v: &str| {
        BASE64
            .decode(v)
            .map_err(|_| format!("{field} is not base64"))
    };
    let credential = Credential {
        mechanism: Mechanism::from_name(mechanism)
            .ok_or_else(|| format!("unknown mechanism {mechanism:?}"))?,
        salt: decode("salt", salt)?,
        iterations,
        stored_key: decode("stored_key", stored_key)?,
        server_key: decode("server_key", server_key)?,
    };
    credential.validate().map_err(|e| e.to_string())?;
    crate::sasl::check_username(name)?;
    Ok(credential)
}

/// Adds or replaces `user`'s credential for its mechanism.
pub fn upsert(users: &mut Vec<UserCredential>, user: UserCredential) {
    let mechanism = user.credential.mechanism;
    match users
        .iter_mut()
        .find(|u| u.name == user.name && u.credential.mechanism == mechanism)
    {
        Some(u) => *u = user,
        None => users.push(user),
    }
}

/// Removes `name`'s credentials (of `mechanism`, or all); returns how many.
pub fn remove(users: &mut Vec<UserCredential>, name: &str, mechanism: Option<Mechanism>) -> usize {
    let before = users.len();
    users.retain(|u| !(u.name == name && mechanism.is_none_or(|m| u.credential.mechanism == m)));
    before - users.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_round_trips_and_a_missing_one_is_empty() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("credentials.toml");
        assert!(read(&path).unwrap().is_empty());
        let mut users = Vec::new();
        for (name, m) in [
            ("alice", Mechanism::ScramSha256),
            ("bob", Mechanism::ScramSha512),
        ] {
            let credential = Credential::generate(m, b"pw", 4096).unwrap();
            upsert(
                &mut users,
                UserCredential {
                    name: name.into(),
                    credential,
                },
            );
        }
        write(&path, &users).unwrap();
        assert_eq!(read(&path).unwrap(), users);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(!text.contains("pw\""), "no password in the file");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(remove(&mut users, "alice", None), 1);
        assert_eq!(remove(&mut users, "bob", Some(Mechanism::ScramSha256)), 0);
    }

    #[test]
    fn credentials_round_trip_through_metadata_records() {
        let users = vec![UserCredential {
            name: "alice".into(),
            credential: Credential::generate(Mechanism::ScramSha512, b"pw", 4096).unwrap(),
        }];
        let records: Vec<_> = users.iter().map(to_record).collect();
        assert_eq!(from_records(&records).unwrap(), users);
        let mut bad = records.clone();
        bad[0].iterations = 1;
        assert!(from_records(&bad).unwrap_err().contains("iteration"));
        bad[0] = ScramCredentialRecord {
            mechanism: "SCRAM-SHA-1".into(),
            ..records[0].clone()
        };
        assert!(from_records(&bad).unwrap_err().contains("mechanism"));
    }

    #[test]
    fn bad_files_are_refused_with_where() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        let good = Credential::generate(Mechanism::ScramSha256, b"pw", 4096).unwrap();
        let entry = |mechanism: &str, iterations: u32, key: &[u8]| {
            format!(
                "[[user]]\nname = \"alice\"\nmechanism = \"{mechanism}\"\n\
                 iterations = {iterations}\n\
                 salt = \"{}\"\nstored_key = \"{}\"\nserver_key = \"{}\"\n",
                BASE64.encode(&good.salt),
                BASE64.encode(key),
                BASE64.encode(&good.server_key)
            )
        };
        let cases = [
            (
                entry("SCRAM-SHA-1", 4096, &good.stored_key),
                "unknown mechanism",
            ),
            (
                entry("SCRAM-SHA-256", 10, &good.stored_key),
                "iteration count",
            ),
            (entry("SCRAM-SHA-256", 4096, b"short"), "key size"),
            (
                entry("SCRAM-SHA-256", 4096, &good.stored_key).repeat(2),
                "listed twice",
            ),
            ("[[user]]\nname = 1\n".to_string(), "invalid type"),
        ];
        for (text, expected) in cases {
            std::fs::write(&path, &text).unwrap();
            let e = read(&path).unwrap_err().to_string();
            assert!(e.contains(expected), "{e}");
        }
    }
}
