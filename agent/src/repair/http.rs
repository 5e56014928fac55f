//! HTTP front of the repair path: `POST /1/repair` and `GET /1/repair/<incident-id>`.
//!
//! - `POST /1/repair`, body = the signed envelope (JSON, at most `max_body_bytes`, checked from
//!   `Content-Length` and again while reading). 202 with the running [`RepairRecord`] when this
//!   request started the run or it is still running, 200 with the final record once it is over,
//!   or a 4xx/5xx [`RepairRefusal`] when nothing ran. Refusals caused by the request are answered
//!   after the invalid-request delay; the delay is a sleep in this request's own task, taken with
//!   no lock held, so it slows only the connection that sent the bad request. At most
//!   `max_delayed_refusals` refusals wait at once; beyond that a refusal is answered at once and
//!   its connection closed, so a flood cannot pile up sleeping connections.
//! - `GET /1/repair/<incident-id>`: the record (progress while running), 404 if unknown. Read-only
//!   and unauthenticated, like mond's reports: repair commands must not print secrets.
//!
//! [`RepairRecord`]: nodecare_protocol::repair::RepairRecord
//! [`RepairRefusal`]: nodecare_protocol::repair::RepairRefusal

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::body::Body;
use hyper::header::{CONNECTION, CONTENT_LENGTH, CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use nodecare_protocol::repair::{
    REPAIR_PATH, RefusalReason, RepairRefusal, RepairState, is_canonical_uuid,
};
use serde::Serialize;

use super::audit::AuditSource;
use super::{Origin, RepairAnswer, RepairService};

/// Whether `path` belongs to the repair endpoint (the agent's router sends these here).
pub fn is_repair_path(path: &str) -> bool {
    path == REPAIR_PATH
        || path
            .strip_prefix(REPAIR_PATH)
            .is_some_and(|rest| rest.starts_with('/'))
}

fn json_response<T: Serialize>(status: StatusCode, body: &T) -> Response<Full<Bytes>> {
    let bytes = serde_json::to_vec(body).unwrap_or_else(|_| b"{}".to_vec());
    let mut response = Response::new(Full::new(Bytes::from(bytes)));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

fn refusal_response(refusal: &RepairRefusal) -> Response<Full<Bytes>> {
    let status =
        StatusCode::from_u16(refusal.reason.http_status()).unwrap_or(StatusCode::BAD_REQUEST);
    json_response(status, refusal)
}

/// The HTTP form of an answer (without the delay).
pub fn answer_response(answer: &RepairAnswer) -> Response<Full<Bytes>> {
    match answer {
        RepairAnswer::Refused { refusal, .. } => refusal_response(refusal),
        RepairAnswer::Record { record, .. } => {
            let status = if record.state == RepairState::Running {
                StatusCode::ACCEPTED
            } else {
                StatusCode::OK
            };
            json_response(status, record)
        }
    }
}

fn simple_error(status: StatusCode, message: &str) -> Response<Full<Bytes>> {
    json_response(status, &serde_json::json!({ "error": message }))
}

enum BodyOutcome {
    Read(Bytes),
    TooLarge(String),
    Unreadable(String),
}

async fn read_body<B>(body: B, limit: usize, timeout: Duration) -> BodyOutcome
where
    B: Body<Data = Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    match tokio::time::timeout(timeout, Limited::new(body, limit).collect()).await {
        Ok(Ok(collected)) => BodyOutcome::Read(collected.to_bytes()),
        Ok(Err(error)) if error.downcast_ref::<LengthLimitError>().is_some() => {
            BodyOutcome::TooLarge(format!("body is larger than {limit} bytes"))
        }
        Ok(Err(error)) => BodyOutcome::Unreadable(format!("cannot read the body: {error}")),
        Err(_) => BodyOutcome::Unreadable(format!(
            "body not received within {} s",
            timeout.as_secs_f64()
        )),
    }
}

impl RepairService {
    /// Answers a request under [`is_repair_path`]. `peer` is recorded in the audit log.
    pub async fn handle_http<B>(
        self: &Arc<Self>,
        request: Request<B>,
        peer: SocketAddr,
    ) -> Response<Full<Bytes>>
    where
        B: Body<Data = Bytes>,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let path = request.uri().path().to_owned();
        if path == REPAIR_PATH {
            if request.method() != Method::POST {
                return simple_error(StatusCode::METHOD_NOT_ALLOWED, "use POST");
            }
            return self.handle_post(request, peer).await;
        }
        let Some(incident) = path
            .strip_prefix(REPAIR_PATH)
            .and_then(|rest| rest.strip_prefix('/'))
        else {
            return simple_error(StatusCode::NOT_FOUND, "no such endpoint");
        };
        if request.method() != Method::GET && request.method() != Method::HEAD {
            return simple_error(StatusCode::METHOD_NOT_ALLOWED, "use GET");
        }
        if !is_canonical_uuid(incident) {
            return simple_error(
                StatusCode::BAD_REQUEST,
                "incident id must be a lower-case hyphenated UUID",
            );
        }
        let service = Arc::clone(self);
        let incident = incident.to_owned();
        let found = tokio::task::spawn_blocking(move || service.record(&incident)).await;
        match found {
            Ok(Ok(Some(record))) => json_response(StatusCode::OK, &record),
            Ok(Ok(None)) => simple_error(StatusCode::NOT_FOUND, "no repair for this incident"),
            Ok(Err(error)) => simple_error(StatusCode::INTERNAL_SERVER_ERROR, &error.to_string()),
            Err(error) => simple_error(StatusCode::INTERNAL_SERVER_ERROR, &error.to_string()),
        }
    }

    async fn handle_post<B>(
        self: &Arc<Self>,
        request: Request<B>,
        peer: SocketAddr,
    ) -> Response<Full<Bytes>>
    where
        B: Body<Data = Bytes>,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let origin = Origin {
            source: AuditSource::Http,
            peer: peer.to_string(),
        };
        let limit = self.config().max_body_bytes;
        let declared = request
            .headers()
            .get(CONTENT_LENGTH)
            .and_then(|value| value.to_str().ok())
            .and_then(|text| text.parse::<u64>().ok());
        let outcome = match declared {
            Some(length) if length > limit as u64 => BodyOutcome::TooLarge(format!(
                "body of {length} bytes is larger than {limit} bytes"
            )),
            _ => read_body(request.into_body(), limit, self.config().body_timeout).await,
        };
        let answer = match outcome {
            // Its own task: a sender that hangs up must not cancel a request half-way (between
            // claiming the incident and recording the run).
            BodyOutcome::Read(body) => {
                let service = Arc::clone(self);
                let task_origin = origin.clone();
                match tokio::spawn(async move { service.submit(&task_origin, &body).await }).await {
                    Ok(answer) => answer,
                    Err(error) => {
                        self.count_refusal(RefusalReason::Internal);
                        RepairAnswer::Refused {
                            refusal: RepairRefusal::new(
                                RefusalReason::Internal,
                                format!("the request was not processed: {error}"),
                            ),
                            delay: false,
                        }
                    }
                }
            }
            BodyOutcome::TooLarge(message) => {
                self.refuse_unread(&origin, RefusalReason::BodyTooLarge, message)
                    .await
            }
            BodyOutcome::Unreadable(message) => {
                self.refuse_unread(&origin, RefusalReason::Malformed, message)
                    .await
            }
        };
        let mut response = answer_response(&answer);
        if let RepairAnswer::Refused { delay: true, .. } = answer {
            match Arc::clone(&self.delayed_refusals).try_acquire_owned() {
                Ok(_slot) => tokio::time::sleep(self.config().invalid_request_delay).await,
                Err(_) => {
                    response
                        .headers_mut()
                        .insert(CONNECTION, HeaderValue::from_static("close"));
                }
            }
        }
        response
    }

    async fn refuse_unread(
        &self,
        origin: &Origin,
        reason: RefusalReason,
        message: String,
    ) -> RepairAnswer {
        self.refuse(origin, &super::Claimed::default(), reason, message)
            .await
    }
}

/// Serves only the repair endpoint on `listener` until `shutdown` completes: for tests and the
/// flood benchmark. At most `max_connections` connections are served at once; more wait in the
/// kernel's accept queue.
pub async fn serve(
    listener: tokio::net::TcpListener,
    service: Arc<RepairService>,
    max_connections: usize,
    shutdown: impl std::future::Future<Output = ()>,
) {
    use hyper::server::conn::http1;
    use hyper_util::rt::{TokioIo, TokioTimer};

    let permits = Arc::new(tokio::sync::Semaphore::new(max_connections.max(1)));
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            () = &mut shutdown => return,
            permit = Arc::clone(&permits).acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => return,
            },
        };
        let (stream, peer) = tokio::select! {
            () = &mut shutdown => return,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let service = Arc::clone(&service);
        tokio::spawn(async move {
            let _permit = permit;
            let handler = hyper::service::service_fn(move |request| {
                let service = Arc::clone(&service);
                async move {
                    let response = if is_repair_path(request.uri().path()) {
                        service.handle_http(request, peer).await
                    } else {
                        simple_error(StatusCode::NOT_FOUND, "no such endpoint")
                    };
                    Ok::<_, std::convert::Infallible>(response)
                }
            });
            let connection = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(Duration::from_secs(10))
                .serve_connection(TokioIo::new(stream), handler);
            if let Err(error) = connection.await {
                tracing::debug!(%error, "repair connection ended with an error");
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repair_paths() {
        assert!(is_repair_path("/1/repair"));
        assert!(is_repair_path("/1/repair/abc"));
        assert!(!is_repair_path("/1/repairs"));
        assert!(!is_repair_path("/1/report/all"));
    }
}
