//! The SCRAM message parsers (protocol/src/scram.rs) on arbitrary bytes: client-first,
//! server-first and client-final parsing, the client's server-final check, and the server's
//! state machine over a client-first and a client-final message. Nothing may panic; what
//! parses must hold the parser's limits and parse again, to the same values, when written
//! back in the canonical form.
//!
//! The first input byte picks the mode (its value modulo 5) and, for the two state machines,
//! the mechanism (bit 7); the rest is the message. In the server mode the second byte says
//! where the client-first message ends (times 8) and the client-final message begins.
#![no_main]

use std::sync::OnceLock;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use borges_protocol::scram::{
    encode_saslname, ClientFinal, ClientFirst, Credential, Mechanism, ScramClient, ScramServer,
    ServerFirst, ITERATIONS_MIN, NONCE_SIZE_BYTES_MAX, SALT_SIZE_BYTES_MAX,
    USERNAME_SIZE_BYTES_MAX,
};
use libfuzzer_sys::fuzz_target;

/// The client's nonce in the server-final mode.
const CLIENT_NONCE: &str = "fyko+d2lbbFgONRv9qkxdawL";
/// The server's part of the nonce in both state-machine modes.
const SERVER_NONCE: &str = "3rfcNHYJY1ZVvWVs7j";

fn valid_nonce(nonce: &str) -> bool {
    !nonce.is_empty()
        && nonce.len() <= NONCE_SIZE_BYTES_MAX
        && nonce
            .bytes()
            .all(|b| (0x21..=0x7e).contains(&b) && b != b',')
}

fn client_first(data: &[u8]) {
    let Ok(m) = ClientFirst::parse(data) else {
        return;
    };
    assert!(!m.username.is_empty() && m.username.len() <= USERNAME_SIZE_BYTES_MAX);
    assert!(valid_nonce(&m.nonce), "{m:?}");
    assert_eq!(format!("{}{}", m.gs2_header, m.bare).as_bytes(), data);
    let canonical = format!(
        "{}n={},r={}",
        m.gs2_header,
        encode_saslname(&m.username),
        m.nonce
    );
    let again = ClientFirst::parse(canonical.as_bytes()).expect("canonical client-first");
    assert_eq!((&again.username, &again.nonce), (&m.username, &m.nonce));
    assert_eq!(again.gs2_header, m.gs2_header);
}

fn server_first(data: &[u8]) {
    let Ok(m) = ServerFirst::parse(data) else {
        return;
    };
    assert!(valid_nonce(&m.nonce), "{m:?}");
    assert!(!m.salt.is_empty() && m.salt.len() <= SALT_SIZE_BYTES_MAX);
    let canonical = format!(
        "r={},s={},i={}",
        m.nonce,
        BASE64.encode(&m.salt),
        m.iterations
    );
    let again = ServerFirst::parse(canonical.as_bytes()).expect("canonical server-first");
    assert_eq!(again, m);
}

fn client_final(data: &[u8]) {
    let Ok(m) = ClientFinal::parse(data) else {
        return;
    };
    assert!(valid_nonce(&m.nonce), "{m:?}");
    assert!(data.starts_with(m.without_proof.as_bytes()));
    let canonical = format!(
        "c={},r={},p={}",
        BASE64.encode(&m.channel_binding),
        m.nonce,
        BASE64.encode(&m.proof)
    );
    let again = ClientFinal::parse(canonical.as_bytes()).expect("canonical client-final");
    assert_eq!(
        (&again.channel_binding, &again.nonce, &again.proof),
        (&m.channel_binding, &m.nonce, &m.proof)
    );
}

fn mechanism(selector: u8) -> Mechanism {
    if selector & 0x80 == 0 {
        Mechanism::ScramSha256
    } else {
        Mechanism::ScramSha512
    }
}

/// The client's check of a server-final message, after a real client-first and a valid
/// server-first: any bytes are refused or (never, without the password) accepted quietly.
fn server_final(selector: u8, data: &[u8]) {
    let mut client = ScramClient::new(
        mechanism(selector),
        "user",
        b"pencil",
        CLIENT_NONCE.to_string(),
    );
    client.client_first().expect("client-first");
    let first = format!("r={CLIENT_NONCE}{SERVER_NONCE},s=QSXCR+Q6sek8bf92,i={ITERATIONS_MIN}");
    client.server_first(first.as_bytes()).expect("client-final");
    assert!(
        client.server_final(data).is_err(),
        "a server-final message the fuzzer made up was accepted"
    );
}

/// The credential of "user" for each mechanism, derived once (4096 PBKDF2 iterations).
fn credential(m: Mechanism) -> Credential {
    static CREDENTIALS: OnceLock<[Credential; 2]> = OnceLock::new();
    let [sha256, sha512] = CREDENTIALS.get_or_init(|| {
        let salt = b"borges-fuzz-salt";
        [
            Credential::new(Mechanism::ScramSha256, b"pencil", salt, ITERATIONS_MIN),
            Credential::new(Mechanism::ScramSha512, b"pencil", salt, ITERATIONS_MIN),
        ]
    });
    match m {
        Mechanism::ScramSha256 => sha256.clone(),
        _ => sha512.clone(),
    }
}

/// The server's state machine: a client-first then a client-final message from the input.
/// A made-up proof never authenticates.
fn server(selector: u8, data: &[u8]) {
    let Some((&cut, rest)) = data.split_first() else {
        return;
    };
    let (first, last) = rest.split_at((usize::from(cut) * 8).min(rest.len()));
    let m = mechanism(selector);
    let mut server = ScramServer::new(m, SERVER_NONCE.to_string(), [7; 32]);
    let lookup = |name: &str| (name == "user").then(|| credential(m));
    let Ok(answer) = server.client_first(first, lookup) else {
        return;
    };
    let answer = ServerFirst::parse(&answer).expect("the server's own server-first");
    assert!(answer.nonce.ends_with(SERVER_NONCE));
    assert!(
        server.client_final(last).is_err(),
        "a client-final message the fuzzer made up authenticated"
    );
}

fuzz_target!(|data: &[u8]| {
    let Some((&selector, message)) = data.split_first() else {
        return;
    };
    match selector % 5 {
        0 => client_first(message),
        1 => server_first(message),
        2 => client_final(message),
        3 => server_final(selector, message),
        _ => server(selector, message),
    }
});
