//! The baselines' HTTP server: a bare hyper HTTP/1.1 server (the crate's loopback `serve`, no
//! framework, no middleware) answering `POST` with the naive admission and anything else with
//! the captured poll answer, so both baselines pay exactly hyper's cost and their own.

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};

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

/// What the handlers share: the naive admission's pool, and the poll answer once captured.
pub(super) struct BaselineState {
    naive: PgPool,
    pub(super) poll: OnceLock<Captured>,
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
            poll: OnceLock::new(),
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
    match state.poll.get() {
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
