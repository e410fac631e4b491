//! The HTTP server: HTTP/1 and HTTP/2 on one listener, drained gracefully on shutdown.

use std::sync::Arc;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::router;
use crate::state::Gateway;

/// How long in-flight requests may take to finish after shutdown begins.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(15);

/// Serves until `shutdown` is cancelled, then stops accepting and lets in-flight requests
/// finish (up to [`DRAIN_TIMEOUT`]). Tests bind `127.0.0.1:0` and call this in process.
pub async fn run(listener: TcpListener, gateway: Arc<Gateway>, shutdown: CancellationToken) {
    let builder = auto::Builder::new(TokioExecutor::new());
    let graceful = GracefulShutdown::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let stream = match accepted {
                    Ok((stream, _)) => stream,
                    Err(error) => {
                        // Usually out of file descriptors: back off instead of spinning.
                        tracing::warn!(%error, "accept failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                let gateway = gateway.clone();
                let service = service_fn(move |request| router::handle(gateway.clone(), request));
                let connection = builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
                let connection = graceful.watch(connection.into_owned());
                tokio::spawn(async move {
                    if let Err(error) = connection.await {
                        tracing::debug!(%error, "connection ended with an error");
                    }
                });
            }
            _ = shutdown.cancelled() => break,
        }
    }
    drop(listener);
    if tokio::time::timeout(DRAIN_TIMEOUT, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("in-flight requests did not finish in time");
    }
}
