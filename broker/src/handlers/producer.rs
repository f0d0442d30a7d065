//! InitProducerId: a producer id and epoch for an idempotent producer, from the controller
//! core (locally or by message).

use std::rc::Rc;

use borges_protocol::frame::{Frame, FrameHeader};
use borges_protocol::{wire, ErrorCode};
use borges_replication::controller::producer_ids::ProducerIdAndEpoch;
use borges_replication::controller::ControllerRequest;
use flatbuffers::FlatBufferBuilder;

use crate::failure::Failure;
use crate::shard::Shard;
use crate::wire as w;

/// Serves InitProducerId.
pub async fn init_producer_id(shard: Rc<Shard>, frame: Frame) -> Option<w::Response> {
    let header = frame.header;
    let checked = w::verify::<wire::InitProducerIdRequest>(&frame.message).and_then(|req| {
        if req.transactional_id().is_some() {
            return Err(Failure::new(
                ErrorCode::InvalidRequest,
                "transactional_id: transactions are not supported yet",
            ));
        }
        Ok(())
    });
    let result = match checked {
        Ok(()) => allocate(&shard).await,
        Err(f) => Err(f),
    };
    Some(response(&header, result))
}

async fn allocate(shard: &Rc<Shard>) -> Result<ProducerIdAndEpoch, Failure> {
    let mut results = shard
        .controller(|reply| ControllerRequest::InitProducerId { reply })
        .await?;
    results.pop().unwrap_or_else(|| {
        Err(Failure::new(
            ErrorCode::UnknownServerError,
            "the controller gave no producer id",
        ))
    })
}

fn response(header: &FrameHeader, result: Result<ProducerIdAndEpoch, Failure>) -> w::Response {
    let mut fbb = FlatBufferBuilder::with_capacity(128);
    let failure = result.as_ref().err();
    let message = w::message(&mut fbb, failure);
    let id = result.as_ref().ok();
    let root = wire::InitProducerIdResponse::create(
        &mut fbb,
        &wire::InitProducerIdResponseArgs {
            error_code: w::code(failure),
            error_message: message,
            throttle_time_ms: 0,
            producer_id: id.map_or(-1, |i| i.producer_id),
            producer_epoch: id.map_or(-1, |i| i.producer_epoch),
        },
    );
    fbb.finish(root, None);
    w::response(header, fbb.finished_data(), Vec::new())
}
