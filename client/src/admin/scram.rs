//! SCRAM users through the broker (AlterUserScramCredentials, DescribeUserScramCredentials;
//! docs/protocol.md 4.22), as Kafka's `Admin.alterUserScramCredentials`: the client salts the
//! password itself, so the password never leaves this process.

use borges_protocol::scram::{self, Mechanism};
use borges_protocol::{wire, ApiKey};

use super::Admin;
use crate::codec::{self, decode};
use crate::error::{check_code, ClientError, Result};

/// A credential to create or replace: what AlterUserScramCredentials carries.
#[derive(Clone, PartialEq, Eq)]
pub struct ScramUpsertion {
    /// The username.
    pub name: String,
    /// The mechanism.
    pub mechanism: Mechanism,
    /// PBKDF2 iterations (the broker takes 4096..=16384).
    pub iterations: u32,
    /// The salt.
    pub salt: Vec<u8>,
    /// `Hi(password, salt, iterations)`.
    pub salted_password: Vec<u8>,
}

impl std::fmt::Debug for ScramUpsertion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScramUpsertion")
            .field("name", &self.name)
            .field("mechanism", &self.mechanism)
            .field("iterations", &self.iterations)
            .finish_non_exhaustive()
    }
}

impl ScramUpsertion {
    /// `password`'s credential for `name`, salted here with a fresh random salt (PBKDF2 runs
    /// `iterations` rounds here: at most [`scram::ITERATIONS_MAX`], else refused without a
    /// request).
    pub fn new(
        name: &str,
        mechanism: Mechanism,
        iterations: u32,
        password: &str,
    ) -> Result<ScramUpsertion> {
        if iterations > scram::ITERATIONS_MAX {
            return Err(ClientError::InvalidArgument(format!(
                "{iterations} SCRAM iterations; at most {}",
                scram::ITERATIONS_MAX
            )));
        }
        let salt = scram::random_salt().to_vec();
        let salted_password = mechanism.salted_password(password.as_bytes(), &salt, iterations);
        Ok(ScramUpsertion {
            name: name.to_string(),
            mechanism,
            iterations,
            salt,
            salted_password,
        })
    }
}

/// A credential to delete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScramDeletion {
    /// The username.
    pub name: String,
    /// The mechanism.
    pub mechanism: Mechanism,
}

/// One user's credentials as DescribeUserScramCredentials answers: no secret.
#[derive(Debug)]
pub struct UserScramCredentials {
    /// The username.
    pub name: String,
    /// Its mechanisms and iterations, or the broker's error for this user.
    pub credentials: Result<Vec<(Mechanism, u32)>>,
}

impl Admin {
    /// Creates, replaces and deletes SCRAM credentials (needs Alter on the cluster): per user
    /// named, in the order of first mention, its outcome (a user's alterations apply all or
    /// none).
    pub async fn alter_user_scram_credentials(
        &self,
        upsertions: &[ScramUpsertion],
        deletions: &[ScramDeletion],
    ) -> Result<Vec<(String, Result<()>)>> {
        let message = codec::encode(|fbb| {
            let d: Vec<_> = deletions
                .iter()
                .map(|d| {
                    let name = fbb.create_string(&d.name);
                    let args = wire::ScramCredentialDeletionArgs {
                        name: Some(name),
                        mechanism: d.mechanism.wire_type(),
                    };
                    wire::ScramCredentialDeletion::create(fbb, &args)
                })
                .collect();
            let u: Vec<_> = upsertions.iter().map(|u| upsertion(fbb, u)).collect();
            let args = wire::AlterUserScramCredentialsRequestArgs {
                deletions: Some(fbb.create_vector(&d)),
                upsertions: Some(fbb.create_vector(&u)),
            };
            wire::AlterUserScramCredentialsRequest::create(fbb, &args)
        });
        let frame = self
            .core
            .call_any(ApiKey::AlterUserScramCredentials, message)
            .await?;
        let response = decode!(AlterUserScramCredentialsResponse, frame)?;
        check_code(response.error_code, response.error_message)?;
        Ok(response
            .results
            .unwrap_or_default()
            .into_iter()
            .map(|r| (r.user, check_code(r.error_code, r.error_message)))
            .collect())
    }

    /// The SCRAM mechanisms and iterations of the users named, or of every user when `names`
    /// is empty (needs Describe on the cluster). Never a secret: the protocol has no field
    /// for one.
    pub async fn describe_user_scram_credentials(
        &self,
        names: &[&str],
    ) -> Result<Vec<UserScramCredentials>> {
        let message = codec::encode(|fbb| {
            let n: Vec<_> = names.iter().map(|n| fbb.create_string(n)).collect();
            let users = (!n.is_empty()).then(|| fbb.create_vector(&n));
            let args = wire::DescribeUserScramCredentialsRequestArgs { users };
            wire::DescribeUserScramCredentialsRequest::create(fbb, &args)
        });
        let frame = self
            .core
            .call_any(ApiKey::DescribeUserScramCredentials, message)
            .await?;
        let response = decode!(DescribeUserScramCredentialsResponse, frame)?;
        check_code(response.error_code, response.error_message)?;
        Ok(response
            .results
            .unwrap_or_default()
            .into_iter()
            .map(|r| UserScramCredentials {
                name: r.user,
                credentials: check_code(r.error_code, r.error_message)
                    .and_then(|()| infos(r.credential_infos.unwrap_or_default())),
            })
            .collect())
    }
}

fn upsertion<'b>(
    fbb: &mut flatbuffers::FlatBufferBuilder<'b>,
    u: &ScramUpsertion,
) -> flatbuffers::WIPOffset<wire::ScramCredentialUpsertion<'b>> {
    let name = Some(fbb.create_string(&u.name));
    let salt = Some(fbb.create_vector(&u.salt));
    let salted_password = Some(fbb.create_vector(&u.salted_password));
    let args = wire::ScramCredentialUpsertionArgs {
        name,
        mechanism: u.mechanism.wire_type(),
        iterations: i32::try_from(u.iterations).unwrap_or(i32::MAX),
        salt,
        salted_password,
    };
    wire::ScramCredentialUpsertion::create(fbb, &args)
}

fn infos(infos: Vec<wire::ScramCredentialInfoT>) -> Result<Vec<(Mechanism, u32)>> {
    infos
        .into_iter()
        .map(|i| {
            let m = Mechanism::from_wire_type(i.mechanism).ok_or_else(|| {
                ClientError::Protocol(format!("unknown SCRAM mechanism {}", i.mechanism))
            })?;
            let iterations = u32::try_from(i.iterations)
                .map_err(|_| ClientError::Protocol(format!("{} SCRAM iterations", i.iterations)))?;
            Ok((m, iterations))
        })
        .collect()
}
