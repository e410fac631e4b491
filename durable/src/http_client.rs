//! Outbound HTTP, shared by the executor's webhook handler and the gateway's read origins: one
//! pooled client type, so both call out with the same TLS roots and pool behaviour.

use std::time::Duration;

use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

/// A pooled HTTP/1.1 client for `http://` and `https://` (rustls, Mozilla's roots): what the
/// webhook handler and the gateway's read origins both call out with.
pub type HttpsClient<B> = Client<HttpsConnector<HttpConnector>, B>;

/// A new [`HttpsClient`]; idle connections are kept 30 s.
pub fn https_client<B>() -> HttpsClient<B>
where
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
{
    let connector = HttpsConnectorBuilder::new()
        .with_webpki_roots()
        .https_or_http()
        .enable_http1()
        .build();
    Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(30))
        .build(connector)
}
