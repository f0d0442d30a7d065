//! Routes requests to their handlers, on the connection's core.

use borges_protocol::frame::{Frame, FrameHeader};
use borges_protocol::{ApiKey, ErrorCode};
use borges_runtime::task::{self, Task};
use std::rc::Rc;

use crate::failure::Failure;
use crate::handlers;
use crate::request_memory::MemoryPermit;
use crate::shard::Shard;
use crate::wire::{self, Response};

/// A request being completed; resolves to the response to write (none for acks=0 produces).
pub type ResponseTask = Task<Option<Response>>;

/// Dispatches one request. Runs the ordered phase now and returns the completion task. The
/// frame's memory permit is released when the task finishes.
pub async fn request(
    shard: &Rc<Shard>,
    frame: Frame,
    permit: MemoryPermit,
    peer: &Rc<str>,
) -> ResponseTask {
    let header = frame.header;
    let started = borges_runtime::time::Instant::now();
    let api = match served_api(&header) {
        Ok(api) => api,
        Err(failure) => {
            shard.metrics().count_request(header.api_key, true);
            let response = wire::error_response(&header, &failure);
            return task::spawn(async move {
                drop(permit);
                Some(response)
            });
        }
    };
    shard.metrics().count_request(header.api_key, false);
    let pending = handlers::handle(shard, api, frame, peer).await;
    let shard = shard.clone();
    task::spawn(async move {
        let response = pending.await;
        drop(permit);
        shard.metrics().record_latency(api, started.elapsed());
        response
    })
}

/// The API of a request this broker serves, or why it is refused.
fn served_api(header: &FrameHeader) -> Result<ApiKey, Failure> {
    let Some(api) = ApiKey::from_u16(header.api_key) else {
        return Err(Failure::new(
            ErrorCode::UnsupportedApi,
            format!("unknown API key {}", header.api_key),
        ));
    };
    if !handlers::served(api) {
        return Err(Failure::new(
            ErrorCode::UnsupportedApi,
            format!("{api} is not served by this broker yet"),
        ));
    }
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
    if header.is_response() {
        return Err(Failure::new(
            ErrorCode::InvalidRequest,
            "a client sent a frame flagged as a response",
        ));
    }
    Ok(api)
}
