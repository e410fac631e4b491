//! Outbound HTTP, shared by the executor's webhook handler and the gateway's read origins: one
//! pooled client type, so both call out with the same trust, proxies and `User-Agent`.
//!
//! What a platform team expects of a service calling its backends: the web's roots plus its own
//! private authority (`outbound_ca_file`), the proxy variables every HTTP client honours
//! (`HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY`, `NO_PROXY`, and their lowercase forms, read as
//! curl reads them), and a `User-Agent` that says who calls.

pub mod proxy;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use hyper::header::HeaderValue;
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::Client;
use hyper_util::client::proxy::matcher::Matcher;
use hyper_util::rt::TokioExecutor;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

use crate::DurableError;
use proxy::Routed;

/// `User-Agent` of every outbound request.
pub const USER_AGENT: &str = concat!("sluice/", env!("CARGO_PKG_VERSION"));

/// A pooled HTTP/1.1 client for `http://` and `https://` (rustls), through the proxies
/// [`Outbound`] names: what the webhook handler and the gateway's read origins both call out
/// with.
pub type HttpsClient<B> = Client<HttpsConnector<Routed>, B>;

/// How a process calls out: whom it trusts and which proxies it goes through.
#[derive(Clone)]
pub struct Outbound {
    tls: Arc<rustls::ClientConfig>,
    proxies: Arc<Matcher>,
}

impl std::fmt::Debug for Outbound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outbound")
            .field("roots", &"webpki + outbound_ca_file")
            .field("proxies", &self.proxies)
            .finish()
    }
}

impl Default for Outbound {
    /// The web's roots and the process's proxy variables: built once per process (every
    /// configuration's default holds one), then shared.
    fn default() -> Self {
        static DEFAULT: std::sync::LazyLock<Outbound> =
            std::sync::LazyLock::new(|| Outbound::with_roots(webpki_roots(), Matcher::from_env()));
        DEFAULT.clone()
    }
}

impl Outbound {
    /// The web's roots plus the authorities of `ca_file` (PEM, one or more certificates), and
    /// the process's proxy variables.
    ///
    /// # Errors
    /// `Misconfigured` naming the file when it cannot be read or holds no certificate rustls
    /// accepts as an authority.
    pub fn from_env(ca_file: Option<&Path>) -> Result<Self, DurableError> {
        Self::new(ca_file, Matcher::from_env())
    }

    /// [`from_env`](Self::from_env) with the proxies of `proxies` instead of the process's.
    ///
    /// # Errors
    /// As [`from_env`](Self::from_env).
    pub fn new(ca_file: Option<&Path>, proxies: Matcher) -> Result<Self, DurableError> {
        let mut roots = webpki_roots();
        if let Some(path) = ca_file {
            let misconfigured = |why: String| {
                DurableError::Misconfigured(format!("outbound_ca_file {}: {why}", path.display()))
            };
            let bytes =
                std::fs::read(path).map_err(|e| misconfigured(format!("cannot be read: {e}")))?;
            let certificates = CertificateDer::pem_slice_iter(&bytes)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| misconfigured(format!("is not PEM ({e})")))?;
            if certificates.is_empty() {
                return Err(misconfigured("holds no PEM certificate".into()));
            }
            for certificate in certificates {
                roots.add(certificate).map_err(|e| {
                    misconfigured(format!("holds a certificate that is no authority ({e})"))
                })?;
            }
        }
        Ok(Self::with_roots(roots, proxies))
    }

    fn with_roots(roots: rustls::RootCertStore, proxies: Matcher) -> Self {
        let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map(|builder| builder.with_root_certificates(roots).with_no_client_auth())
        .unwrap_or_else(|_| unreachable!("ring supports rustls's safe default versions"));
        Self {
            tls: Arc::new(tls),
            proxies: Arc::new(proxies),
        }
    }

    /// A new [`HttpsClient`]; idle connections are kept 30 s.
    pub fn client<B>(&self) -> HttpsClient<B>
    where
        B: hyper::body::Body + Send + 'static,
        B::Data: Send,
    {
        let connector = HttpsConnectorBuilder::new()
            .with_tls_config((*self.tls).clone())
            .https_or_http()
            .enable_http1()
            .wrap_connector(Routed::new(self.proxies.clone()));
        Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .build(connector)
    }

    /// The headers every outbound request carries besides its own: `User-Agent`, and
    /// `Proxy-Authorization` when a plain `http://` request goes through a proxy with
    /// credentials (an `https://` one sends them on its `CONNECT`).
    pub fn decorate<B>(&self, request: &mut hyper::Request<B>) {
        let headers = request.headers_mut();
        headers.insert(
            hyper::header::USER_AGENT,
            HeaderValue::from_static(USER_AGENT),
        );
        if request.uri().scheme_str() == Some("http")
            && let Some(auth) = self
                .proxies
                .intercept(request.uri())
                .and_then(|proxy| proxy.basic_auth().cloned())
        {
            request
                .headers_mut()
                .insert(hyper::header::PROXY_AUTHORIZATION, auth);
        }
    }
}

fn webpki_roots() -> rustls::RootCertStore {
    rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    }
}
