//! A real `sluice serve` process against a stack's database and the shared Redis, signing
//! tickets with the stack's keys, with an HTTP client that answers like [`Stack::request_with`].
//!
//! The in-process gateway of a [`Stack`] shares its address space with the test; these are
//! separate processes, so whatever they agree on goes through Redis and PostgreSQL only.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request};
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;
use sluice_durable::testkit::shared_redis;

use crate::support::*;

/// One `sluice serve` process, killed (SIGKILL) and reaped when dropped. Its stdout and stderr
/// (JSON logs) go to `log`.
pub(crate) struct GatewayProcess {
    child: Child,
    log: PathBuf,
    pub(crate) base: String,
    client: HttpClient<HttpConnector, Full<Bytes>>,
}

impl GatewayProcess {
    /// Starts `sluice serve` on a free loopback port and waits until `/readyz` answers `200`.
    /// The port is found by binding `:0` and letting go, so another process may take it in
    /// between: a process that exits before it serves is started again on another port.
    pub(crate) async fn start(stack: &Stack, dir: &Path, name: &str) -> GatewayProcess {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let client = HttpClient::builder(TokioExecutor::new())
            .pool_max_idle_per_host(1024)
            .build(connector);
        let mut last_log = String::new();
        for attempt in 0..3 {
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .expect("a free port")
                .port();
            let log = dir.join(format!("{name}-{attempt}.log"));
            let out = std::fs::File::create(&log).expect("create the gateway log");
            let err = out.try_clone().expect("clone the log handle");
            let child = Command::new(env!("CARGO_BIN_EXE_sluice"))
                .args(["serve", "--pg-pool-size", "16"])
                .env("SLUICE_DATABASE_URL", &stack.database_url)
                .env("SLUICE_REDIS_URL", shared_redis().url())
                .env("SLUICE_LISTEN", format!("127.0.0.1:{port}"))
                .env("SLUICE_TICKET_KEYS", &stack.ticket_spec)
                .env("SLUICE_LOG", "info")
                .env("SLUICE_LOG_FORMAT", "json")
                .stdin(Stdio::null())
                .stdout(Stdio::from(out))
                .stderr(Stdio::from(err))
                .spawn()
                .expect("spawn sluice serve");
            let mut process = GatewayProcess {
                child,
                log,
                base: format!("http://127.0.0.1:{port}"),
                client: client.clone(),
            };
            if process.ready(Duration::from_secs(15)).await {
                return process;
            }
            last_log = process.log_text();
            assert!(
                !process.is_running(),
                "the gateway runs but is not ready within 15 s:\n{last_log}"
            );
        }
        panic!("sluice serve did not start in three attempts; last log:\n{last_log}");
    }

    /// Polls `/readyz` until it answers `200`, the process exits, or `within` passes.
    async fn ready(&mut self, within: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if !self.is_running() {
                return false;
            }
            let probe = Request::get(format!("{}/readyz", self.base))
                .body(Full::new(Bytes::new()))
                .expect("request");
            let answered =
                tokio::time::timeout(Duration::from_secs(2), self.client.request(probe)).await;
            if let Ok(Ok(response)) = answered
                && response.status() == hyper::StatusCode::OK
            {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub(crate) fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    pub(crate) fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// One request; a JSON content type whenever there is a body.
    pub(crate) async fn request(
        &self,
        method: Method,
        path: &str,
        bearer: Option<&str>,
        body: Option<Bytes>,
        headers: &[(&str, &str)],
    ) -> Reply {
        let mut builder = Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base));
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        if let Some(bearer) = bearer {
            builder = builder.header("authorization", format!("Bearer {bearer}"));
        }
        if body.is_some() {
            builder = builder.header("content-type", "application/json");
        }
        let request = builder
            .body(Full::new(body.unwrap_or_default()))
            .expect("request");
        let response = tokio::time::timeout(Duration::from_secs(30), self.client.request(request))
            .await
            .expect("answered within 30 s")
            .expect("HTTP exchange");
        let status = response.status();
        let headers = response.headers().clone();
        let bytes = response
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes();
        let body = serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()));
        Reply {
            status,
            headers,
            body,
        }
    }

    pub(crate) async fn post(&self, path: &str, bearer: &str, body: &Value) -> Reply {
        self.request(
            Method::POST,
            path,
            Some(bearer),
            Some(Bytes::from(body.to_string())),
            &[],
        )
        .await
    }

    pub(crate) async fn get(&self, path: &str, bearer: &str) -> Reply {
        self.request(Method::GET, path, Some(bearer), None, &[])
            .await
    }
}

impl Drop for GatewayProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
