//! SASL SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka speaks them (KIP-84): the
//! four messages, the key derivation, and the client's and the server's state machines. Sans-IO:
//! the broker and the SDK carry the bytes in `SaslAuthenticate` frames (docs/protocol.md, 4.20).
//!
//! ```text
//! client-first   n,[a=AUTHZID],n=USERNAME,r=CLIENT_NONCE
//! server-first   r=CLIENT_NONCE SERVER_NONCE,s=BASE64(SALT),i=ITERATIONS
//! client-final   c=BASE64(GS2 HEADER),r=CLIENT_NONCE SERVER_NONCE,p=BASE64(CLIENT PROOF)
//! server-final   v=BASE64(SERVER SIGNATURE)   or   e=ERROR
//! ```
//!
//! As in Kafka: no channel binding (`p=` in the GS2 header is refused, `y` and `n` accepted), an
//! authorization id must equal the username (no impersonation, CVE-2017-12610), passwords are
//! their UTF-8 bytes (no SASLprep), iterations are 4096..=16384. The server checks that the
//! client-final nonce is exactly the one it sent (CVE-2024-56128) and compares keys in constant
//! time (`subtle`, CVE-2021-38153). An unknown user gets a server-first message like a known one
//! (a salt derived from the username) and fails at the proof, with the error a wrong password
//! gets, so usernames cannot be probed. Every message is bounded by
//! [`SCRAM_MESSAGE_SIZE_BYTES_MAX`] before it is parsed.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::{Digest, Sha256, Sha512};
use subtle::ConstantTimeEq;
use thiserror::Error;

/// Largest SCRAM message either side accepts, in bytes.
pub const SCRAM_MESSAGE_SIZE_BYTES_MAX: usize = 2048;
/// Longest username, in bytes of UTF-8 (after `=2C`/`=3D` decoding).
pub const USERNAME_SIZE_BYTES_MAX: usize = 255;
/// Longest nonce (client part, or client and server parts together), in characters.
pub const NONCE_SIZE_BYTES_MAX: usize = 512;
/// Longest salt, in bytes.
pub const SALT_SIZE_BYTES_MAX: usize = 128;
/// Fewest PBKDF2 iterations accepted (Kafka's minimum, RFC 7677's recommendation).
pub const ITERATIONS_MIN: u32 = 4096;
/// Most PBKDF2 iterations accepted (Kafka's maximum): a server cannot make a client spin.
pub const ITERATIONS_MAX: u32 = 16384;
/// Random bytes in a nonce this module generates (base64-encoded on the wire).
pub const NONCE_RANDOM_BYTES: usize = 24;
/// Bytes of a salt this module generates.
pub const SALT_RANDOM_BYTES: usize = 32;
/// Most deletions and upsertions together in one AlterUserScramCredentials request.
pub const ALTERATIONS_PER_REQUEST_MAX: usize = 1000;
/// Most users one DescribeUserScramCredentials request names.
pub const DESCRIBED_USERS_PER_REQUEST_MAX: usize = 1000;

/// A SCRAM mechanism.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mechanism {
    /// SCRAM-SHA-256 (RFC 7677).
    ScramSha256,
    /// SCRAM-SHA-512 (Kafka's second SCRAM mechanism).
    ScramSha512,
}

impl Mechanism {
    /// Every mechanism, in the order a broker lists them.
    pub const ALL: &'static [Mechanism] = &[Mechanism::ScramSha256, Mechanism::ScramSha512];

    /// The SASL name, as in SaslHandshake.
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::ScramSha256 => "SCRAM-SHA-256",
            Mechanism::ScramSha512 => "SCRAM-SHA-512",
        }
    }

    /// The mechanism of a SASL name (exact, upper case as registered).
    pub fn from_name(name: &str) -> Option<Mechanism> {
        Mechanism::ALL.iter().copied().find(|m| m.name() == name)
    }

    /// The mechanism's number on the wire (Kafka's ScramMechanism: 1 SCRAM-SHA-256,
    /// 2 SCRAM-SHA-512).
    pub fn wire_type(self) -> i8 {
        match self {
            Mechanism::ScramSha256 => 1,
            Mechanism::ScramSha512 => 2,
        }
    }

    /// The mechanism of a wire number; `None` for 0 (Kafka's UNKNOWN) and others.
    pub fn from_wire_type(value: i8) -> Option<Mechanism> {
        Mechanism::ALL
            .iter()
            .copied()
            .find(|m| m.wire_type() == value)
    }

    /// Size of the hash, and so of every key and signature, in bytes.
    pub fn key_size_bytes(self) -> usize {
        match self {
            Mechanism::ScramSha256 => 32,
            Mechanism::ScramSha512 => 64,
        }
    }

    fn hmac(self, key: &[u8], data: &[u8]) -> Vec<u8> {
        // HMAC accepts keys of any length: `new_from_slice` cannot fail for it.
        match self {
            Mechanism::ScramSha256 => match Hmac::<Sha256>::new_from_slice(key) {
                Ok(mut mac) => {
                    mac.update(data);
                    mac.finalize().into_bytes().to_vec()
                }
                Err(_) => unreachable!("HMAC takes keys of any length"),
            },
            Mechanism::ScramSha512 => match Hmac::<Sha512>::new_from_slice(key) {
                Ok(mut mac) => {
                    mac.update(data);
                    mac.finalize().into_bytes().to_vec()
                }
                Err(_) => unreachable!("HMAC takes keys of any length"),
            },
        }
    }

    fn hash(self, data: &[u8]) -> Vec<u8> {
        match self {
            Mechanism::ScramSha256 => Sha256::digest(data).to_vec(),
            Mechanism::ScramSha512 => Sha512::digest(data).to_vec(),
        }
    }

    /// `Hi(password, salt, iterations)`: PBKDF2 with this mechanism's HMAC. What a client
    /// sends in AlterUserScramCredentials instead of the password.
    pub fn salted_password(self, password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
        let mut out = vec![0u8; self.key_size_bytes()];
        match self {
            Mechanism::ScramSha256 => {
                pbkdf2::pbkdf2_hmac::<Sha256>(password, salt, iterations, &mut out)
            }
            Mechanism::ScramSha512 => {
                pbkdf2::pbkdf2_hmac::<Sha512>(password, salt, iterations, &mut out)
            }
        }
        out
    }
}

impl std::fmt::Display for Mechanism {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a SCRAM exchange failed. The server answers every variant with one
/// `SaslAuthenticationFailed` and logs the variant; the client reports it.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ScramError {
    /// A message does not follow RFC 5802's grammar; says which part.
    #[error("malformed SCRAM message: {0}")]
    Malformed(&'static str),
    /// A message is longer than [`SCRAM_MESSAGE_SIZE_BYTES_MAX`].
    #[error("SCRAM message of {size_bytes} bytes exceeds {SCRAM_MESSAGE_SIZE_BYTES_MAX}")]
    TooLarge {
        /// The message's size.
        size_bytes: usize,
    },
    /// The client asked for channel binding (`p=` in the GS2 header), which Borges does not do.
    #[error("channel binding is not supported")]
    ChannelBindingUnsupported,
    /// The client-final `c=` attribute is not the GS2 header of the client-first message.
    #[error("channel binding data does not match the GS2 header")]
    ChannelBindingMismatch,
    /// The authorization id is not the username: a client may not act as another user.
    #[error("authorization id differs from the username")]
    AuthzidNotUsername,
    /// A mandatory extension (`m=`) that this implementation does not know.
    #[error("unsupported mandatory extension")]
    MandatoryExtension,
    /// The client-final nonce is not the nonce the server sent, or the server's nonce does not
    /// extend the client's.
    #[error("nonce mismatch")]
    NonceMismatch,
    /// The iteration count is outside [`ITERATIONS_MIN`]..=[`ITERATIONS_MAX`].
    #[error("iteration count {iterations} outside {ITERATIONS_MIN}..={ITERATIONS_MAX}")]
    IterationsOutOfRange {
        /// The count received.
        iterations: u32,
    },
    /// The client proof is wrong: a wrong password or an unknown user (the server does not say
    /// which).
    #[error("invalid credentials")]
    InvalidProof,
    /// The server's signature is wrong: the server does not know the password (or a man in the
    /// middle answered).
    #[error("the server's signature does not verify: the server does not hold the credential")]
    ServerSignatureMismatch,
    /// The server ended the exchange with `e=`.
    #[error("the server refused: {0}")]
    ServerError(String),
    /// A message arrived in a state that does not expect it.
    #[error("SCRAM message out of order")]
    OutOfOrder,
}

/// A stored SCRAM credential: what the broker keeps instead of the password (RFC 5802 3).
#[derive(Clone, PartialEq, Eq)]
pub struct Credential {
    /// The mechanism the keys belong to.
    pub mechanism: Mechanism,
    /// The salt.
    pub salt: Vec<u8>,
    /// PBKDF2 iterations.
    pub iterations: u32,
    /// `H(HMAC(SaltedPassword, "Client Key"))`.
    pub stored_key: Vec<u8>,
    /// `HMAC(SaltedPassword, "Server Key")`.
    pub server_key: Vec<u8>,
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credential")
            .field("mechanism", &self.mechanism)
            .field("iterations", &self.iterations)
            .finish_non_exhaustive()
    }
}

impl Credential {
    /// The credential of `password` with `salt` and `iterations`.
    pub fn new(mechanism: Mechanism, password: &[u8], salt: &[u8], iterations: u32) -> Credential {
        let salted = mechanism.salted_password(password, salt, iterations);
        Credential::from_salted(mechanism, &salted, salt, iterations)
    }

    fn from_salted(mechanism: Mechanism, salted: &[u8], salt: &[u8], iterations: u32) -> Self {
        let client_key = mechanism.hmac(salted, b"Client Key");
        Credential {
            mechanism,
            salt: salt.to_vec(),
            iterations,
            stored_key: mechanism.hash(&client_key),
            server_key: mechanism.hmac(salted, b"Server Key"),
        }
    }

    /// The credential of a salted password (`Hi(password, salt, iterations)`, as
    /// AlterUserScramCredentials carries it), checked: iterations in range, the salted
    /// password of the mechanism's hash size, a salt of 1..=[`SALT_SIZE_BYTES_MAX`] bytes.
    pub fn from_salted_password(
        mechanism: Mechanism,
        salted_password: &[u8],
        salt: &[u8],
        iterations: u32,
    ) -> Result<Credential, ScramError> {
        check_iterations(iterations)?;
        if salted_password.len() != mechanism.key_size_bytes() {
            return Err(ScramError::Malformed(
                "salted password size differs from the mechanism's",
            ));
        }
        let credential = Credential::from_salted(mechanism, salted_password, salt, iterations);
        credential.validate()?;
        Ok(credential)
    }

    /// The credential of `password` with a fresh random salt.
    pub fn generate(
        mechanism: Mechanism,
        password: &[u8],
        iterations: u32,
    ) -> Result<Credential, ScramError> {
        check_iterations(iterations)?;
        Ok(Credential::new(
            mechanism,
            password,
            &random_salt(),
            iterations,
        ))
    }

    /// Checks sizes against the mechanism (a credential read from a file).
    pub fn validate(&self) -> Result<(), ScramError> {
        check_iterations(self.iterations)?;
        let size = self.mechanism.key_size_bytes();
        if self.stored_key.len() != size || self.server_key.len() != size {
            return Err(ScramError::Malformed(
                "key size differs from the mechanism's",
            ));
        }
        if self.salt.is_empty() || self.salt.len() > SALT_SIZE_BYTES_MAX {
            return Err(ScramError::Malformed("salt empty or too long"));
        }
        Ok(())
    }
}

fn check_iterations(iterations: u32) -> Result<(), ScramError> {
    if (ITERATIONS_MIN..=ITERATIONS_MAX).contains(&iterations) {
        Ok(())
    } else {
        Err(ScramError::IterationsOutOfRange { iterations })
    }
}

/// A fresh salt from the operating system's CSPRNG ([`SALT_RANDOM_BYTES`] bytes).
pub fn random_salt() -> [u8; SALT_RANDOM_BYTES] {
    let mut salt = [0u8; SALT_RANDOM_BYTES];
    rand::rngs::OsRng.fill_bytes(&mut salt);
    salt
}

/// A fresh nonce from the operating system's CSPRNG: base64 (printable, no `,`).
pub fn random_nonce() -> String {
    let mut bytes = [0u8; NONCE_RANDOM_BYTES];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    BASE64.encode(bytes)
}

/// Constant-time equality of two byte strings (their lengths are not secret).
pub fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    a.ct_eq(b).into()
}

// ---- parsing ----

fn text(message: &[u8]) -> Result<&str, ScramError> {
    if message.len() > SCRAM_MESSAGE_SIZE_BYTES_MAX {
        return Err(ScramError::TooLarge {
            size_bytes: message.len(),
        });
    }
    std::str::from_utf8(message).map_err(|_| ScramError::Malformed("not UTF-8"))
}

/// `attr=value` with a one-letter attribute.
fn attribute(part: &str) -> Result<(u8, &str), ScramError> {
    let bytes = part.as_bytes();
    if bytes.len() < 2 || bytes[1] != b'=' || !bytes[0].is_ascii_alphabetic() {
        return Err(ScramError::Malformed("attribute is not a=value"));
    }
    Ok((bytes[0], &part[2..]))
}

/// The value of attribute `name`, which must come next.
fn expect<'a>(parts: &mut std::str::Split<'a, char>, name: u8) -> Result<&'a str, ScramError> {
    let part = parts
        .next()
        .ok_or(ScramError::Malformed("attribute missing"))?;
    let (attr, value) = attribute(part)?;
    if attr == b'm' {
        return Err(ScramError::MandatoryExtension);
    }
    if attr != name {
        return Err(ScramError::Malformed("attribute out of order"));
    }
    Ok(value)
}

/// Checks that what is left are optional extensions (not `m=`).
fn extensions(parts: std::str::Split<'_, char>) -> Result<(), ScramError> {
    for part in parts {
        let (attr, _) = attribute(part)?;
        if attr == b'm' {
            return Err(ScramError::MandatoryExtension);
        }
    }
    Ok(())
}

/// Decodes a `saslname` (`=2C` is `,`, `=3D` is `=`).
fn decode_saslname(value: &str) -> Result<String, ScramError> {
    if value.is_empty() || value.len() > 3 * USERNAME_SIZE_BYTES_MAX {
        return Err(ScramError::Malformed("username empty or too long"));
    }
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(i) = rest.find('=') {
        out.push_str(&rest[..i]);
        match rest.get(i..i + 3) {
            Some("=2C") => out.push(','),
            Some("=3D") => out.push('='),
            _ => return Err(ScramError::Malformed("bad = escape in username")),
        }
        rest = &rest[i + 3..];
    }
    out.push_str(rest);
    if out.len() > USERNAME_SIZE_BYTES_MAX {
        return Err(ScramError::Malformed("username empty or too long"));
    }
    Ok(out)
}

/// Encodes a username as a `saslname`.
pub fn encode_saslname(name: &str) -> String {
    name.replace('=', "=3D").replace(',', "=2C")
}

fn check_nonce(nonce: &str) -> Result<(), ScramError> {
    let printable = nonce
        .bytes()
        .all(|b| (0x21..=0x7e).contains(&b) && b != b',');
    if nonce.is_empty() || nonce.len() > NONCE_SIZE_BYTES_MAX || !printable {
        return Err(ScramError::Malformed(
            "nonce empty, too long or not printable",
        ));
    }
    Ok(())
}

fn decode_base64(value: &str, what: &'static str) -> Result<Vec<u8>, ScramError> {
    BASE64
        .decode(value)
        .map_err(|_| ScramError::Malformed(what))
}

/// A parsed client-first message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientFirst {
    /// The GS2 header (`n,,` or `y,,` or with `a=`), echoed base64 in client-final's `c=`.
    pub gs2_header: String,
    /// The username.
    pub username: String,
    /// The client's nonce.
    pub nonce: String,
    /// The message without the GS2 header.
    pub bare: String,
}

impl ClientFirst {
    /// Parses a client-first message.
    pub fn parse(message: &[u8]) -> Result<ClientFirst, ScramError> {
        let text = text(message)?;
        let mut parts = text.split(',');
        match parts.next() {
            Some("n") | Some("y") => {}
            Some(flag) if flag.starts_with("p=") => {
                return Err(ScramError::ChannelBindingUnsupported)
            }
            _ => return Err(ScramError::Malformed("GS2 channel binding flag")),
        }
        let authzid = match parts.next() {
            Some("") => None,
            Some(a) => match a.strip_prefix("a=") {
                Some(name) => Some(decode_saslname(name)?),
                None => return Err(ScramError::Malformed("GS2 authorization id")),
            },
            None => return Err(ScramError::Malformed("GS2 header")),
        };
        let gs2_size_bytes = text
            .match_indices(',')
            .nth(1)
            .map(|(i, _)| i + 1)
            .ok_or(ScramError::Malformed("GS2 header"))?;
        let username = decode_saslname(expect(&mut parts, b'n')?)?;
        let nonce = expect(&mut parts, b'r')?;
        check_nonce(nonce)?;
        extensions(parts)?;
        if authzid.as_ref().is_some_and(|a| *a != username) {
            return Err(ScramError::AuthzidNotUsername);
        }
        Ok(ClientFirst {
            gs2_header: text[..gs2_size_bytes].to_string(),
            username,
            nonce: nonce.to_string(),
            bare: text[gs2_size_bytes..].to_string(),
        })
    }
}

/// A parsed server-first message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerFirst {
    /// Client and server nonce together.
    pub nonce: String,
    /// The salt.
    pub salt: Vec<u8>,
    /// PBKDF2 iterations.
    pub iterations: u32,
}

impl ServerFirst {
    /// Parses a server-first message.
    pub fn parse(message: &[u8]) -> Result<ServerFirst, ScramError> {
        let text = text(message)?;
        if let Some(e) = text.strip_prefix("e=") {
            return Err(ScramError::ServerError(e.to_string()));
        }
        let mut parts = text.split(',');
        let nonce = expect(&mut parts, b'r')?;
        check_nonce(nonce)?;
        let salt = decode_base64(expect(&mut parts, b's')?, "salt is not base64")?;
        if salt.is_empty() || salt.len() > SALT_SIZE_BYTES_MAX {
            return Err(ScramError::Malformed("salt empty or too long"));
        }
        let iterations = expect(&mut parts, b'i')?
            .parse::<u32>()
            .map_err(|_| ScramError::Malformed("iteration count is not a number"))?;
        extensions(parts)?;
        Ok(ServerFirst {
            nonce: nonce.to_string(),
            salt,
            iterations,
        })
    }
}

/// A parsed client-final message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientFinal {
    /// The decoded `c=` attribute.
    pub channel_binding: Vec<u8>,
    /// The nonce.
    pub nonce: String,
    /// The decoded proof.
    pub proof: Vec<u8>,
    /// The message up to (not including) `,p=`.
    pub without_proof: String,
}

impl ClientFinal {
    /// Parses a client-final message.
    pub fn parse(message: &[u8]) -> Result<ClientFinal, ScramError> {
        let text = text(message)?;
        let proof_at = text
            .rfind(",p=")
            .ok_or(ScramError::Malformed("client proof missing"))?;
        let without_proof = &text[..proof_at];
        let proof = decode_base64(&text[proof_at + 3..], "proof is not base64")?;
        let mut parts = without_proof.split(',');
        let channel_binding =
            decode_base64(expect(&mut parts, b'c')?, "channel binding is not base64")?;
        let nonce = expect(&mut parts, b'r')?;
        check_nonce(nonce)?;
        extensions(parts)?;
        Ok(ClientFinal {
            channel_binding,
            nonce: nonce.to_string(),
            proof,
            without_proof: without_proof.to_string(),
        })
    }
}

// ---- server ----

enum ServerState {
    First,
    Final(Box<ServerFinalState>),
    Done,
}

struct ServerFinalState {
    client_first: ClientFirst,
    server_first: String,
    nonce: String,
    /// False for an unknown user (a stand-in credential answered the client-first message).
    known: bool,
    credential: Credential,
}

/// The server side of one SCRAM exchange. Lives on the connection that authenticates.
pub struct ScramServer {
    mechanism: Mechanism,
    server_nonce: String,
    unknown_user_key: [u8; 32],
    state: ServerState,
}

impl ScramServer {
    /// A server for `mechanism` that appends `server_nonce` to the client's nonce. An unknown
    /// user's stand-in salt is `HMAC(unknown_user_key, username)`: keep the key for the process
    /// (random), so that the same unknown name always sees the same salt.
    pub fn new(mechanism: Mechanism, server_nonce: String, unknown_user_key: [u8; 32]) -> Self {
        ScramServer {
            mechanism,
            server_nonce,
            unknown_user_key,
            state: ServerState::First,
        }
    }

    /// The mechanism.
    pub fn mechanism(&self) -> Mechanism {
        self.mechanism
    }

    /// Answers a client-first message; `lookup` finds the user's credential for this
    /// mechanism.
    pub fn client_first(
        &mut self,
        message: &[u8],
        lookup: impl FnOnce(&str) -> Option<Credential>,
    ) -> Result<Vec<u8>, ScramError> {
        if !matches!(self.state, ServerState::First) {
            return Err(ScramError::OutOfOrder);
        }
        self.state = ServerState::Done;
        let client_first = ClientFirst::parse(message)?;
        let found = lookup(&client_first.username).filter(|c| c.mechanism == self.mechanism);
        let known = found.is_some();
        let credential = match found {
            Some(c) => c,
            None => {
                let salt = self
                    .mechanism
                    .hmac(&self.unknown_user_key, client_first.username.as_bytes());
                Credential {
                    mechanism: self.mechanism,
                    salt,
                    iterations: ITERATIONS_MIN,
                    stored_key: vec![0; self.mechanism.key_size_bytes()],
                    server_key: vec![0; self.mechanism.key_size_bytes()],
                }
            }
        };
        let nonce = format!("{}{}", client_first.nonce, self.server_nonce);
        check_nonce(&nonce)?;
        let server_first = format!(
            "r={nonce},s={},i={}",
            BASE64.encode(&credential.salt),
            credential.iterations
        );
        self.state = ServerState::Final(Box::new(ServerFinalState {
            client_first,
            server_first: server_first.clone(),
            nonce,
            known,
            credential,
        }));
        Ok(server_first.into_bytes())
    }

    /// Checks a client-final message; on success returns the server-final message and the
    /// authenticated username.
    pub fn client_final(&mut self, message: &[u8]) -> Result<(Vec<u8>, String), ScramError> {
        let state = match std::mem::replace(&mut self.state, ServerState::Done) {
            ServerState::Final(state) => state,
            _ => return Err(ScramError::OutOfOrder),
        };
        let client_final = ClientFinal::parse(message)?;
        if client_final.channel_binding != state.client_first.gs2_header.as_bytes() {
            return Err(ScramError::ChannelBindingMismatch);
        }
        if !ct_eq(client_final.nonce.as_bytes(), state.nonce.as_bytes()) {
            return Err(ScramError::NonceMismatch);
        }
        let mechanism = self.mechanism;
        if client_final.proof.len() != mechanism.key_size_bytes() {
            return Err(ScramError::InvalidProof);
        }
        let auth_message = format!(
            "{},{},{}",
            state.client_first.bare, state.server_first, client_final.without_proof
        );
        let credential = &state.credential;
        let client_signature = mechanism.hmac(&credential.stored_key, auth_message.as_bytes());
        let client_key: Vec<u8> = client_final
            .proof
            .iter()
            .zip(&client_signature)
            .map(|(p, s)| p ^ s)
            .collect();
        let matches = ct_eq(&mechanism.hash(&client_key), &credential.stored_key);
        if !(matches && state.known) {
            return Err(ScramError::InvalidProof);
        }
        let server_signature = mechanism.hmac(&credential.server_key, auth_message.as_bytes());
        let server_final = format!("v={}", BASE64.encode(server_signature));
        Ok((server_final.into_bytes(), state.client_first.username))
    }
}

// ---- client ----

enum ClientState {
    First,
    ServerFirst { client_first_bare: String },
    ServerFinal { server_signature: Vec<u8> },
    Done,
}

/// The client side of one SCRAM exchange.
pub struct ScramClient {
    mechanism: Mechanism,
    username: String,
    password: Vec<u8>,
    nonce: String,
    state: ClientState,
}

/// The GS2 header the client sends: no channel binding, no authorization id.
const GS2_HEADER: &str = "n,,";

impl ScramClient {
    /// A client for `username` with `password` and its nonce `nonce` (use [`random_nonce`]).
    pub fn new(
        mechanism: Mechanism,
        username: &str,
        password: &[u8],
        nonce: String,
    ) -> ScramClient {
        ScramClient {
            mechanism,
            username: username.to_string(),
            password: password.to_vec(),
            nonce,
            state: ClientState::First,
        }
    }

    /// The client-first message.
    pub fn client_first(&mut self) -> Result<Vec<u8>, ScramError> {
        if !matches!(self.state, ClientState::First) {
            return Err(ScramError::OutOfOrder);
        }
        if self.username.is_empty() || self.username.len() > USERNAME_SIZE_BYTES_MAX {
            return Err(ScramError::Malformed("username empty or too long"));
        }
        check_nonce(&self.nonce)?;
        let bare = format!("n={},r={}", encode_saslname(&self.username), self.nonce);
        let message = format!("{GS2_HEADER}{bare}");
        self.state = ClientState::ServerFirst {
            client_first_bare: bare,
        };
        Ok(message.into_bytes())
    }

    /// Answers the server-first message with the client-final message.
    pub fn server_first(&mut self, message: &[u8]) -> Result<Vec<u8>, ScramError> {
        let bare = match std::mem::replace(&mut self.state, ClientState::Done) {
            ClientState::ServerFirst { client_first_bare } => client_first_bare,
            _ => return Err(ScramError::OutOfOrder),
        };
        let server_first = ServerFirst::parse(message)?;
        if server_first.nonce.len() <= self.nonce.len()
            || !server_first.nonce.starts_with(&self.nonce)
        {
            return Err(ScramError::NonceMismatch);
        }
        check_iterations(server_first.iterations)?;
        let mechanism = self.mechanism;
        let salted =
            mechanism.salted_password(&self.password, &server_first.salt, server_first.iterations);
        let client_key = mechanism.hmac(&salted, b"Client Key");
        let stored_key = mechanism.hash(&client_key);
        let without_proof = format!("c={},r={}", BASE64.encode(GS2_HEADER), server_first.nonce);
        let server_first_text =
            std::str::from_utf8(message).map_err(|_| ScramError::Malformed("not UTF-8"))?;
        let auth_message = format!("{bare},{server_first_text},{without_proof}");
        let client_signature = mechanism.hmac(&stored_key, auth_message.as_bytes());
        let proof: Vec<u8> = client_key
            .iter()
            .zip(&client_signature)
            .map(|(k, s)| k ^ s)
            .collect();
        let server_key = mechanism.hmac(&salted, b"Server Key");
        self.state = ClientState::ServerFinal {
            server_signature: mechanism.hmac(&server_key, auth_message.as_bytes()),
        };
        Ok(format!("{without_proof},p={}", BASE64.encode(proof)).into_bytes())
    }

    /// Verifies the server-final message: the server proved it holds the credential.
    pub fn server_final(&mut self, message: &[u8]) -> Result<(), ScramError> {
        let expected = match std::mem::replace(&mut self.state, ClientState::Done) {
            ClientState::ServerFinal { server_signature } => server_signature,
            _ => return Err(ScramError::OutOfOrder),
        };
        let text = text(message)?;
        if let Some(e) = text.strip_prefix("e=") {
            return Err(ScramError::ServerError(e.to_string()));
        }
        let mut parts = text.split(',');
        let signature = decode_base64(expect(&mut parts, b'v')?, "signature is not base64")?;
        extensions(parts)?;
        if !ct_eq(&signature, &expected) {
            return Err(ScramError::ServerSignatureMismatch);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
