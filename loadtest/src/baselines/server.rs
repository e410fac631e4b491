//! The baselines' HTTP server: a bare hyper HTTP/1.1 server (the crate's loopback `serve`, no
//! framework, no middleware) answering `POST` with the naive admission and anything else with
//! the captured poll answer, so both baselines pay exactly hyper's cost and their own.

use std::net::SocketAddr;
use std::sync::{Arc, RwLock};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{Value, json};
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use super::naive;
use super::polls::Captured;
use crate::bench_stack::BoxError;
use crate::servers::{respond, serve};

/// What the handlers share: the naive admission's pool, and the poll answer the pair being
/// measured captured.
pub(super) struct BaselineState {
    naive: PgPool,
    poll: RwLock<Option<Arc<Captured>>>,
}

impl BaselineState {
    /// Replays `captured` from now on (each poll pair captures its own answer).
    pub(super) fn set_poll(&self, captured: Captured) {
        *self.poll.write().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(captured));
    }
}

/// The server on an ephemeral loopback port, until `shutdown` is cancelled.
pub(super) struct BaselineServer {
    pub(super) addr: SocketAddr,
    pub(super) state: Arc<BaselineState>,
    pub(super) shutdown: CancellationToken,
}

impl BaselineServer {
    pub(super) async fn start(naive: PgPool) -> Result<Self, BoxError> {
        let state = Arc::new(BaselineState {
            naive,
            poll: RwLock::new(None),
        });
        let shutdown = CancellationToken::new();
        let shared = state.clone();
        let base = serve(shutdown.clone(), move |request: Request<Incoming>| {
            let state = shared.clone();
            async move { answer(&state, request).await }
        })
        .await?;
        Ok(Self {
            addr: base.trim_start_matches("http://").parse()?,
            state,
            shutdown,
        })
    }
}

/// `POST` is the naive admission, anything else the captured poll answer.
async fn answer(state: &BaselineState, request: Request<Incoming>) -> Response<Full<Bytes>> {
    if request.method() == Method::POST {
        return naive::answer(&state.naive, request).await;
    }
    let captured = state.poll.read().unwrap_or_else(|e| e.into_inner()).clone();
    match captured {
        Some(captured) => captured.replay(),
        None => json_response(
            StatusCode::NOT_FOUND,
            &json!({ "error": "nothing captured" }),
        ),
    }
}

/// `body` as a JSON answer of `status`.
pub(super) fn json_response(status: StatusCode, body: &Value) -> Response<Full<Bytes>> {
    respond(status, Bytes::from(body.to_string()))
}
