//! SASL/SCRAM against real broker processes (issue 20 items 2 and 5): users made with
//! `borges user create`, the SDK and the CLI authenticating with both mechanisms, and every
//! refusal a client can provoke: wrong password, unknown user, the other mechanism, no SASL, a
//! request before authentication, an oversized or malformed handshake, a bad nonce, a replayed
//! exchange, an authorization id that is not the username, too many failures. Each gets its
//! typed error and the broker goes on serving others. A connection that never completes the
//! exchange is closed after `sasl.authentication_timeout_ms`.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use borges_client::{
    Admin, ClientConfig, ClientError, ErrorCode, NewTopic, Producer, ProducerConfig,
    ProducerRecord, SaslConfig,
};
use borges_protocol::frame::{FrameDecoder, FrameHeader};
use borges_protocol::message::{self, MessageHead};
use borges_protocol::scram::{self, Mechanism, ScramClient};
use borges_protocol::{wire, ApiKey};
use borges_testkit::{borges_bin, BrokerOptions, BrokerProcess};
use bytes::BytesMut;
use flatbuffers::FlatBufferBuilder;

const ALICE_PASSWORD: &str = "alice-secret";
const BOB_PASSWORD: &str = "bob, the =secret";

fn sasl_broker() -> BrokerProcess {
    BrokerProcess::start_with(BrokerOptions {
        args: vec![
            "--sasl-enabled-mechanisms".into(),
            "SCRAM-SHA-256,SCRAM-SHA-512".into(),
        ],
        ..BrokerOptions::default()
    })
}

/// Runs `borges user ARGS --data-dir DIR` with `stdin`.
fn user(data_dir: &Path, args: &[&str], stdin: &str) -> std::process::Output {
    let mut child = std::process::Command::new(borges_bin())
        .arg("user")
        .args(args)
        .arg("--data-dir")
        .arg(data_dir)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run borges user");
    let mut input = child.stdin.take().unwrap();
    input.write_all(stdin.as_bytes()).unwrap();
    drop(input);
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "borges user {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn create_users(broker: &BrokerProcess) {
    let dir = broker.data_dir();
    user(
        dir,
        &[
            "create",
            "alice",
            "--mechanism",
            "SCRAM-SHA-256",
            "--password-stdin",
        ],
        &format!("{ALICE_PASSWORD}\n"),
    );
    user(
        dir,
        &[
            "create",
            "bob",
            "--mechanism",
            "SCRAM-SHA-512",
            "--password-stdin",
        ],
        &format!("{BOB_PASSWORD}\n"),
    );
}

fn config(broker: &BrokerProcess, sasl: Option<SaslConfig>) -> ClientConfig {
    ClientConfig::new(&broker.bootstrap())
        .request_timeout_ms(20_000)
        .sasl(sasl)
}

fn scram(mechanism: &str, name: &str, password: &str) -> Option<SaslConfig> {
    Some(SaslConfig::scram(mechanism, name, password).unwrap())
}

/// The broker's error code inside `e` (also behind NoBrokerAvailable).
fn code_of(e: &ClientError) -> Option<ErrorCode> {
    match e {
        ClientError::NoBrokerAvailable { last, .. } => code_of(last),
        e => e.code(),
    }
}

fn text(e: &ClientError) -> String {
    match e {
        ClientError::NoBrokerAvailable { last, .. } => format!("{e} / {}", text(last)),
        _ => e.to_string(),
    }
}

/// Admin for `sasl`, retried for up to 10 s while the broker re-reads its credentials file.
async fn admin_eventually(broker: &BrokerProcess, sasl: Option<SaslConfig>) -> Admin {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match Admin::new(config(broker, sasl.clone())).await {
            Ok(a) => match a.list_topics().await {
                Ok(_) => return a,
                Err(e) if Instant::now() < deadline => eprintln!("not yet: {e}"),
                Err(e) => panic!("never authenticated: {}", text(&e)),
            },
            Err(e) if Instant::now() < deadline => eprintln!("not yet: {}", text(&e)),
            Err(e) => panic!("never authenticated: {}", text(&e)),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The error an SDK client with `sasl` gets on its first request.
async fn refusal(broker: &BrokerProcess, sasl: Option<SaslConfig>) -> ClientError {
    let result = async {
        let admin = Admin::new(config(broker, sasl)).await?;
        admin.list_topics().await
    }
    .await;
    result.expect_err("authenticated with bad credentials")
}

fn password_file(dir: &Path, name: &str, password: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, format!("{password}\n")).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_authenticate_with_both_mechanisms_and_bad_credentials_are_refused() {
    let broker = sasl_broker();
    create_and_list_users(&broker);
    let (alice, bob) = alice_writes_and_bob_reads(&broker).await;
    sdk_refusals(&broker).await;
    cli_flags_and_refusals(&broker);
    a_deleted_user_is_refused(&broker, alice, bob).await;
}

fn create_and_list_users(broker: &BrokerProcess) {
    create_users(broker);
    let listed = user(broker.data_dir(), &["list"], "");
    let listed = String::from_utf8_lossy(&listed.stdout);
    assert!(
        listed.contains("user-principal 'alice' are SCRAM-SHA-256=iterations=4096")
            && listed.contains("user-principal 'bob' are SCRAM-SHA-512=iterations=4096"),
        "{listed}"
    );
    let file = std::fs::read_to_string(broker.data_dir().join("sasl-credentials.toml")).unwrap();
    assert!(!file.contains(ALICE_PASSWORD) && !file.contains("bob-secret"));
}

async fn alice_writes_and_bob_reads(
    broker: &BrokerProcess,
) -> (Option<SaslConfig>, Option<SaslConfig>) {
    // alice (SHA-256) writes, bob (SHA-512) reads.
    let alice = scram("SCRAM-SHA-256", "alice", ALICE_PASSWORD);
    let admin = admin_eventually(broker, alice.clone()).await;
    admin
        .create_topics(vec![NewTopic::new("t", 2)])
        .await
        .unwrap();
    let producer = Producer::new(config(broker, alice.clone()), ProducerConfig::default())
        .await
        .unwrap();
    let mut acks = Vec::new();
    for i in 0..20 {
        let record = ProducerRecord::new("t")
            .key(format!("k{i}"))
            .value(format!("v{i}"));
        acks.push(producer.send(record).await.unwrap());
    }
    for ack in acks {
        ack.await
            .expect("acknowledged to an authenticated producer");
    }
    let bob = scram("SCRAM-SHA-512", "bob", BOB_PASSWORD);
    let offsets = admin_eventually(broker, bob.clone())
        .await
        .list_topics()
        .await
        .unwrap();
    assert!(offsets.iter().any(|t| t == "t"), "{offsets:?}");

    (alice, bob)
}

async fn sdk_refusals(broker: &BrokerProcess) {
    // Refusals: the same words for a wrong password and an unknown user.
    let wrong = refusal(broker, scram("SCRAM-SHA-256", "alice", "guess")).await;
    let unknown = refusal(broker, scram("SCRAM-SHA-256", "mallory", "guess")).await;
    for e in [&wrong, &unknown] {
        assert_eq!(
            code_of(e),
            Some(ErrorCode::SaslAuthenticationFailed),
            "{}",
            text(e)
        );
        assert!(text(e).contains("invalid credentials"), "{}", text(e));
    }
    let other = refusal(broker, scram("SCRAM-SHA-512", "alice", ALICE_PASSWORD)).await;
    assert_eq!(code_of(&other), Some(ErrorCode::SaslAuthenticationFailed));
    let none = refusal(broker, None).await;
    assert_eq!(
        code_of(&none),
        Some(ErrorCode::IllegalSaslState),
        "{}",
        text(&none)
    );
}

fn cli_flags_and_refusals(broker: &BrokerProcess) {
    // The CLI: global flags; a wrong password is a one-line typed error.
    let dir = tempfile::tempdir().unwrap();
    let good = password_file(dir.path(), "good", ALICE_PASSWORD);
    let bad = password_file(dir.path(), "bad", "guess");
    let cli = |file: &Path| {
        let file = file.display().to_string();
        broker.run_cli(
            &[
                "topic",
                "list",
                "--sasl-mechanism",
                "SCRAM-SHA-256",
                "--sasl-username",
                "alice",
                "--sasl-password-file",
                &file,
            ],
            "",
        )
    };
    let ok = cli(&good);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    assert!(String::from_utf8_lossy(&ok.stdout)
        .lines()
        .any(|l| l == "t"));
    let refused = cli(&bad);
    assert_eq!(refused.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("SaslAuthenticationFailed"), "{stderr}");
    let plain = broker.run_cli(&["topic", "list"], "");
    assert!(String::from_utf8_lossy(&plain.stderr).contains("IllegalSaslState"));
}

async fn a_deleted_user_is_refused(
    broker: &BrokerProcess,
    alice: Option<SaslConfig>,
    bob: Option<SaslConfig>,
) {
    // A deleted user can no longer authenticate (the broker re-reads the file).
    user(broker.data_dir(), &["delete", "alice"], "");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match Admin::new(config(broker, alice.clone())).await {
            Err(e) if code_of(&e) == Some(ErrorCode::SaslAuthenticationFailed) => break,
            _ if Instant::now() < deadline => tokio::time::sleep(Duration::from_millis(200)).await,
            _ => panic!("alice still authenticates after `borges user delete`"),
        }
    }
    // bob is unaffected.
    admin_eventually(broker, bob).await;
}

/// A blocking client that speaks frames, for exchanges the SDK would never send.
struct Raw {
    stream: TcpStream,
    buf: BytesMut,
    decoder: FrameDecoder,
    correlation: u32,
}

struct Answer {
    header: FrameHeader,
    message: bytes::Bytes,
}

impl Raw {
    fn connect(broker: &BrokerProcess) -> Raw {
        let stream = TcpStream::connect(broker.addr()).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        Raw {
            stream,
            buf: BytesMut::new(),
            decoder: FrameDecoder::new(1 << 20),
            correlation: 0,
        }
    }

    fn send_message(&mut self, api: ApiKey, message: &[u8]) {
        self.correlation += 1;
        let header =
            FrameHeader::new(api as u16, 0, 0, self.correlation, message.len(), 0).unwrap();
        self.stream.write_all(&header.to_bytes()).unwrap();
        self.stream.write_all(message).unwrap();
    }

    fn send(&mut self, api: ApiKey, fbb: &FlatBufferBuilder) {
        self.correlation += 1;
        let head = MessageHead::request(api, 0, self.correlation);
        let frame = message::encode_message(head, fbb, &[]).unwrap();
        self.stream.write_all(&frame).unwrap();
    }

    /// The next frame; `None` once the broker closed the connection.
    fn receive(&mut self) -> Option<Answer> {
        loop {
            if let Some(frame) = self.decoder.decode(&mut self.buf).unwrap() {
                return Some(Answer {
                    header: frame.header,
                    message: frame.message,
                });
            }
            let mut chunk = [0u8; 8192];
            match self.stream.read(&mut chunk) {
                Ok(0) | Err(_) => return None,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
            }
        }
    }

    fn closed(&mut self) -> bool {
        self.receive().is_none()
    }

    fn handshake(&mut self, mechanism: &str) -> (u16, Vec<String>) {
        let mut fbb = FlatBufferBuilder::new();
        let name = fbb.create_string(mechanism);
        let root = wire::SaslHandshakeRequest::create(
            &mut fbb,
            &wire::SaslHandshakeRequestArgs {
                mechanism: Some(name),
            },
        );
        fbb.finish(root, None);
        self.send(ApiKey::SaslHandshake, &fbb);
        let a = self.receive().expect("handshake answered");
        assert!(!a.header.is_error());
        let r = flatbuffers::root::<wire::SaslHandshakeResponse>(&a.message).unwrap();
        let names = r
            .mechanisms()
            .map(|v| v.iter().map(str::to_string).collect())
            .unwrap_or_default();
        (r.error_code(), names)
    }

    /// One SaslAuthenticate round: (error code, error message, auth bytes).
    fn authenticate(&mut self, bytes: &[u8]) -> (ErrorCode, String, Vec<u8>) {
        let mut fbb = FlatBufferBuilder::new();
        let auth = fbb.create_vector(bytes);
        let root = wire::SaslAuthenticateRequest::create(
            &mut fbb,
            &wire::SaslAuthenticateRequestArgs {
                auth_bytes: Some(auth),
            },
        );
        fbb.finish(root, None);
        self.send(ApiKey::SaslAuthenticate, &fbb);
        let a = self.receive().expect("authenticate answered");
        assert!(
            !a.header.is_error(),
            "{:?}",
            message::decode_error_response(&a.message)
        );
        let r = flatbuffers::root::<wire::SaslAuthenticateResponse>(&a.message).unwrap();
        (
            ErrorCode::from_u16(r.error_code()),
            r.error_message().unwrap_or("").to_string(),
            r.auth_bytes()
                .map(|b| b.bytes().to_vec())
                .unwrap_or_default(),
        )
    }

    /// Sends Metadata; returns the ErrorResponse code, or None for a normal answer.
    fn metadata(&mut self) -> Option<ErrorCode> {
        let mut fbb = FlatBufferBuilder::new();
        let root = wire::MetadataRequest::create(&mut fbb, &Default::default());
        fbb.finish(root, None);
        self.send(ApiKey::Metadata, &fbb);
        let a = self.receive().expect("metadata answered");
        a.header
            .is_error()
            .then(|| message::decode_error_response(&a.message).unwrap().0)
    }

    /// A whole SCRAM exchange as `name`; returns the messages sent and the final answer.
    fn login(&mut self, name: &str, password: &str) -> (Vec<u8>, Vec<u8>, ErrorCode) {
        assert_eq!(self.handshake("SCRAM-SHA-256").0, 0);
        let mut c = ScramClient::new(
            Mechanism::ScramSha256,
            name,
            password.as_bytes(),
            scram::random_nonce(),
        );
        let first = c.client_first().unwrap();
        let (code, _, server_first) = self.authenticate(&first);
        assert_eq!(code, ErrorCode::None);
        let last = c.server_first(&server_first).unwrap();
        let (code, _, server_final) = self.authenticate(&last);
        if code == ErrorCode::None {
            c.server_final(&server_final)
                .expect("the broker's signature verifies");
        }
        (first, last, code)
    }
}

/// Waits until the broker has read the credentials file: a login as alice succeeds.
fn wait_until_alice_logs_in(broker: &BrokerProcess) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Raw::connect(broker).login("alice", ALICE_PASSWORD).2 != ErrorCode::None {
        assert!(Instant::now() < deadline, "alice never authenticated");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn raw_exchanges_that_break_the_rules_get_typed_errors_and_the_broker_keeps_serving() {
    let broker = sasl_broker();
    create_users(&broker);
    wait_until_alice_logs_in(&broker);

    before_authentication(&broker);
    malformed_and_out_of_sequence(&broker);
    bad_nonce_and_replay(&broker);
    unknown_user_impersonation_and_the_others(&broker);
}

fn before_authentication(broker: &BrokerProcess) {
    // A request before authentication: IllegalSaslState, then the connection closes.
    let mut c = Raw::connect(broker);
    assert_eq!(c.metadata(), Some(ErrorCode::IllegalSaslState));
    assert!(c.closed());

    // ApiVersions is served before authentication and lists the SASL APIs.
    let mut c = Raw::connect(broker);
    let mut fbb = FlatBufferBuilder::new();
    let root = wire::ApiVersionsRequest::create(&mut fbb, &Default::default());
    fbb.finish(root, None);
    c.send(ApiKey::ApiVersions, &fbb);
    let a = c.receive().unwrap();
    assert!(!a.header.is_error());
    let r = flatbuffers::root::<wire::ApiVersionsResponse>(&a.message).unwrap();
    let keys: Vec<u16> = r
        .api_versions()
        .unwrap()
        .iter()
        .map(|v| v.api_key())
        .collect();
    assert!(keys.contains(&(ApiKey::SaslHandshake as u16)) && keys.contains(&20));

    // A huge handshake: refused from its header (CVE-2022-34917: nothing allocated for it).
    let mut c = Raw::connect(broker);
    let header = FrameHeader::new(ApiKey::SaslHandshake as u16, 0, 0, 7, 1 << 20, 0).unwrap();
    c.stream.write_all(&header.to_bytes()).unwrap();
    let started = Instant::now();
    let a = c.receive().expect("answered from the header alone");
    assert!(a.header.is_error());
    let (code, text) = message::decode_error_response(&a.message).unwrap();
    let text = text.unwrap_or("");
    assert_eq!(code, ErrorCode::FrameTooLarge, "{text}");
    assert!(text.contains("before authentication"), "{text}");
    assert!(started.elapsed() < Duration::from_secs(3));
    assert!(c.closed());
}

fn malformed_and_out_of_sequence(broker: &BrokerProcess) {
    // A malformed handshake message, then a malformed SCRAM message: typed errors, and the
    // connection survives until the third failure.
    let mut c = Raw::connect(broker);
    c.send_message(ApiKey::SaslHandshake, b"\x01\x02not a flatbuffer");
    let a = c.receive().unwrap();
    assert!(a.header.is_error());
    assert_eq!(
        message::decode_error_response(&a.message).unwrap().0,
        ErrorCode::MalformedFrame
    );
    assert_eq!(c.handshake("SCRAM-SHA-256").0, 0);
    let (code, text, _) = c.authenticate(b"hello");
    assert_eq!(code, ErrorCode::SaslAuthenticationFailed);
    assert!(text.contains("malformed"), "{text}");
    let (code, names) = c.handshake("PLAIN");
    assert_eq!(
        ErrorCode::from_u16(code),
        ErrorCode::UnsupportedSaslMechanism
    );
    assert_eq!(names, ["SCRAM-SHA-256", "SCRAM-SHA-512"]);
    assert!(c.closed(), "the third failure closes the connection");

    // SaslAuthenticate before SaslHandshake.
    let mut c = Raw::connect(broker);
    let (code, _, _) = c.authenticate(b"n,,n=alice,r=abc");
    assert_eq!(code, ErrorCode::IllegalSaslState);
}

fn bad_nonce_and_replay(broker: &BrokerProcess) {
    // A bad nonce: a client-final with a valid proof, but for a nonce the broker did not send.
    let mut c = Raw::connect(broker);
    assert_eq!(c.handshake("SCRAM-SHA-256").0, 0);
    let mut client = ScramClient::new(
        Mechanism::ScramSha256,
        "alice",
        ALICE_PASSWORD.as_bytes(),
        "cnonce".into(),
    );
    let (_, _, server_first) = c.authenticate(&client.client_first().unwrap());
    let server_first = String::from_utf8(server_first).unwrap();
    let (nonce, rest) = server_first.split_once(',').unwrap();
    let forged = format!("r=cnonceFORGED,{rest}");
    assert_ne!(nonce, "r=cnonceFORGED");
    let last = client.server_first(forged.as_bytes()).unwrap();
    let (code, text, _) = c.authenticate(&last);
    assert_eq!(code, ErrorCode::SaslAuthenticationFailed);
    assert!(text.contains("nonce"), "{text}");

    // A replayed exchange: a recorded successful login, sent again on a new connection.
    let mut c = Raw::connect(broker);
    let (first, last, code) = c.login("alice", ALICE_PASSWORD);
    assert_eq!(code, ErrorCode::None);
    assert_eq!(c.metadata(), None, "authenticated: Metadata is served");
    let mut replay = Raw::connect(broker);
    assert_eq!(replay.handshake("SCRAM-SHA-256").0, 0);
    assert_eq!(replay.authenticate(&first).0, ErrorCode::None);
    let (code, text, _) = replay.authenticate(&last);
    assert_eq!(code, ErrorCode::SaslAuthenticationFailed, "{text}");
    // After authentication there is no second handshake.
    assert_eq!(
        ErrorCode::from_u16(c.handshake("SCRAM-SHA-256").0),
        ErrorCode::IllegalSaslState
    );
}

fn unknown_user_impersonation_and_the_others(broker: &BrokerProcess) {
    // Unknown user: a normal-looking server-first, then the wrong-password answer.
    let mut c = Raw::connect(broker);
    let (_, _, code) = c.login("mallory", "x");
    assert_eq!(code, ErrorCode::SaslAuthenticationFailed);

    // Impersonation through the authorization id (CVE-2017-12610).
    let mut c = Raw::connect(broker);
    assert_eq!(c.handshake("SCRAM-SHA-256").0, 0);
    let (code, text, _) = c.authenticate(b"n,a=bob,n=alice,r=abc");
    assert_eq!(code, ErrorCode::SaslAuthenticationFailed);
    assert!(text.contains("authorization id"), "{text}");

    // The broker serves others throughout.
    let mut c = Raw::connect(broker);
    assert_eq!(
        c.login("bob", BOB_PASSWORD_256_FALLBACK).2,
        ErrorCode::SaslAuthenticationFailed
    );
    let mut c = Raw::connect(broker);
    assert_eq!(c.login("alice", ALICE_PASSWORD).2, ErrorCode::None);
    assert_eq!(c.metadata(), None);
}

/// bob has only a SCRAM-SHA-512 credential: a SHA-256 login with his password fails.
const BOB_PASSWORD_256_FALLBACK: &str = BOB_PASSWORD;

/// `sasl.authentication_timeout_ms` of the timeout test.
const AUTH_TIMEOUT: Duration = Duration::from_millis(1500);
/// How long the timeout test waits for the broker to close a connection: well below the
/// idle timeout (10 minutes) and the default authentication timeout (10 s).
const CLOSE_WAIT_MAX: Duration = Duration::from_secs(8);

/// Polls `streams` (every 10 ms, without reading their bytes' meaning) until the broker has
/// closed each (end of stream or reset); returns when each was seen closed.
fn seen_closed(streams: &mut [&mut TcpStream]) -> Vec<Instant> {
    let start = Instant::now();
    let mut closed: Vec<Option<Instant>> = vec![None; streams.len()];
    for s in streams.iter() {
        s.set_nonblocking(true).unwrap();
    }
    while closed.iter().any(Option::is_none) {
        for (s, at) in streams.iter_mut().zip(&mut closed) {
            let mut chunk = [0u8; 4096];
            match s.read(&mut chunk) {
                Ok(0) => *at = at.or(Some(Instant::now())),
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(_) => *at = at.or(Some(Instant::now())),
            }
        }
        assert!(
            start.elapsed() < CLOSE_WAIT_MAX,
            "a connection that never authenticated is still open: {closed:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    closed.into_iter().flatten().collect()
}

/// With `sasl.authentication_timeout_ms` 1,500: a connection that sends nothing and one that
/// stops after its client-first message are closed once the timeout has passed (not before),
/// while another client logs in and is served; an authenticated connection idle for longer
/// is not closed, and a new one authenticates after. Planted: `idle_limit` without the
/// authentication deadline -> "a connection that never authenticated is still open".
#[test]
fn a_connection_that_never_authenticates_is_closed_after_the_timeout() {
    let broker = BrokerProcess::start_with(BrokerOptions {
        args: vec!["--sasl-enabled-mechanisms".into(), "SCRAM-SHA-256".into()],
        config_toml: Some(format!(
            "[sasl]\nauthentication_timeout_ms = {}\n",
            AUTH_TIMEOUT.as_millis()
        )),
        ..BrokerOptions::default()
    });
    create_users(&broker);
    wait_until_alice_logs_in(&broker);
    let mut authenticated = Raw::connect(&broker);
    assert_eq!(
        authenticated.login("alice", ALICE_PASSWORD).2,
        ErrorCode::None
    );

    let silent_since = Instant::now();
    let mut silent = TcpStream::connect(broker.addr()).unwrap();
    let stalled_since = Instant::now();
    let mut stalled = Raw::connect(&broker);
    assert_eq!(stalled.handshake("SCRAM-SHA-256").0, 0);
    let mut scram = ScramClient::new(
        Mechanism::ScramSha256,
        "alice",
        ALICE_PASSWORD.as_bytes(),
        scram::random_nonce(),
    );
    let first = scram.client_first().unwrap();
    assert_eq!(stalled.authenticate(&first).0, ErrorCode::None);
    // Others are served while the two wait.
    let mut other = Raw::connect(&broker);
    assert_eq!(other.login("alice", ALICE_PASSWORD).2, ErrorCode::None);
    assert_eq!(other.metadata(), None);

    let closed = seen_closed(&mut [&mut silent, &mut stalled.stream]);
    for (what, since, at) in [
        ("silent", silent_since, closed[0]),
        ("stalled", stalled_since, closed[1]),
    ] {
        let after = at - since;
        eprintln!("the {what} connection was closed {after:?} after its connect");
        assert!(
            after + Duration::from_millis(100) >= AUTH_TIMEOUT,
            "the {what} connection was closed after {after:?}, before the timeout"
        );
    }
    assert_eq!(
        authenticated.metadata(),
        None,
        "an authenticated connection was closed"
    );
    let mut later = Raw::connect(&broker);
    assert_eq!(later.login("alice", ALICE_PASSWORD).2, ErrorCode::None);
    assert_eq!(later.metadata(), None);
}

/// Deleting a user cuts its open connections too, not only its next logins: a connection
/// authenticated as alice is answered SaslAuthenticationFailed at its first request after the
/// broker read the file without her, and closed; bob's connection goes on.
#[test]
fn a_deleted_users_open_connection_is_closed_at_its_next_request() {
    let broker = sasl_broker();
    create_users(&broker);
    wait_until_alice_logs_in(&broker);
    let mut alice = Raw::connect(&broker);
    assert_eq!(alice.login("alice", ALICE_PASSWORD).2, ErrorCode::None);
    assert_eq!(alice.metadata(), None, "alice is served");
    let mut bob = Raw::connect(&broker);
    assert_eq!(bob.handshake("SCRAM-SHA-512").0, 0);
    let mut c = ScramClient::new(
        Mechanism::ScramSha512,
        "bob",
        BOB_PASSWORD.as_bytes(),
        scram::random_nonce(),
    );
    let (code, _, server_first) = bob.authenticate(&c.client_first().unwrap());
    assert_eq!(code, ErrorCode::None);
    let last = c.server_first(&server_first).unwrap();
    assert_eq!(bob.authenticate(&last).0, ErrorCode::None);
    user(broker.data_dir(), &["delete", "alice"], "");
    // Core 0 re-reads the file within a second of its change; until then alice is served.
    let deadline = Instant::now() + Duration::from_secs(10);
    let refused = loop {
        match alice.metadata() {
            None if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(100)),
            None => panic!("alice's connection is still served after `borges user delete`"),
            Some(code) => break code,
        }
    };
    assert_eq!(refused, ErrorCode::SaslAuthenticationFailed);
    assert!(alice.closed(), "the connection is closed after the refusal");
    assert_eq!(bob.metadata(), None, "bob's connection goes on");
}
