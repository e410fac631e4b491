//! A real `sluice serve` process against a stack's database and the shared Redis, signing
//! tickets with the stack's keys, with an HTTP client that answers like [`Stack::request_with`].
//!
//! The in-process gateway of a [`Stack`] shares its address space with the test; these are
//! separate processes, so whatever they agree on goes through Redis and PostgreSQL only.

use std::net::SocketAddr;
use std::path::Path;
use std::process::ExitStatus;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Method, Request};
use serde_json::Value;

use crate::support::sluice_process::SluiceProcess;
use crate::support::*;

/// One `sluice serve` process, killed (SIGKILL) and reaped when dropped. Its stdout and stderr
/// (JSON logs) go to a file of the test's directory.
pub(crate) struct GatewayProcess {
    process: SluiceProcess,
    pub(crate) base: String,
    /// The admin listener: `/metrics` and the detailed `/readyz`.
    pub(crate) admin_base: String,
    client: TestClient,
}

impl GatewayProcess {
    /// Starts `sluice serve` on a free loopback port (its admin listener on another) and waits
    /// until the detailed `/readyz` answers `200`. The ports are found by binding `:0` and
    /// letting go, so another process may take one in between: a process that exits before it
    /// serves is started again on other ports.
    pub(crate) async fn start(stack: &Stack, dir: &Path, name: &str) -> GatewayProcess {
        Self::start_with(stack, dir, name, &[]).await
    }

    /// [`start`](Self::start) with `env` on top (e.g. `SLUICE_LOG=debug`).
    pub(crate) async fn start_with(
        stack: &Stack,
        dir: &Path,
        name: &str,
        env: &[(&str, &str)],
    ) -> GatewayProcess {
        let client = http_client(1024);
        let mut last_log = String::new();
        for attempt in 0..3 {
            let (port, admin_port) = (free_port(), free_port());
            let listen = format!("127.0.0.1:{port}");
            let admin_listen = format!("127.0.0.1:{admin_port}");
            let mut vars = vec![
                ("SLUICE_LISTEN", listen.as_str()),
                ("SLUICE_ADMIN_LISTEN", admin_listen.as_str()),
                ("SLUICE_TICKET_KEYS", stack.ticket_spec.as_str()),
            ];
            vars.extend_from_slice(env);
            let process = SluiceProcess::spawn(
                stack,
                &["serve", "--pg-pool-size", "16"],
                &vars,
                dir.join(format!("{name}-{attempt}.log")),
            );
            let mut process = GatewayProcess {
                process,
                base: format!("http://127.0.0.1:{port}"),
                admin_base: format!("http://{admin_listen}"),
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

    /// Kills the process (SIGKILL, no drain) and waits until it is gone: its ports refuse
    /// connections from here on.
    pub(crate) async fn kill(&mut self) {
        self.process.signal("KILL");
        assert!(
            self.process.exited(Duration::from_secs(10)).await.is_some(),
            "the gateway did not die"
        );
    }

    /// Starts `sluice serve` again on the same ports (after [`kill`](Self::kill)), and waits
    /// until it is ready.
    pub(crate) async fn restart(&mut self, stack: &Stack, dir: &Path, name: &str) {
        let (listen, admin) = (
            self.base.trim_start_matches("http://").to_string(),
            self.admin_base.trim_start_matches("http://").to_string(),
        );
        self.process = SluiceProcess::spawn(
            stack,
            &["serve", "--pg-pool-size", "16"],
            &[
                ("SLUICE_LISTEN", listen.as_str()),
                ("SLUICE_ADMIN_LISTEN", admin.as_str()),
                ("SLUICE_TICKET_KEYS", stack.ticket_spec.as_str()),
            ],
            dir.join(format!("{name}-restarted.log")),
        );
        assert!(
            self.ready(Duration::from_secs(15)).await,
            "the gateway did not come back on its ports:\n{}",
            self.log_text()
        );
    }

    /// Polls the detailed `/readyz` until it answers `200`, the process exits, or `within`
    /// passes.
    async fn ready(&mut self, within: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if !self.is_running() {
                return false;
            }
            let probe = Request::get(format!("{}/readyz", self.admin_base))
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
        self.process.is_running()
    }

    pub(crate) fn log_text(&self) -> String {
        self.process.log_text()
    }

    /// The address it listens on.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.base
            .trim_start_matches("http://")
            .parse()
            .expect("a socket address")
    }

    /// Sends `signal` (`TERM`, `INT`) to the process.
    pub(crate) fn signal(&self, signal: &str) {
        self.process.signal(signal);
    }

    /// Polls for the process's exit for at most `within`.
    pub(crate) async fn exited(&mut self, within: Duration) -> Option<ExitStatus> {
        self.process.exited(within).await
    }

    /// SIGSTOP, and waits until the kernel shows the process stopped: from then on it does
    /// nothing at all (its timers fall due meanwhile) until [`resume`](Self::resume).
    pub(crate) async fn pause(&self) {
        self.signal("STOP");
        let stat = format!("/proc/{}/stat", self.process.child.id());
        let stopped = eventually(Duration::from_secs(5), || async {
            // `pid (comm) state …`: the state follows the command name's closing parenthesis.
            std::fs::read_to_string(&stat).is_ok_and(|text| {
                text.rsplit_once(')')
                    .is_some_and(|(_, rest)| rest.trim_start().starts_with('T'))
            })
        })
        .await;
        assert!(stopped, "the gateway did not stop");
    }

    /// SIGCONT after [`pause`](Self::pause).
    pub(crate) fn resume(&self) {
        self.signal("CONT");
    }

    /// A request with an optional bearer and JSON body.
    pub(crate) async fn send(
        &self,
        method: Method,
        path: &str,
        bearer: Option<&str>,
        body: Option<&Value>,
    ) -> Reply {
        let body = body.map(|b| Bytes::from(b.to_string()));
        send_request(&self.client, &self.base, method, path, bearer, body, &[]).await
    }

    /// A `POST` of `body` as JSON with `headers`.
    pub(crate) async fn post_with(
        &self,
        path: &str,
        bearer: &str,
        body: &Value,
        headers: &[(&str, &str)],
    ) -> Reply {
        let body = Some(Bytes::from(body.to_string()));
        send_request(
            &self.client,
            &self.base,
            Method::POST,
            path,
            Some(bearer),
            body,
            headers,
        )
        .await
    }

    pub(crate) async fn post(&self, path: &str, bearer: &str, body: &Value) -> Reply {
        self.post_with(path, bearer, body, &[]).await
    }

    pub(crate) async fn get(&self, path: &str, bearer: &str) -> Reply {
        send_request(
            &self.client,
            &self.base,
            Method::GET,
            path,
            Some(bearer),
            None,
            &[],
        )
        .await
    }
}
