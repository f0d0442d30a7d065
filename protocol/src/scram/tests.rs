//! The SCRAM codec: RFC 7677's exchange byte for byte, both mechanisms end to end, and every
//! refusal (wrong password, unknown user, replay, nonce, channel binding, impersonation, size).

use super::*;
use proptest::prelude::*;

// RFC 7677, section 3.
const RFC_CLIENT_NONCE: &str = "rOprNGfwEbeRWgbNEkqO";
const RFC_SERVER_NONCE: &str = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";
const RFC_SALT_B64: &str = "W22ZaJ0SNY7soEsUEjb6gQ==";
const RFC_CLIENT_FIRST: &str = "n,,n=user,r=rOprNGfwEbeRWgbNEkqO";
const RFC_SERVER_FIRST: &str =
    "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
const RFC_CLIENT_FINAL: &str = "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,\
                                p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
const RFC_SERVER_FINAL: &str = "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=";

const KEY: [u8; 32] = [7; 32];

fn rfc_credential() -> Credential {
    let salt = BASE64.decode(RFC_SALT_B64).unwrap();
    Credential::new(Mechanism::ScramSha256, b"pencil", &salt, 4096)
}

fn store<'a>(users: &'a [(&'a str, Credential)]) -> impl Fn(&str) -> Option<Credential> + 'a {
    move |name| {
        users
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, c)| c.clone())
    }
}

/// Runs a whole exchange; returns the server's verdict and the client's on the server-final.
fn exchange(
    mechanism: Mechanism,
    stored: &[(&str, Credential)],
    username: &str,
    password: &[u8],
) -> Result<String, ScramError> {
    let mut client = ScramClient::new(mechanism, username, password, random_nonce());
    let mut server = ScramServer::new(mechanism, random_nonce(), KEY);
    let first = client.client_first()?;
    let server_first = server.client_first(&first, store(stored))?;
    let client_final = client.server_first(&server_first)?;
    let (server_final, name) = server.client_final(&client_final)?;
    client.server_final(&server_final)?;
    Ok(name)
}

#[test]
fn the_client_speaks_rfc_7677s_exchange_byte_for_byte() {
    let mut client = ScramClient::new(
        Mechanism::ScramSha256,
        "user",
        b"pencil",
        RFC_CLIENT_NONCE.to_string(),
    );
    assert_eq!(client.client_first().unwrap(), RFC_CLIENT_FIRST.as_bytes());
    let client_final = client.server_first(RFC_SERVER_FIRST.as_bytes()).unwrap();
    assert_eq!(String::from_utf8(client_final).unwrap(), RFC_CLIENT_FINAL);
    client.server_final(RFC_SERVER_FINAL.as_bytes()).unwrap();
}

#[test]
fn the_server_speaks_rfc_7677s_exchange_byte_for_byte() {
    let credential = rfc_credential();
    let mut server = ScramServer::new(Mechanism::ScramSha256, RFC_SERVER_NONCE.to_string(), KEY);
    let users = [("user", credential)];
    let server_first = server
        .client_first(RFC_CLIENT_FIRST.as_bytes(), store(&users))
        .unwrap();
    assert_eq!(String::from_utf8(server_first).unwrap(), RFC_SERVER_FIRST);
    let (server_final, name) = server.client_final(RFC_CLIENT_FINAL.as_bytes()).unwrap();
    assert_eq!(String::from_utf8(server_final).unwrap(), RFC_SERVER_FINAL);
    assert_eq!(name, "user");
}

#[test]
fn both_mechanisms_authenticate_and_refuse_a_wrong_password() {
    for &m in Mechanism::ALL {
        let c = Credential::generate(m, b"secret", ITERATIONS_MIN).unwrap();
        c.validate().unwrap();
        assert_eq!(c.stored_key.len(), m.key_size_bytes());
        let users = [("alice", c)];
        assert_eq!(exchange(m, &users, "alice", b"secret").unwrap(), "alice");
        assert_eq!(
            exchange(m, &users, "alice", b"secreT"),
            Err(ScramError::InvalidProof),
            "{m}"
        );
    }
}

#[test]
fn a_credential_of_the_other_mechanism_does_not_authenticate() {
    let c = Credential::generate(Mechanism::ScramSha512, b"secret", ITERATIONS_MIN).unwrap();
    let users = [("alice", c)];
    assert_eq!(
        exchange(Mechanism::ScramSha256, &users, "alice", b"secret"),
        Err(ScramError::InvalidProof)
    );
}

#[test]
fn an_unknown_user_sees_a_stable_salt_and_fails_like_a_wrong_password() {
    let users: [(&str, Credential); 0] = [];
    assert_eq!(
        exchange(Mechanism::ScramSha256, &users, "mallory", b"x"),
        Err(ScramError::InvalidProof)
    );
    let salt = |name: &str| {
        let mut s = ScramServer::new(Mechanism::ScramSha256, random_nonce(), KEY);
        let first = format!("n,,n={name},r=abc");
        let sf = s.client_first(first.as_bytes(), store(&users)).unwrap();
        ServerFirst::parse(&sf).unwrap()
    };
    let (a, b) = (salt("mallory"), salt("mallory"));
    assert_eq!(a.salt, b.salt, "the same unknown name sees the same salt");
    assert_eq!(a.iterations, ITERATIONS_MIN);
    assert_ne!(salt("eve").salt, a.salt);
}

/// A recorded successful exchange (client-first, client-final) against a new server.
fn replay(client_first: &[u8], client_final: &[u8], users: &[(&str, Credential)]) -> ScramError {
    let mut server = ScramServer::new(Mechanism::ScramSha256, random_nonce(), KEY);
    server.client_first(client_first, store(users)).unwrap();
    server.client_final(client_final).unwrap_err()
}

#[test]
fn a_replayed_exchange_fails_on_the_servers_fresh_nonce() {
    let users = [("user", rfc_credential())];
    assert_eq!(
        replay(
            RFC_CLIENT_FIRST.as_bytes(),
            RFC_CLIENT_FINAL.as_bytes(),
            &users
        ),
        ScramError::NonceMismatch
    );
}

#[test]
fn a_client_final_nonce_other_than_the_servers_is_refused() {
    let users = [("user", rfc_credential())];
    let with_nonce = |nonce: &str| {
        let mut server =
            ScramServer::new(Mechanism::ScramSha256, RFC_SERVER_NONCE.to_string(), KEY);
        server
            .client_first(RFC_CLIENT_FIRST.as_bytes(), store(&users))
            .unwrap();
        let message = RFC_CLIENT_FINAL.replace(
            &format!("r={RFC_CLIENT_NONCE}{RFC_SERVER_NONCE}"),
            &format!("r={nonce}"),
        );
        server.client_final(message.as_bytes()).unwrap_err()
    };
    // The client's part alone (CVE-2024-56128), a changed server part, a longer one.
    assert_eq!(with_nonce(RFC_CLIENT_NONCE), ScramError::NonceMismatch);
    let changed = format!("{RFC_CLIENT_NONCE}%hvYDpWUa2RaTCAfuxFIlj)hNlF$k1");
    assert_eq!(with_nonce(&changed), ScramError::NonceMismatch);
    let longer = format!("{RFC_CLIENT_NONCE}{RFC_SERVER_NONCE}x");
    assert_eq!(with_nonce(&longer), ScramError::NonceMismatch);
}

#[test]
fn the_client_refuses_a_server_nonce_that_does_not_extend_its_own() {
    for server_first in [
        "r=rOprNGfwEbeRWgbNEkqO,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
        "r=XOprNGfwEbeRWgbNEkqO%hvY,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
    ] {
        let mut client = ScramClient::new(
            Mechanism::ScramSha256,
            "user",
            b"pencil",
            RFC_CLIENT_NONCE.to_string(),
        );
        client.client_first().unwrap();
        assert_eq!(
            client.server_first(server_first.as_bytes()),
            Err(ScramError::NonceMismatch)
        );
    }
}

#[test]
fn the_client_refuses_iterations_out_of_range_and_a_wrong_server_signature() {
    for (iterations, ok) in [(4095, false), (4096, true), (16384, true), (16385, false)] {
        let mut client = ScramClient::new(Mechanism::ScramSha256, "u", b"p", "abc".to_string());
        client.client_first().unwrap();
        let sf = format!("r=abcdef,s=c2FsdA==,i={iterations}");
        assert_eq!(
            client.server_first(sf.as_bytes()).is_ok(),
            ok,
            "{iterations}"
        );
    }
    let mut client = ScramClient::new(
        Mechanism::ScramSha256,
        "user",
        b"pencil",
        RFC_CLIENT_NONCE.to_string(),
    );
    client.client_first().unwrap();
    client.server_first(RFC_SERVER_FIRST.as_bytes()).unwrap();
    assert_eq!(
        client.server_final(b"v=7rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="),
        Err(ScramError::ServerSignatureMismatch)
    );
}

#[test]
fn an_authorization_id_must_be_the_username() {
    let users = [("user", rfc_credential())];
    let mut server = ScramServer::new(Mechanism::ScramSha256, random_nonce(), KEY);
    assert_eq!(
        server.client_first(b"n,a=admin,n=user,r=abc", store(&users)),
        Err(ScramError::AuthzidNotUsername)
    );
    let mut server = ScramServer::new(Mechanism::ScramSha256, random_nonce(), KEY);
    server
        .client_first(b"n,a=user,n=user,r=abc", store(&users))
        .unwrap();
}

#[test]
fn channel_binding_and_mandatory_extensions_are_refused() {
    let cases: [(&[u8], ScramError); 4] = [
        (
            b"p=tls-unique,,n=user,r=abc",
            ScramError::ChannelBindingUnsupported,
        ),
        (b"n,,n=user,r=abc,m=ext", ScramError::MandatoryExtension),
        (b"n,,m=ext,n=user,r=abc", ScramError::MandatoryExtension),
        (
            b"x,,n=user,r=abc",
            ScramError::Malformed("GS2 channel binding flag"),
        ),
    ];
    for (message, error) in cases {
        let mut server = ScramServer::new(Mechanism::ScramSha256, random_nonce(), KEY);
        assert_eq!(server.client_first(message, |_| None), Err(error));
    }
    // c= must be the GS2 header sent: "y,," sent, "n,," echoed.
    let users = [("user", rfc_credential())];
    let mut server = ScramServer::new(Mechanism::ScramSha256, RFC_SERVER_NONCE.to_string(), KEY);
    let first = RFC_CLIENT_FIRST.replacen("n,,", "y,,", 1);
    server
        .client_first(first.as_bytes(), store(&users))
        .unwrap();
    assert_eq!(
        server.client_final(RFC_CLIENT_FINAL.as_bytes()),
        Err(ScramError::ChannelBindingMismatch)
    );
}

#[test]
fn malformed_and_oversized_messages_are_refused() {
    let huge = format!("n,,n=user,r={}", "a".repeat(SCRAM_MESSAGE_SIZE_BYTES_MAX));
    let cases: [&[u8]; 12] = [
        b"",
        b"n,,",
        b"n,,n=,r=abc",
        b"n,,n=user",
        b"n,,r=abc,n=user",
        b"n,,n=us=er,r=abc",
        b"n,,n=user,r=",
        b"n,,n=user,r=a b",
        b"n,,n=user,r=abc,x",
        b"n,b,n=user,r=abc",
        b"\xff,,n=user,r=abc",
        huge.as_bytes(),
    ];
    for message in cases {
        let mut server = ScramServer::new(Mechanism::ScramSha256, random_nonce(), KEY);
        let e = server.client_first(message, |_| None).unwrap_err();
        assert!(
            matches!(e, ScramError::Malformed(_) | ScramError::TooLarge { .. }),
            "{:?}: {e:?}",
            String::from_utf8_lossy(message)
        );
    }
    let long_name = format!("n,,n={},r=abc", "u".repeat(USERNAME_SIZE_BYTES_MAX + 1));
    assert!(matches!(
        ClientFirst::parse(long_name.as_bytes()),
        Err(ScramError::Malformed(_))
    ));
}

#[test]
fn messages_out_of_order_are_refused() {
    let mut server = ScramServer::new(Mechanism::ScramSha256, random_nonce(), KEY);
    assert_eq!(
        server.client_final(RFC_CLIENT_FINAL.as_bytes()),
        Err(ScramError::OutOfOrder)
    );
    let users = [("user", rfc_credential())];
    let mut server = ScramServer::new(Mechanism::ScramSha256, random_nonce(), KEY);
    server
        .client_first(RFC_CLIENT_FIRST.as_bytes(), store(&users))
        .unwrap();
    assert_eq!(
        server.client_first(RFC_CLIENT_FIRST.as_bytes(), store(&users)),
        Err(ScramError::OutOfOrder)
    );
    let mut client = ScramClient::new(Mechanism::ScramSha256, "u", b"p", "n".to_string());
    assert_eq!(client.server_final(b"v=AA=="), Err(ScramError::OutOfOrder));
}

#[test]
fn usernames_with_commas_and_equals_signs_round_trip() {
    let name = "a,b=c";
    assert_eq!(encode_saslname(name), "a=2Cb=3Dc");
    let c = Credential::generate(Mechanism::ScramSha256, b"pw", ITERATIONS_MIN).unwrap();
    let users = [(name, c)];
    assert_eq!(
        exchange(Mechanism::ScramSha256, &users, name, b"pw").unwrap(),
        name
    );
}

#[test]
fn a_server_error_reaches_the_client() {
    let mut client = ScramClient::new(Mechanism::ScramSha256, "u", b"p", "n".to_string());
    client.client_first().unwrap();
    assert_eq!(
        client.server_first(b"e=other-error"),
        Err(ScramError::ServerError("other-error".into()))
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]

    #[test]
    fn any_user_and_password_authenticate_and_a_changed_password_does_not(
        name in "[^\u{0}]{1,40}",
        password in proptest::collection::vec(any::<u8>(), 0..64),
        sha512 in any::<bool>(),
    ) {
        let m = if sha512 { Mechanism::ScramSha512 } else { Mechanism::ScramSha256 };
        let c = Credential::generate(m, &password, ITERATIONS_MIN).unwrap();
        let users = [(name.as_str(), c)];
        prop_assert_eq!(exchange(m, &users, &name, &password).unwrap(), name.clone());
        let mut other = password.clone();
        other.push(1);
        prop_assert_eq!(exchange(m, &users, &name, &other), Err(ScramError::InvalidProof));
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn any_change_to_a_client_final_message_fails(at in 0usize..200, byte in any::<u8>()) {
        let message = RFC_CLIENT_FINAL.as_bytes();
        let at = at % message.len();
        prop_assume!(message[at] != byte);
        let mut changed = message.to_vec();
        changed[at] = byte;
        let users = [("user", rfc_credential())];
        let mut server = ScramServer::new(
            Mechanism::ScramSha256,
            RFC_SERVER_NONCE.to_string(),
            KEY,
        );
        server.client_first(RFC_CLIENT_FIRST.as_bytes(), store(&users)).unwrap();
        prop_assert!(server.client_final(&changed).is_err());
    }

    #[test]
    fn no_input_makes_a_decoder_or_a_state_machine_panic(
        a in proptest::collection::vec(any::<u8>(), 0..300),
        b in proptest::collection::vec(any::<u8>(), 0..300),
        text_a in "[a-z=,]{0,40}",
    ) {
        for input in [&a[..], text_a.as_bytes()] {
            let _ = ClientFirst::parse(input);
            let _ = ServerFirst::parse(input);
            let _ = ClientFinal::parse(input);
            let mut server = ScramServer::new(Mechanism::ScramSha256, random_nonce(), KEY);
            if server.client_first(input, |_| Some(rfc_credential())).is_ok() {
                let _ = server.client_final(&b);
            }
            let mut client = ScramClient::new(Mechanism::ScramSha256, "u", b"p", "n".into());
            client.client_first().unwrap();
            let _ = client.server_first(input);
        }
    }
}

/// What a client sends in AlterUserScramCredentials (the salted password) gives the broker the
/// credential the password gives (RFC 7677's vector), and a wrong size or iteration count is
/// refused.
#[test]
fn a_salted_password_gives_the_passwords_credential_and_is_checked() {
    let salt = BASE64.decode(RFC_SALT_B64).unwrap();
    let m = Mechanism::ScramSha256;
    let salted = m.salted_password(b"pencil", &salt, 4096);
    let from_salted = Credential::from_salted_password(m, &salted, &salt, 4096).unwrap();
    assert!(from_salted == rfc_credential());
    let e = Credential::from_salted_password(m, &salted, &salt, 4095).unwrap_err();
    assert_eq!(e, ScramError::IterationsOutOfRange { iterations: 4095 });
    assert!(Credential::from_salted_password(m, &salted[1..], &salt, 4096).is_err());
    assert!(Credential::from_salted_password(m, &salted, &[], 4096).is_err());
    for &m in Mechanism::ALL {
        assert_eq!(Mechanism::from_wire_type(m.wire_type()), Some(m));
    }
    assert_eq!(Mechanism::from_wire_type(0), None);
}
