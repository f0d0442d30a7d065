//! CreateAcls, DescribeAcls, DeleteAcls (docs/protocol.md 4.21). The permission to call them
//! (Alter or Describe on the cluster) was checked before dispatch (`acl::check`); changes go
//! to core 0 (`Shard::change_acls`), descriptions read this core's copy.

use std::rc::Rc;

use borges_protocol::acl::{self, Acl, CREATIONS_PER_REQUEST_MAX, FILTERS_PER_REQUEST_MAX};
use borges_protocol::frame::Frame;
use borges_protocol::{wire, ErrorCode};
use flatbuffers::{FlatBufferBuilder, WIPOffset};

use crate::acl::store::{AclChange, AclChanged};
use crate::failure::Failure;
use crate::shard::Shard;
use crate::wire as w;

fn invalid(e: acl::AclError) -> Failure {
    Failure::new(ErrorCode::InvalidRequest, e.to_string())
}

fn too_many(what: &str, n: usize, max: usize) -> Failure {
    Failure::new(
        ErrorCode::LimitExceeded,
        format!("{n} {what} in one request; at most {max}"),
    )
}

fn bindings<'b>(
    fbb: &mut FlatBufferBuilder<'b>,
    acls: &[Acl],
) -> WIPOffset<flatbuffers::Vector<'b, flatbuffers::ForwardsUOffset<wire::AclBinding<'b>>>> {
    let items: Vec<_> = acls.iter().map(|a| acl::encode_acl(fbb, a)).collect();
    fbb.create_vector(&items)
}

/// Serves CreateAcls.
pub async fn create(shard: Rc<Shard>, frame: Frame) -> Option<w::Response> {
    let header = frame.header;
    let decoded = w::verify::<wire::CreateAclsRequest>(&frame.message).and_then(|r| {
        let items: Vec<_> = r.creations().iter().flatten().collect();
        if items.len() > CREATIONS_PER_REQUEST_MAX {
            return Err(too_many("ACLs", items.len(), CREATIONS_PER_REQUEST_MAX));
        }
        Ok(items
            .iter()
            .map(|b| acl::decode_acl(b).map_err(invalid))
            .collect::<Vec<_>>())
    });
    let outcome = match decoded {
        Ok(items) => shard.change_acls(AclChange::Create(items)).await,
        Err(f) => Err(f),
    };
    let mut fbb = FlatBufferBuilder::with_capacity(256);
    let (failure, results) = match outcome {
        Ok(AclChanged::Created(results)) => (None, results),
        Ok(AclChanged::Deleted(_)) => (Some(unexpected()), Vec::new()),
        Err(f) => (Some(f), Vec::new()),
    };
    let results: Vec<_> = results
        .iter()
        .map(|r| {
            let f = r.as_ref().err();
            let error_message = w::message(&mut fbb, f);
            wire::AclCreationResult::create(
                &mut fbb,
                &wire::AclCreationResultArgs {
                    error_code: w::code(f),
                    error_message,
                },
            )
        })
        .collect();
    let results = fbb.create_vector(&results);
    let error_message = w::message(&mut fbb, failure.as_ref());
    let root = wire::CreateAclsResponse::create(
        &mut fbb,
        &wire::CreateAclsResponseArgs {
            error_code: w::code(failure.as_ref()),
            error_message,
            results: Some(results),
        },
    );
    fbb.finish(root, None);
    Some(w::response(&header, fbb.finished_data(), Vec::new()))
}

fn unexpected() -> Failure {
    Failure::new(
        ErrorCode::UnknownServerError,
        "the ACL change answered another change",
    )
}

/// Serves DescribeAcls from this core's copy of the ACLs.
pub async fn describe(shard: Rc<Shard>, frame: Frame) -> Option<w::Response> {
    let header = frame.header;
    let filter = w::verify::<wire::DescribeAclsRequest>(&frame.message).and_then(|r| {
        r.filter()
            .map(|f| acl::decode_filter(&f).map_err(invalid))
            .transpose()
    });
    let authorizer = shard.authorizer();
    let (failure, listed) = match filter {
        Ok(filter) => {
            let filter = filter.unwrap_or_default();
            let listed: Vec<Acl> = authorizer
                .acls()
                .iter()
                .filter(|a| filter.matches(a))
                .cloned()
                .collect();
            (None, listed)
        }
        Err(f) => (Some(f), Vec::new()),
    };
    let mut fbb = FlatBufferBuilder::with_capacity(256 + 128 * listed.len());
    let acls = bindings(&mut fbb, &listed);
    let error_message = w::message(&mut fbb, failure.as_ref());
    let root = wire::DescribeAclsResponse::create(
        &mut fbb,
        &wire::DescribeAclsResponseArgs {
            error_code: w::code(failure.as_ref()),
            error_message,
            acls: Some(acls),
        },
    );
    fbb.finish(root, None);
    Some(w::response(&header, fbb.finished_data(), Vec::new()))
}

/// Serves DeleteAcls.
pub async fn delete(shard: Rc<Shard>, frame: Frame) -> Option<w::Response> {
    let header = frame.header;
    let decoded = w::verify::<wire::DeleteAclsRequest>(&frame.message).and_then(|r| {
        let items: Vec<_> = r.filters().iter().flatten().collect();
        if items.len() > FILTERS_PER_REQUEST_MAX {
            return Err(too_many("filters", items.len(), FILTERS_PER_REQUEST_MAX));
        }
        Ok(items
            .iter()
            .map(|f| acl::decode_filter(f).map_err(invalid))
            .collect::<Vec<_>>())
    });
    let outcome = match decoded {
        Ok(items) => shard.change_acls(AclChange::Delete(items)).await,
        Err(f) => Err(f),
    };
    let (failure, results) = match outcome {
        Ok(AclChanged::Deleted(results)) => (None, results),
        Ok(AclChanged::Created(_)) => (Some(unexpected()), Vec::new()),
        Err(f) => (Some(f), Vec::new()),
    };
    let mut fbb = FlatBufferBuilder::with_capacity(256);
    let results: Vec<_> = results
        .iter()
        .map(|r| {
            let (f, removed) = match r {
                Ok(removed) => (None, removed.as_slice()),
                Err(f) => (Some(f), &[][..]),
            };
            let matching_acls = bindings(&mut fbb, removed);
            let error_message = w::message(&mut fbb, f);
            wire::DeleteAclsFilterResult::create(
                &mut fbb,
                &wire::DeleteAclsFilterResultArgs {
                    error_code: w::code(f),
                    error_message,
                    matching_acls: Some(matching_acls),
                },
            )
        })
        .collect();
    let filter_results = fbb.create_vector(&results);
    let error_message = w::message(&mut fbb, failure.as_ref());
    let root = wire::DeleteAclsResponse::create(
        &mut fbb,
        &wire::DeleteAclsResponseArgs {
            error_code: w::code(failure.as_ref()),
            error_message,
            filter_results: Some(filter_results),
        },
    );
    fbb.finish(root, None);
    Some(w::response(&header, fbb.finished_data(), Vec::new()))
}
