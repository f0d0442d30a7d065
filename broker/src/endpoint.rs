//! The HTTP endpoint on `metrics_listen` (served by core 0): `/metrics` (Prometheus text, or
//! OpenMetrics when the scraper asks for it), `/healthz` (liveness: 503 when a log directory
//! failed or a core does not answer) and `/readyz` (readiness: 503 while starting, shutting
//! down, with a read-only or failed log directory, or without a known controller). Requests
//! are parsed with `httparse`; one request per connection, at most
//! [`METRICS_CONNECTIONS_MAX`] connections at once (their descriptors are reserved in the
//! descriptor plan); more are closed at once.

use std::cell::Cell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;

use borges_runtime::net::{TcpListener, TcpStream};
use borges_runtime::{task, time};

use crate::descriptors::METRICS_CONNECTIONS_MAX;
use crate::error::BrokerError;
use crate::lifecycle::CoreHealth;
use crate::metrics::MetricsOptions;
use crate::shard::Shard;

/// Request heads larger than this are answered 431.
const REQUEST_HEAD_BYTES_MAX: usize = 8192;
/// Headers parsed at most.
const REQUEST_HEADERS_MAX: usize = 32;
/// A request head must arrive within this long.
const REQUEST_READ_TIMEOUT_MS: u64 = 5000;

/// Binds `metrics_listen` (unless empty) and serves it on this core until shutdown.
pub fn start(shard: &Rc<Shard>) -> Result<Option<SocketAddr>, BrokerError> {
    if shard.config().metrics_listen.is_empty() {
        return Ok(None);
    }
    let addr = crate::config::resolve_address(&shard.config().metrics_listen)
        .map_err(|e| BrokerError::Config(format!("metrics_listen: {e}")))?;
    let listener = TcpListener::bind_exclusive(addr).map_err(|source| BrokerError::Io {
        context: format!("binding metrics_listen {addr}"),
        cause: source,
    })?;
    let bound = listener.local_addr().map_err(|source| BrokerError::Io {
        context: format!("reading the address of {addr}"),
        cause: source,
    })?;
    task::spawn(accept_loop(shard.clone(), listener)).detach();
    Ok(Some(bound))
}

async fn accept_loop(shard: Rc<Shard>, listener: TcpListener) {
    let lifecycle = shard.lifecycle().clone();
    let open = Rc::new(Cell::new(0u64));
    loop {
        let seen = lifecycle.shutdown().generation();
        if lifecycle.is_shutting_down() {
            return;
        }
        let accepted = futures_lite::future::or(async { Some(listener.accept().await) }, async {
            lifecycle.shutdown().changed_since(seen).await;
            None
        })
        .await;
        match accepted {
            None => return,
            // Over the limit the connection is closed at once (dropped).
            Some(Ok(_)) if open.get() >= METRICS_CONNECTIONS_MAX => {}
            Some(Ok(stream)) => {
                open.set(open.get() + 1);
                let (shard, open) = (shard.clone(), open.clone());
                task::spawn(async move {
                    serve(shard, stream).await;
                    open.set(open.get() - 1);
                })
                .detach();
            }
            Some(Err(e)) => {
                tracing::debug!("metrics endpoint: accept failed: {e}");
                time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

/// A parsed request: what the endpoint needs of it.
#[derive(Debug, PartialEq, Eq)]
struct Request {
    head_only: bool,
    path: String,
    openmetrics: bool,
}

/// Why a request head was not answered normally.
#[derive(Debug, PartialEq, Eq)]
enum Refusal {
    /// Not HTTP/1.x.
    Malformed(String),
    /// A method other than GET and HEAD.
    Method(String),
    /// The head is larger than [`REQUEST_HEAD_BYTES_MAX`].
    TooLarge,
}

/// Parses a request head; `Ok(None)` while it is incomplete.
fn parse(bytes: &[u8]) -> Result<Option<Request>, Refusal> {
    let mut headers = [httparse::EMPTY_HEADER; REQUEST_HEADERS_MAX];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(bytes) {
        Ok(httparse::Status::Partial) if bytes.len() >= REQUEST_HEAD_BYTES_MAX => {
            Err(Refusal::TooLarge)
        }
        Ok(httparse::Status::Partial) => Ok(None),
        Err(e) => Err(Refusal::Malformed(e.to_string())),
        Ok(httparse::Status::Complete(_)) => {
            let method = req.method.unwrap_or("");
            if method != "GET" && method != "HEAD" {
                return Err(Refusal::Method(method.to_string()));
            }
            let target = req.path.unwrap_or("/");
            let path = target.split('?').next().unwrap_or("/").to_string();
            let openmetrics = req.headers.iter().any(|h| {
                h.name.eq_ignore_ascii_case("accept")
                    && String::from_utf8_lossy(h.value).contains("application/openmetrics-text")
            });
            Ok(Some(Request {
                head_only: method == "HEAD",
                path,
                openmetrics,
            }))
        }
    }
}

async fn read_request(stream: &mut TcpStream) -> Option<Result<Request, Refusal>> {
    let mut buf = vec![0u8; REQUEST_HEAD_BYTES_MAX];
    let mut len = 0;
    let deadline = Duration::from_millis(REQUEST_READ_TIMEOUT_MS);
    loop {
        match parse(&buf[..len]) {
            Ok(None) => {}
            done => return done.transpose(),
        }
        match time::timeout(deadline, stream.read(&mut buf[len..])).await {
            Some(Ok(n)) if n > 0 => len += n,
            _ => return None,
        }
    }
}

async fn serve(shard: Rc<Shard>, mut stream: TcpStream) {
    let request = match read_request(&mut stream).await {
        None => return,
        Some(Ok(r)) => r,
        Some(Err(refusal)) => {
            let (status, body) = match refusal {
                Refusal::Malformed(e) => (400, format!("bad request: {e}\n")),
                Refusal::Method(m) => (405, format!("method {m} not allowed; use GET\n")),
                Refusal::TooLarge => (431, "request head too large\n".to_string()),
            };
            let _ = respond(&mut stream, status, "text/plain", &body, false).await;
            return;
        }
    };
    let (status, content_type, body) = match request.path.as_str() {
        "/metrics" => {
            let body = scrape(&shard, request.openmetrics).await;
            let content_type = if request.openmetrics {
                "application/openmetrics-text; version=1.0.0; charset=utf-8"
            } else {
                "text/plain; version=0.0.4; charset=utf-8"
            };
            (200, content_type, body)
        }
        "/healthz" => health_response(&liveness(&shard.gather_health().await, shard.cores())),
        "/readyz" => {
            let health = shard.gather_health().await;
            let mut problems = liveness(&health, shard.cores());
            let controller_known = shard.cluster_handle().map(|c| c.controller_id().is_some());
            problems.extend(readiness(&health, controller_known));
            health_response(&problems)
        }
        _ => (
            404,
            "text/plain",
            "not found; try /metrics, /healthz or /readyz\n".to_string(),
        ),
    };
    let _ = respond(&mut stream, status, content_type, &body, request.head_only).await;
}

fn health_response(problems: &[String]) -> (u16, &'static str, String) {
    if problems.is_empty() {
        return (200, "text/plain", "ok\n".to_string());
    }
    (503, "text/plain", format!("{}\n", problems.join("\n")))
}

/// What makes the broker unhealthy (a restart is needed): a failed log directory, a core
/// that does not answer.
fn liveness(health: &[CoreHealth], cores: usize) -> Vec<String> {
    let mut problems = Vec::new();
    // While starting, cores busy opening partitions may not answer in time: not a fault.
    let started = health.iter().any(|h| h.core == 0 && h.serving);
    if started && health.len() < cores {
        problems.push(format!("{} of {cores} cores answered", health.len()));
    }
    for h in health.iter().filter(|h| h.log_dir_state == "failed") {
        let why = h.log_dir_reason.as_deref().unwrap_or("");
        problems.push(format!("core {}: log directory failed: {why}", h.core));
    }
    problems
}

/// What keeps the broker from taking traffic now (it may pass by itself); `controller_known`
/// is `None` on a single node.
fn readiness(health: &[CoreHealth], controller_known: Option<bool>) -> Vec<String> {
    let mut problems = Vec::new();
    for h in health {
        if h.shutting_down {
            problems.push(format!("core {}: shutting down", h.core));
        } else if !h.serving {
            problems.push(format!("core {}: starting", h.core));
        }
        if h.log_dir_state == "read_only" {
            let why = h.log_dir_reason.as_deref().unwrap_or("");
            problems.push(format!("core {}: log directory read-only: {why}", h.core));
        }
    }
    if controller_known == Some(false) {
        problems.push("no active controller known".to_string());
    }
    problems
}

async fn scrape(shard: &Rc<Shard>, openmetrics: bool) -> String {
    let snapshots = shard.gather_metrics().await;
    let mut figures = shard.broker_figures();
    let dirs = vec![shard.config().data_dir.clone()];
    figures.host = task::spawn_blocking(move || crate::metrics::read_host(&dirs)).await;
    let settings = &shard.config().metrics;
    let options = MetricsOptions {
        partition_series: settings.partition_series,
        series_per_family_max: settings.series_per_family_max as usize,
        openmetrics,
    };
    crate::metrics::render(&snapshots, &figures, options)
}

async fn respond(
    stream: &mut TcpStream,
    status: u16,
    content_type: &str,
    body: &str,
    head_only: bool,
) -> std::io::Result<()> {
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        431 => "Request Header Fields Too Large",
        _ => "Service Unavailable",
    };
    let allow = if status == 405 {
        "Allow: GET, HEAD\r\n"
    } else {
        ""
    };
    let head = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\
         {allow}Connection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    if !head_only {
        stream.write_all(body.as_bytes()).await?;
    }
    stream.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn core(core: usize, state: &'static str, serving: bool) -> CoreHealth {
        CoreHealth {
            core,
            log_dir_state: state,
            log_dir_reason: (state != "writable").then(|| "fdatasync failed: EIO".to_string()),
            serving,
            shutting_down: false,
        }
    }

    #[test]
    fn health_follows_the_log_directories_and_the_cores() {
        let fine = [core(0, "writable", true), core(1, "writable", true)];
        assert!(liveness(&fine, 2).is_empty() && readiness(&fine, None).is_empty());
        let failed = [core(0, "writable", true), core(1, "failed", true)];
        assert_eq!(
            liveness(&failed, 2),
            ["core 1: log directory failed: fdatasync failed: EIO"]
        );
        let full = [core(0, "read_only", true)];
        assert!(
            liveness(&full, 1).is_empty(),
            "a full disk needs no restart"
        );
        assert_eq!(readiness(&full, None).len(), 1);
        assert_eq!(liveness(&fine[..1], 2), ["1 of 2 cores answered"]);
        let starting = [core(0, "writable", false)];
        assert!(
            liveness(&starting, 2).is_empty(),
            "cores busy starting are not a fault"
        );
        assert_eq!(readiness(&starting, None), ["core 0: starting"]);
        assert_eq!(
            readiness(&fine, Some(false)),
            ["no active controller known"]
        );
        assert!(readiness(&fine, Some(true)).is_empty());
    }

    #[test]
    fn requests_are_parsed_whole_or_refused() {
        assert_eq!(parse(b"GET /metrics HTTP/1.1\r\nHost: x\r\n"), Ok(None));
        let r = parse(b"GET /metrics?x=1 HTTP/1.1\r\nAccept: application/openmetrics-text\r\n\r\n");
        assert_eq!(
            r,
            Ok(Some(Request {
                head_only: false,
                path: "/metrics".into(),
                openmetrics: true
            }))
        );
        let head = parse(b"HEAD /healthz HTTP/1.0\r\n\r\n").unwrap().unwrap();
        assert!(head.head_only && !head.openmetrics);
        assert!(matches!(
            parse(b"POST / HTTP/1.1\r\n\r\n"),
            Err(Refusal::Method(_))
        ));
        assert!(matches!(
            parse(b"\x16\x03\x01\x02\0\r\n\r\n"),
            Err(Refusal::Malformed(_))
        ));
        let long = format!("GET /{} HTTP/1.1\r\n", "a".repeat(REQUEST_HEAD_BYTES_MAX));
        assert_eq!(parse(long.as_bytes()), Err(Refusal::TooLarge));
    }
}
