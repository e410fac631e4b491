//! The connection under an outbound request: straight to the destination, or through the proxy
//! the proxy variables name for it. An `https://` destination is tunnelled (`CONNECT`, with the
//! proxy's credentials), and TLS then runs end to end inside the tunnel, so the proxy sees only
//! the host and port; a plain `http://` one is sent to the proxy in absolute form, as HTTP
//! proxies expect.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use hyper::Uri;
use hyper::rt::{Read, ReadBufCursor, Write};
use hyper_util::client::legacy::connect::proxy::Tunnel;
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::client::proxy::matcher::Matcher;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tower_service::Service;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A connector choosing, per destination, a direct connection or one through a proxy.
#[derive(Clone)]
pub struct Routed {
    direct: HttpConnector,
    proxies: Arc<Matcher>,
}

impl Routed {
    pub fn new(proxies: Arc<Matcher>) -> Self {
        let mut direct = HttpConnector::new();
        // The TLS layer above decides the scheme; this one only opens TCP connections.
        direct.enforce_http(false);
        direct.set_nodelay(true);
        Self { direct, proxies }
    }
}

/// A connection, and whether requests on it go to a forward proxy (absolute-form targets).
pub struct RoutedStream {
    io: TokioIo<TcpStream>,
    forward_proxy: bool,
}

impl Service<Uri> for Routed {
    type Response = RoutedStream;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<RoutedStream, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.direct.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, destination: Uri) -> Self::Future {
        let mut direct = self.direct.clone();
        let proxy = self.proxies.intercept(&destination);
        Box::pin(async move {
            match proxy {
                None => Ok(RoutedStream {
                    io: direct.call(destination).await?,
                    forward_proxy: false,
                }),
                Some(proxy) if destination.scheme_str() == Some("https") => {
                    let mut tunnel = Tunnel::new(proxy.uri().clone(), direct);
                    if let Some(auth) = proxy.basic_auth() {
                        tunnel = tunnel.with_auth(auth.clone());
                    }
                    Ok(RoutedStream {
                        io: tunnel.call(destination).await?,
                        forward_proxy: false,
                    })
                }
                Some(proxy) => Ok(RoutedStream {
                    io: direct.call(proxy.uri().clone()).await?,
                    forward_proxy: true,
                }),
            }
        })
    }
}

impl Connection for RoutedStream {
    fn connected(&self) -> Connected {
        self.io.connected().proxy(self.forward_proxy)
    }
}

impl Read for RoutedStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl Write for RoutedStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }
}
