//! SASL/SCRAM authentication of a new connection (docs/protocol.md, 4.20): SaslHandshake, then
//! the client-first and client-final messages in two SaslAuthenticate requests; the broker's
//! server-final message is verified too (the broker proves it holds the credential).

use borges_protocol::scram::{self, Mechanism, ScramClient};
use borges_protocol::{wire, ApiKey, ErrorCode};

use crate::codec::{decode, encode, obj};
use crate::connection::{Connection, Request};
use crate::error::{check_code, ClientError, Result};

/// SASL settings of a client: the mechanism and the user it authenticates as.
#[derive(Clone, PartialEq, Eq)]
pub struct SaslConfig {
    /// SCRAM-SHA-256 or SCRAM-SHA-512.
    pub mechanism: Mechanism,
    /// The username.
    pub username: String,
    /// The password.
    pub password: String,
}

impl std::fmt::Debug for SaslConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SaslConfig")
            .field("mechanism", &self.mechanism)
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

impl SaslConfig {
    /// SCRAM with `mechanism` (its SASL name, "SCRAM-SHA-256" or "SCRAM-SHA-512") as
    /// `username` with `password`.
    pub fn scram(mechanism: &str, username: &str, password: &str) -> Result<SaslConfig> {
        let mechanism = Mechanism::from_name(mechanism).ok_or_else(|| {
            ClientError::InvalidConfig(format!(
                "sasl: unknown mechanism {mechanism:?} (SCRAM-SHA-256 or SCRAM-SHA-512)"
            ))
        })?;
        if username.is_empty() || username.len() > scram::USERNAME_SIZE_BYTES_MAX {
            return Err(ClientError::InvalidConfig(format!(
                "sasl: a username has 1..={} bytes",
                scram::USERNAME_SIZE_BYTES_MAX
            )));
        }
        Ok(SaslConfig {
            mechanism,
            username: username.to_string(),
            password: password.to_string(),
        })
    }
}

/// Authenticates `conn` (to `addr`) within `timeout_ms` per request.
pub(crate) async fn authenticate(
    conn: &Connection,
    addr: &str,
    sasl: &SaslConfig,
    timeout_ms: u64,
) -> Result<()> {
    let handshake = obj!(wire::SaslHandshakeRequestT {
        mechanism: Some(sasl.mechanism.name().to_string()),
    });
    let message = encode(|fbb| handshake.pack(fbb));
    let frame = conn
        .call(Request::new(ApiKey::SaslHandshake, message), timeout_ms)
        .await?;
    let response = decode!(SaslHandshakeResponse, frame)?;
    check_code(response.error_code, response.error_message)?;
    let mut client = ScramClient::new(
        sasl.mechanism,
        &sasl.username,
        sasl.password.as_bytes(),
        scram::random_nonce(),
    );
    let failed = |e: scram::ScramError| ClientError::Authentication {
        addr: addr.to_string(),
        message: e.to_string(),
    };
    let client_first = client.client_first().map_err(failed)?;
    let server_first = round(conn, client_first, timeout_ms).await?;
    let client_final = client.server_first(&server_first).map_err(failed)?;
    let server_final = round(conn, client_final, timeout_ms).await?;
    client.server_final(&server_final).map_err(failed)
}

/// One SaslAuthenticate round: sends `auth_bytes`, returns the broker's.
async fn round(conn: &Connection, auth_bytes: Vec<u8>, timeout_ms: u64) -> Result<Vec<u8>> {
    let request = obj!(wire::SaslAuthenticateRequestT {
        auth_bytes: Some(auth_bytes),
    });
    let message = encode(|fbb| request.pack(fbb));
    let frame = conn
        .call(Request::new(ApiKey::SaslAuthenticate, message), timeout_ms)
        .await?;
    let response = decode!(SaslAuthenticateResponse, frame)?;
    check_code(response.error_code, response.error_message)?;
    response.auth_bytes.ok_or_else(|| ClientError::Broker {
        code: ErrorCode::SaslAuthenticationFailed,
        message: Some("SaslAuthenticateResponse without auth_bytes".into()),
    })
}
