//! The executor's own HTTP endpoint (`sluice execute --metrics-listen ADDR`): `GET /metrics`
//! (Prometheus text) and `GET /healthz`, nothing else.
//!
//! The executor serves no API, so this is a separate, tiny HTTP/1 server rather than the
//! gateway's router: no envelope, no credentials (it is for a local scraper, like the gateway's
//! `/metrics`). It stops accepting when the executor's shutdown token is cancelled.

use std::convert::Infallible;
use std::time::Duration;

use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::response::{HttpResponse, exposition, plain};

/// How long a scrape in flight at shutdown may take to finish.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(2);

/// Serves until `shutdown` is cancelled, then lets requests in flight finish briefly.
pub async fn serve(listener: TcpListener, shutdown: CancellationToken) {
    let graceful = GracefulShutdown::new();
    loop {
        tokio::select! {
            stream = crate::server::accept(&listener, "metrics") => {
                let connection = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service_fn(answer));
                let connection = graceful.watch(connection);
                tokio::spawn(async move {
                    if let Err(error) = connection.await {
                        tracing::debug!(%error, "metrics connection ended with an error");
                    }
                });
            }
            _ = shutdown.cancelled() => break,
        }
    }
    drop(listener);
    let _ = tokio::time::timeout(DRAIN_TIMEOUT, graceful.shutdown()).await;
}

async fn answer(request: Request<Incoming>) -> Result<HttpResponse, Infallible> {
    Ok(match (request.method(), request.uri().path()) {
        (&Method::GET, "/metrics") => exposition(sluice_durable::metrics::executor_text()),
        (&Method::GET, "/healthz") => plain(StatusCode::OK, "ok\n"),
        _ => plain(
            StatusCode::NOT_FOUND,
            "not found: GET /metrics or GET /healthz\n",
        ),
    })
}
