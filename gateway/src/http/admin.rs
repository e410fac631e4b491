//! The admin listeners: what an operator's own machinery asks, never the public.
//!
//! - The gateway's (`admin_listen`, `sluice serve --admin-listen`, loopback by default):
//!   `GET /metrics` and the detailed `GET /readyz`. A scrape costs up to a thousand script calls
//!   and names every tenant's ids; the detailed readiness queries PostgreSQL, may rebuild
//!   projections and says why it is not ready in the servers' own words. None of that belongs on
//!   a port anyone can reach, so the public port keeps `/healthz` and a readiness that does no
//!   I/O ([`crate::http::health::public_readiness`]).
//! - The executor's (`metrics_listen`, off unless set): `GET /metrics` and `GET /healthz`.
//!
//! Both are small HTTP/1 servers with no envelope and no credentials (the address is the
//! access control), with the same header read timeout as the public port, stopping when the
//! process's shutdown token is cancelled.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::http::response::{HttpResponse, exposition, new_request_id, plain};
use crate::state::Gateway;

/// How long a scrape in flight at shutdown may take to finish.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(2);

/// A request's headers must arrive within this: an admin port is loopback, but a stuck client
/// must not hold a connection forever there either.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// The gateway's admin listener: `/metrics`, the detailed `/readyz` and `/healthz`.
pub async fn serve_gateway(
    listener: TcpListener,
    gateway: Arc<Gateway>,
    shutdown: CancellationToken,
) {
    serve(listener, shutdown, move |request| {
        let gateway = gateway.clone();
        async move { gateway_answer(&gateway, &request).await }
    })
    .await
}

/// The executor's: `/metrics` and `/healthz`.
pub async fn serve_executor(listener: TcpListener, shutdown: CancellationToken) {
    serve(listener, shutdown, |request| async move {
        match (request.method(), request.uri().path()) {
            (&Method::GET, "/metrics") => exposition(sluice_metrics::executor_text()),
            (&Method::GET, "/healthz") => plain(StatusCode::OK, "ok\n"),
            _ => plain(
                StatusCode::NOT_FOUND,
                "not found: GET /metrics or GET /healthz\n",
            ),
        }
    })
    .await
}

async fn gateway_answer(gateway: &Gateway, request: &Request<Incoming>) -> HttpResponse {
    match (request.method(), request.uri().path()) {
        (&Method::GET, "/metrics") => {
            let mut text = sluice_durable::figures::gateway_text(&gateway.pg, &gateway.redis).await;
            text.push_str(&gateway.reads.exposition());
            exposition(text)
        }
        (&Method::GET, "/readyz") => crate::http::health::readiness(gateway).await,
        (&Method::GET, "/healthz") => plain(StatusCode::OK, "ok\n"),
        _ => plain(
            StatusCode::NOT_FOUND,
            "not found: GET /metrics, GET /readyz or GET /healthz\n",
        ),
    }
}

/// Serves `answer` on every connection until `shutdown` is cancelled, then lets requests in
/// flight finish briefly.
async fn serve<F, A>(listener: TcpListener, shutdown: CancellationToken, answer: F)
where
    F: Fn(Request<Incoming>) -> A + Clone + Send + Sync + 'static,
    A: Future<Output = HttpResponse> + Send + 'static,
{
    let graceful = GracefulShutdown::new();
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    loop {
        tokio::select! {
            stream = crate::http::server::accept(&listener, "admin") => {
                let answer = answer.clone();
                let service = service_fn(move |request: Request<Incoming>| {
                    // Each admin request has its span and id like a public one, so whatever it
                    // logs (a rebuild the readiness started) carries them.
                    let span = tracing::info_span!(
                        "request",
                        request_id = %new_request_id(),
                        method = %request.method(),
                        path = %request.uri().path(),
                        listener = "admin",
                    );
                    let answered = answer(request).instrument(span);
                    async move { Ok::<_, Infallible>(answered.await) }
                });
                let connection = graceful.watch(builder.serve_connection(TokioIo::new(stream), service));
                tokio::spawn(async move {
                    if let Err(error) = connection.await {
                        tracing::debug!(%error, "admin connection ended with an error");
                    }
                });
            }
            _ = shutdown.cancelled() => break,
        }
    }
    drop(listener);
    let _ = tokio::time::timeout(DRAIN_TIMEOUT, graceful.shutdown()).await;
}
