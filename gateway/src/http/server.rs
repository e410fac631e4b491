//! The HTTP server: HTTP/1 and HTTP/2 on one listener, drained gracefully on shutdown.
//!
//! Shutdown closes the listener at once (new connections are refused), then every open
//! connection answers what it already carries and closes, within [`DRAIN_TIMEOUT`].

use std::convert::Infallible;
use std::fmt::Display;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper::header::{CONNECTION, HeaderValue};
use hyper::service::service_fn;
use hyper::{Request, Version};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulConnection;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::gateway_config::GatewayConfig;
use crate::http::response::HttpResponse;
use crate::http::router;
use crate::state::Gateway;

/// How long in-flight requests may take to finish after shutdown begins.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(15);

/// How long after shutdown begins an open connection may still deliver a request.
///
/// An HTTP/1 connection idle between two requests cannot be closed at once without a race:
/// its client may have sent the next request already, and closing a socket with unread bytes
/// resets it, so that request would be lost unanswered (hyper's graceful shutdown closes idle
/// connections immediately, and connections whose first bytes it has not read yet too). So
/// each connection is kept this long: whatever arrives meanwhile is answered, with
/// `Connection: close` so the client sends nothing more on it, and only then is it shut.
const IDLE_GRACE: Duration = Duration::from_secs(1);

/// Connections the kernel may hold for us before `accept` (capped by `net.core.somaxconn`).
///
/// A drop opens thousands of connections within one second. With the default backlog (1,024)
/// the kernel drops the SYNs that overflow it, and each such client retries only after 1 s, then
/// 3 s, 7 s: measured in a 10,000-subject drop as hundreds of listen overflows and seconds of
/// extra latency on requests the gateway would have answered in a millisecond.
pub const LISTEN_BACKLOG: u32 = 8_192;

/// Binds the gateway's listener with [`LISTEN_BACKLOG`].
pub fn bind(address: std::net::SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if address.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(address)?;
    socket.listen(LISTEN_BACKLOG)
}

/// The listener's next connection. A failed accept (usually out of file descriptors) is logged
/// and retried after a pause instead of spinning; cancel-safe, so it can race a shutdown.
pub async fn accept(listener: &TcpListener, name: &str) -> tokio::net::TcpStream {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => return stream,
            Err(error) => {
                tracing::warn!(%error, listener = name, "accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// Serves until `shutdown` is cancelled, then stops accepting and lets in-flight requests
/// finish (up to [`DRAIN_TIMEOUT`]). Tests bind `127.0.0.1:0` and call this in process.
pub async fn run(listener: TcpListener, gateway: Arc<Gateway>, shutdown: CancellationToken) {
    let builder = connection_builder(&gateway.config);
    let open = Arc::new(Semaphore::new(gateway.config.max_connections));
    let rooms = tokio::spawn(crate::rooms::ticker::run(gateway.clone(), shutdown.clone()));
    let connections = TaskTracker::new();
    loop {
        tokio::select! {
            stream = accept(&listener, "gateway") => {
                // Over the cap the connection is closed at once: the kernel's backlog would
                // otherwise hold it unanswered, and the connections in hand stay served.
                let Ok(slot) = open.clone().try_acquire_owned() else {
                    tracing::debug!("connection cap reached; a connection was closed at once");
                    drop(stream);
                    continue;
                };
                let _ = stream.set_nodelay(true);
                let connection = serve(&builder, stream, gateway.clone(), shutdown.clone());
                connections.spawn(async move {
                    connection.await;
                    drop(slot);
                });
            }
            _ = shutdown.cancelled() => break,
        }
    }
    gateway
        .draining
        .store(true, std::sync::atomic::Ordering::Relaxed);
    // The port refuses new connections from here on.
    drop(listener);
    let _ = rooms.await;
    connections.close();
    if tokio::time::timeout(DRAIN_TIMEOUT, connections.wait())
        .await
        .is_err()
    {
        tracing::warn!("in-flight requests did not finish in time");
    }
}

/// The most an HTTP/1 connection buffers of what it reads: a request head must fit (larger is
/// `431`), bodies are read in pieces of at most this. hyper's default (about 400 KiB) let one
/// large body grow a connection's read buffer for the rest of its life; 16 KiB is what Node.js
/// allows for a head, and the gateway's own requests are far smaller.
pub const HTTP1_MAX_BUF_BYTES: usize = 16 * 1024;

/// What a connection keeps between two requests is what 10,000 open connections cost (see
/// docs/performance.md, "Memory per connection"), so the per-request future is boxed: hyper
/// keeps a `Box<Option<future>>` for each connection from its first byte to its close, sized for
/// the future whether or not a request is in progress. Boxed, that is one pointer; the request's
/// own state is allocated when it arrives and freed when it is answered.
type AnswerFuture = Pin<Box<dyn Future<Output = Result<HttpResponse, Infallible>> + Send>>;

/// One accepted connection, as the task that serves it to its end (see [`drive`]).
fn serve(
    builder: &auto::Builder<TokioExecutor>,
    stream: TcpStream,
    gateway: Arc<Gateway>,
    shutdown: CancellationToken,
) -> impl Future<Output = ()> + Send + use<> {
    let closing = shutdown.clone();
    let service = service_fn(move |request| -> AnswerFuture {
        Box::pin(answer(gateway.clone(), request, closing.clone()))
    });
    let connection = builder
        .serve_connection(TokioIo::new(stream), service)
        .into_owned();
    drive(connection, shutdown)
}

/// HTTP/1 and HTTP/2 with the configured limits. hyper applies its header read timeout only
/// with a timer, so one is always given. HTTP/1 writes the head from a buffer and the body from
/// its own bytes (`writev`) instead of copying bodies into a buffer that would keep their size.
fn connection_builder(config: &GatewayConfig) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(Duration::from_millis(config.header_read_timeout_ms))
        .max_buf_size(HTTP1_MAX_BUF_BYTES)
        .writev(true);
    let ping = Duration::from_millis(config.http2_keep_alive_interval_ms);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(config.http2_max_concurrent_streams)
        .keep_alive_interval(ping)
        .keep_alive_timeout(ping);
    builder
}

/// Answers one request. Once shutdown has begun, HTTP/1 answers say `Connection: close`: the
/// client then opens its next request elsewhere instead of racing this connection's close.
async fn answer(
    gateway: Arc<Gateway>,
    request: Request<Incoming>,
    shutdown: CancellationToken,
) -> Result<HttpResponse, Infallible> {
    let http1 = request.version() < Version::HTTP_2;
    let Ok(mut response) = router::handle(gateway, request).await;
    if http1 && shutdown.is_cancelled() {
        response
            .headers_mut()
            .insert(CONNECTION, HeaderValue::from_static("close"));
    }
    Ok(response)
}

/// Runs one connection to its end. After shutdown it gets [`IDLE_GRACE`] to deliver and be
/// answered what it carries (an HTTP/1 answer then closes it); then hyper's graceful shutdown
/// finishes the request in progress, if any, and closes it (HTTP/2: `GOAWAY`).
async fn drive<C>(connection: C, shutdown: CancellationToken)
where
    C: GracefulConnection,
    C::Error: Display,
{
    tokio::pin!(connection);
    let ended = tokio::select! {
        result = connection.as_mut() => Some(result),
        () = shutdown.cancelled() => None,
    };
    let result = match ended {
        Some(result) => result,
        None => match tokio::time::timeout(IDLE_GRACE, connection.as_mut()).await {
            Ok(result) => result,
            Err(_) => {
                connection.as_mut().graceful_shutdown();
                connection.await
            }
        },
    };
    if let Err(error) = result {
        tracing::debug!(%error, "connection ended with an error");
    }
}

/// How long queued group-commit jobs may take to commit after the connections are drained.
const COMMIT_FLUSH_TIMEOUT: Duration = Duration::from_secs(10);

/// After [`run`]: every connection is answered or given up on, but jobs whose caller went away
/// (or outlived the drain) may still wait in the group committers (acceptances, room joins and
/// heartbeats).
/// Commits them before the process exits, which would otherwise cut them mid-batch. Nothing
/// lost either way is a command or a place anyone was told about.
pub async fn flush_committer(gateway: &Gateway) {
    tracing::info!("connections drained; flushing the group committers");
    let all = async {
        tokio::join!(
            gateway.committer.close(),
            gateway.room_joins.close(),
            gateway.pass_heartbeats.close()
        )
    };
    if tokio::time::timeout(COMMIT_FLUSH_TIMEOUT, all)
        .await
        .is_err()
    {
        tracing::warn!(
            "the group committers did not finish in time; their last batches were not committed (no caller was told they were accepted)"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The size of what `function` returns, without calling it.
    fn output_size<F, R>(_: &F) -> usize
    where
        F: FnOnce(&auto::Builder<TokioExecutor>, TcpStream, Arc<Gateway>, CancellationToken) -> R,
    {
        std::mem::size_of::<R>()
    }

    fn answer_size<F, R>(_: &F) -> usize
    where
        F: FnOnce(Arc<Gateway>, Request<Incoming>, CancellationToken) -> R,
    {
        std::mem::size_of::<R>()
    }

    /// What an idle connection holds: its task (the connection and [`drive`]'s state, inline)
    /// and hyper's box for the request future, which must stay one pointer whatever the router
    /// grows into (unboxed, the answer future was about 16 KiB, on every open connection).
    #[test]
    fn an_idle_connection_holds_no_request_state() {
        let task = output_size(&serve);
        let request = answer_size(&answer);
        let held = std::mem::size_of::<Option<AnswerFuture>>();
        println!(
            "connection task {task} bytes, request future {request} bytes (boxed per request), held between requests {held} bytes"
        );
        assert_eq!(held, 16, "hyper's per-connection box holds a pointer");
        assert!(
            task < 4 * 1024,
            "a connection task of {task} bytes: what grew it?"
        );
    }
}
