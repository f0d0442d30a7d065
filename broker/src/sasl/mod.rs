//! SASL authentication at the start of a client connection (SCRAM-SHA-256 and -512; issue 20,
//! docs/protocol.md 4.20, docs/operations.md "SASL").
//!
//! - [`Sasl`]: the process's settings and credential store, shared by every core (an `Arc`;
//!   credentials are read on each authentication, under a lock no data path takes). Core 0
//!   re-reads the credentials file when it changes and on SIGHUP. In a cluster, once the
//!   metadata log holds SCRAM credentials (`scram_generation > 0`), the first core to apply an
//!   image with a new generation installs them ([`Sasl::install_from_metadata`]) and the file
//!   is no longer read: until then it is the bootstrap set.
//! - [`Authenticator`]: one connection's state, owned by its reader. Before authentication it
//!   lets through ApiVersions and the SASL requests only; anything else is answered
//!   `IllegalSaslState` and closes the connection. A failed exchange counts against
//!   `sasl.failed_attempts_max` (the last one closes the connection) and starts over at
//!   SaslHandshake.

pub mod client;
pub mod file;
pub mod users;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::SystemTime;

use borges_protocol::frame::{Frame, FrameHeader};
use borges_protocol::scram::{self, Credential, Mechanism, ScramError, ScramServer};
use borges_protocol::{wire as m, ApiKey, ErrorCode};
use flatbuffers::FlatBufferBuilder;
use rand::RngCore;

use crate::config::SaslSettings;
use crate::failure::Failure;
use crate::wire::{self, Response};

/// Checks a username: 1..=255 bytes, no control characters.
pub fn check_username(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > scram::USERNAME_SIZE_BYTES_MAX {
        return Err(format!(
            "a username has 1..={} bytes",
            scram::USERNAME_SIZE_BYTES_MAX
        ));
    }
    if name.chars().any(char::is_control) {
        return Err("a username has no control characters".into());
    }
    Ok(())
}

type Users = HashMap<(String, Mechanism), Credential>;

/// The credentials in force and where they came from.
struct InForce {
    /// The metadata log's `scram_generation` they came from; 0: the credentials file.
    generation: u64,
    users: Arc<Users>,
}

fn users_of(read: Vec<file::UserCredential>) -> Users {
    read.into_iter()
        .map(|u| ((u.name, u.credential.mechanism), u.credential))
        .collect()
}

/// The user this broker's follower fetches authenticate to other brokers as
/// (`sasl.inter_broker_*`).
#[derive(Clone)]
pub struct InterBrokerUser {
    /// The mechanism.
    pub mechanism: Mechanism,
    /// The username.
    pub username: String,
    /// The password (the first line of `sasl.inter_broker_password_file`).
    pub password: String,
}

impl std::fmt::Debug for InterBrokerUser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InterBrokerUser")
            .field("mechanism", &self.mechanism)
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

/// Reads the inter-broker password file: its first line, without the line ending.
fn read_inter_broker(
    settings: &SaslSettings,
) -> Result<Option<InterBrokerUser>, file::CredentialsError> {
    let (Some(username), Some(path)) = (
        &settings.inter_broker_username,
        &settings.inter_broker_password_file,
    ) else {
        return Ok(None);
    };
    let text = std::fs::read_to_string(path).map_err(|source| file::CredentialsError::Io {
        what: "reading the inter-broker password file",
        path: path.clone(),
        source,
    })?;
    let password = text.lines().next().unwrap_or("").to_string();
    let invalid = |message: &str| file::CredentialsError::Invalid {
        path: path.clone(),
        message: message.to_string(),
    };
    if password.is_empty() {
        return Err(invalid(
            "the inter-broker password file's first line is empty",
        ));
    }
    let mechanism = settings
        .inter_broker_mechanism()
        .ok_or_else(|| invalid("no inter-broker mechanism (sasl.mechanisms is empty)"))?;
    Ok(Some(InterBrokerUser {
        mechanism,
        username: username.clone(),
        password,
    }))
}

/// The process's SASL settings and credentials. Shared by every core.
pub struct Sasl {
    mechanisms: Vec<Mechanism>,
    settings: SaslSettings,
    path: PathBuf,
    users: RwLock<InForce>,
    /// The file's modification time when last read.
    modified: Mutex<Option<SystemTime>>,
    /// Key of the stand-in salts of unknown users (random per process).
    unknown_user_key: [u8; 32],
    /// Who this broker's follower fetches authenticate as; its password is re-read on SIGHUP.
    inter_broker: RwLock<Option<InterBrokerUser>>,
    /// Bumped whenever the credentials in force are replaced: an authenticated connection
    /// checks its user's credential again at its next request when this moved.
    changes: AtomicU64,
}

impl Sasl {
    /// Loads the credentials file named by `settings` (relative to `data_dir` when unset).
    pub fn load(settings: &SaslSettings, data_dir: &Path) -> Result<Sasl, file::CredentialsError> {
        let path = settings.credentials_path(data_dir);
        let mut unknown_user_key = [0u8; 32];
        rand::rngs::OsRng.fill_bytes(&mut unknown_user_key);
        let sasl = Sasl {
            mechanisms: settings.parsed_mechanisms(),
            settings: settings.clone(),
            path,
            users: RwLock::new(InForce {
                generation: 0,
                users: Arc::new(Users::new()),
            }),
            modified: Mutex::new(None),
            unknown_user_key,
            inter_broker: RwLock::new(read_inter_broker(settings)?),
            changes: AtomicU64::new(0),
        };
        sasl.reload()?;
        Ok(sasl)
    }

    /// The credentials file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Credentials (user and mechanism pairs) held.
    pub fn users(&self) -> usize {
        self.snapshot().len()
    }

    fn snapshot(&self) -> Arc<Users> {
        match self.users.read() {
            Ok(u) => u.users.clone(),
            Err(poisoned) => poisoned.into_inner().users.clone(),
        }
    }

    fn in_force(&self) -> std::sync::RwLockWriteGuard<'_, InForce> {
        match self.users.write() {
            Ok(u) => u,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// The metadata log's generation of the credentials in force; 0 while the file's are.
    pub fn metadata_generation(&self) -> u64 {
        match self.users.read() {
            Ok(u) => u.generation,
            Err(poisoned) => poisoned.into_inner().generation,
        }
    }

    /// Puts the metadata log's credentials of `generation` in force, in place of the file's
    /// or an older generation's; false (nothing done) when `generation` is not newer.
    pub fn install_from_metadata(&self, generation: u64, users: Vec<file::UserCredential>) -> bool {
        let users = Arc::new(users_of(users));
        let mut in_force = self.in_force();
        if generation <= in_force.generation {
            return false;
        }
        *in_force = InForce { generation, users };
        self.changes.fetch_add(1, Ordering::Release);
        true
    }

    /// How many times the credentials in force were replaced.
    fn changes(&self) -> u64 {
        self.changes.load(Ordering::Acquire)
    }

    fn modified_now(&self) -> Option<SystemTime> {
        std::fs::metadata(&self.path)
            .and_then(|m| m.modified())
            .ok()
    }

    /// Re-reads the file; a failure keeps the credentials in force, and so does a file read
    /// once the metadata log's credentials are in force (they take precedence). Blocking: run
    /// it off the cores' executors.
    pub fn reload(&self) -> Result<usize, file::CredentialsError> {
        let modified = self.modified_now();
        let users = users_of(file::read(&self.path)?);
        let count = users.len();
        if let Ok(mut m) = self.modified.lock() {
            *m = modified;
        }
        let mut in_force = self.in_force();
        if in_force.generation > 0 {
            tracing::warn!(
                generation = in_force.generation,
                "{} changed, but the metadata log's SCRAM credentials are in force: the file \
                 is not used (manage users with AlterUserScramCredentials, `borges user ... \
                 --bootstrap`)",
                self.path.display()
            );
            return Ok(in_force.users.len());
        }
        in_force.users = Arc::new(users);
        self.changes.fetch_add(1, Ordering::Release);
        Ok(count)
    }

    /// Re-reads the file if its modification time changed; `None` when it did not.
    pub fn reload_if_changed(&self) -> Option<Result<usize, file::CredentialsError>> {
        let now = self.modified_now();
        let before = self.modified.lock().ok().and_then(|m| *m);
        if now == before {
            return None;
        }
        Some(self.reload())
    }

    fn lookup(&self, name: &str, mechanism: Mechanism) -> Option<Credential> {
        self.snapshot().get(&(name.to_string(), mechanism)).cloned()
    }

    /// The mechanisms the listeners accept.
    pub fn mechanisms(&self) -> &[Mechanism] {
        &self.mechanisms
    }

    /// The settings.
    pub fn settings(&self) -> &SaslSettings {
        &self.settings
    }

    /// The user follower fetches authenticate as, when set (read when a fetcher connects, so
    /// a reloaded password is used from the next connection on).
    pub fn inter_broker(&self) -> Option<InterBrokerUser> {
        match self.inter_broker.read() {
            Ok(u) => u.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Re-reads `sasl.inter_broker_password_file` (on SIGHUP): `Ok(true)` when the password
    /// changed, `Ok(false)` when it is the same or no inter-broker user is set. A file that
    /// cannot be used keeps the password in force. Blocking: run it off the cores' executors.
    pub fn reload_inter_broker(&self) -> Result<bool, file::CredentialsError> {
        let read = read_inter_broker(&self.settings)?;
        let mut in_force = match self.inter_broker.write() {
            Ok(u) => u,
            Err(poisoned) => poisoned.into_inner(),
        };
        let changed = match (&*in_force, &read) {
            (Some(old), Some(new)) => old.password != new.password,
            _ => false,
        };
        if changed {
            *in_force = read;
        }
        Ok(changed)
    }
}

enum State {
    /// Waiting for SaslHandshake.
    Start,
    /// Handshake done; waiting for the first SaslAuthenticate.
    Handshaken(Mechanism),
    /// Server-first sent; waiting for client-final. The credential the exchange uses (none:
    /// an unknown user, whose exchange fails) and the credentials' change count when it was
    /// looked up.
    Exchanging(Box<ScramServer>, Option<Credential>, u64),
    /// Authenticated.
    Authenticated(Box<Session>),
}

/// One SaslAuthenticate step done: the server message to answer with and, after the last
/// step, the user with the credential it proved and the credentials' change count then.
type Step = (Vec<u8>, Option<(String, Option<Credential>, u64)>);

/// An authenticated connection's user and the credential it proved; the connection is closed
/// at its next request once that credential is deleted or replaced.
struct Session {
    user: String,
    credential: Credential,
    /// `Sasl::changes` when the credential was last found current.
    checked_at_change: u64,
}

/// What the connection does with a frame.
pub enum Gate {
    /// Serve it as usual.
    Pass,
    /// Answer with this response instead (its `close_after` says whether the connection
    /// closes after it).
    Answer(Response),
}

/// An authentication outcome, for the connection's metrics and log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Nothing decided by this frame.
    None,
    /// Authenticated as this user.
    Authenticated(String),
    /// A failed exchange (the reason, for the log).
    Failed(String),
}

/// One connection's authentication. Lives in the connection's reader.
pub struct Authenticator {
    sasl: Arc<Sasl>,
    state: State,
    failures: u32,
}

impl Authenticator {
    /// A connection that has not authenticated yet.
    pub fn new(sasl: Arc<Sasl>) -> Authenticator {
        Authenticator {
            sasl,
            state: State::Start,
            failures: 0,
        }
    }

    /// The authenticated user.
    pub fn user(&self) -> Option<&str> {
        match &self.state {
            State::Authenticated(session) => Some(&session.user),
            _ => None,
        }
    }

    /// Whether the authenticated user's credential is still the one it proved (a connection
    /// whose user was deleted, or whose password changed, must not go on). One atomic load per
    /// request while the credentials have not changed.
    fn credential_current(&mut self) -> bool {
        let State::Authenticated(session) = &mut self.state else {
            return false;
        };
        let changes = self.sasl.changes();
        if changes == session.checked_at_change {
            return true;
        }
        let mechanism = session.credential.mechanism;
        let current = self.sasl.lookup(&session.user, mechanism);
        if current.as_ref() != Some(&session.credential) {
            return false;
        }
        session.checked_at_change = changes;
        true
    }

    /// Decides what to do with `frame`; the outcome says whether it authenticated or failed.
    pub fn gate(&mut self, frame: &Frame) -> (Gate, Outcome) {
        let header = &frame.header;
        let api = ApiKey::from_u16(header.api_key);
        match (api, self.user().is_some()) {
            (Some(ApiKey::ApiVersions), _) => (Gate::Pass, Outcome::None),
            (Some(ApiKey::SaslHandshake | ApiKey::SaslAuthenticate), true) => {
                let failure = Failure::new(
                    ErrorCode::IllegalSaslState,
                    "this connection is authenticated already (no re-authentication)",
                );
                (
                    Gate::Answer(self.error(header, api, failure)),
                    Outcome::None,
                )
            }
            (_, true) if self.credential_current() => (Gate::Pass, Outcome::None),
            (_, true) => {
                let user = self.user().unwrap_or_default().to_string();
                let failure = Failure::new(
                    ErrorCode::SaslAuthenticationFailed,
                    format!(
                        "the credential user {user:?} authenticated with was deleted or \
                         replaced; connect and authenticate again"
                    ),
                );
                let response = wire::error_response(header, &failure).then_close();
                (Gate::Answer(response), Outcome::Failed(failure.to_string()))
            }
            (Some(ApiKey::SaslHandshake), false) => self.handshake(frame),
            (Some(ApiKey::SaslAuthenticate), false) => self.authenticate(frame),
            (_, false) => {
                let name =
                    api.map_or_else(|| format!("API key {}", header.api_key), |a| a.to_string());
                let failure = Failure::new(
                    ErrorCode::IllegalSaslState,
                    format!(
                        "{name} before authentication: this broker requires SASL \
                         ({}); send SaslHandshake and SaslAuthenticate first",
                        self.mechanism_names().join(", ")
                    ),
                );
                let response = wire::error_response(header, &failure).then_close();
                (Gate::Answer(response), Outcome::Failed(failure.to_string()))
            }
        }
    }

    fn mechanism_names(&self) -> Vec<&'static str> {
        self.sasl.mechanisms.iter().map(|m| m.name()).collect()
    }

    /// A request-level error for a SASL request: an ErrorResponse when its version is not
    /// served, else the API's own response carrying the error.
    fn error(&self, header: &FrameHeader, api: Option<ApiKey>, failure: Failure) -> Response {
        match api {
            Some(ApiKey::SaslHandshake) => self.handshake_response(header, Some(&failure)),
            Some(ApiKey::SaslAuthenticate) => authenticate_response(header, Some(&failure), None),
            _ => wire::error_response(header, &failure),
        }
    }

    /// Counts a failure; the last allowed one closes the connection.
    fn fail(&mut self, mut response: Response, reason: String) -> (Gate, Outcome) {
        self.state = State::Start;
        self.failures += 1;
        if self.failures >= self.sasl.settings.failed_attempts_max {
            response = response.then_close();
        }
        (Gate::Answer(response), Outcome::Failed(reason))
    }

    fn check_version(header: &FrameHeader, api: ApiKey) -> Result<(), Failure> {
        if header.api_version < api.min_version() || header.api_version > api.max_version() {
            return Err(Failure::new(
                ErrorCode::UnsupportedVersion,
                format!(
                    "{api} version {} is not supported; supported versions are {}..={}",
                    header.api_version,
                    api.min_version(),
                    api.max_version()
                ),
            ));
        }
        Ok(())
    }

    fn handshake(&mut self, frame: &Frame) -> (Gate, Outcome) {
        let header = &frame.header;
        let requested = Self::check_version(header, ApiKey::SaslHandshake)
            .and_then(|()| wire::verify::<m::SaslHandshakeRequest>(&frame.message))
            .map(|r| r.mechanism().unwrap_or("").to_string());
        let requested = match requested {
            Ok(r) => r,
            Err(failure) => {
                let reason = failure.to_string();
                return self.fail(wire::error_response(header, &failure), reason);
            }
        };
        if !matches!(self.state, State::Start) {
            let failure = Failure::new(
                ErrorCode::IllegalSaslState,
                "SaslHandshake in the middle of an exchange",
            );
            let reason = failure.to_string();
            let response = self.handshake_response(header, Some(&failure));
            return self.fail(response, reason);
        }
        let mechanism =
            Mechanism::from_name(&requested).filter(|m| self.sasl.mechanisms.contains(m));
        let Some(mechanism) = mechanism else {
            let failure = Failure::new(
                ErrorCode::UnsupportedSaslMechanism,
                format!(
                    "mechanism {requested:?} is not enabled; this broker enables {}",
                    self.mechanism_names().join(", ")
                ),
            );
            let reason = failure.to_string();
            let response = self.handshake_response(header, Some(&failure));
            return self.fail(response, reason);
        };
        self.state = State::Handshaken(mechanism);
        (
            Gate::Answer(self.handshake_response(header, None)),
            Outcome::None,
        )
    }

    fn handshake_response(&self, header: &FrameHeader, failure: Option<&Failure>) -> Response {
        handshake_response(header, &self.sasl.mechanisms, failure)
    }

    fn authenticate(&mut self, frame: &Frame) -> (Gate, Outcome) {
        let header = &frame.header;
        let bytes = Self::check_version(header, ApiKey::SaslAuthenticate)
            .and_then(|()| wire::verify::<m::SaslAuthenticateRequest>(&frame.message))
            .map(|r| r.auth_bytes().map(|b| b.bytes()).unwrap_or(&[]));
        let bytes = match bytes {
            Ok(b) => b,
            Err(failure) => {
                let reason = failure.to_string();
                return self.fail(wire::error_response(header, &failure), reason);
            }
        };
        let state = std::mem::replace(&mut self.state, State::Start);
        let step = match state {
            State::Handshaken(mechanism) => {
                let mut server = Box::new(ScramServer::new(
                    mechanism,
                    scram::random_nonce(),
                    self.sasl.unknown_user_key,
                ));
                let sasl = &self.sasl;
                let changes = sasl.changes();
                let mut used = None;
                let answer = server.client_first(bytes, |name| {
                    used = sasl.lookup(name, mechanism);
                    used.clone()
                });
                answer.map(|server_first| {
                    self.state = State::Exchanging(server, used, changes);
                    (server_first, None)
                })
            }
            State::Exchanging(mut server, used, changes) => server
                .client_final(bytes)
                .map(|(server_final, user)| (server_final, Some((user, used, changes)))),
            State::Start | State::Authenticated(_) => {
                let failure = Failure::new(
                    ErrorCode::IllegalSaslState,
                    "SaslAuthenticate before SaslHandshake",
                );
                let reason = failure.to_string();
                let response = authenticate_response(header, Some(&failure), None);
                return self.fail(response, reason);
            }
        };
        self.step_answer(header, step)
    }

    /// The answer to one SaslAuthenticate step: the next server message, the last one (then
    /// authenticated), or the failure.
    fn step_answer(
        &mut self,
        header: &FrameHeader,
        step: Result<Step, ScramError>,
    ) -> (Gate, Outcome) {
        match step {
            Ok((answer, None)) => (
                Gate::Answer(authenticate_response(header, None, Some(&answer))),
                Outcome::None,
            ),
            Ok((answer, Some((user, Some(credential), checked_at_change)))) => {
                self.state = State::Authenticated(Box::new(Session {
                    user: user.clone(),
                    credential,
                    checked_at_change,
                }));
                (
                    Gate::Answer(authenticate_response(header, None, Some(&answer))),
                    Outcome::Authenticated(user),
                )
            }
            Ok((_, Some((user, None, _)))) => {
                // A proof verified without a stored credential cannot happen (an unknown user's
                // exchange fails at the proof); refuse rather than trust it.
                let failure = Failure::new(
                    ErrorCode::SaslAuthenticationFailed,
                    "authentication failed: invalid credentials (unknown user or wrong password)",
                );
                let response = authenticate_response(header, Some(&failure), None);
                self.fail(response, format!("{user:?}: a proof without a credential"))
            }
            Err(e) => {
                let failure = Failure::new(ErrorCode::SaslAuthenticationFailed, failure_text(&e));
                let response = authenticate_response(header, Some(&failure), None);
                self.fail(response, e.to_string())
            }
        }
    }
}

/// What a client is told about a failed exchange: the same words for a wrong password and an
/// unknown user.
fn failure_text(e: &ScramError) -> String {
    match e {
        ScramError::InvalidProof => {
            "authentication failed: invalid credentials (unknown user or wrong password)".into()
        }
        e => format!("authentication failed: {e}"),
    }
}

fn authenticate_response(
    header: &FrameHeader,
    failure: Option<&Failure>,
    auth_bytes: Option<&[u8]>,
) -> Response {
    let mut fbb = FlatBufferBuilder::with_capacity(256);
    let auth_bytes = auth_bytes.map(|b| fbb.create_vector(b));
    let error_message = wire::message(&mut fbb, failure);
    let root = m::SaslAuthenticateResponse::create(
        &mut fbb,
        &m::SaslAuthenticateResponseArgs {
            error_code: wire::code(failure),
            error_message,
            auth_bytes,
            session_lifetime_ms: 0,
        },
    );
    fbb.finish(root, None);
    wire::response(header, fbb.finished_data(), Vec::new())
}

fn handshake_response(
    header: &FrameHeader,
    mechanisms: &[Mechanism],
    failure: Option<&Failure>,
) -> Response {
    let mut fbb = FlatBufferBuilder::with_capacity(256);
    let names: Vec<_> = mechanisms
        .iter()
        .map(|m| fbb.create_string(m.name()))
        .collect();
    let mechanisms = fbb.create_vector(&names);
    let error_message = wire::message(&mut fbb, failure);
    let root = m::SaslHandshakeResponse::create(
        &mut fbb,
        &m::SaslHandshakeResponseArgs {
            error_code: wire::code(failure),
            error_message,
            mechanisms: Some(mechanisms),
        },
    );
    fbb.finish(root, None);
    wire::response(header, fbb.finished_data(), Vec::new())
}

/// The answer of a broker without SASL to a SASL request: `IllegalSaslState` in the API's own
/// response; the connection stays open.
pub fn not_enabled(header: &FrameHeader) -> Response {
    let failure = Failure::new(
        ErrorCode::IllegalSaslState,
        "SASL is not enabled on this broker (sasl.mechanisms is empty)",
    );
    match ApiKey::from_u16(header.api_key) {
        Some(ApiKey::SaslHandshake) => handshake_response(header, &[], Some(&failure)),
        _ => authenticate_response(header, Some(&failure), None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(name: &str, password: &[u8]) -> file::UserCredential {
        file::UserCredential {
            name: name.into(),
            credential: Credential::generate(Mechanism::ScramSha256, password, 4096).unwrap(),
        }
    }

    /// The file is the bootstrap set; once the metadata log's credentials are installed they
    /// replace it, a re-read file changes nothing, and only a newer generation replaces them.
    #[test]
    fn metadata_credentials_take_precedence_over_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let settings = SaslSettings {
            mechanisms: vec!["SCRAM-SHA-256".into()],
            ..SaslSettings::default()
        };
        let path = settings.credentials_path(dir.path());
        file::write(&path, &[user("alice", b"pw")]).unwrap();
        let sasl = Sasl::load(&settings, dir.path()).unwrap();
        let sha256 = Mechanism::ScramSha256;
        assert!(sasl.lookup("alice", sha256).is_some());
        assert_eq!(sasl.metadata_generation(), 0);
        assert!(sasl.install_from_metadata(7, vec![user("carol", b"pw")]));
        assert!(
            sasl.lookup("alice", sha256).is_none(),
            "the file's users are replaced"
        );
        assert!(sasl.lookup("carol", sha256).is_some());
        file::write(&path, &[user("alice", b"pw"), user("mallory", b"pw")]).unwrap();
        assert_eq!(sasl.reload().unwrap(), 1);
        assert!(
            sasl.lookup("mallory", sha256).is_none(),
            "the file is not used any more"
        );
        assert!(!sasl.install_from_metadata(7, Vec::new()), "not newer");
        assert!(sasl.lookup("carol", sha256).is_some());
        assert!(sasl.install_from_metadata(9, Vec::new()));
        assert_eq!((sasl.users(), sasl.metadata_generation()), (0, 9));
    }

    /// SIGHUP re-reads the inter-broker password: a new one is in force for the next
    /// connection; an unreadable or empty file keeps the one in force.
    #[test]
    fn the_inter_broker_password_is_reloaded_and_a_bad_file_keeps_the_old_one() {
        let dir = tempfile::tempdir().unwrap();
        let password_file = dir.path().join("broker.pw");
        std::fs::write(&password_file, "first\n").unwrap();
        let settings = SaslSettings {
            mechanisms: vec!["SCRAM-SHA-256".into()],
            inter_broker_username: Some("broker".into()),
            inter_broker_password_file: Some(password_file.clone()),
            ..SaslSettings::default()
        };
        file::write(&settings.credentials_path(dir.path()), &[]).unwrap();
        let sasl = Sasl::load(&settings, dir.path()).unwrap();
        let password = || sasl.inter_broker().map(|u| u.password);
        assert_eq!(password().as_deref(), Some("first"));
        assert!(!sasl.reload_inter_broker().unwrap(), "unchanged");
        std::fs::write(&password_file, "second\n").unwrap();
        assert!(sasl.reload_inter_broker().unwrap());
        assert_eq!(password().as_deref(), Some("second"));
        std::fs::write(&password_file, "\n").unwrap();
        assert!(sasl.reload_inter_broker().is_err(), "an empty first line");
        std::fs::remove_file(&password_file).unwrap();
        assert!(sasl.reload_inter_broker().is_err(), "no file");
        assert_eq!(password().as_deref(), Some("second"), "the old one stays");
    }
}
