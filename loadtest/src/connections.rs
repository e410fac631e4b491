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
//!
//! With `--sigterm-gateway-after`, new connections are routed as [`Routing`] says (a gateway out
//! of rotation or refusing gets none; kept-alive ones stay where they are) and its witness sees
//! how each request travelled ([`Trace`]); without it, nothing of that runs.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::{self, SendRequest};
use hyper::{Request, Response, Uri};
use hyper_util::rt::TokioIo;
use tokio::sync::Semaphore;

use crate::sigterm::Routing;

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
    idle: Mutex<HashMap<String, Vec<Idle>>>,
    /// Where new connections go when a gateway drains (unset: always to the request's own).
    routing: OnceLock<Arc<Routing>>,
}

/// A kept-alive connection waiting for its next request.
struct Idle {
    sender: Sender,
    /// Idle since.
    since: Instant,
    /// When it was opened.
    opened: Instant,
}

/// How one request travelled, for the witness of a gateway's drain.
#[derive(Debug, Default)]
pub struct Trace {
    /// The connection the request was written on (the last one tried), if any.
    pub carrier: Option<Carrier>,
    /// Idle connections found closed before the request was written on them (it was then
    /// sent on another: nothing of it reached the gateway on those).
    pub unsent: u32,
    /// A new connection to the request's own gateway was refused.
    pub refused: bool,
    /// The request went to another gateway than its own.
    pub rerouted: bool,
}

/// The connection a request was written on.
#[derive(Debug, Clone)]
pub struct Carrier {
    pub authority: String,
    pub opened: Instant,
    /// Kept alive from an earlier request.
    pub reused: bool,
}

impl HttpClient {
    /// A client holding at most `max` connections at once.
    pub fn new(max: usize) -> Self {
        HttpClient {
            inner: Arc::new(Inner {
                slots: Arc::new(Semaphore::new(max.max(1))),
                idle: Mutex::new(HashMap::new()),
                routing: OnceLock::new(),
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
        let (authority, request) = origin_form(request)?;
        let Some(routing) = self.inner.routing.get() else {
            return self.send(&authority, request, &mut Trace::default()).await;
        };
        let sent = Instant::now();
        let mut trace = Trace::default();
        let result = self
            .send_routed(routing, &authority, request, &mut trace)
            .await;
        routing.record(&authority, sent, &trace, &result);
        result
    }

    /// Routes new connections as [`Routing`] says from now on, and has its witness see every
    /// request (`sluice-loadtest --sigterm-gateway-after`). Set once, after the stack is up.
    pub fn route(&self, routing: Arc<Routing>) {
        let _ = self.inner.routing.set(routing);
    }

    /// On an idle connection to `authority` if one is open, else on a new one.
    async fn send(
        &self,
        authority: &str,
        request: Request<Full<Bytes>>,
        trace: &mut Trace,
    ) -> Result<Response<Full<Bytes>>, RequestError> {
        let request = match self.send_on_idle(authority, request, trace).await {
            Ok(answered) => return answered,
            Err(unsent) => unsent,
        };
        let stream = open(authority).await?;
        self.send_on_new(authority, stream, request, trace).await
    }

    /// [`Self::send`] as a load balancer in front of the gateways would: an idle connection to
    /// `authority` is used while it is open (an unready gateway keeps its connections, as an
    /// L4 balancer's), a new one goes elsewhere once the gateway is out of rotation, and a
    /// refused connect is sent to the next gateway (no byte of the request was written).
    async fn send_routed(
        &self,
        routing: &Routing,
        authority: &str,
        request: Request<Full<Bytes>>,
        trace: &mut Trace,
    ) -> Result<Response<Full<Bytes>>, RequestError> {
        let request = match self.send_on_idle(authority, request, trace).await {
            Ok(answered) => return answered,
            Err(unsent) => unsent,
        };
        if let Some(elsewhere) = routing.elsewhere(authority) {
            trace.rerouted = true;
            return self.send(elsewhere, request, trace).await;
        }
        match open(authority).await {
            Ok(stream) => self.send_on_new(authority, stream, request, trace).await,
            Err(OpenError::Refused(why)) => {
                trace.refused = true;
                routing.take_out(authority);
                let Some(elsewhere) = routing.elsewhere(authority) else {
                    return Err(RequestError(why));
                };
                trace.rerouted = true;
                self.send(elsewhere, request, trace).await
            }
            Err(error) => Err(error.into()),
        }
    }

    /// The request on the idle connection to `authority` used last, if one is open: its
    /// answer, or the request back when none was idle or the one found refused it unwritten
    /// (the gateway closed it meanwhile).
    async fn send_on_idle(
        &self,
        authority: &str,
        request: Request<Full<Bytes>>,
        trace: &mut Trace,
    ) -> Result<Result<Response<Full<Bytes>>, RequestError>, Request<Full<Bytes>>> {
        let Some((mut sender, opened)) = self.reusable(authority) else {
            return Err(request);
        };
        trace.carrier = Some(Carrier {
            authority: authority.to_string(),
            opened,
            reused: true,
        });
        match sender.try_send_request(request).await {
            Ok(response) => Ok(self.finish(authority, sender, opened, response).await),
            Err(mut refused) => match refused.take_message() {
                Some(unsent) => {
                    trace.carrier = None;
                    trace.unsent += 1;
                    Err(unsent)
                }
                None => Ok(Err(RequestError(format!("transport: {}", refused.error())))),
            },
        }
    }

    /// The request on a connection just opened to `authority`.
    async fn send_on_new(
        &self,
        authority: &str,
        stream: tokio::net::TcpStream,
        request: Request<Full<Bytes>>,
        trace: &mut Trace,
    ) -> Result<Response<Full<Bytes>>, RequestError> {
        let opened = Instant::now();
        trace.carrier = Some(Carrier {
            authority: authority.to_string(),
            opened,
            reused: false,
        });
        let mut sender = handshake(stream).await?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| RequestError(format!("transport: {e}")))?;
        self.finish(authority, sender, opened, response).await
    }

    /// Kept-alive connections to `authority` idle now (some may have aged out or been closed
    /// by the gateway without this client having looked yet).
    pub fn idle_count(&self, authority: &str) -> usize {
        let idle = self.inner.idle.lock().unwrap_or_else(|p| p.into_inner());
        idle.get(authority).map_or(0, Vec::len)
    }

    /// The most recently used idle connection to `authority` that is still open and fresh.
    /// With the instant it was opened.
    fn reusable(&self, authority: &str) -> Option<(Sender, Instant)> {
        let mut idle = self.inner.idle.lock().unwrap_or_else(|p| p.into_inner());
        let stack = idle.get_mut(authority)?;
        while let Some(Idle {
            sender,
            since,
            opened,
        }) = stack.pop()
        {
            if sender.is_ready() && since.elapsed() < IDLE_CONNECTION {
                return Some((sender, opened));
            }
        }
        None
    }

    /// Reads the body, then puts the connection back for the next request.
    async fn finish(
        &self,
        authority: &str,
        sender: Sender,
        opened: Instant,
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
            let fresh = stack.partition_point(|idle| idle.since.elapsed() >= IDLE_CONNECTION);
            stack.drain(..fresh);
            stack.push(Idle {
                sender,
                since: Instant::now(),
                opened,
            });
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

/// Why no connection was opened.
#[derive(Debug)]
pub(crate) enum OpenError {
    /// The port refused it (nothing listens there any more).
    Refused(String),
    Other(String),
}

impl From<OpenError> for RequestError {
    fn from(error: OpenError) -> Self {
        match error {
            OpenError::Refused(why) | OpenError::Other(why) => RequestError(why),
        }
    }
}

/// A new TCP connection to `authority`.
async fn open(authority: &str) -> Result<tokio::net::TcpStream, OpenError> {
    let stream = tokio::net::TcpStream::connect(authority)
        .await
        .map_err(|e| {
            let why = format!("connect {authority}: {e}");
            if e.kind() == std::io::ErrorKind::ConnectionRefused {
                OpenError::Refused(why)
            } else {
                OpenError::Other(why)
            }
        })?;
    stream
        .set_nodelay(true)
        .map_err(|e| OpenError::Other(format!("nodelay: {e}")))?;
    // The client closes only idle connections (aged out, or the run's end): a reset instead of
    // a FIN leaves no TIME_WAIT behind, whose ports every later `connect()` would search past.
    stream
        .set_zero_linger()
        .map_err(|e| OpenError::Other(format!("linger: {e}")))?;
    Ok(stream)
}

/// HTTP/1.1 on `stream`, its driver running on the runtime.
async fn handshake(stream: tokio::net::TcpStream) -> Result<Sender, RequestError> {
    let (sender, connection) = http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| RequestError(format!("handshake: {e}")))?;
    tokio::spawn(async move {
        // Ends when the connection closes (either side); its requests have their answers.
        let _ = connection.await;
    });
    Ok(sender)
}
