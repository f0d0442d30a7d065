//! The client side of SASL/SCRAM for this broker's own connections to other brokers (the
//! follower fetches of `replicate.rs`), sans-IO: the request frames and what their answers
//! mean. The exchange is the SDK's (`client/src/sasl.rs`): SaslHandshake, then client-first and
//! client-final in two SaslAuthenticate requests, and the leader's server-final is verified
//! (it proves it holds the credential).

use borges_protocol::frame::Frame;
use borges_protocol::message::{self, MessageHead};
use borges_protocol::scram::Mechanism;
use borges_protocol::scram::ScramError;
use borges_protocol::{wire as m, ApiKey, ErrorCode};
use bytes::BytesMut;
use flatbuffers::FlatBufferBuilder;

/// Why an inter-broker authentication failed.
#[derive(Debug, thiserror::Error)]
pub enum InterBrokerAuthError {
    /// The other broker refused a step.
    #[error("{step} refused ({code}): {message}")]
    Refused {
        /// SaslHandshake or SaslAuthenticate.
        step: ApiKey,
        /// Its error code.
        code: ErrorCode,
        /// Its error message.
        message: String,
    },
    /// Its answer was not a SASL response.
    #[error("undecodable {step} answer: {message}")]
    Malformed {
        /// SaslHandshake or SaslAuthenticate.
        step: ApiKey,
        /// What was wrong.
        message: String,
    },
    /// The SCRAM exchange failed on this side (a bad server-first or server proof).
    #[error("SCRAM: {0}")]
    Scram(#[from] ScramError),
}

/// A SaslHandshake request frame for `mechanism`.
pub fn handshake_request(mechanism: Mechanism, correlation_id: u32) -> BytesMut {
    let mut fbb = FlatBufferBuilder::with_capacity(128);
    let name = fbb.create_string(mechanism.name());
    let root = m::SaslHandshakeRequest::create(
        &mut fbb,
        &m::SaslHandshakeRequestArgs {
            mechanism: Some(name),
        },
    );
    fbb.finish(root, None);
    frame(ApiKey::SaslHandshake, &fbb, correlation_id)
}

/// A SaslAuthenticate request frame carrying `auth_bytes` (at most a SCRAM message).
pub fn authenticate_request(auth_bytes: &[u8], correlation_id: u32) -> BytesMut {
    let mut fbb = FlatBufferBuilder::with_capacity(auth_bytes.len() + 128);
    let bytes = fbb.create_vector(auth_bytes);
    let root = m::SaslAuthenticateRequest::create(
        &mut fbb,
        &m::SaslAuthenticateRequestArgs {
            auth_bytes: Some(bytes),
        },
    );
    fbb.finish(root, None);
    frame(ApiKey::SaslAuthenticate, &fbb, correlation_id)
}

fn frame(api: ApiKey, fbb: &FlatBufferBuilder<'_>, correlation_id: u32) -> BytesMut {
    let head = MessageHead::request(api, 0, correlation_id);
    match message::encode_message(head, fbb, &[]) {
        Ok(frame) => frame,
        Err(e) => unreachable!("a SASL request is at most a few kilobytes: {e}"),
    }
}

/// An ErrorResponse (an unsupported version, say) as a refusal of `step`.
fn error_response(step: ApiKey, frame: &Frame) -> InterBrokerAuthError {
    match message::decode_error_response(&frame.message) {
        Ok((code, text)) => InterBrokerAuthError::Refused {
            step,
            code,
            message: text.unwrap_or("").to_string(),
        },
        Err(e) => InterBrokerAuthError::Malformed {
            step,
            message: e.to_string(),
        },
    }
}

fn refused(step: ApiKey, code: u16, message: Option<&str>) -> InterBrokerAuthError {
    InterBrokerAuthError::Refused {
        step,
        code: ErrorCode::from_u16(code),
        message: message.unwrap_or("").to_string(),
    }
}

/// Checks the SaslHandshake answer.
pub fn handshake_answer(frame: &Frame) -> Result<(), InterBrokerAuthError> {
    let step = ApiKey::SaslHandshake;
    if frame.header.is_error() {
        return Err(error_response(step, frame));
    }
    let r = message::decode_message::<m::SaslHandshakeResponse>(&frame.message).map_err(|e| {
        InterBrokerAuthError::Malformed {
            step,
            message: e.to_string(),
        }
    })?;
    if r.error_code() != 0 {
        return Err(refused(step, r.error_code(), r.error_message()));
    }
    Ok(())
}

/// The mechanism's message in a SaslAuthenticate answer.
pub fn authenticate_answer(frame: &Frame) -> Result<Vec<u8>, InterBrokerAuthError> {
    let step = ApiKey::SaslAuthenticate;
    if frame.header.is_error() {
        return Err(error_response(step, frame));
    }
    let r =
        message::decode_message::<m::SaslAuthenticateResponse>(&frame.message).map_err(|e| {
            InterBrokerAuthError::Malformed {
                step,
                message: e.to_string(),
            }
        })?;
    if r.error_code() != 0 {
        return Err(refused(step, r.error_code(), r.error_message()));
    }
    r.auth_bytes()
        .map(|b| b.bytes().to_vec())
        .ok_or_else(|| InterBrokerAuthError::Malformed {
            step,
            message: "no auth_bytes".into(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use borges_protocol::frame::FrameDecoder;

    fn decode(bytes: &[u8]) -> Frame {
        let mut buf = BytesMut::from(bytes);
        match FrameDecoder::new(1 << 20).decode(&mut buf) {
            Ok(Some(frame)) => frame,
            other => panic!("not one frame: {other:?}"),
        }
    }

    #[test]
    fn the_brokers_answers_are_read_as_the_authenticator_writes_them() {
        let request = decode(&handshake_request(Mechanism::ScramSha256, 7));
        assert_eq!(request.header.api_key, ApiKey::SaslHandshake as u16);
        let accepted =
            super::super::handshake_response(&request.header, &[Mechanism::ScramSha256], None);
        handshake_answer(&decode(&accepted.head)).unwrap();
        // A leader without SASL answers IllegalSaslState: a typed refusal, not a panic.
        let refused = super::super::not_enabled(&request.header);
        match handshake_answer(&decode(&refused.head)) {
            Err(InterBrokerAuthError::Refused { code, step, .. }) => {
                assert_eq!(
                    (code, step),
                    (ErrorCode::IllegalSaslState, ApiKey::SaslHandshake)
                );
            }
            other => panic!("{other:?}"),
        }
        let request = decode(&authenticate_request(b"n,,n=broker,r=abc", 8));
        let answer = super::super::authenticate_response(&request.header, None, Some(b"r=abcd"));
        assert_eq!(
            authenticate_answer(&decode(&answer.head)).unwrap(),
            b"r=abcd"
        );
        let failure = crate::failure::Failure::new(ErrorCode::SaslAuthenticationFailed, "no");
        let answer = super::super::authenticate_response(&request.header, Some(&failure), None);
        assert!(matches!(
            authenticate_answer(&decode(&answer.head)),
            Err(InterBrokerAuthError::Refused {
                code: ErrorCode::SaslAuthenticationFailed,
                ..
            })
        ));
    }
}
