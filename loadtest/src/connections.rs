//! The load generator's HTTP/1.1 client: at most `max` connections per run, kept alive and
//! reused, requests beyond them waiting their turn in arrival order.
//!
//! hyper-util's pooled client registers every request that finds no idle connection as a
//! waiter and, once it is served, sweeps the whole waiter list under the pool's lock; it also
//! opens a new connection for each such request while it waits. With a 100,000-person room
//! that is thousands of waiters swept per request and thousands of `connect()`s a second, each
//! searching a port range crowded with live sockets: a profile of the load generator had 18 %
//! in the sweep and 39 % in the kernel's port search, and the load generator, not the gateway,
//! was the run's ceiling (it peaked at 156 % of the two cores while the gateway used 26 %).
//! Here waiting is a FIFO semaphore, idle connections a stack per gateway address (the one
//! used last is reused first, so the rest age out), and a connection is opened only when no
//! idle one exists and the run is below `max`: as an edge proxy in front of a gateway holds
//! a pool of connections for its many browsers.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::{self, SendRequest};
use hyper::{Request, Response, Uri};
use hyper_util::rt::TokioIo;
use tokio::sync::Semaphore;

/// How long a connection is kept idle for reuse: less than the gateway's idle keep-alive limit
/// (`header_read_timeout_ms`, 10 s by default). A request written on a connection the gateway
/// is closing at that instant is reset unanswered, which the run would count against the
/// gateway although it only kept its documented limit.
pub const IDLE_CONNECTION: Duration = Duration::from_secs(5);

/// Why a request got no response.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct RequestError(String);

type Sender = SendRequest<Full<Bytes>>;

/// Connections to the gateways, shared by every caller of a run (cheap to clone).
#[derive(Clone)]
pub struct HttpClient {
    inner: Arc<Inner>,
}

struct Inner {
    /// One permit per connection the run may hold at once.
    slots: Arc<Semaphore>,
    idle: Mutex<HashMap<String, Vec<(Sender, Instant)>>>,
}

impl HttpClient {
    /// A client holding at most `max` connections at once.
    pub fn new(max: usize) -> Self {
        HttpClient {
            inner: Arc::new(Inner {
                slots: Arc::new(Semaphore::new(max.max(1))),
                idle: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// Sends `request` (an absolute `http://host:port/path` URI) and reads its whole body.
    pub async fn request(
        &self,
        request: Request<Full<Bytes>>,
    ) -> Result<Response<Full<Bytes>>, RequestError> {
        let _slot = self
            .inner
            .slots
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| RequestError("the client is closed".into()))?;
        let (authority, mut request) = origin_form(request)?;
        // A reused connection the gateway closed meanwhile refuses the request before writing
        // it: sent again once on a new connection.
        if let Some(mut sender) = self.reusable(&authority) {
            match sender.try_send_request(request).await {
                Ok(response) => return self.finish(&authority, sender, response).await,
                Err(mut refused) => match refused.take_message() {
                    Some(unsent) => request = unsent,
                    None => return Err(RequestError(format!("transport: {}", refused.error()))),
                },
            }
        }
        let mut sender = connect(&authority).await?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| RequestError(format!("transport: {e}")))?;
        self.finish(&authority, sender, response).await
    }

    /// The most recently used idle connection to `authority` that is still open and fresh.
    fn reusable(&self, authority: &str) -> Option<Sender> {
        let mut idle = self.inner.idle.lock().unwrap_or_else(|p| p.into_inner());
        let stack = idle.get_mut(authority)?;
        while let Some((sender, since)) = stack.pop() {
            if sender.is_ready() && since.elapsed() < IDLE_CONNECTION {
                return Some(sender);
            }
        }
        None
    }

    /// Reads the body, then puts the connection back for the next request.
    async fn finish(
        &self,
        authority: &str,
        sender: Sender,
        response: Response<hyper::body::Incoming>,
    ) -> Result<Response<Full<Bytes>>, RequestError> {
        let (parts, body) = response.into_parts();
        let bytes = body
            .collect()
            .await
            .map_err(|e| RequestError(format!("body lost: {e}")))?
            .to_bytes();
        if !sender.is_closed() {
            let mut idle = self.inner.idle.lock().unwrap_or_else(|p| p.into_inner());
            let stack = idle.entry(authority.to_string()).or_default();
            // Connections that aged out while others were in use are dropped here, from the
            // bottom of the stack, where the oldest lie.
            let fresh = stack.partition_point(|(_, since)| since.elapsed() >= IDLE_CONNECTION);
            stack.drain(..fresh);
            stack.push((sender, Instant::now()));
        }
        Ok(Response::from_parts(parts, Full::new(bytes)))
    }
}

/// The request's authority, and the request in origin form with its `Host`.
fn origin_form(
    mut request: Request<Full<Bytes>>,
) -> Result<(String, Request<Full<Bytes>>), RequestError> {
    let uri = request.uri().clone();
    let authority = uri
        .authority()
        .ok_or_else(|| RequestError(format!("{uri} names no host")))?
        .to_string();
    let path = uri
        .path_and_query()
        .map_or_else(|| "/".to_string(), |p| p.as_str().to_string());
    *request.uri_mut() = path
        .parse::<Uri>()
        .map_err(|e| RequestError(format!("{path}: {e}")))?;
    let host = authority
        .parse()
        .map_err(|e| RequestError(format!("{authority}: {e}")))?;
    request.headers_mut().insert(hyper::header::HOST, host);
    Ok((authority, request))
}

/// A new connection to `authority`, its driver running on the runtime.
async fn connect(authority: &str) -> Result<Sender, RequestError> {
    let stream = tokio::net::TcpStream::connect(authority)
        .await
        .map_err(|e| RequestError(format!("connect {authority}: {e}")))?;
    stream
        .set_nodelay(true)
        .map_err(|e| RequestError(format!("nodelay: {e}")))?;
    // The client closes only idle connections (aged out, or the run's end): a reset instead of
    // a FIN leaves no TIME_WAIT behind, whose ports every later `connect()` would search past.
    stream
        .set_zero_linger()
        .map_err(|e| RequestError(format!("linger: {e}")))?;
    let (sender, connection) = http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| RequestError(format!("handshake: {e}")))?;
    tokio::spawn(async move {
        // Ends when the connection closes (either side); its requests have their answers.
        let _ = connection.await;
    });
    Ok(sender)
}
