//! Routes requests to their handlers (on the connection's core) and executes messages from
//! other cores (on the owning core).

use std::rc::Rc;

use borges_protocol::frame::Frame;
use borges_protocol::{ApiKey, ErrorCode};
use borges_runtime::sync::StaticPermit;
use borges_runtime::task;

use crate::connection::ResponseTask;
use crate::core::Core;
use crate::failure::Failure;
use crate::handlers;
use crate::router::CoreMessage;
use crate::wire;

/// Dispatches one request. Runs the ordered phase now and returns the completion task. The
/// frame's memory permit is released when the task finishes.
pub async fn request(
    core: &Rc<Core>,
    frame: Frame,
    permit: StaticPermit,
    peer: &Rc<str>,
) -> ResponseTask {
    let header = frame.header;
    let started = borges_runtime::time::Instant::now();
    let api = ApiKey::from_u16(header.api_key);
    let refusal = match api {
        None => Some(Failure::new(
            ErrorCode::UnsupportedApi,
            format!("unknown API key {}", header.api_key),
        )),
        Some(api) if !handlers::served(api) => Some(Failure::new(
            ErrorCode::UnsupportedApi,
            format!("{api} is not served by this broker yet"),
        )),
        Some(api)
            if header.api_version < api.min_version() || header.api_version > api.max_version() =>
        {
            Some(Failure::new(
                ErrorCode::UnsupportedVersion,
                format!(
                    "{api} version {} is not supported; supported versions are {}..={}",
                    header.api_version,
                    api.min_version(),
                    api.max_version()
                ),
            ))
        }
        Some(_) if header.is_response() => Some(Failure::new(
            ErrorCode::InvalidRequest,
            "a client sent a frame flagged as a response",
        )),
        Some(_) => None,
    };
    if let Some(failure) = refusal {
        core.metrics.count_request(header.api_key, true);
        let response = wire::error_response(&header, &failure);
        return task::spawn(async move {
            drop(permit);
            Some(response)
        });
    }
    let api = api.unwrap_or(ApiKey::ApiVersions);
    core.metrics.count_request(header.api_key, false);
    let pending = handlers::handle(core, api, frame, peer).await;
    let core = core.clone();
    task::spawn(async move {
        let response = pending.await;
        drop(permit);
        core.metrics.record_latency(api, started.elapsed());
        response
    })
}

/// Executes a message from another core.
pub async fn execute(core: &Rc<Core>, msg: CoreMessage) {
    match msg {
        CoreMessage::Produce {
            items,
            acks,
            timeout_ms,
            reply,
        } => {
            let completion = core.partitions.append_all(items, acks, timeout_ms).await;
            task::spawn(async move {
                let _ = reply.send(completion.await);
            })
            .detach();
        }
        CoreMessage::Fetch { items, copy, reply } => {
            let core = core.clone();
            task::spawn(async move {
                let _ = reply.send(core.partitions.read_all(&items, copy).await);
            })
            .detach();
        }
        CoreMessage::WaitForData {
            items,
            deadline,
            reply,
        } => {
            let core = core.clone();
            task::spawn(async move {
                core.partitions.wait_for_data(&items, deadline).await;
                let _ = reply.send(());
            })
            .detach();
        }
        CoreMessage::ListOffsets { items, reply } => {
            let core = core.clone();
            task::spawn(async move {
                let _ = reply.send(core.partitions.list_offsets(&items).await);
            })
            .detach();
        }
        CoreMessage::Group { request, reply } => {
            let core = core.clone();
            task::spawn(async move {
                let _ = reply.send(crate::groups::coordinator::execute(&core, request).await);
            })
            .detach();
        }
        CoreMessage::Controller(request) => {
            let core = core.clone();
            task::spawn(async move { crate::controller::execute(&core, request).await }).detach();
        }
        CoreMessage::ApplyMetadata { image, reply } => {
            let result = core.apply_metadata(image).await;
            let _ = reply.send(result);
        }
        CoreMessage::Bind { reply } => {
            let _ = reply.send(crate::server::bind(core));
        }
        CoreMessage::Serve { endpoints, reply } => {
            crate::server::serve(core, endpoints);
            let _ = reply.send(());
        }
        CoreMessage::Metrics { reply } => {
            let _ = reply.send(core.snapshot());
        }
        CoreMessage::Shutdown { reply } => {
            let result = crate::server::shutdown_core(core).await;
            let _ = reply.send(result);
        }
    }
}
