//! AlterUserScramCredentials and DescribeUserScramCredentials (docs/protocol.md 4.22). The
//! permission to call them (Alter or Describe on the cluster) was checked before dispatch
//! (`acl::check`); the shard decides where the credentials live (`shard/scram.rs`).

use std::rc::Rc;

use borges_protocol::frame::Frame;
use borges_protocol::scram::{ALTERATIONS_PER_REQUEST_MAX, DESCRIBED_USERS_PER_REQUEST_MAX};
use borges_protocol::{wire, ErrorCode};
use flatbuffers::FlatBufferBuilder;

use crate::failure::Failure;
use crate::sasl::users::{self, Alterations, Deletion, Described, Upsertion, UserResult};
use crate::shard::Shard;
use crate::wire as w;

fn too_many(what: &str, n: usize, max: usize) -> Failure {
    Failure::new(
        ErrorCode::LimitExceeded,
        format!("{n} {what} in one request; at most {max}"),
    )
}

fn bytes(v: Option<flatbuffers::Vector<'_, u8>>) -> Vec<u8> {
    v.map(|b| b.bytes().to_vec()).unwrap_or_default()
}

/// The request's alterations, owned.
fn decode_alterations(message: &[u8]) -> Result<Alterations, Failure> {
    let r = w::verify::<wire::AlterUserScramCredentialsRequest>(message)?;
    let count = r.deletions().map_or(0, |d| d.len()) + r.upsertions().map_or(0, |u| u.len());
    if count > ALTERATIONS_PER_REQUEST_MAX {
        return Err(too_many("alterations", count, ALTERATIONS_PER_REQUEST_MAX));
    }
    let deletions = r.deletions().into_iter().flatten();
    let upsertions = r.upsertions().into_iter().flatten();
    Ok(Alterations {
        deletions: deletions
            .map(|d| Deletion {
                name: d.name().to_string(),
                mechanism: d.mechanism(),
            })
            .collect(),
        upsertions: upsertions
            .map(|u| Upsertion {
                name: u.name().to_string(),
                mechanism: u.mechanism(),
                iterations: u.iterations(),
                salt: bytes(u.salt()),
                salted_password: bytes(u.salted_password()),
            })
            .collect(),
    })
}

/// Serves AlterUserScramCredentials.
pub async fn alter(shard: Rc<Shard>, frame: Frame) -> Option<w::Response> {
    let header = frame.header;
    let outcome = match decode_alterations(&frame.message) {
        Ok(alterations) => shard.alter_scram_credentials(alterations).await,
        Err(f) => Err(f),
    };
    let (failure, results) = match outcome {
        Ok(results) => (None, results),
        Err(f) => (Some(f), Vec::new()),
    };
    Some(w::response(
        &header,
        &alter_response(failure.as_ref(), &results),
        Vec::new(),
    ))
}

fn alter_response(failure: Option<&Failure>, results: &[UserResult]) -> Vec<u8> {
    let mut fbb = FlatBufferBuilder::with_capacity(256 + 64 * results.len());
    let results: Vec<_> = results
        .iter()
        .map(|(name, r)| {
            let f = r.as_ref().err();
            let user = fbb.create_string(name);
            let error_message = w::message(&mut fbb, f);
            wire::AlterUserScramCredentialsResult::create(
                &mut fbb,
                &wire::AlterUserScramCredentialsResultArgs {
                    user: Some(user),
                    error_code: w::code(f),
                    error_message,
                },
            )
        })
        .collect();
    let results = fbb.create_vector(&results);
    let error_message = w::message(&mut fbb, failure);
    let root = wire::AlterUserScramCredentialsResponse::create(
        &mut fbb,
        &wire::AlterUserScramCredentialsResponseArgs {
            error_code: w::code(failure),
            error_message,
            results: Some(results),
        },
    );
    fbb.finish(root, None);
    fbb.finished_data().to_vec()
}

fn decode_names(message: &[u8]) -> Result<Vec<String>, Failure> {
    let r = w::verify::<wire::DescribeUserScramCredentialsRequest>(message)?;
    let names: Vec<String> = r.users().into_iter().flatten().map(String::from).collect();
    if names.len() > DESCRIBED_USERS_PER_REQUEST_MAX {
        return Err(too_many(
            "users",
            names.len(),
            DESCRIBED_USERS_PER_REQUEST_MAX,
        ));
    }
    Ok(names)
}

/// Serves DescribeUserScramCredentials: mechanisms and iterations, never a secret.
pub async fn describe(shard: Rc<Shard>, frame: Frame) -> Option<w::Response> {
    let header = frame.header;
    let described = match decode_names(&frame.message) {
        Ok(names) => shard
            .scram_credentials()
            .await
            .map(|current| users::describe(&current, &names)),
        Err(f) => Err(f),
    };
    let (failure, results) = match described {
        Ok(results) => (None, results),
        Err(f) => (Some(f), Vec::new()),
    };
    Some(w::response(
        &header,
        &describe_response(failure.as_ref(), &results),
        Vec::new(),
    ))
}

fn describe_response(failure: Option<&Failure>, results: &[Described]) -> Vec<u8> {
    let mut fbb = FlatBufferBuilder::with_capacity(256 + 64 * results.len());
    let results: Vec<_> = results
        .iter()
        .map(|(name, r)| {
            let (f, found) = match r {
                Ok(found) => (None, found.as_slice()),
                Err(f) => (Some(f), &[][..]),
            };
            let infos: Vec<_> = found
                .iter()
                .map(|(m, iterations)| {
                    let args = wire::ScramCredentialInfoArgs {
                        mechanism: m.wire_type(),
                        iterations: i32::try_from(*iterations).unwrap_or(i32::MAX),
                    };
                    wire::ScramCredentialInfo::create(&mut fbb, &args)
                })
                .collect();
            let credential_infos = Some(fbb.create_vector(&infos));
            let user = Some(fbb.create_string(name));
            let error_message = w::message(&mut fbb, f);
            let args = wire::DescribeUserScramCredentialsResultArgs {
                user,
                error_code: w::code(f),
                error_message,
                credential_infos,
            };
            wire::DescribeUserScramCredentialsResult::create(&mut fbb, &args)
        })
        .collect();
    let results = fbb.create_vector(&results);
    let error_message = w::message(&mut fbb, failure);
    let root = wire::DescribeUserScramCredentialsResponse::create(
        &mut fbb,
        &wire::DescribeUserScramCredentialsResponseArgs {
            error_code: w::code(failure),
            error_message,
            results: Some(results),
        },
    );
    fbb.finish(root, None);
    fbb.finished_data().to_vec()
}
